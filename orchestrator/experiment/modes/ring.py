"""``ring``: ring AllReduce between the workers over UDP (reduce-scatter then all-gather); sums only."""

from __future__ import annotations

from typing import Any

from aidcnet.ina.header import Op
from aidcnet.modes import Mode
from orchestrator.configure.plan.schema import LabPlan, PlanInaJob
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.collective import CollectiveMode
from orchestrator.experiment.session import ExperimentError, LabSession


@register
class Ring(CollectiveMode):
    name = Mode.RING
    summary = "ring AllReduce between the workers over UDP"

    def check_job(self, job: PlanInaJob) -> None:
        if Op[job.op.upper()] is not Op.SUM:
            raise ExperimentError(
                f"job {job.job}: mode {self.name} reduces sums only, the job is {job.dtype} {job.op} "
                "(run it with --mode ina or ps, or set op: sum in ina.jobs)"
            )
        super().check_job(job)

    def before_op(self, session: LabSession, job: PlanInaJob, request: dict[str, Any]) -> None:
        request["addresses"] = loopbacks(session.plan, job)


def loopbacks(plan: LabPlan, job: PlanInaJob) -> dict[int | None, str]:
    """Each worker's BFR-id and loopback address, as the workers' agents take them."""
    return {
        plan.nodes[w].bfr_id: str(plan.nodes[w].loopback.ip)  # type: ignore[union-attr]
        for w in job.workers
    }
