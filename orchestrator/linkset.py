"""``aidclab link set NODE:IF down|up|bandwidth BW|loss ...``: fault injection on a link
(docs/time-and-fidelity.md, docs/fare.md).

* ``down`` / ``up`` sets the interface administratively down/up inside the node (a failed port): the far end
  loses carrier, and both agents see it through netlink and re-route at once.
* ``bandwidth BW`` changes the link at both ends: the agents' FARE view (FARE re-weights and re-advertises)
  and the shapers, to BW / time scale, so a Y-cable that lost one of its two 400G sub-links really
  becomes half as fast. ``clab-<lab>/fabric.json`` records it.
* ``loss ...`` sets the link-fault tc program at both ends' egress (``--one-way``: only what NODE sends on
  IF): every packet crosses it, whatever sent it (unicast, BIER, network-BIER, INA, BGP, IGMP), and each
  drop is counted per end and cause. Independent, bursty (mean burst length) or a full Gilbert-Elliott
  chain (``aidcnet.ebpf.link_fault``).

Down/up and the agents' view go through the node's own tools (``ip`` and ``aidcnet ctl`` via docker exec);
shapers and the fault program are set from the host into the node's namespace, so FRR nodes get them too.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aidcnet.ebpf.link_fault import FaultError, LinkFault, parse_loss_words
from aidcnet.fare.bandwidth import BandwidthError, format_bandwidth, parse_bandwidth
from orchestrator.fabric import EndShaper, Fabric, FabricError
from orchestrator.topology import lab_dir_name

ACTIONS = ("down", "up", "bandwidth", "loss")
_ENDPOINT = re.compile(r"^(?P<node>[^:\s]+):(?P<iface>[A-Za-z0-9_.-]{1,15})$")


class LinkSetError(ValueError):
    pass


class Runtime(Protocol):
    def exec(self, container: str, cmd: list[str] | str, timeout: float | None = None) -> tuple[int, str]: ...


@dataclass(frozen=True)
class End:
    node: str
    interface: str
    container: str
    runs_agent: bool  # aidcnet ctl works there (not FRR or plain linux)


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
        from orchestrator.nodes import role_from

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
    """What link set needs from :mod:`orchestrator.fabric_tc` (a fake in unit tests)."""

    def load_fabric(self, lab_dir: Path) -> Fabric: ...
    def write_fabric(self, lab_dir: Path, fabric: Fabric) -> Path: ...
    def node_netns(self, container: str) -> str: ...
    def apply_shapers(self, netns: str, ends: list[EndShaper]) -> int: ...
    def set_link_fault(self, netns: str, interface: str, fault: LinkFault) -> None: ...


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
) -> list[str]:
    """Apply the change; returns one line per end touched. Raises LinkSetError naming what is wrong."""
    node, interface = parse_endpoint(endpoint)
    data_path = lab_dir / "topology-data.json"
    if not data_path.exists():
        raise LinkSetError(f"{data_path} does not exist: is the lab deployed from this directory?")
    here, peer = link_ends(json.loads(data_path.read_text()), node, interface, str(data_path))
    words = _values(value)
    if action in ("down", "up"):
        code, out = runtime.exec(here.container, ["ip", "link", "set", "dev", interface, action])
        if code != 0:
            raise LinkSetError(f"{node}: ip link set {interface} {action} failed: {out.strip()}")
        return [f"{node}:{interface} {action} (peer {peer.node}:{peer.interface} sees carrier {action})"]
    if action not in ("bandwidth", "loss"):
        raise LinkSetError(f"action {action!r}: one of {', '.join(ACTIONS)}")
    if fabric_io is None:
        from orchestrator import fabric_tc

        fabric_io = fabric_tc  # type: ignore[assignment]
    assert fabric_io is not None
    try:
        fabric = fabric_io.load_fabric(lab_dir)
    except RuntimeError as exc:
        raise LinkSetError(str(exc)) from None
    if action == "loss":
        return _set_loss(fabric_io, fabric, lab_dir, here, peer, words, one_way)
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
        code, out = runtime.exec(end.container, ["aidcnet", "ctl", "link-bandwidth", end.interface, value])
        if code != 0:
            raise LinkSetError(
                f"{end.node}: aidcnet ctl link-bandwidth {end.interface} {value}: {out.strip()}"
            )
        lines.append(f"{end.node}:{end.interface} bandwidth {shown} (FARE re-weights)")
    containers = {here.node: here.container, peer.node: peer.container}
    for shaper in changed:
        fabric_io.apply_shapers(fabric_io.node_netns(containers[shaper.node]), [shaper])
        lines.append(
            f"{shaper.name} shaped to {shaper.rate_bps / 1e6:g} Mbit/s ({shown} / time scale {fabric.scale})"
        )
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


def _lab_dir(lab: str | None) -> Path:
    if lab is not None:
        from orchestrator.cli import _lab_name

        return Path.cwd() / lab_dir_name(_lab_name(lab))
    found = sorted(p.parent for p in Path.cwd().glob("clab-*/topology-data.json"))
    if len(found) != 1:
        shown = ", ".join(p.name for p in found) or "none"
        raise LinkSetError(f"name the lab with --lab: lab dirs here: {shown}")
    return found[0]


def cmd_link(args: argparse.Namespace) -> int:
    import time

    from orchestrator.progress import fail
    from orchestrator.runtime.docker import DockerRuntime

    started = time.monotonic()
    try:
        lines = link_set(
            DockerRuntime(), _lab_dir(args.lab), args.endpoint, args.action, args.value, one_way=args.one_way
        )
    except LinkSetError as exc:
        fail(str(exc))
        return 1
    for line in lines:
        print(line)
    print(f"link set done in {time.monotonic() - started:.2f} s")
    return 0


_DESCRIPTION = """\
aidclab link set NODE:IF down|up|bandwidth BW|loss P [burst B]|loss gilbert P R [LB [LG]]

  down / up       set the interface down/up in the node: the peer loses carrier, and both agents
                  withdraw or re-weight through netlink at once (not at hold-timer expiry)
  bandwidth BW    the link's new speed (bits/s, e.g. 400G for a Y-cable that lost one of its two
                  400G sub-links): both shapers go to BW / time scale, and FARE re-weights and
                  re-advertises at both ends
  loss P          every packet leaving either end is lost with probability P (0..1, or 5%), by a tc
                  program on the link itself: unicast, BIER, network-BIER, INA, BGP and IGMP alike
  loss P burst B  the same mean loss P, in bursts of B packets on average (simple Gilbert model)
  loss gilbert P R [LB [LG]]
                  the whole Gilbert-Elliott chain: P = Good->Bad and R = Bad->Good per packet,
                  LB = loss probability in Bad (default 1), LG = in Good (default 0)
  loss 0          removes the loss

  Drops are counted per link end and cause: the shaper's queue (qdisc drops) apart from injected
  loss (the program's counters, lost in Good and in Bad). clab-<lab>/fabric.json records every
  link's rate and loss; each run copies it.
"""

_EPILOG = """\
examples:
  aidclab link set G1:eth2 down
  aidclab link set G1:eth2 up
  aidclab link set --lab superpod G2:eth1 bandwidth 400G
  aidclab link set --lab ina-fig1 s5:eth1 loss 0.02
  aidclab link set --lab ina-fig1 s5:eth1 loss 5% burst 4
  aidclab link set --lab ina-fig1 --one-way s5:eth1 loss gilbert 0.01 0.25 0.8
  aidclab link set --lab ina-fig1 s5:eth1 loss 0
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "link",
        help="fault injection: take a link down/up, change its bandwidth (and shaper), or make it lossy",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="link_verb", required=True, metavar="set")
    s = verbs.add_parser(
        "set",
        help="change one link",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--lab", help="lab name or topology file (default: the only clab-*/ lab dir here)")
    s.add_argument("endpoint", help="NODE:INTERFACE, e.g. G1:eth2")
    s.add_argument(
        "--one-way",
        action="store_true",
        help="loss: only on what NODE sends on IF (default: both directions of the link)",
    )
    s.add_argument("action", choices=ACTIONS)
    s.add_argument(
        "value",
        nargs="*",
        help="bandwidth: bits/s with an SI prefix, e.g. 400G; loss: P, P burst B, or gilbert P R [LB [LG]]",
    )
    s.set_defaults(func=cmd_link)
