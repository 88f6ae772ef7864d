"""A run's predicted completion: the time model (docs/scale.md, "Predicted time") on the run's own plan, link
conditions and trace, in the mode the run's data travels as.

The driver asks before the run starts (the automatic time scale needs it, and a prediction must not
depend on what the run did) and sets the run against it afterwards
(:meth:`orchestrator.experiment.records.TimingRecord.paced`, docs/time-and-fidelity.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.workloads.trace import AnyOp, TraceOp

if TYPE_CHECKING:
    from aidcnet.modes import StepModes
    from orchestrator.experiment.modes.base import ExperimentMode
    from orchestrator.experiment.session import LabSession
    from orchestrator.model.timing import Prediction


@dataclass(frozen=True)
class Predicted:
    """What the time model said of a run, and how long it took to say it. ``propagation_s``: the run's
    completion with the links' propagation delay added (docs/delay.md), when the lab has delay."""

    prediction: Prediction
    by: str  # "the time model", with what it leaves out
    took_s: float  # wall seconds the model took
    propagation_s: float | None = None

    @property
    def fabric_s(self) -> float:
        return self.prediction.completion_s if self.propagation_s is None else self.propagation_s

    def describe(self) -> str:
        return f"predicted {self.fabric_s * 1e6:.2f} µs of fabric time by {self.by} (in {self.took_s:.1f} s)"


def predict_run(
    spec: ExperimentMode, session: LabSession, ops: list[TraceOp], conditions: dict[str, Any] | None
) -> Predicted | None:
    """The time model's completion of ``ops`` in ``spec``'s mode on the session's lab, under the link
    ``conditions`` the run starts with; None when no model covers the mode."""
    from orchestrator.model.timing import LinkConditions, TimeModel

    carried = spec.predicted_as()
    if carried is None:
        return None
    mode, leaves_out = carried
    started = time.monotonic()
    delay = spec.data_delay_fabric_s(session)
    starts = {op.id: op.t + delay for op in ops}
    model = TimeModel.for_plan(session.plan, LinkConditions.of(conditions))
    prediction = model.predict(ops, mode, starts, spec.options.ps_host)
    by = "the time model" if mode == spec.name else f"the time model, as {mode}"
    if leaves_out:
        by += f" ({leaves_out})"
    propagation = with_propagation(prediction, session, ops, mode)
    if propagation is not None:
        by += ", with the links' propagation delay"
    return Predicted(prediction, by, time.monotonic() - started, propagation)


def with_propagation(
    prediction: Prediction, session: LabSession, ops: list[TraceOp], mode: str | StepModes
) -> float | None:
    """The completion once every op's last byte has also crossed its path's length: its predicted finish
    plus the longest one-way delay to any of its receivers (an open-loop sender's bytes arrive one path
    delay after they leave; docs/delay.md). None on a lab without delay, for the collectives, whose
    windows wait on round trips the flow model does not follow, and for a closed-loop step
    (``StepModes``), whose delays add up along its chains of ops, which the step model does not follow."""
    from aidcnet.modes import COLLECTIVE, StepModes
    from orchestrator.lab.propagation import path_delays

    if not any(session.delays.values()) or isinstance(mode, StepModes) or mode in COLLECTIVE:
        return None
    ends = []
    for op in ops:
        farthest = max((path_delays(session.plan, session.delays, op.src, d)[1] for d in op.dst), default=0.0)
        ends.append(prediction.ops[op.id].finish + farthest)
    return max(ends, default=prediction.completion_s)


def step_predictor(
    session: Any, ops: Sequence[AnyOp], modes: StepModes, ps_host: str | None
) -> dict[str, Any]:
    """The time model's step for a run about to start (``RunOptions.predict_step``): on the session's plan
    under the link conditions its lab has now; ``settings.step.predicted`` of the run
    (docs/results-format.md): the step's metrics without the per-GPU spans."""
    from orchestrator.lab import labdir
    from orchestrator.lab.shaping import load_fabric
    from orchestrator.model.timing import LinkConditions, TimeModel

    conditions = None
    if session.time_scale.shaped:
        conditions = load_fabric(labdir.lab_dir(session.topo)).conditions()
    model = TimeModel.for_plan(session.plan, LinkConditions.of(conditions))
    prediction = model.predict(list(ops), modes, None, ps_host)
    assert prediction.step is not None
    out = prediction.step.to_dict({op.id: op for op in ops})
    for gpu in out["gpus"].values():
        del gpu["spans"]
    return out | {"completion_s": prediction.completion_s, "modes": str(modes)}
