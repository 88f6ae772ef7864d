"""rtnetlink route requests and their answers as bytes: pure codec, no I/O (RFC 3549, linux/rtnetlink.h).

The agent re-routes every prefix of a node in one ``sendmsg`` (:func:`aidcnet.agent.kernel.apply_routes`).
pyroute2 builds each request from a generic message description, about 0.5 ms per multipath route in
Python, which made a GPU re-routing its 63 peers' loopbacks after one link event spend most of its reaction
encoding; these requests take microseconds. Only what the agent installs is encoded: IPv4 unicast routes in
the main table, one next hop (``RTA_GATEWAY`` + ``RTA_OIF``) or several (``RTA_MULTIPATH``, weight - 1 in
``rtnh_hops``, as ``ip route ... nexthop via V dev D weight W`` does). Byte diagrams: docs/rtnl.md.

Link changes are decoded here too (RTM_NEWLINK: name and flags only), so an agent that watches its links
need not import pyroute2 before its first configure.

Netlink is host byte order; addresses are network order.
"""

from __future__ import annotations

import functools
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "NLMSG_ERROR",
    "RTMGRP_LINK",
    "RTM_DELROUTE",
    "RTM_NEWROUTE",
    "AddressState",
    "Answer",
    "LinkState",
    "RouteState",
    "addr_delete",
    "addr_dump_request",
    "addr_replace",
    "link_dump_request",
    "link_set",
    "parse_addresses",
    "parse_answers",
    "parse_link_states",
    "parse_routes",
    "route_delete",
    "route_dump_request",
    "route_replace",
]

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTNH = struct.Struct("=HBBi")  # rtnh_len, rtnh_flags, rtnh_hops, rtnh_ifindex
RTATTR = struct.Struct("=HH")  # rta_len, rta_type
IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBi")  # family, prefixlen, flags, scope, index

NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
RTM_GETROUTE = 26
RTMGRP_LINK = 0x1  # multicast group of link changes (bind to it to hear RTM_NEWLINK/RTM_DELLINK)
IFLA_IFNAME = 3
IFLA_MTU = 4
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_REPLACE = 0x100
NLM_F_CREATE = 0x400
NLM_F_CAPPED = 0x100  # in an NLMSG_ERROR answer: the request is not echoed
NLM_F_ACK_TLVS = 0x200  # in an NLMSG_ERROR answer: extended-ack attributes follow
NLMSGERR_ATTR_MSG = 1
RTA_DST = 1
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_MULTIPATH = 9
RTA_TABLE = 15
RT_TABLE_MAIN = 254
RTN_UNICAST = 1
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_NOWHERE = 255  # in a delete: any scope

Hop = tuple[str, int, int]  # (gateway, ifindex, weight)


def _attr(kind: int, payload: bytes) -> bytes:
    length = RTATTR.size + len(payload)
    return RTATTR.pack(length, kind) + payload + b"\0" * (-length % 4)


def _dst(prefix: str) -> tuple[int, bytes]:
    addr, _, length = prefix.partition("/")
    try:
        dst_len = int(length) if length else 32
        packed = socket.inet_aton(addr)
    except (OSError, ValueError):
        raise ValueError(f"route prefix {prefix!r}: not an IPv4 prefix a.b.c.d/len") from None
    if not 0 <= dst_len <= 32 or addr.count(".") != 3:
        raise ValueError(f"route prefix {prefix!r}: not an IPv4 prefix a.b.c.d/len")
    return dst_len, packed


@functools.lru_cache(maxsize=1024)
def _next_hops(hops: tuple[Hop, ...]) -> bytes:
    # Cached: after a link event most prefixes share one next-hop set.
    if len(hops) == 1:
        # One next hop carries no weight: the kernel keeps weights only inside RTA_MULTIPATH.
        via, ifindex, _weight = hops[0]
        return _attr(RTA_GATEWAY, socket.inet_aton(via)) + _attr(RTA_OIF, struct.pack("=i", ifindex))
    nexthops = []
    for via, ifindex, weight in hops:
        if not 1 <= weight <= 256:
            raise ValueError(f"via {via}: weight {weight} outside the kernel's 1..256")
        gateway = _attr(RTA_GATEWAY, socket.inet_aton(via))
        nexthops.append(RTNH.pack(RTNH.size + len(gateway), 0, weight - 1, ifindex) + gateway)
    return _attr(RTA_MULTIPATH, b"".join(nexthops))


