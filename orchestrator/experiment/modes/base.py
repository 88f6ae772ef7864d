"""The interface every experiment mode implements, and what the driver hands it.

The driver (``orchestrator/experiment/driver.py``) runs every mode through the same steps:
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

from aidcnet.modes import BASELINES, Mode
from aidcnet.replay import DEFAULT_MAX_DATAGRAM
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import LabSession
from orchestrator.workloads.trace import TraceOp

if TYPE_CHECKING:
    from orchestrator.experiment.faults import Fault

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
    # Faults during the run, in time order (orchestrator.experiment.faults.schedule).
    faults: tuple[Fault, ...] = ()


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
