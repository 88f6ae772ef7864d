"""Has the lab's unicast routing converged: does every node's kernel hold a route to every GPU host its plan
routes to, and every GPU host a route to every node? Read from the host into each node's namespace
(netlink), so it works for every image. Routes between two switches are left out: under RFC 7938's ASN
plan two spines of one cluster never learn each other's loopback (the path would carry their own ASN),
and no traffic of ours needs them.

``aidclab configure`` waits for the BGP sessions to be Established, not for the routes they carry: on a
fabric without delay that is a matter of milliseconds, but over long links each BGP hop of an UPDATE
costs its delay times the time scale of wall time (a 10 ms WAN link at 1:1000 is 10 s), so a run on a
delayed lab waits for this first (docs/delay.md).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from aidcnet.roles import Role
from orchestrator.lab.shaping import FabricIOError, node_netns, open_netns


def missing_routes(plan: Any, container_of: Callable[[str], str], nodes: list[str] | None = None) -> dict:
    """node -> the planned destination prefixes its kernel has no route to (nodes missing none left out)."""
    out: dict[str, list[str]] = {}
    hosts = {name for name, node in plan.nodes.items() if node.role == Role.GPU_HOST}
    for name in nodes if nodes is not None else list(plan.nodes):
        routes = plan.nodes[name].routes
        wanted = {str(r.prefix) for r in routes if name in hosts or r.to in hosts}
        if not wanted:
            continue
        try:
            with open_netns(node_netns(container_of(name))) as ns:
                have = {
                    f"{msg.get_attr('RTA_DST')}/{msg['dst_len']}"
                    for msg in ns.get_routes(family=socket.AF_INET)
                    if msg.get_attr("RTA_DST")
                }
        except FabricIOError:
            have = set()
        lacking = sorted(wanted - have)
        if lacking:
            out[name] = lacking
    return out


def wait_for_routes(
    plan: Any, container_of: Callable[[str], str], timeout_s: float, poll_s: float = 1.0
) -> dict[str, list[str]]:
    """Poll :func:`missing_routes` until nothing is missing or ``timeout_s`` of wall time passed; returns
    what is still missing (empty: converged)."""
    deadline = time.monotonic() + timeout_s
    pending = list(plan.nodes)
    while True:
        missing = missing_routes(plan, container_of, pending)
        if not missing or time.monotonic() >= deadline:
            return missing
        pending = list(missing)
        time.sleep(poll_s)
