"""A lab's own management network, made by us with netlink, not a Docker network.

Each node's container starts with Docker's ``none`` network; deploy then gives it an ``eth0`` with the
address this module plans for it. The segment is a macvlan hub: a Linux bridge with no ports (the lab's
"bridge", named as ``mgmt.bridge`` or ``am<hash>``), each node's ``eth0`` a macvlan of it in bridge mode,
created straight into the node's namespace, and one more macvlan in the host's namespace that holds the
gateway address. Macvlan switches between its siblings itself, so node-to-node traffic does not pass the
host's iptables, as it would between a bridge's ports (Docker loads ``br_netfilter`` and sets ``FORWARD``
to ``DROP``), and a node costs one device, not a veth pair. The bridge is only a lower device with carrier
(this kernel has no dummy device).

Why not a Docker network (what a lab got before): starting 68 containers on a user-defined network cost
dockerd about 5 s more CPU than on ``none`` (10.0 s against 4.9 s, measured on this machine), a fifth of a
superpod deploy's CPU on two cores; and Docker 20.10 keeps a count of a network's endpoints apart from its
endpoints, which can miss a decrement, after which the empty network refuses removal until dockerd
restarts (docs/running-a-lab.md, "Destroy"). A hub of ours has neither.

What ``--internal`` meant is kept: the host's macvlan holds the gateway address (the host reaches every
node, as with Docker), containers get no default route, and the host's macvlan neither forwards what it
receives (``net.ipv4.conf.<dev>.forwarding=0``) nor runs IPv6, so nothing from a lab leaves the machine.

Both host devices carry the alias ``aidclab-mgmt:<lab>``: destroy finds them by that, also after a deploy
that died halfway; deleting the hub deletes every macvlan on it, the nodes' too. A topology that names
``mgmt.network`` keeps the Docker network it names (shared, as containerlab's ``clab`` is).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import ipaddress
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from orchestrator.lab.topology import MAX_IFNAME, Topology, free_mgmt_subnet, mgmt_capacity, mgmt_prefix_for

ALIAS_PREFIX = "aidclab-mgmt:"
# Two deploys choosing a free subnet at once must not choose the same one: they take turns holding a lock
# on /run itself, a directory every deploy on the machine sees, so no lock file is left behind.
SUBNET_LOCK = Path("/run")
MGMT_IFNAME = "eth0"


class MgmtError(RuntimeError):
    pass


def _lab_hash(lab: str) -> str:
    return hashlib.sha1(lab.encode()).hexdigest()[:8]


def bridge_name(topo: Topology) -> str:
    """``mgmt.bridge`` when the file names one, else ``am<8 hex of the lab's name>``: unique per lab and
    within IFNAMSIZ however long the lab's name."""
    return topo.mgmt.bridge or f"am{_lab_hash(topo.name)}"


def gateway_name(topo: Topology) -> str:
    """The host's macvlan on the hub, which holds the gateway address."""
    return f"{bridge_name(topo)[: MAX_IFNAME - 2]}gw"


