"""Tiers: hop distance from the nearest GPU host, counted over switches only (hosts never transit).

Tier 0 is a GPU host, tier 1 a leaf (a switch with a host on one of its links), tier 2 a spine, and so
on up the Clos. ASNs (RFC 7938 §5.2.1) and BFR-ID order both follow the tier. A switch no host can
reach (a lab without GPU hosts) keeps tier None; the features treat it like a leaf.
"""

from __future__ import annotations

from collections import deque

import networkx as nx

from orchestrator.configure.plan.context import Context, natural_sorted
from orchestrator.configure.plan.schema import LabPlan


def fabric_graph(ctx: Context) -> nx.MultiGraph:
    """Managed nodes and the links between them, one edge per link (parallel links stay parallel)."""
    graph = nx.MultiGraph()
    graph.add_nodes_from(n for n in ctx.topo.nodes if ctx.is_managed(n))
    for index, link in enumerate(ctx.topo.links):
        a, b = link.a.node, link.b.node
        if ctx.is_managed(a) and ctx.is_managed(b) and a != b:
            graph.add_edge(a, b, key=index)
    return graph


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    graph = fabric_graph(ctx)
    tier: dict[str, int] = {}
    queue: deque[str] = deque()
    for name in natural_sorted(graph.nodes):
        if ctx.is_host(name):
            tier[name] = 0
            queue.append(name)
    while queue:
        here = queue.popleft()
        for neighbor in natural_sorted(set(graph.neighbors(here))):
            if neighbor in tier or not ctx.is_switch(neighbor):
                continue
            tier[neighbor] = tier[here] + 1
            queue.append(neighbor)
    for name, node in plan.nodes.items():
        node.tier = tier.get(name)
    return plan
