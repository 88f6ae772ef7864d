"""Static routes: from every managed node to every other node's loopback over all equal-cost shortest
paths (ECMP), each first hop given as the neighbour's address on the link toward it.

Only switches transit: a GPU host is a path's end, never its middle, even when it has links into
several planes (a SuperPoD GPU must not forward plane 1 traffic into plane 2). Path cost is the hop
count; parallel links to the same neighbour are separate next hops. Pairs with no such path get no
route and are counted in ``plan.unreachable``.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass

from orchestrator.configure.plan.context import Context, natural_key
from orchestrator.configure.plan.model import LabPlan, PlanNextHop, PlanRoute, Unreachable

UNREACHABLE_SHOWN = 20


@dataclass(frozen=True)
class _Adj:
    dev: str
    neighbor: str
    via: ipaddress.IPv4Address


def _adjacency(plan: LabPlan, ctx: Context) -> dict[str, list[_Adj]]:
    adj: dict[str, list[_Adj]] = {n: [] for n in plan.nodes if ctx.is_managed(n)}
    for link in plan.links:
        a, b = link.a, link.b
        if a.node == b.node or not (ctx.is_managed(a.node) and ctx.is_managed(b.node)):
            continue
        if a.address is None or b.address is None:
            continue
        adj[a.node].append(_Adj(a.interface, b.node, b.address.ip))
        adj[b.node].append(_Adj(b.interface, a.node, a.address.ip))
    for hops in adj.values():
        hops.sort(key=lambda h: natural_key(h.dev))
    return adj


def _distances_to(dest: str, adj: dict[str, list[_Adj]], ctx: Context) -> dict[str, int]:
    """Hops from every node to ``dest`` over paths whose inner nodes are all switches."""
    dist = {dest: 0}
    queue = deque([dest])
    while queue:
        here = queue.popleft()
        if here != dest and not ctx.is_switch(here):
            continue
        for hop in adj[here]:
            if hop.neighbor not in dist:
                dist[hop.neighbor] = dist[here] + 1
                queue.append(hop.neighbor)
    return dist


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    adj = _adjacency(plan, ctx)
    for node in plan.nodes.values():
        node.routes = []
    missing: list[str] = []
    for dest, dest_node in plan.nodes.items():
        if dest not in adj or dest_node.loopback is None:
            continue
        dist = _distances_to(dest, adj, ctx)
        for src in adj:
            if src == dest:
                continue
            if src not in dist:
                missing.append(f"{src} -> {dest}")
                continue
            hops = [
                PlanNextHop(via=h.via, dev=h.dev, neighbor=h.neighbor)
                for h in adj[src]
                if (h.neighbor == dest or ctx.is_switch(h.neighbor)) and dist.get(h.neighbor) == dist[src] - 1
            ]
            route = PlanRoute(to=dest, prefix=dest_node.loopback.network, nexthops=hops)
            plan.nodes[src].routes.append(route)
    plan.unreachable = Unreachable(count=len(missing), pairs=missing[:UNREACHABLE_SHOWN])
    return plan
