"""``aidclab link set NODE:IF down|up|bandwidth BW|loss ...|delay D [jitter J]``: fault injection on a link
(docs/time-and-fidelity.md, docs/fare.md, docs/delay.md).

* ``down`` / ``up`` sets the interface administratively down/up inside the node (a failed port): the far end
  loses carrier, and both agents see it through netlink and re-route at once.
* ``bandwidth BW`` changes the link at both ends: the agents' FARE view (FARE re-weights and re-advertises)
  and the shapers, to BW / time scale, so a Y-cable that lost one of its two 400G sub-links really
  becomes half as fast. ``clab-<lab>/fabric.json`` records it.
* ``loss ...`` sets the link-fault tc program at both ends' egress (``--one-way``: only what NODE sends on
  IF): every packet crosses it, whatever sent it (unicast, BIER, network-BIER, INA, BGP, IGMP), and each
  drop is counted per end and cause. Independent, bursty (mean burst length) or a full Gilbert-Elliott
  chain (``aidcnet.ebpf.link_fault``).
* ``delay D [jitter J]`` holds what both ends send (``--one-way``: what NODE sends on IF) for D of fabric
  time after the shaper, varied by up to ± J without reordering: the lab's delay relay
  (:mod:`orchestrator.lab.relay`) is started, told or stopped to match, and fabric.json records it.

The agents' view goes through the node's agent (its control socket); down/up, the shapers and the fault
program are set from the host into the node's namespace (netlink, tc, bpftool), so FRR nodes get them too
and a fault's moment is not a ``docker exec``'s 100 ms or more.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aidcnet.agent.control import ControlError
from aidcnet.ebpf.link_fault import FaultError, LinkFault, parse_loss_words
from aidcnet.fare.bandwidth import BandwidthError, format_bandwidth, parse_bandwidth
from orchestrator.lab.delay import DelayError, parse_delay_words
from orchestrator.lab.fabric import EndShaper, Fabric, FabricError

if TYPE_CHECKING:
    from aidcnet.agent.client import AgentClient

ACTIONS = ("down", "up", "bandwidth", "loss", "delay")
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


class FabricIO(Protocol):
    """What link set needs from :mod:`orchestrator.lab.shaping` (a fake in unit tests)."""

    def load_fabric(self, lab_dir: Path) -> Fabric: ...
    def write_fabric(self, lab_dir: Path, fabric: Fabric) -> Path: ...
    def node_netns(self, container: str) -> str: ...
    def apply_shapers(self, netns: str, ends: list[EndShaper]) -> int: ...
    def set_link_fault(self, netns: str, interface: str, fault: LinkFault) -> None: ...
    def set_link_state(self, netns: str, interface: str, up: bool) -> None: ...


class RelayIO(Protocol):
    """What link set needs from :mod:`orchestrator.lab.relayctl` (a fake in unit tests)."""

    def sync(self, lab_dir: Path, fabric: Fabric) -> str | None: ...


def _values(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def link_set(
    runtime: Runtime,
    lab_dir: Path,
    endpoint: str,
    action: str,
    value: str | list[str] | None = None,
    one_way: bool = False,
    fabric_io: FabricIO | None = None,
    relay_io: RelayIO | None = None,
) -> list[str]:
    """Apply the change; returns one line per end touched. Raises LinkSetError naming what is wrong."""
    node, interface = parse_endpoint(endpoint)
    data_path = lab_dir / "topology-data.json"
    if not data_path.exists():
        raise LinkSetError(f"{data_path} does not exist: is the lab deployed from this directory?")
    here, peer = link_ends(json.loads(data_path.read_text()), node, interface, str(data_path))
    words = _values(value)
    if action not in ACTIONS:
        raise LinkSetError(f"action {action!r}: one of {', '.join(ACTIONS)}")
    if fabric_io is None:
        from orchestrator.lab import shaping

        fabric_io = shaping  # type: ignore[assignment]
    assert fabric_io is not None
    if action in ("down", "up"):
        try:
            fabric_io.set_link_state(fabric_io.node_netns(here.container), interface, action == "up")
        except (RuntimeError, OSError) as exc:
            raise LinkSetError(f"{node}: setting {interface} {action} failed: {exc}") from None
        lines = [f"{node}:{interface} {action} (peer {peer.node}:{peer.interface} sees carrier {action})"]
        # fabric.json records it, so the runs made while it is down say so (settings.conditions).
        try:
            fabric = fabric_io.load_fabric(lab_dir)
        except (RuntimeError, ValueError) as exc:
            return [*lines, f"not recorded in the lab's fabric.json: {exc}"]
        fabric_io.write_fabric(lab_dir, fabric.with_down(f"{node}:{interface}", action == "down"))
        return lines
    try:
        fabric = fabric_io.load_fabric(lab_dir)
    except RuntimeError as exc:
        raise LinkSetError(str(exc)) from None
    if action == "loss":
        return _set_loss(fabric_io, fabric, lab_dir, here, peer, words, one_way)
    if action == "delay":
        if relay_io is None:
            from orchestrator.lab import relayctl

            relay_io = relayctl  # type: ignore[assignment]
        assert relay_io is not None
        return _set_delay(fabric_io, relay_io, fabric, lab_dir, here, peer, words, one_way)
    return _set_bandwidth(runtime, fabric_io, fabric, lab_dir, here, peer, words)


def _set_bandwidth(
    runtime: Runtime,
    fabric_io: FabricIO,
    fabric: Fabric,
    lab_dir: Path,
    here: End,
    peer: End,
    words: list[str],
) -> list[str]:
    if len(words) != 1:
        raise LinkSetError(
            f"bandwidth needs one value, e.g. aidclab link set {here.node}:{here.interface} bandwidth 400G"
        )
    value = words[0]
    try:
        bytes_per_s = parse_bandwidth(value)
    except BandwidthError as exc:
        raise LinkSetError(str(exc)) from None
    if bytes_per_s <= 0:
        raise LinkSetError(f"bandwidth {value!r} must be above zero (a dead link is 'down')")
    shown = format_bandwidth(bytes_per_s)
    try:
        fabric, changed = fabric.with_bandwidth(f"{here.node}:{here.interface}", round(bytes_per_s * 8))
    except FabricError as exc:
        raise LinkSetError(str(exc)) from None
    lines = []
    for end in (here, peer):
        if not end.runs_agent:
            lines.append(f"{end.node}:{end.interface} FARE view unchanged (no aidcnet agent: set it there)")
            continue
        try:
            reply = runtime.agent(end.container, end.node).bgp_link(end.interface, value)
        except ControlError as exc:
            raise LinkSetError(f"{end.node}: bandwidth of {end.interface} to {value}: {exc}") from None
        fare = "FARE re-weights" if reply.get("bgp", True) else "no BGP on this node: no FARE view to change"
        lines.append(f"{end.node}:{end.interface} bandwidth {shown} ({fare})")
    containers = {here.node: here.container, peer.node: peer.container}
    for shaper in changed:
        fabric_io.apply_shapers(fabric_io.node_netns(containers[shaper.node]), [shaper])
        if fabric.scale is None:
            lines.append(f"{shaper.name} not shaped (the lab sets no time.scale): its agents' view only")
        else:
            rate = shaper.rate_bps / 1e6
            lines.append(f"{shaper.name} shaped to {rate:g} Mbit/s ({shown} / time scale {fabric.scale})")
    fabric_io.write_fabric(lab_dir, fabric)
    return lines


def _set_loss(
    fabric_io: FabricIO,
    fabric: Fabric,
    lab_dir: Path,
    here: End,
    peer: End,
    words: list[str],
    one_way: bool,
) -> list[str]:
    try:
        fault = parse_loss_words(words)
    except FaultError as exc:
        raise LinkSetError(f"{here.node}:{here.interface}: {exc}") from None
    lines = []
    for end in (here,) if one_way else (here, peer):
        name = f"{end.node}:{end.interface}"
        try:
            fabric = fabric.with_fault(name, None if fault.is_none else fault.to_dict())
        except FabricError as exc:
            raise LinkSetError(str(exc)) from None
        fabric_io.set_link_fault(fabric_io.node_netns(end.container), end.interface, fault)
        other = peer if end is here else here
        lines.append(f"{name} -> {other.node}:{other.interface}: {fault.describe()}")
    fabric_io.write_fabric(lab_dir, fabric)
    return lines


def _set_delay(
    fabric_io: FabricIO,
    relay_io: RelayIO,
    fabric: Fabric,
    lab_dir: Path,
    here: End,
    peer: End,
    words: list[str],
    one_way: bool,
) -> list[str]:
    from orchestrator.lab.relay import RelayError

    name = f"{here.node}:{here.interface}"
    try:
        delay = parse_delay_words(words)
        fabric, changed = fabric.with_delay(name, delay, one_way)
    except (DelayError, FabricError) as exc:
        raise LinkSetError(f"{name}: {exc}") from None
    fabric_io.write_fabric(lab_dir, fabric)
    lines = [f"{end.name} -> {end.peer}: {delay.describe()}" for end in changed]
    try:
        said = relay_io.sync(lab_dir, fabric)
    except RelayError as exc:
        raise LinkSetError(f"{name}: fabric.json has the delay, the relay did not follow: {exc}") from None
    return [*lines, *([said] if said else [])]
