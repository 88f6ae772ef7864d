"""BFD on the data links (docs/bfd.md): the interval in fabric microseconds, the multiplier and the loss
threshold, and which interfaces of each node run a session: every point-to-point link whose two ends
run our agent. The node files' ``bfd`` sections.

An unset interval is the longer of two: one that lets a BFD packet wait behind a full shaper queue
(:func:`queue_safe_interval_s`), and ``wall_interval_ms`` of wall time (what our agents' timers can keep).
"""

from __future__ import annotations

from pydantic import ValidationError

from aidcnet.config import Bfd
from aidcnet.roles import AGENT_ROLES
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.context import Context, natural_key, validation_problems
from orchestrator.configure.plan.schema import BFD_KNOBS, LabPlan, PlanBfd, PlanError


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    enabled, _ = ctx.setting("bfd.enabled")
    knobs: dict[str, object] = {key: ctx.setting(f"bfd.{key}")[0] for key in BFD_KNOBS}
    if knobs["interval_us"] is None:
        wall_ms, _ = ctx.setting("bfd.wall_interval_ms")
        floor_s = TimeScale.of(plan.time.scale).fabric_s(float(wall_ms) / 1e3)
        interval_s = max(queue_safe_interval_s(plan, int(knobs["multiplier"])), floor_s)
        knobs["interval_us"] = round(interval_s * 1e6, 3)
    try:
        Bfd(**knobs)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise PlanError(f"{ctx.vars_file}: bfd: " + "; ".join(validation_problems(exc))) from None
    plan.bfd = PlanBfd(enabled=bool(enabled), **knobs)  # type: ignore[arg-type]
    return plan


def queue_safe_interval_s(plan: LabPlan, multiplier: int) -> float:
    """The shortest interval (fabric seconds) whose detection time outlasts a BFD packet's wait behind a
    full shaper queue, with an interval to spare: the shapers have one FIFO, and a switch's strict-priority
    queue for control packets is not emulated, so a busy link would otherwise look dead (docs/bfd.md)."""
    waits = [link.queue_bytes * 8 / link.bandwidth_bps for link in plan.links if link.bandwidth_bps]
    return max(waits, default=0.0) / max(1, multiplier - 1)


def bfd_config(plan: LabPlan, name: str) -> Bfd | None:
    """The node's ``bfd`` section: a session on each /31 link to another node running our agent."""
    p = plan.bfd
    if p is None or not p.enabled or plan.nodes[name].role not in AGENT_ROLES:
        return None
    interfaces = [
        here.interface
        for link in plan.links
        for here, there in ((link.a, link.b), (link.b, link.a))
        if here.node == name
        and plan.nodes[there.node].role in AGENT_ROLES
        and here.address is not None
        and here.address.network.prefixlen == 31
    ]
    if not interfaces:
        return None
    return Bfd(interfaces=sorted(interfaces, key=natural_key), **{key: getattr(p, key) for key in BFD_KNOBS})
