"""Network planes of a multi-plane fabric (the SuperPoD of draft-xu-rtgwg-fare-in-sun: every GPU has one
port per plane through its Y-cable, and the planes share no switch).

A plane is a set of switches. A host belongs to every plane it has a link into; a link belongs to the
plane of its switch end(s) when they agree.
"""

from __future__ import annotations

import networkx as nx

from orchestrator.configure.plan.context import Context, Source, clash, natural_sorted, problem
from orchestrator.configure.plan.schema import LabPlan, PlanPlane
from orchestrator.configure.plan.tiers import fabric_graph


def _detect(ctx: Context, graph: nx.MultiGraph) -> tuple[list[list[str]], str]:
    """Planes found from the wiring, and why there are that many (for the count-mismatch error)."""
    switches = [n for n in graph.nodes if ctx.is_switch(n)]
    hosts = natural_sorted(n for n in graph.nodes if ctx.is_host(n))
    attach = {h: frozenset(n for n in graph.neighbors(h) if ctx.is_switch(n)) for h in hosts}
    sets = set(attach.values())
    if not hosts or len(sets) != 1 or not next(iter(sets)):
        shown = "; ".join(f"{h}: {', '.join(natural_sorted(s)) or '-'}" for h, s in list(attach.items())[:4])
        why = "no GPU hosts" if not hosts else f"GPU hosts link to different switch sets ({shown})"
        return [natural_sorted(switches)], why
    plane_leaves = natural_sorted(next(iter(sets)))
    # A spine layer private to one plane belongs to it; a switch shared by planes belongs to none.
    core = graph.subgraph(switches)
    planes = []
    for leaf in plane_leaves:
        component = nx.node_connected_component(core, leaf)
        if len(component & set(plane_leaves)) == 1:
            planes.append(natural_sorted(component))
        else:
            planes.append([leaf])
    return planes, f"every GPU host links to the same {len(plane_leaves)} switches"


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    graph = fabric_graph(ctx)
    spec, src = ctx.setting("planes")
    if isinstance(spec, list):
        planes = _pinned(ctx, spec, src)
    else:
        planes, why = _detect(ctx, graph)
        if isinstance(spec, int) and spec != len(planes):
            raise problem(
                src,
                f"planes = {spec}, but {ctx.topo_file} has {len(planes)} plane(s): {why}; "
                "fix the wiring, drop the key, or list the planes' switches explicitly",
            )
    plan.planes = [PlanPlane(id=i + 1, switches=members) for i, members in enumerate(planes)]
    plane_of = {s: p.id for p in plan.planes for s in p.switches}
    for name, node in plan.nodes.items():
        if name in plane_of:
            node.planes = [plane_of[name]]
        elif ctx.is_host(name):
            node.planes = sorted({plane_of[n] for n in graph.neighbors(name) if n in plane_of})
    for link in plan.links:
        ends = {plane_of.get(link.a.node), plane_of.get(link.b.node)} - {None}
        link.plane = ends.pop() if len(ends) == 1 else None
    return plan


def _pinned(ctx: Context, spec: list[list[str]], src: Source) -> list[list[str]]:
    seen: dict[str, Source] = {}
    for p, members in enumerate(spec):
        if not members:
            raise problem(Source(src.file, f"planes.{p}"), "a plane needs at least one switch")
        for i, name in enumerate(members):
            here = Source(src.file, f"planes.{p}.{i}")
            if name not in ctx.topo.nodes:
                raise problem(here, f"no node {name!r} in {ctx.topo_file}")
            if not ctx.is_switch(name):
                raise problem(here, f"{name} is a {ctx.roles[name]}, not a switch; planes list switches")
            if name in seen:
                raise clash(here, name, seen[name], name, "is already in")
            seen[name] = here
    return [list(m) for m in spec]
