"""The plan, seen from one node: its :class:`aidcnet.config.NodeConfig` (the file the agent applies)."""

from __future__ import annotations

from aidcnet.config import CONFIG_VERSION, Bgp, Bier, Interface, NextHop, NodeConfig, Route
from orchestrator.plan.context import natural_key
from orchestrator.plan.model import LabPlan, PlanError


def node_config(plan: LabPlan, name: str) -> NodeConfig:
    node = plan.nodes[name]
    if node.loopback is None:
        raise PlanError(
            f"{plan.topology}: node {name} ({node.role}) has no loopback; the plan does not configure it"
        )
    interfaces = []
    for link in plan.links:
        for local, remote in ((link.a, link.b), (link.b, link.a)):
            if local.node != name or local.address is None:
                continue
            interfaces.append(
                Interface(
                    name=local.interface,
                    ipv4=local.address,
                    peer=remote.node,
                    peer_interface=remote.interface,
                    mtu=link.mtu,
                    bandwidth_bps=link.bandwidth_bps,
                )
            )
    interfaces.sort(key=lambda i: natural_key(i.name))
    routes = [
        Route(prefix=r.prefix, nexthops=[NextHop(via=h.via, dev=h.dev) for h in r.nexthops])
        for r in node.routes
    ]
    return NodeConfig(
        version=CONFIG_VERSION,
        node=name,
        role=node.role,
        loopback=node.loopback,
        interfaces=interfaces,
        routes=routes,
        bgp=Bgp(asn=node.asn, router_id=node.loopback.ip) if node.asn is not None else None,
        bier=(
            Bier(bfr_id=node.bfr_id, sub_domain=plan.bier.sub_domain, bsl=plan.bier.bsl, bift=plan.bier.bift)
            if node.bfr_id is not None
            else None
        ),
    )


def node_configs(plan: LabPlan) -> dict[str, NodeConfig]:
    """A config for every node the plan manages (every role but linux), in topology node order."""
    return {name: node_config(plan, name) for name, node in plan.nodes.items() if node.role != "linux"}
