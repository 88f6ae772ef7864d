"""rtnetlink route requests and their answers as bytes: pure codec, no I/O (RFC 3549, linux/rtnetlink.h).

The agent re-routes every prefix of a node in one ``sendmsg`` (:func:`aidcnet.agent.kernel.apply_routes`).
pyroute2 builds each request from a generic message description, about 0.5 ms per multipath route in
Python, which made a GPU re-routing its 63 peers' loopbacks after one link event spend most of its reaction
encoding; these requests take microseconds. Only what the agent installs is encoded: IPv4 unicast routes in
the main table, one next hop (``RTA_GATEWAY`` + ``RTA_OIF``) or several (``RTA_MULTIPATH``, weight - 1 in
``rtnh_hops``, as ``ip route ... nexthop via V dev D weight W`` does). Byte diagrams: docs/rtnl.md.

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
    "RTM_DELROUTE",
    "RTM_NEWROUTE",
    "Answer",
    "parse_answers",
    "route_delete",
    "route_replace",
]

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTNH = struct.Struct("=HBBi")  # rtnh_len, rtnh_flags, rtnh_hops, rtnh_ifindex
RTATTR = struct.Struct("=HH")  # rta_len, rta_type

NLMSG_ERROR = 2
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
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
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, kind, flags, seq, _pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size or offset + length > len(data):
            raise ValueError(f"netlink message at byte {offset}: length {length} runs past {len(data)}")
        end = offset + length
        if kind == NLMSG_ERROR:
            body = offset + NLMSG_HDR.size
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
        offset += (length + 3) & ~3
    return out
