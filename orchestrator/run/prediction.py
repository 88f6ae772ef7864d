"""A run's predicted completion: the time model (docs/scale.md, "Predicted time") on the run's own plan, link
conditions and trace, in the mode the run's data travels as.

The driver asks before the run starts (the automatic time scale needs it, and a prediction must not
depend on what the run did) and sets the run against it afterwards
(:meth:`orchestrator.experiment.records.TimingRecord.paced`, docs/time-and-fidelity.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from orchestrator.workloads.trace import AnyOp, TraceOp

if TYPE_CHECKING:
    from aidcnet.modes import StepModes
    from orchestrator.experiment.modes.base import ExperimentMode
    from orchestrator.experiment.session import LabSession
    from orchestrator.model.timing import Prediction


@dataclass(frozen=True)
class Predicted:
    """What the time model said of a run, and how long it took to say it. ``propagation_s``: how much of the
    prediction the links' propagation delay accounts for (the same model with every delay 0 predicts
    that much less); None on a lab without delay."""

    prediction: Prediction
    by: str  # "the time model", with what it leaves out
    took_s: float  # wall seconds the model took
    propagation_s: float | None = None

    @property
    def fabric_s(self) -> float:
        return self.prediction.completion_s

    def describe(self) -> str:
        line = f"predicted {self.fabric_s * 1e6:.2f} µs of fabric time by {self.by}"
        if self.prediction.hash_draws_s:
            line += f", the median of {self.prediction.hash_spread()}"
        return f"{line} (in {self.took_s:.1f} s)"


def predict_run(
    spec: ExperimentMode, session: LabSession, ops: list[TraceOp], conditions: dict[str, Any] | None
) -> Predicted | None:
    """The time model's completion of ``ops`` in ``spec``'s mode on the session's lab, under the link
    ``conditions`` the run starts with and the links' delays as the session found them (an open-loop
    transfer ends a path delay after its last byte left; a window or a step's chain waits on each); None
    when no model covers the mode."""
    from orchestrator.model.timing import LinkConditions, TimeModel

    carried = spec.predicted_as()
    if carried is None:
        return None
    mode, leaves_out = carried
    started = time.monotonic()
    delay = spec.data_delay_fabric_s(session)
    starts = {op.id: op.t + delay for op in ops}
    links = replace(LinkConditions.of(conditions), delay_s=dict(session.delays))
    qps = spec.options.qps
    prediction = TimeModel.for_plan(session.plan, links, qps=qps).predict(
        ops, mode, starts, spec.options.ps_host
    )
    by = "the time model" if mode == spec.name else f"the time model, as {mode}"
    if leaves_out:
        by += f" ({leaves_out})"
    propagation_s = None
    if any(session.delays.values()):
        by += ", with the links' propagation delay"
        short = replace(links, delay_s=dict.fromkeys(session.delays, 0.0))
        propagation_s = prediction.completion_s - (
            TimeModel.for_plan(session.plan, short, qps=qps)
            .predict(ops, mode, starts, spec.options.ps_host)
            .completion_s
        )
    return Predicted(prediction, by, time.monotonic() - started, propagation_s)


def step_predictor(
    session: LabSession, ops: Sequence[AnyOp], modes: StepModes, ps_host: str | None
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
    links = replace(LinkConditions.of(conditions), delay_s=dict(session.delays))
    model = TimeModel.for_plan(session.plan, links)
    prediction = model.predict(list(ops), modes, None, ps_host)
    assert prediction.step is not None
    out = prediction.step.to_dict({op.id: op for op in ops})
    for gpu in out["gpus"].values():
        del gpu["spans"]
    return out | {"completion_s": prediction.completion_s, "modes": str(modes)}
