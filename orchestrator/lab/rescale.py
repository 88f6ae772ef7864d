"""Run a configured lab at another time scale between runs: its shapers and its agents together.

The time scale is one value (``aidcnet.timescale.TimeScale``) with one live source, the lab's
``fabric.json``. A scale search, ``replay --confirm`` and the automatic scale change it between runs; the
agents' protocol timers and modelled costs must follow the links, or a run would mix two clocks (a fault
or an IGMP timer at the old scale over links at the new one). This is the one place that changes all of
them: the shapers, the agents and the delay relay (docs/delay.md), which holds each delay for delay x
scale of wall time.
The node files keep the configured scale: ``aidclab configure`` puts everything back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from aidcnet.agent.client import AgentClient
from aidcnet.agent.control import ControlError
from aidcnet.timescale import TimeScale
from orchestrator.lab import relayctl
from orchestrator.lab.fabric import Fabric
from orchestrator.lab.shaping import apply_fabric, load_fabric


class RescaleError(ValueError):
    pass


def rescale(
    lab_dir: Path,
    container_of: Callable[[str], str],
    agents: Mapping[str, AgentClient],
    time_scale: TimeScale,
) -> Fabric:
    """Shape every link to ``time_scale`` and tell every agent; returns the fabric as written. Nothing is
    done when the lab already runs at that scale."""
    fabric = load_fabric(lab_dir)
    if fabric.time_scale == time_scale:
        return fabric
    if not time_scale.shaped:
        raise RescaleError("a run cannot unshape a shaped lab: set time.scale: off and configure it")
    fabric = apply_fabric(fabric.with_scale(time_scale), lab_dir, container_of)
    relayctl.sync(lab_dir, fabric)

    def tell(node: str) -> str | None:
        try:
            reply = agents[node].set_time_scale(time_scale.value)
        except ControlError as exc:
            return f"{node}: {exc}"
        return None if reply.get("ok") else f"{node}: {reply.get('error')}"

    with ThreadPoolExecutor(8) as pool:
        failed = [why for why in pool.map(tell, sorted(agents)) if why]
    if failed:
        raise RescaleError(
            f"the links run at {time_scale.label} but {len(failed)} agent(s) did not follow "
            f"({'; '.join(failed[:3])}): aidclab configure puts the lab back at its own scale"
        )
    return fabric


@contextmanager
def at_scale(
    lab_dir: Path,
    container_of: Callable[[str], str],
    agents: Mapping[str, AgentClient],
    time_scale: TimeScale,
) -> Iterator[Fabric]:
    """The lab at ``time_scale`` for the body (a run there with the automatic scale off), then back at the
    scale it had, whatever the body did."""
    before = load_fabric(lab_dir).time_scale
    try:
        yield rescale(lab_dir, container_of, agents, time_scale)
    finally:
        rescale(lab_dir, container_of, agents, before)
