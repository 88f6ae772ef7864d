"""The interface every experiment mode implements, and what the driver hands it.

The driver (``orchestrator/run/driver.py``) runs every mode through the same steps:
``check_trace`` → ``prepare`` (what the mode needs configured) → ``load`` (what it tells each agent before
the start) → counters before → ``run`` → counters after → ``collect`` (how its deliveries are judged).
A mode instance lives for one run, so it may keep what it worked out in ``prepare`` for later steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from aidcnet.agent.replay.protocol import OpTimes
from aidcnet.modes import BASELINES, Mode
from aidcnet.replay import DEFAULT_MAX_DATAGRAM
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import LabSession
from orchestrator.workloads.trace import TraceOp

if TYPE_CHECKING:
    from orchestrator.lab.fault_spec import Fault

Say = Callable[[str], None]


class Family(StrEnum):
    """What a mode carries: trace messages (unicast and multicast ops) or collectives (allreduce ops)."""

    MESSAGES = "messages"
    COLLECTIVE = "collective"


@dataclass
class RunOptions:
    """Knobs of one run; each mode reads the ones that concern it (the CLI documents them)."""

    max_datagram: int = DEFAULT_MAX_DATAGRAM
    drain_s: float = 5.0
    timeout_s: float = 60.0
    gap_us: float = 0.0
    # Unicast flows (QPs, UDP source ports) per sending host: what per-flow ECMP or FARE hashes over.
    qps: int = 8
    ps_host: str | None = None
    # igmp/proxy: seconds from the moment an op's receivers are known to its data (None: the mode's own
    # default, orchestrator/experiment/membership.py).
    lead_s: float | None = None
    seed: int = 1
    # Faults during the run, in time order (orchestrator.lab.fault_spec.schedule).
    faults: tuple[Fault, ...] = ()
    # A closed-loop step (docs/training.md): the collective mode its AllReduce ops run in (a message
    # mode's run), and whether a compute phase is a wait or real work.
    allreduce: Mode | None = None
    compute: str = "wait"
    # The time model's prediction of a step, when the caller has one to give (the CLI and the pytest
    # plugin do: orchestrator.run.prediction.step_predictor); the run's record carries it.
    predict_step: Callable[..., Any] | None = None


@dataclass
class ModeOutcome:
    """What a run delivered, as judged by its mode."""

    messages: list[MessageResult]
    settings: dict[str, Any] = field(default_factory=dict)
    missing: list[tuple[int, str]] = field(default_factory=list)
    wrong: list[tuple[int, str]] = field(default_factory=list)
    # Printed under the run's summary, and files written beside run.json (name -> text).
    lines: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    # Set when the mode judged the run failed for a reason ``missing``/``wrong`` cannot say.
    problem: str | None = None
    detail: Any = None
    # Message modes: per sending host, what it did with each op (when it was due, when its first and last
    # datagram went to the kernel, its bytes): where a host's link idled while it had data due.
    op_times: dict[str, list[OpTimes]] = field(default_factory=dict)
    # Reliable modes: per source, the spans (wall seconds) its protocol let it send nothing (a full window,
    # budget or a timer pending): data due then waited on the fabric's answers, not on our software.
    protocol_waits: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


class ExperimentMode(ABC):
    name: ClassVar[Mode]
    family: ClassVar[Family]
    # Wall seconds from the driver's run step to the run's zero (the trace's t = 0): faults count from it.
    start_lead_s: ClassVar[float] = 0.0
    # One line for ``aidclab replay --help``.
    summary: ClassVar[str]

    def __init__(self, options: RunOptions | None = None) -> None:
        self.options = options or RunOptions()

    @classmethod
    def is_baseline(cls) -> bool:
        """The mode other modes of its family are compared against in reports (``aidcnet.modes``)."""
        return cls.name in BASELINES

    def predicted_as(self) -> tuple[Mode, str] | None:
        """The mode the time model predicts this one's completion as (the same data on the same paths),
        with a few words on what the prediction leaves out; None when no model covers it (the run is then
        set against the busiest link's bound). By default, itself when the model covers it."""
        from aidcnet.modes import COLLECTIVE, MODELLED

        return (self.name, "") if self.name in MODELLED | COLLECTIVE else None

    def data_delay_fabric_s(self, session: LabSession) -> float:
        """How long after an op's t its data leaves, in fabric seconds (a lead the mode adds)."""
        return 0.0

    @abstractmethod
    def check_trace(self, ops: list[TraceOp], trace: Path) -> None:
        """Refuse, naming the op, a trace this mode cannot carry, before anything runs."""

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:  # noqa: B027
        """Check the lab has what the mode needs and configure what it lacks (through the configuration
        plane's API, never by running the configure command)."""

    @abstractmethod
    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        """Tell each agent its part of the run before anyone starts."""

    @abstractmethod
    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        """Start every agent on a common clock and wait until the run is over (or timed out)."""

    @abstractmethod
    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        """Fetch what each receiver got and judge it against the trace."""
