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
from orchestrator.configure.plan.schema import LabPlan, PlanNextHop, PlanRoute, Unreachable

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


def collapsed(routes: list[PlanRoute]) -> list[tuple[ipaddress.IPv4Network, tuple[tuple[str, str], ...]]]:
    """The node's routes as its kernel needs them: destinations with the same next-hop set merged into
    the fewest prefixes that cover exactly those destinations (``ipaddress.collapse_addresses``), as
    ``(prefix, ((via, dev), ...))`` in address order.

    Nothing new is routed: only prefixes that tile a larger one are merged, and the plan's loopbacks are
    disjoint, so each address still takes the next hops its own route had. On a 256-GPU leaf-spine a
    host's 279 loopback routes, all via its leaf, become about ten; the node files, Ansible's payload
    and the agent's netlink work shrink with them. The plan itself keeps one route per destination node
    (the BIFT, INA trees and the exact model read it by ``to``)."""
    by_hops: dict[tuple[tuple[str, str], ...], list[ipaddress.IPv4Network]] = {}
    for route in routes:
        hops = tuple((str(h.via), h.dev) for h in route.nexthops)
        by_hops.setdefault(hops, []).append(route.prefix)
    merged = [
        (prefix, hops)
        for hops, prefixes in by_hops.items()
        for prefix in ipaddress.collapse_addresses(prefixes)
    ]
    return sorted(merged, key=lambda item: (item[0].network_address, item[0].prefixlen))
