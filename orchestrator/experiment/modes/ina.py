"""``ina``: in-network aggregation on the job's VAT (seed 002); the root returns the result by BIER.

Chunk numbers restart at 0 every run, so the job's switches forget the previous run's slots first.
"""

from __future__ import annotations

from typing import Any

from aidcnet.modes import Mode
from orchestrator.configure.plan.schema import LabPlan, PlanInaJob
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.collective import CollectiveMode
from orchestrator.experiment.session import LabSession


@register
class Ina(CollectiveMode):
    name = Mode.INA
    summary = "in-network aggregation on the job's VAT; the root returns the result by BIER"

    def before_op(self, session: LabSession, job: PlanInaJob, request: dict[str, Any]) -> None:
        for switch in [*job.vat, *job.transit]:
            session.agent(switch).ina_reset(job.job)

    def aggregation_point(self, plan: LabPlan, job: PlanInaJob) -> str | None:
        return job.root
