"""``ps``: a parameter server host receives every worker's array, reduces and sends the result back.

The baseline of the collective family. The server is ``--ps-host``, by default the first GPU host that is
not a worker of the job.
"""

from __future__ import annotations

from typing import Any

from aidcnet.modes import Mode
from orchestrator.configure.plan.schema import LabPlan, PlanInaJob
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.collective import CollectiveMode, default_ps_host
from orchestrator.experiment.modes.ring import loopbacks
from orchestrator.experiment.session import LabSession


@register
class ParameterServer(CollectiveMode):
    name = Mode.PS
    summary = "a parameter server host (--ps-host, default the first gpu-host outside the job)"

    def before_op(self, session: LabSession, job: PlanInaJob, request: dict[str, Any]) -> None:
        ps = self.aggregation_point(session.plan, job)
        session.agent(ps).ps_serve(**serve_request(session.plan, job))
        request["to"] = str(session.plan.nodes[ps].loopback.ip)  # type: ignore[union-attr]

    def aggregation_point(self, plan: LabPlan, job: PlanInaJob) -> str:
        """The parameter server: ``--ps-host``, or the first GPU host outside the job."""
        return self.options.ps_host or default_ps_host(plan, job)


def serve_request(plan: LabPlan, job: PlanInaJob) -> dict[str, Any]:
    """What the parameter server is told before one AllReduce of ``job`` (its agent's ``ps_serve``;
    ``aidcnet.agent.ina.worker.ps_job_config`` reads it, and so does the scale model)."""
    return {
        "job": job.job,
        "workers": loopbacks(plan, job),
        "reduce": job.op,
        "dtype": job.dtype,
        "slot_budget": job.slot_budget,
    }
