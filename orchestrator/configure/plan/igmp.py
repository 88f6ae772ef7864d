"""IGMP at the leaves (docs/igmp.md): which leaves run it, their timers in fabric seconds, which host
ports may send Receiver Proxy Reports and which do not query; the node files' ``igmp`` sections.

Unset timers are chosen from wall-clock values (``igmp.wall_timers``, igmp.yml) divided by the time scale:
the 8-bit Max Resp and QQIC codes carry 0.1 s..3174.4 s on the wall clock, which the RFC's own defaults
(10 s response, 125 s interval, in fabric seconds) overrun at any scale above about 300.
"""

from __future__ import annotations

from ipaddress import IPv4Address

from pydantic import ValidationError

from aidcnet.config import Igmp, IgmpPort
from aidcnet.roles import Role
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.bier import host_leaf_port
from orchestrator.configure.plan.context import Context, natural_key, problem, validation_problems
from orchestrator.configure.plan.schema import IGMP_KNOBS, IGMP_TIMERS, LabPlan, PlanError, PlanIgmp


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    enabled, _ = ctx.setting("igmp.enabled")
    knobs = settings(plan, ctx)
    plan.igmp = PlanIgmp(enabled=bool(enabled), **knobs)
    if not enabled:
        return plan
    hosts = [n for n in plan.nodes if ctx.is_host(n)]
    proxy, proxy_src = ctx.setting("igmp.proxy_hosts")
    proxy_ports: dict[str, list[str]] = {}
    for host in hosts if proxy == "all" else proxy or []:
        if host not in plan.nodes or not ctx.is_host(host):
            raise problem(proxy_src, f"{host!r} is not a gpu-host node of this lab")
        found = host_leaf_port(plan, host)
        if found is None:
            raise problem(proxy_src, f"{host} is not linked to a BIER leaf: it has no first-hop router")
        proxy_ports.setdefault(found[0], []).append(found[1])
    off, off_src = ctx.setting("igmp.querier_off")
    leaves = {leaf for h in hosts if (found := host_leaf_port(plan, h)) for leaf in [found[0]]}
    quiet: dict[str, list[str]] = {}
    for item in off or []:
        leaf, _, port = item.partition(":")
        if leaf not in leaves:
            raise problem(off_src, f"{leaf!r} is not a leaf with gpu-hosts ({', '.join(sorted(leaves))})")
        quiet.setdefault(leaf, []).append(port or "*")
    plan.igmp = PlanIgmp(
        enabled=True,
        proxy_ports={k: sorted(v, key=natural_key) for k, v in sorted(proxy_ports.items())},
        quiet_ports=dict(sorted(quiet.items())),
        **knobs,
    )
    try:
        Igmp(time_scale=plan.time.scale, **knobs)
    except ValidationError as exc:
        raise PlanError(
            f"{ctx.vars_file}: igmp at time.scale {plan.time.scale} (timers in fabric seconds): "
            + "; ".join(validation_problems(exc))
            + "; leave the timers unset to get wall-clock values that fit"
        ) from None
    return plan


def settings(plan: LabPlan, ctx: Context) -> dict[str, object]:
    """The knobs of the IGMP feature from the vars or igmp.yml; an unset timer is its wall_timers value
    divided by the time scale."""
    knobs: dict[str, object] = {key: ctx.setting(f"igmp.{key}")[0] for key in IGMP_KNOBS}
    clock = TimeScale.of(plan.time.scale)
    for key in IGMP_TIMERS:
        if knobs[key] is None:
            knobs[key] = clock.fabric_s(ctx.setting(f"igmp.wall_timers.{key}")[0])
    return knobs


def igmp_config(plan: LabPlan, name: str, host_ports: list[str]) -> Igmp | None:
    """The leaf's ``igmp`` section: every host port, the BFIRs (every leaf with hosts) and the address
    table of every host (loopback and link addresses) to its leaf's BFR-id."""
    p = plan.igmp
    if not p.enabled or not host_ports:
        return None
    receivers: dict[IPv4Address, int] = {}
    bfirs: set[int] = set()
    for host, node in plan.nodes.items():
        if node.role != Role.GPU_HOST:
            continue
        found = host_leaf_port(plan, host)
        if found is None or plan.nodes[found[0]].bfr_id is None:
            continue
        bfr_id = plan.nodes[found[0]].bfr_id
        bfirs.add(bfr_id)  # type: ignore[arg-type]
        addresses = [node.loopback.ip] if node.loopback else []
        for link in plan.links:
            for here in (link.a, link.b):
                if here.node == host and here.address is not None:
                    addresses.append(here.address.ip)
        for a in addresses:
            receivers[a] = bfr_id  # type: ignore[assignment]
    quiet = p.quiet_ports.get(name, [])
    ports = [
        IgmpPort(
            name=port,
            querier=not ("*" in quiet or port in quiet),
            proxy=port in p.proxy_ports.get(name, []),
        )
        for port in host_ports
    ]
    return Igmp(
        ports=ports,
        time_scale=plan.time.scale,
        bfirs=sorted(bfirs),
        receivers=dict(sorted(receivers.items())),
        **{key: getattr(p, key) for key in IGMP_KNOBS},
    )
