"""Faults the lab declares for every replay (``faults:`` in its vars, docs/faults.md): link flaps, loss
periods and gray failures written as ``aidclab replay --fault`` takes them, checked here so a mistake
stops ``aidclab configure`` naming the entry, and carried in the plan for the replays to apply."""

from __future__ import annotations

from orchestrator.configure.plan.context import Context, problem
from orchestrator.configure.plan.schema import LabPlan
from orchestrator.lab.fault_spec import FaultSpecError, check_targets, parse_faults


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    for index, text in enumerate(ctx.vars.faults):
        try:
            check_targets(parse_faults(text), ctx.roles, plan.lab)
        except FaultSpecError as exc:
            raise problem(ctx.vars_source(f"faults.{index}"), str(exc)) from None
    plan.faults = list(ctx.vars.faults)
    return plan
