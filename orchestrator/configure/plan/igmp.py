"""IGMP at the leaves (docs/igmp.md): which leaves run it, their timers in fabric seconds, which host
ports may send Receiver Proxy Reports and which do not query; the node files' ``igmp`` sections.

Unset timers are chosen from wall-clock values (:data:`WALL_DEFAULTS`) divided by the time scale: the
8-bit Max Resp and QQIC codes carry 0.1 s..3174.4 s on the wall clock, which the RFC's own defaults
(10 s response, 125 s interval, in fabric seconds) overrun at any scale above about 300.
"""

from __future__ import annotations

from ipaddress import IPv4Address

from pydantic import ValidationError

from aidcnet.config import Igmp, IgmpPort
from aidcnet.roles import Role
from orchestrator.configure.plan.bier import host_leaf_port
from orchestrator.configure.plan.context import Context, natural_key, problem, validation_problems
from orchestrator.configure.plan.model import LabPlan, PlanError, PlanIgmp

WALL_DEFAULTS = {"query_interval": 20.0, "query_response_interval": 2.0, "last_member_query_interval": 0.2}


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    enabled, _ = ctx.setting("igmp.enabled")
    plan.igmp = PlanIgmp(enabled=bool(enabled))
    if not enabled:
        return plan
    scale = plan.time.scale or 1
    timers = {}
    for key, wall in WALL_DEFAULTS.items():
        value, _ = ctx.setting(f"igmp.{key}")
        timers[key] = float(value) if value is not None else wall / scale
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
        groups=list(ctx.setting("igmp.groups")[0]),
        robustness=ctx.setting("igmp.robustness")[0],
        proxy_ports={k: sorted(v, key=natural_key) for k, v in sorted(proxy_ports.items())},
        quiet_ports=dict(sorted(quiet.items())),
        max_channels=ctx.setting("igmp.max_channels")[0],
        max_groups=ctx.setting("igmp.max_groups")[0],
        control_cost=float(ctx.setting("igmp.control_cost")[0] or 0),
        control_cost_record=float(ctx.setting("igmp.control_cost_record")[0] or 0),
        **timers,
    )
    try:
        Igmp(robustness=plan.igmp.robustness, time_scale=plan.time.scale, **timers)
    except ValidationError as exc:
        raise PlanError(
            f"{ctx.vars_file}: igmp timers (fabric seconds) at time.scale {plan.time.scale}: "
            + "; ".join(validation_problems(exc))
            + "; leave them unset to get wall-clock values that fit"
        ) from None
    return plan


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
        groups=p.groups,  # type: ignore[arg-type]
        ports=ports,
        robustness=p.robustness,
        query_interval=p.query_interval,
        query_response_interval=p.query_response_interval,
        last_member_query_interval=p.last_member_query_interval,
        time_scale=plan.time.scale,
        bfirs=sorted(bfirs),
        receivers=dict(sorted(receivers.items())),
        max_channels=p.max_channels,
        max_groups=p.max_groups,
        control_cost=p.control_cost,
        control_cost_record=p.control_cost_record,
    )
