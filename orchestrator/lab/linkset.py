"""``aidclab link set NODE:IF down|up|bandwidth BW|loss P``: fault injection (docs/fare.md).

* ``down`` / ``up`` sets the interface administratively down/up inside the node (a failed port): the far end
  loses carrier, and both agents see it through netlink and re-route at once.
* ``bandwidth BW`` tells the agents at both ends that the link now carries BW (a Y-cable losing one of its
  two 400G sub-links becomes 400G instead of 800G): FARE re-weights and re-advertises. The veth itself is
  not shaped; FARE's shares are what changes.
* ``loss P`` makes the node's agent drop a share P (0..1) of what it sends on the interface (INA packets and
  BIER copies; ``aidcnet.loss``): this kernel has no netem, so loss lives in our dataplane. 0 removes it.

Both act through the node's own tools (``ip`` via docker exec, and the node's agent through its control
socket), never around them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aidcnet.agent.control import ControlError
from aidcnet.fare.bandwidth import BandwidthError, format_bandwidth, parse_bandwidth

if TYPE_CHECKING:
    from aidcnet.agent.client import AgentClient

ACTIONS = ("down", "up", "bandwidth", "loss")
_ENDPOINT = re.compile(r"^(?P<node>[^:\s]+):(?P<iface>[A-Za-z0-9_.-]{1,15})$")


class LinkSetError(ValueError):
    pass


class Runtime(Protocol):
    def exec(self, container: str, cmd: list[str] | str, timeout: float | None = None) -> tuple[int, str]: ...

    def agent(self, container: str, node: str | None = None, timeout: float = 10.0) -> AgentClient: ...


@dataclass(frozen=True)
class End:
    node: str
    interface: str
    container: str
    runs_agent: bool  # the aidcnet agent runs there (not FRR or plain linux)


def parse_endpoint(text: str) -> tuple[str, str]:
    match = _ENDPOINT.match(text)
    if match is None:
        raise LinkSetError(f"{text!r}: expected NODE:INTERFACE, e.g. G1:eth2")
    return match["node"], match["iface"]


def link_ends(topology_data: dict, node: str, interface: str, source: str) -> tuple[End, End]:
    """The named end and its peer, from the lab dir's topology-data.json (containerlab's shape)."""
    nodes = topology_data.get("nodes", {})
    if node not in nodes:
        raise LinkSetError(f"{source}: no node {node!r} (nodes: {', '.join(sorted(nodes))})")

    def end(n: str, i: str) -> End:
        from orchestrator.lab.roles import role_from

        info = nodes[n]
        role = role_from(n, info.get("labels", {}), str(info.get("image", "")))
        return End(n, i, info["longname"], role.runs_agent)

    for link in topology_data.get("links", []):
        a, z = link["a"], link["z"]
        if (a["node"], a["interface"]) == (node, interface):
            return end(node, interface), end(z["node"], z["interface"])
        if (z["node"], z["interface"]) == (node, interface):
            return end(node, interface), end(a["node"], a["interface"])
    have = sorted(
        e["interface"]
        for link in topology_data.get("links", [])
        for e in (link["a"], link["z"])
        if e["node"] == node
    )
    raise LinkSetError(
        f"{source}: {node} has no link on {interface} (its links: {', '.join(have) or 'none'})"
    )


def link_set(
    runtime: Runtime, lab_dir: Path, endpoint: str, action: str, value: str | None = None
) -> list[str]:
    """Apply the change; returns one line per node touched. Raises LinkSetError naming what is wrong."""
    node, interface = parse_endpoint(endpoint)
    data_path = lab_dir / "topology-data.json"
    if not data_path.exists():
        raise LinkSetError(f"{data_path} does not exist: is the lab deployed from this directory?")
    here, peer = link_ends(json.loads(data_path.read_text()), node, interface, str(data_path))
    if action in ("down", "up"):
        code, out = runtime.exec(here.container, ["ip", "link", "set", "dev", interface, action])
        if code != 0:
            raise LinkSetError(f"{node}: ip link set {interface} {action} failed: {out.strip()}")
        return [f"{node}:{interface} {action} (peer {peer.node}:{peer.interface} sees carrier {action})"]
    if action == "loss":
        return [_set_loss(runtime, here, value)]
    if action != "bandwidth":
        raise LinkSetError(f"action {action!r}: one of {', '.join(ACTIONS)}")
    if value is None:
        raise LinkSetError("bandwidth needs a value, e.g. aidclab link set LAB G1:eth2 bandwidth 400G")
    try:
        shown = format_bandwidth(parse_bandwidth(value))
    except BandwidthError as exc:
        raise LinkSetError(str(exc)) from None
    lines = []
    for end in (here, peer):
        if not end.runs_agent:
            lines.append(f"{end.node}:{end.interface} skipped (not an aidcnet node: set its bandwidth there)")
            continue
        try:
            runtime.agent(end.container, end.node).bgp_link(end.interface, value)
        except ControlError as exc:
            raise LinkSetError(f"{end.node}: bandwidth of {end.interface} to {value}: {exc}") from None
        lines.append(f"{end.node}:{end.interface} bandwidth {shown}")
    return lines


def _set_loss(runtime: Runtime, end: End, value: str | None) -> str:
    try:
        probability = float(value) if value is not None else None
    except ValueError:
        probability = None
    if probability is None or not 0.0 <= probability <= 1.0:
        raise LinkSetError(
            f"loss needs a probability 0..1, e.g. aidclab link set {end.node}:{end.interface} loss 0.02 "
            f"(got {value!r})"
        )
    if not end.runs_agent:
        raise LinkSetError(f"{end.node} is not an aidcnet node: loss injection lives in the aidcnet agent")
    try:
        runtime.agent(end.container, end.node).drop(end.interface, probability)
    except ControlError as exc:
        raise LinkSetError(f"{end.node}: loss {probability} on {end.interface}: {exc}") from None
    if probability == 0:
        return f"{end.node}:{end.interface} loss removed"
    return f"{end.node}:{end.interface} drops {probability:.2%} of what its agent sends"
