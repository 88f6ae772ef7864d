"""Propagation delay along a lab's paths, in fabric seconds (docs/delay.md): what the links' length adds to
a transfer, and the round trips a protocol's timers must outlast.

Pure logic over a plan and the delay of each link end (``node:interface`` -> one-way seconds of what that
end sends: the plan's, or the live ``fabric.json``'s after ``link set ... delay``). A path follows the
plan's routes hop by hop, every equal-cost next hop considered, so the worst case is the one a timer must
allow for and the best the one a transfer can hope for.

For an open-loop transfer (our replay senders send as fast as their link allows) the last byte arrives
one path delay after it left, so a flow's completion is its serialisation plus its path's delay; a
windowed protocol (INA's window, the reliable transport's) is bound besides by its window per round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A path longer than this many hops loops (a plan's routes never do).
MAX_HOPS = 64


class PropagationError(ValueError):
    pass


def plan_delays(plan: Any) -> dict[str, float]:
    """``node:interface`` -> the one-way delay (seconds, with its jitter: the latest a packet may take) of
    every link end of a plan (:class:`orchestrator.configure.plan.schema.LabPlan`)."""
    out: dict[str, float] = {}
    for link in plan.links:
        for end in (link.a, link.b):
            out[f"{end.node}:{end.interface}"] = link.delay_s + link.jitter_s
    return out


def fabric_delays(fabric: Any) -> dict[str, float]:
    """The same from a lab's live fabric (:class:`orchestrator.lab.fabric.Fabric`): what ``link set``
    changed included."""
    return {name: end.delay_s + end.jitter_s for name, end in fabric.ends.items()}


def path_delays(plan: Any, delays: Mapping[str, float], src: str, dst: str) -> tuple[float, float]:
    """(least, most) one-way delay from ``src`` to ``dst`` over the plan's routes, every equal-cost next
    hop considered. PropagationError when ``dst`` cannot be reached from ``src``."""
    memo: dict[str, tuple[float, float]] = {}

    def walk(here: str, depth: int) -> tuple[float, float]:
        if here == dst:
            return 0.0, 0.0
        if here in memo:
            return memo[here]
        if depth > MAX_HOPS:
            raise PropagationError(f"the routes from {src} to {dst} loop (more than {MAX_HOPS} hops)")
        hops = [h for r in plan.nodes[here].routes if r.to == dst for h in r.nexthops]
        if not hops:
            raise PropagationError(f"{here} has no route to {dst} (from {src}): is the plan complete?")
        spans = []
        for hop in hops:
            least, most = walk(hop.neighbor, depth + 1)
            own = delays.get(f"{here}:{hop.dev}", 0.0)
            spans.append((own + least, own + most))
        memo[here] = (min(s[0] for s in spans), max(s[1] for s in spans))
        return memo[here]

    return walk(src, 0)


def worst_round_trip_s(plan: Any, delays: Mapping[str, float], pairs: list[tuple[str, str]]) -> float:
    """The longest round trip among ``pairs`` (a, b): there and back, each way its slowest path."""
    if not pairs:
        return 0.0
    return max(path_delays(plan, delays, a, b)[1] + path_delays(plan, delays, b, a)[1] for a, b in pairs)