def _message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), kind, flags, seq, 0) + body


def route_replace(seq: int, prefix: str, hops: Sequence[Hop], proto: int, ack: bool = True) -> bytes:
    """RTM_NEWROUTE with NLM_F_CREATE|NLM_F_REPLACE (``ip route replace``). ``ack`` False: the kernel
    answers only a failure, so a batch asks for one acknowledgement, on its last request."""
    if not hops:
        raise ValueError(f"route {prefix}: no next hop to install")
    dst_len, dst = _dst(prefix)
    attrs = [_attr(RTA_TABLE, struct.pack("=I", RT_TABLE_MAIN)), _attr(RTA_DST, dst)]
    try:
        attrs.append(_next_hops(tuple(hops)))
    except ValueError as exc:
        raise ValueError(f"route {prefix} {exc}") from None
    body = RTMSG.pack(socket.AF_INET, dst_len, 0, 0, RT_TABLE_MAIN, proto, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0)
    flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | (NLM_F_ACK if ack else 0)
    return _message(RTM_NEWROUTE, flags, seq, body + b"".join(attrs))


def route_delete(seq: int, prefix: str, proto: int, ack: bool = True) -> bytes:
    """RTM_DELROUTE of ``prefix`` in the main table, only if it carries protocol ``proto``."""
    dst_len, dst = _dst(prefix)
    body = RTMSG.pack(socket.AF_INET, dst_len, 0, 0, RT_TABLE_MAIN, proto, RT_SCOPE_NOWHERE, 0, 0)
    attrs = _attr(RTA_TABLE, struct.pack("=I", RT_TABLE_MAIN)) + _attr(RTA_DST, dst)
    return _message(RTM_DELROUTE, NLM_F_REQUEST | (NLM_F_ACK if ack else 0), seq, body + attrs)


@dataclass(frozen=True)
class Answer:
    """The kernel's NLMSG_ERROR answer to request ``seq``: ``errno`` 0 is an acknowledgement; ``message``
    the kernel's extended-ack text (e.g. "Nexthop has invalid gateway"), empty when it gave none."""

    seq: int
    errno: int
    message: str = ""


@dataclass(frozen=True, slots=True)
class LinkState:
    """An interface as one RTM_NEWLINK message announces it."""

    name: str
    index: int
    flags: int
    mtu: int = 0

    @property
    def running(self) -> bool:
        """Administratively up and with carrier (``IFF_UP`` and ``IFF_LOWER_UP``)."""
        return self.flags & (IFF_UP | IFF_LOWER_UP) == IFF_UP | IFF_LOWER_UP


def _attrs(data: bytes, offset: int, end: int) -> Iterator[tuple[int, bytes]]:
    while offset + RTATTR.size <= end:
        length, kind = RTATTR.unpack_from(data, offset)
        if length < RTATTR.size or offset + length > end:
            return
        yield kind & 0x3FFF, data[offset + RTATTR.size : offset + length]
        offset += (length + 3) & ~3


def parse_answers(data: bytes) -> list[Answer]:
    """The NLMSG_ERROR answers in one ``recv`` buffer; other message types are skipped. Raises
    :class:`ValueError` on a truncated message (the buffer was too small for the datagram)."""
    out: list[Answer] = []
    for kind, flags, seq, body, end in _messages(data):
        if kind != NLMSG_ERROR:
            continue
        (error,) = struct.unpack_from("=i", data, body)
        # The request follows whole unless capped; its header says how long it was.
        request = body + 4
        if error != 0 and not flags & NLM_F_CAPPED:
            (request_len,) = struct.unpack_from("=I", data, request)
            tlvs = request + ((request_len + 3) & ~3)
        else:
            tlvs = request + NLMSG_HDR.size
        message = ""
        if flags & NLM_F_ACK_TLVS:
            for attr_kind, value in _attrs(data, tlvs, end):
                if attr_kind == NLMSGERR_ATTR_MSG:
                    message = value.rstrip(b"\0").decode(errors="replace")
        out.append(Answer(seq=seq, errno=-error, message=message))
    return out


