"""Program addresses, MTUs and routes into the node's kernel, and hear its link changes: a thin shell
around :mod:`aidcnet.netstate`, which decides what to change, with rtnetlink messages from
:mod:`aidcnet.rtnl` on plain netlink sockets.

Not pyroute2: its package imports every module it has, about 75 ms of CPU in a node, and every agent of a
lab pays for its imports at once in a deploy (68 on two cores for the superpod). pyroute2 stays the
independent reference the codec is tested against, and drives :func:`apply_routes_per_request`.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from aidcnet import rtnl
from aidcnet.netstate import (
    RTPROT_AIDCNET,
    KernelDiff,
    KernelState,
    NextHops,
    diff_state,
    forget_routes_on,
)

T = TypeVar("T")
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


def _dump(request: bytes, parse: Callable[[bytes], tuple[list[T], bool]]) -> list[T]:
    out: list[T] = []
    with _netlink_socket() as sock:
        sock.sendall(request)
        done = False
        while not done:
            batch, done = parse(sock.recv(1 << 20))
            out.extend(batch)
    return out


def read_state(managed: set[str], proto: int = RTPROT_AIDCNET) -> KernelState:
    """Addresses and MTUs of ``managed`` interfaces, and the routes installed with ``proto``."""
    links = dump_links()
    names = {link.index: link.name for link in links}
    mtus = {link.name: link.mtu for link in links if link.name in managed}
    addresses = set()
    for addr in _dump(rtnl.addr_dump_request(1), rtnl.parse_addresses):
        name = names.get(addr.index)
        if name in managed and not ipaddress.ip_address(addr.address).is_loopback:
            addresses.add((name, f"{addr.address}/{addr.prefixlen}"))
    routes: dict[str, NextHops] = {}
    for route in _dump(rtnl.route_dump_request(1), rtnl.parse_routes):
        if route.protocol == proto:
            hops = ((via, names.get(oif, "?"), weight) for via, oif, weight in route.hops)
            routes[route.prefix] = tuple(sorted(hops)) if len(route.hops) > 1 else tuple(hops)
    return KernelState(frozenset(addresses), routes, mtus)


def _ask(sock: socket.socket, seq: int, request: bytes) -> rtnl.Answer:
    sock.sendall(request)
    while True:
        for answer in rtnl.parse_answers(sock.recv(1 << 16)):
            if answer.seq == seq:
                return answer


def apply_diff(diff: KernelDiff, proto: int = RTPROT_AIDCNET) -> None:
    """Apply in the order that keeps routes resolvable: MTUs and new addresses, then routes, then
    removals. Raises :class:`KernelError` naming the item the kernel refused."""
    first: list[tuple[str, bytes]] = []
    for name, mtu in diff.set_mtus.items():
        first.append((f"set mtu {mtu} on {name}", rtnl.link_set(len(first), _index(name), mtu=mtu)))
    for name, cidr in diff.add_addresses:
        index = _index(name)
        first.append((f"add address {cidr} on {name}", rtnl.addr_replace(len(first), index, cidr)))
        if name != "lo":
            first.append((f"set {name} up", rtnl.link_set(len(first), index)))
    last = [
        (f"remove address {cidr} from {name}", rtnl.addr_delete(seq, _index(name), cidr))
        for seq, (name, cidr) in enumerate(diff.remove_addresses, len(first))
    ]
    with _netlink_socket() as sock:
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        for seq, (step, request) in enumerate(first):
            _check(step, _ask(sock, seq, request))
        apply_routes(diff.replace_routes, diff.remove_routes, proto)
        for seq, (step, request) in enumerate(last, len(first)):
            _check(step, _ask(sock, seq, request))


def _check(step: str, answer: rtnl.Answer) -> None:
    if answer.errno != 0:
        reason = answer.message or os.strerror(answer.errno)
        raise KernelError(f"kernel refused to {step}: {reason} (errno {answer.errno})")


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
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

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


def _netlink_socket(groups: int = 0, blocking: bool = True) -> socket.socket:
    kind = socket.SOCK_RAW | socket.SOCK_CLOEXEC | (0 if blocking else socket.SOCK_NONBLOCK)
    sock = socket.socket(socket.AF_NETLINK, kind, socket.NETLINK_ROUTE)
    sock.bind((0, groups))
    return sock


def dump_links() -> list[rtnl.LinkState]:
    """Every interface of this node and its flags (``ip link show``)."""
    return _dump(rtnl.link_dump_request(1), rtnl.parse_link_states)


class LinkWatch:
    """Link changes as the kernel announces them (the RTMGRP_LINK group), read on the running event
    loop. Open it before :func:`dump_links` so no change falls between the two. A receive buffer that
    overflowed raises ``OSError(ENOBUFS)`` from :meth:`changes`: changes were lost, dump again."""

    RCVBUF = 1 << 20

    def __init__(self) -> None:
        self._sock = _netlink_socket(rtnl.RTMGRP_LINK, blocking=False)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.RCVBUF)

    async def changes(self) -> list[rtnl.LinkState]:
        """The next datagram's link states (one or more), waiting for it."""
        data = await asyncio.get_running_loop().sock_recv(self._sock, 1 << 20)
        return rtnl.parse_link_states(data)[0]

    def close(self) -> None:
        self._sock.close()


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
