"""Program addresses, MTUs and routes into the node's kernel with pyroute2; a thin shell around
:mod:`aidcnet.netstate`, which decides what to change."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import threading
from collections.abc import Iterable, Mapping

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from aidcnet import rtnl
from aidcnet.netstate import (
    RTPROT_AIDCNET,
    KernelDiff,
    KernelState,
    NextHops,
    diff_state,
    forget_routes_on,
)

SOL_NETLINK = 270
NETLINK_CAP_ACK = 10  # failure answers without the echoed request
NETLINK_EXT_ACK = 11  # ... but with the kernel's reason in words


class KernelError(RuntimeError):
    pass


def _index(ifname: str) -> int:
    # if_nametoindex is one ioctl; pyroute2's link_lookup dumps every link of the node to find one, and a
    # SuperPoD GPU re-routing its loopbacks after a link event asked once per nexthop of every route
    # (most of a 240 ms reaction at 16 GPUs, py-spy on G1's agent).
    try:
        return socket.if_nametoindex(ifname)
    except OSError:
        raise KernelError(
            f"interface {ifname} does not exist on this node (is the lab wired as planned?)"
        ) from None


def read_state(managed: set[str], proto: int = RTPROT_AIDCNET) -> KernelState:
    """Addresses and MTUs of ``managed`` interfaces, and the routes installed with ``proto``."""
    addresses = set()
    mtus = {}
    routes: dict[str, NextHops] = {}
    with IPRoute() as ipr:
        names = {msg["index"]: msg.get_attr("IFLA_IFNAME") for msg in ipr.get_links()}
        for msg in ipr.get_links():
            name = msg.get_attr("IFLA_IFNAME")
            if name in managed:
                mtus[name] = msg.get_attr("IFLA_MTU")
        for msg in ipr.get_addr(family=socket.AF_INET):
            name = names.get(msg["index"])
            addr = msg.get_attr("IFA_ADDRESS")
            if name in managed and not ipaddress.ip_address(addr).is_loopback:
                addresses.add((name, f"{addr}/{msg['prefixlen']}"))
        for msg in ipr.get_routes(family=socket.AF_INET, proto=proto):
            prefix = f"{msg.get_attr('RTA_DST') or '0.0.0.0'}/{msg['dst_len']}"
            multipath = msg.get_attr("RTA_MULTIPATH")
            if multipath:
                hops = tuple(
                    sorted(
                        (nh.get_attr("RTA_GATEWAY"), names.get(nh["oif"], "?"), nh["hops"] + 1)
                        for nh in multipath
                    )
                )
            else:
                hops = ((msg.get_attr("RTA_GATEWAY"), names.get(msg.get_attr("RTA_OIF"), "?"), 1),)
            routes[prefix] = hops
    return KernelState(frozenset(addresses), routes, mtus)


def apply_diff(diff: KernelDiff, proto: int = RTPROT_AIDCNET) -> None:
    """Apply in the order that keeps routes resolvable: MTUs and new addresses, then routes, then
    removals. Raises :class:`KernelError` naming the item the kernel refused."""
    with IPRoute() as ipr:
        step = ""
        try:
            for name, mtu in diff.set_mtus.items():
                step = f"set mtu {mtu} on {name}"
                ipr.link("set", index=_index(name), mtu=mtu, state="up")
            for name, cidr in diff.add_addresses:
                step = f"add address {cidr} on {name}"
                iface = ipaddress.IPv4Interface(cidr)
                ipr.addr(
                    "replace",
                    index=_index(name),
                    address=str(iface.ip),
                    prefixlen=iface.network.prefixlen,
                )
                if name != "lo":
                    ipr.link("set", index=_index(name), state="up")
            apply_routes(diff.replace_routes, diff.remove_routes, proto)
            for name, cidr in diff.remove_addresses:
                step = f"remove address {cidr} from {name}"
                iface = ipaddress.IPv4Interface(cidr)
                ipr.addr(
                    "del", index=_index(name), address=str(iface.ip), prefixlen=iface.network.prefixlen
                )
        except NetlinkError as exc:
            raise KernelError(f"kernel refused to {step}: {exc.args[-1]} (errno {exc.code})") from exc


# Requests per sendmsg: one skb each, far below the socket's send buffer, and a failure answer per request
# still fits the receive buffer if every one of them fails.
BATCH = 128


def _route_step(prefix: str, hops: NextHops | None) -> str:
    if hops is None:
        return f"remove route {prefix}"
    return f"route {prefix} via {', '.join(f'{v} dev {d} weight {w}' for v, d, w in hops)}"


def apply_routes(replace: Mapping[str, NextHops], remove: Iterable[str], proto: int = RTPROT_AIDCNET) -> None:
    """Replace ``replace`` and delete ``remove`` (only routes of ``proto``) in as few netlink round trips
    as there are :data:`BATCH` requests: the kernel answers only failures, plus one acknowledgement per
    batch, so a link event re-routing every prefix costs a few system calls, not one per prefix. A route
    to delete that is already gone (the kernel flushed it with its link) counts as deleted. Raises
    :class:`KernelError` naming the first request the kernel refused, after all were tried."""
    ifindex: dict[str, int] = {}

    def index(dev: str) -> int:
        if dev not in ifindex:
            ifindex[dev] = _index(dev)
        return ifindex[dev]

    steps: list[tuple[str, NextHops | None]] = [*replace.items(), *((p, None) for p in remove)]
    if not steps:
        return
    failures: list[tuple[int, rtnl.Answer]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.bind((0, 0))
        for start in range(0, len(steps), BATCH):
            chunk = steps[start : start + BATCH]
            last = start + len(chunk) - 1
            requests = []
            for seq, (prefix, hops) in enumerate(chunk, start):
                ack = seq == last
                if hops is None:
                    requests.append(rtnl.route_delete(seq, prefix, proto, ack=ack))
                else:
                    wire = [(via, index(dev), w) for via, dev, w in hops]
                    requests.append(rtnl.route_replace(seq, prefix, wire, proto, ack=ack))
            sock.sendall(b"".join(requests))
            done = False
            while not done:
                for answer in rtnl.parse_answers(sock.recv(1 << 20)):
                    done |= answer.seq == last
                    if answer.errno == 0:
                        continue
                    if answer.errno == errno.ESRCH and steps[answer.seq][1] is None:
                        continue
                    failures.append((answer.seq, answer))
    if failures:
        seq, answer = min(failures, key=lambda f: f[0])
        reason = answer.message or os.strerror(answer.errno)
        more = f" (and {len(failures) - 1} more refused)" if len(failures) > 1 else ""
        raise KernelError(
            f"kernel refused to {_route_step(*steps[seq])}: {reason} (errno {answer.errno}){more}"
        )


def apply_routes_per_request(
    replace: Mapping[str, NextHops], remove: Iterable[str], proto: int = RTPROT_AIDCNET
) -> None:
    """The same change as :func:`apply_routes` with one pyroute2 request per route: the reference the
    batched path is tested and benchmarked against."""
    with IPRoute() as ipr:
        for prefix, hops in replace.items():
            if len(hops) == 1:
                via, dev, _w = hops[0]
                ipr.route("replace", dst=prefix, gateway=via, oif=_index(dev), proto=proto)
            else:
                multipath = [{"gateway": via, "oif": _index(dev), "hops": w - 1} for via, dev, w in hops]
                ipr.route("replace", dst=prefix, proto=proto, multipath=multipath)
        for prefix in remove:
            try:
                ipr.route("del", dst=prefix, proto=proto)
            except NetlinkError as exc:
                if exc.code != errno.ESRCH:
                    raise


class RouteTable:
    """The routes of protocol ``proto`` an agent installed, kept in step with the kernel without dumping
    it: :meth:`program` diffs the wanted routes against what it installed last and applies the diff in
    one batch (:func:`apply_routes`); :meth:`links_changed` records the links whose routes the kernel may
    have changed on its own. Only when the kernel refuses a step is the table read back and the diff
    applied once more. :meth:`links_changed` may be called from another thread than :meth:`program`."""

    def __init__(self, proto: int) -> None:
        self.proto = proto
        self.installed: dict[str, NextHops] | None = None  # None: read the kernel first
        self.dumps = 0
        self.resyncs = 0
        self._lock = threading.Lock()
        self._changed_devs: set[str] = set()

    def links_changed(self, devs: set[str]) -> None:
        with self._lock:
            self._changed_devs |= devs

    def program(self, routes: Mapping[str, NextHops]) -> KernelDiff:
        """Bring the kernel's routes of ``proto`` to ``routes``; returns the diff applied. Raises
        :class:`KernelError` when the kernel refuses it even after a fresh read of its table."""
        with self._lock:
            devs, self._changed_devs = self._changed_devs, set()
        if self.installed is not None and devs:
            self.installed = forget_routes_on(self.installed, devs)
        for attempt in (1, 2):
            if self.installed is None or attempt == 2:
                self.installed = read_state(set(), proto=self.proto).routes
                self.dumps += 1
            diff = diff_state(KernelState(routes=dict(routes)), KernelState(routes=self.installed), set())
            if diff.empty:
                return diff
            try:
                apply_routes(diff.replace_routes, diff.remove_routes, self.proto)
            except KernelError:
                self.installed = None
                if attempt == 2:
                    raise
                self.resyncs += 1
                continue
            self.installed = dict(routes)
            return diff
        raise AssertionError("unreachable")


# The discard service (RFC 863): the datagram only has to make the kernel resolve the neighbour.
DISCARD_PORT = 9


def resolve_neighbors(peers: list[tuple[str, str, str]]) -> int:
    """Send one datagram to each link peer so its ARP entry exists before traffic needs it: a burst to an
    unresolved neighbour waits in a short queue and overflows it (the lost first run of a fresh lab).
    Returns how many were sent."""
    import socket

    sent = 0
    for ifname, own, peer in peers:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
                sock.bind((own, 0))
                sock.sendto(b"arp", (peer, DISCARD_PORT))
                sent += 1
            except OSError:
                continue  # a link that is down resolves when it comes back (the link watcher re-converges)
    return sent