def link_dump_request(seq: int) -> bytes:
    """RTM_GETLINK for every interface (``ip link show``): the kernel answers RTM_NEWLINK messages, then
    NLMSG_DONE."""
    any_link = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    return _message(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, any_link)


def _messages(data: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(type, flags, seq, body offset, end) of each message in one ``recv`` buffer. Raises
    :class:`ValueError` on a truncated message (the buffer was too small for the datagram)."""
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, kind, flags, seq, _pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size or offset + length > len(data):
            raise ValueError(f"netlink message at byte {offset}: length {length} runs past {len(data)}")
        yield kind, flags, seq, offset + NLMSG_HDR.size, offset + length
        offset += (length + 3) & ~3


def parse_link_states(data: bytes) -> tuple[list[LinkState], bool]:
    """The RTM_NEWLINK messages in one ``recv`` buffer, in order, and whether NLMSG_DONE (the end of a
    dump) was among them. Other message types and links without ``IFLA_IFNAME`` are skipped. Raises
    :class:`ValueError` on a truncated message."""
    out: list[LinkState] = []
    done = False
    for kind, _flags, _seq, body, end in _messages(data):
        done |= kind == NLMSG_DONE
        if kind != RTM_NEWLINK or body + IFINFOMSG.size > end:
            continue
        _family, _type, index, flags, _change = IFINFOMSG.unpack_from(data, body)
        name, mtu = None, 0
        for attr_kind, value in _attrs(data, body + IFINFOMSG.size, end):
            if attr_kind == IFLA_IFNAME:
                name = value.split(b"\0", 1)[0].decode(errors="replace")
            elif attr_kind == IFLA_MTU and len(value) >= 4:
                (mtu,) = struct.unpack_from("=I", value)
        if name is not None:
            out.append(LinkState(name=name, index=index, flags=flags, mtu=mtu))
    return out, done


@dataclass(frozen=True, slots=True)
class AddressState:
    """An IPv4 address of an interface, as RTM_NEWADDR gives it (``IFA_ADDRESS``: the address itself,
    or the peer's on a point-to-point link)."""

    index: int
    address: str
    prefixlen: int


@dataclass(frozen=True, slots=True)
class RouteState:
    """An IPv4 route of the main table as RTM_NEWROUTE gives it: its next hops as (gateway, ifindex,
    weight), weight 1 for a route with one next hop (the kernel keeps weights only in a multipath)."""

    prefix: str
    protocol: int
    hops: tuple[tuple[str | None, int, int], ...]


def addr_dump_request(seq: int) -> bytes:
    """RTM_GETADDR for every IPv4 address (``ip -4 addr show``)."""
    return _message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, IFADDRMSG.pack(socket.AF_INET, 0, 0, 0, 0))


def route_dump_request(seq: int) -> bytes:
    """RTM_GETROUTE for every IPv4 route of every table (the kernel has no filter for a dump)."""
    body = RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)
    return _message(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq, body)


def parse_addresses(data: bytes) -> tuple[list[AddressState], bool]:
    """The IPv4 RTM_NEWADDR messages in one ``recv`` buffer, and whether the dump ended there."""
    out: list[AddressState] = []
    done = False
    for kind, _flags, _seq, body, end in _messages(data):
        done |= kind == NLMSG_DONE
        if kind != RTM_NEWADDR or body + IFADDRMSG.size > end:
            continue
        family, prefixlen, _flags, _scope, index = IFADDRMSG.unpack_from(data, body)
        if family != socket.AF_INET:
            continue
        attrs = dict(_attrs(data, body + IFADDRMSG.size, end))
        raw = attrs.get(IFA_ADDRESS) or attrs.get(IFA_LOCAL)
        if raw is not None and len(raw) == 4:
            out.append(AddressState(index=index, address=socket.inet_ntoa(raw), prefixlen=prefixlen))
    return out, done