def gateway(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    """The bridge's own address: the subnet's first host, as Docker's gateway."""
    return subnet.network_address + 1


def plan_addresses(topo: Topology, subnet: ipaddress.IPv4Network) -> dict[str, ipaddress.IPv4Address]:
    """Node → management address: a node's ``mgmt-ipv4`` when the file pins one, else the next free host
    address after the gateway, in the file's node order (so a redeploy gives every node the same one)."""
    gw = gateway(subnet)
    out: dict[str, ipaddress.IPv4Address] = {}
    taken = {gw}
    for name, node in topo.nodes.items():
        if node.mgmt_ipv4:
            addr = ipaddress.IPv4Address(node.mgmt_ipv4)
            if addr not in subnet or addr in (gw, subnet.network_address, subnet.broadcast_address):
                raise MgmtError(
                    f"{topo.path}: topology/nodes/{name}/mgmt-ipv4: {addr} is not a node address of the "
                    f"management subnet {subnet} ({gw} is the bridge's); pick one inside it"
                )
            out[name] = addr
            taken.add(addr)
    free = (a for a in subnet.hosts() if a not in taken)
    for name in topo.nodes:
        if name not in out:
            addr = next(free, None)
            if addr is None:
                raise MgmtError(
                    f"{topo.path}: {len(topo.nodes)} nodes do not fit management subnet {subnet} "
                    f"({mgmt_capacity(subnet)} nodes); set mgmt.ipv4-subnet to a "
                    f"/{mgmt_prefix_for(len(topo.nodes))} or wider, or leave it out and deploy sizes it"
                )
            out[name] = addr
    return out


@dataclass
class MgmtBridge:
    """A lab's bridge as deploy wires nodes to it."""

    lab: str
    name: str
    index: int
    subnet: ipaddress.IPv4Network
    addresses: dict[str, ipaddress.IPv4Address]

    def host_addresses(self) -> dict[str, str]:
        """Node → its address, without the prefix (what the lab directory records)."""
        return {node: str(addr) for node, addr in self.addresses.items()}

    def interface(self, node: str) -> str:
        """``eth0``'s address with its prefix, as ``ip addr`` writes it."""
        return f"{self.addresses[node]}/{self.subnet.prefixlen}"

    def hosts_file(self, container_names: dict[str, str]) -> str:
        """The nodes' ``/etc/hosts``: loopback names, then every node of the lab at its management
        address, by node name and container name. Docker writes none for a container with networking
        disabled (how a node on the lab's own hub starts)."""
        lines = [
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            "ff02::1\tip6-allnodes",
            "ff02::2\tip6-allrouters",
        ]
        for node, addr in self.addresses.items():
            lines.append(f"{addr}\t{node} {container_names.get(node, node)}")
        return "\n".join(lines) + "\n"


@contextmanager
def subnet_lock() -> Iterator[None]:
    fd = os.open(SUBNET_LOCK, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def host_subnets(ipr: IPRoute) -> list[ipaddress.IPv4Network]:
    """Every IPv4 subnet an address of the host's namespace is in (other labs' bridges among them)."""
    out = []
    for msg in ipr.get_addr(family=2):
        addr = msg.get_attr("IFA_ADDRESS")
        if addr:
            out.append(ipaddress.IPv4Network(f"{addr}/{msg['prefixlen']}", strict=False))
    return out


def _find(ipr: IPRoute, name: str) -> dict | None:
    found = ipr.link_lookup(ifname=name)
    return ipr.get_links(found[0])[0] if found else None


def _subnet_of(ipr: IPRoute, index: int) -> ipaddress.IPv4Network | None:
    for msg in ipr.get_addr(family=2, index=index):
        return ipaddress.IPv4Network(f"{msg.get_attr('IFA_ADDRESS')}/{msg['prefixlen']}", strict=False)
    return None


def _sysctl(path: str, value: str) -> None:
    Path("/proc/sys", path).write_text(value)


def ensure_bridge(topo: Topology, taken: Iterable[ipaddress.IPv4Network]) -> MgmtBridge:
    """Create the lab's bridge (or take the one a redeploy finds) and settle ``topo.mgmt.ipv4_subnet``:
    the file's subnet, else the first free one in the pool that holds the nodes and overlaps neither
    ``taken`` (Docker's networks) nor any subnet of the host's addresses."""
    name = bridge_name(topo)
    alias = f"{ALIAS_PREFIX}{topo.name}"
    with subnet_lock(), IPRoute() as ipr:
        existing = _find(ipr, name)
        gw_dev = _find(ipr, gateway_name(topo))
        if existing is not None:
            if existing.get_attr("IFLA_IFALIAS") != alias:
                raise MgmtError(
                    f"{topo.path}: interface {name} exists on the host and is not lab {topo.name!r}'s "
                    f"management bridge; set mgmt.bridge to another name, or remove it (ip link del {name})"
                )
            subnet = _subnet_of(ipr, gw_dev["index"]) if gw_dev is not None else None
            wanted = topo.mgmt.ipv4_subnet
            if subnet is None or (wanted and ipaddress.IPv4Network(wanted, strict=False) != subnet):
                raise MgmtError(
                    f"{topo.path}: lab {topo.name!r}'s management bridge {name} is left from an earlier "
                    f"deploy with subnet {subnet}, not {wanted}; run `aidclab destroy {topo.path}` first"
                )
            addresses = plan_addresses(topo, subnet)
            index = existing["index"]
        else:
            subnet = _choose_subnet(topo, [*taken, *host_subnets(ipr)])
            addresses = plan_addresses(topo, subnet)  # refuses a lab that does not fit, before creating
            index = _create_hub(ipr, name, gateway_name(topo), alias, subnet)
    topo.mgmt.ipv4_subnet = str(subnet)
    return MgmtBridge(lab=topo.name, name=name, index=index, subnet=subnet, addresses=addresses)


def _choose_subnet(topo: Topology, taken: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    if topo.mgmt.ipv4_subnet:
        subnet = ipaddress.IPv4Network(topo.mgmt.ipv4_subnet, strict=False)
        clash = next((t for t in taken if t.overlaps(subnet)), None)
        if clash is not None:
            raise MgmtError(
                f"{topo.path}: mgmt.ipv4-subnet {subnet} overlaps {clash}, already on this machine (a Docker "
                "network, another lab's management bridge or a host address); pick another, or leave it out"
            )
        return subnet
    free = free_mgmt_subnet(max(len(topo.nodes), 1), taken)
    if free is None:
        raise MgmtError(
            f"{topo.path}: no free /{mgmt_prefix_for(len(topo.nodes))} left for lab {topo.name!r}'s "
            "management network; destroy labs you no longer need, or set mgmt.ipv4-subnet"
        )
    return free


def _create_hub(ipr: IPRoute, name: str, gw_name: str, alias: str, subnet: ipaddress.IPv4Network) -> int:
    try:
        ipr.link("add", ifname=name, kind="bridge")
        index = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=index, ifalias=alias, state="up")
        ipr.link("add", ifname=gw_name, kind="macvlan", link=index, macvlan_mode="bridge")
    except NetlinkError as exc:
        raise MgmtError(f"creating management hub {name}: {exc.args[-1]} (errno {exc.code})") from exc
    gw_index = ipr.link_lookup(ifname=gw_name)[0]
    ipr.link("set", index=gw_index, ifalias=alias)
    # Before it is up: no IPv6 link-local address, and nothing it receives is routed anywhere.
    for dev in (name, gw_name):
        _sysctl(f"net/ipv6/conf/{dev}/disable_ipv6", "1")
    _sysctl(f"net/ipv4/conf/{gw_name}/forwarding", "0")
    ipr.addr("add", index=gw_index, address=str(gateway(subnet)), prefixlen=subnet.prefixlen)
    ipr.link("set", index=gw_index, state="up")
    return index


def attach_node(ipr: IPRoute, bridge: MgmtBridge, node: str, pid: int) -> None:
    """Node ``node``'s ``eth0``: a macvlan of the hub created straight into its namespace. The address
    goes on in the node's own namespace (``configure_eth0``)."""
    try:
        ipr.link(
            "add", ifname=MGMT_IFNAME, kind="macvlan", link=bridge.index, macvlan_mode="bridge",
            net_ns_pid=pid,
        )  # fmt: skip
    except NetlinkError as exc:
        raise MgmtError(
            f"node {node}: netlink refused its management interface (a macvlan of {bridge.name}): "
            f"{exc.args[-1]} (errno {exc.code}); run `aidclab destroy` for lab {bridge.lab!r}, then deploy"
        ) from exc


def write_hosts(node: str, pid: int, text: str) -> None:
    """Write the node's ``/etc/hosts`` through its PID's root. Not followed if the image made it a link:
    through ``/proc/PID/root`` an absolute link would resolve on the host."""
    path = f"/proc/{pid}/root/etc/hosts"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise MgmtError(
            f"node {node}: cannot write its /etc/hosts ({exc.strerror}); is the container running?"
        ) from exc
    with os.fdopen(fd, "w") as f:
        f.write(text)


def configure_eth0(ns: IPRoute, index: int, address: str) -> None:
    """Inside the node: ``eth0`` gets ``address`` (``A.B.C.D/len``) and goes up."""
    addr, _, prefixlen = address.partition("/")
    try:
        ns.addr("add", index=index, address=addr, prefixlen=int(prefixlen))
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise
    ns.link("set", index=index, state="up")


def remove_bridges(lab: str | None) -> list[str]:
    """Delete the management hub of ``lab`` (of every lab if None), and with it every macvlan on it;
    returns the names of the host devices deleted."""
    removed = []
    wanted = f"{ALIAS_PREFIX}{lab}" if lab else None
    with IPRoute() as ipr:
        for msg in ipr.get_links():
            alias = msg.get_attr("IFLA_IFALIAS") or ""
            if alias == wanted or (wanted is None and alias.startswith(ALIAS_PREFIX)):
                try:
                    ipr.link("del", index=msg["index"])
                    removed.append(msg.get_attr("IFLA_IFNAME"))
                except NetlinkError as exc:
                    if exc.code != errno.ENODEV:
                        raise
    return removed
