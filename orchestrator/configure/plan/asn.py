"""ASNs in the shape of RFC 7938 §5.2.1: every GPU host and every leaf (tier 1) gets an ASN of its own;
above the leaves, the switches of one tier share an ASN per cluster.

A cluster of tier k is a connected component of the switches of tier <= k. In a 3-stage leaf-spine all
spines are one cluster (one ASN, RFC 7938's Tier 1); in a 5-stage Clos the tier-2 switches of each pod
form a cluster (RFC 7938's "unique ASN to each set of Tier 2 devices in the same cluster"), so a path
that leaves one pod and enters another never meets its own ASN twice. Switches with no tier (no host
reaches them) are numbered like leaves.

Pins: a pinned node keeps its ASN; the unpinned members of a cluster follow its first pinned member
(natural name order). Automatic numbering skips every pinned value. Pinned ASNs are not required to
be unique: RFC 7938 §5.2.2 reuses ASNs on purpose (with allowas-in).
"""

from __future__ import annotations

import networkx as nx

from orchestrator.configure.plan.context import Context, Source, natural_key, natural_sorted, problem
from orchestrator.configure.plan.schema import AsnRange, LabPlan
from orchestrator.configure.plan.tiers import fabric_graph


class _Numberer:
    def __init__(self, name: str, ctx: Context, taken: set[int]):
        self.range: AsnRange
        self.range, self.src = ctx.setting(f"asn.{name}")
        self.next = self.range.first
        self.taken = taken

    def take(self, what: str) -> int:
        while self.next in self.taken:
            self.next += 1
        if self.next > self.range.last:
            raise problem(self.src, f"ASN range {self.range} is exhausted at {what}; widen it")
        self.next += 1
        return self.next - 1


def clusters(plan: LabPlan, ctx: Context) -> list[list[str]]:
    """Switch clusters above the leaves, top tier first, each in natural name order."""
    graph = fabric_graph(ctx)
    tiers = {n: node.tier for n, node in plan.nodes.items() if ctx.is_switch(n) and node.tier is not None}
    out: list[list[str]] = []
    for k in sorted({t for t in tiers.values() if t >= 2}, reverse=True):
        below = graph.subgraph([n for n, t in tiers.items() if t <= k])
        found = []
        for component in nx.connected_components(below):
            members = natural_sorted(n for n in component if tiers[n] == k)
            if members:
                found.append(members)
        out += sorted(found, key=lambda m: natural_key(m[0]))
    return out


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    pins: dict[str, int] = {}
    for name, node_vars in ctx.vars.nodes.items():
        if node_vars.asn is None:
            continue
        if not ctx.is_managed(name):
            raise problem(
                Source(ctx.vars_file, f"nodes.{name}.asn"),
                f"{name} is a {ctx.roles[name]} node, which the plan does not configure",
            )
        pins[name] = node_vars.asn
    taken = set(pins.values())

    upper = _Numberer("upper", ctx, taken)
    for members in clusters(plan, ctx):
        pinned = [pins[m] for m in members if m in pins]
        shared = (
            pinned[0]
            if pinned
            else upper.take(f"the tier-{plan.nodes[members[0]].tier} cluster of {', '.join(members)}")
        )
        for m in members:
            plan.nodes[m].asn = pins.get(m, shared)

    leaves = _Numberer("leaves", ctx, taken)
    hosts = _Numberer("hosts", ctx, taken)
    for name in natural_sorted(plan.nodes):
        node = plan.nodes[name]
        if not ctx.is_managed(name) or node.asn is not None:
            continue
        if name in pins:
            node.asn = pins[name]
        elif ctx.is_host(name):
            node.asn = hosts.take(name)
        else:
            node.asn = leaves.take(name)
    return plan