def _hops(data: bytes, body: int, end: int) -> tuple[tuple[str | None, int, int], ...]:
    gateway, oif, multipath = None, 0, None
    for kind, value in _attrs(data, body, end):
        if kind == RTA_GATEWAY and len(value) == 4:
            gateway = socket.inet_ntoa(value)
        elif kind == RTA_OIF and len(value) >= 4:
            (oif,) = struct.unpack_from("=i", value)
        elif kind == RTA_MULTIPATH:
            multipath = value
    if multipath is None:
        return ((gateway, oif, 1),)
    hops = []
    offset = 0
    while offset + RTNH.size <= len(multipath):
        length, _flags, weight_less_one, ifindex = RTNH.unpack_from(multipath, offset)
        if length < RTNH.size or offset + length > len(multipath):
            break
        via = None
        for kind, value in _attrs(multipath, offset + RTNH.size, offset + length):
            if kind == RTA_GATEWAY and len(value) == 4:
                via = socket.inet_ntoa(value)
        hops.append((via, ifindex, weight_less_one + 1))
        offset += (length + 3) & ~3
    return tuple(hops)


def parse_routes(data: bytes) -> tuple[list[RouteState], bool]:
    """The IPv4 unicast routes of the main table in one ``recv`` buffer of a route dump, and whether the
    dump ended there."""
    out: list[RouteState] = []
    done = False
    for kind, _flags, _seq, body, end in _messages(data):
        done |= kind == NLMSG_DONE
        if kind != RTM_NEWROUTE or body + RTMSG.size > end:
            continue
        family, dst_len, _src, _tos, table, protocol, _scope, rtype, _flags = RTMSG.unpack_from(data, body)
        attrs = body + RTMSG.size
        dst = "0.0.0.0"
        for attr_kind, value in _attrs(data, attrs, end):
            if attr_kind == RTA_TABLE and len(value) >= 4:
                (table,) = struct.unpack_from("=I", value)
            elif attr_kind == RTA_DST and len(value) == 4:
                dst = socket.inet_ntoa(value)
        if family != socket.AF_INET or table != RT_TABLE_MAIN or rtype != RTN_UNICAST:
            continue
        out.append(RouteState(prefix=f"{dst}/{dst_len}", protocol=protocol, hops=_hops(data, attrs, end)))
    return out, done


def link_set(seq: int, index: int, up: bool = True, mtu: int | None = None) -> bytes:
    """RTM_NEWLINK on interface ``index`` (``ip link set dev D [mtu M] up``), acknowledged."""
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, IFF_UP if up else 0, IFF_UP)
    attrs = _attr(IFLA_MTU, struct.pack("=I", mtu)) if mtu is not None else b""
    return _message(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, body + attrs)


def _address(kind: int, flags: int, seq: int, index: int, cidr: str) -> bytes:
    addr, _, length = cidr.partition("/")
    prefixlen, packed = _dst(f"{addr}/{length or 32}")
    body = IFADDRMSG.pack(socket.AF_INET, prefixlen, 0, RT_SCOPE_UNIVERSE, index)
    attrs = _attr(IFA_LOCAL, packed) + _attr(IFA_ADDRESS, packed)
    return _message(kind, NLM_F_REQUEST | NLM_F_ACK | flags, seq, body + attrs)


def addr_replace(seq: int, index: int, cidr: str) -> bytes:
    """RTM_NEWADDR of ``cidr`` (``a.b.c.d/len``) on interface ``index`` (``ip addr replace``)."""
    return _address(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, seq, index, cidr)


def addr_delete(seq: int, index: int, cidr: str) -> bytes:
    """RTM_DELADDR of ``cidr`` from interface ``index`` (``ip addr del``)."""
    return _address(RTM_DELADDR, 0, seq, index, cidr)
