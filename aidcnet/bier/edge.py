"""Pure logic of network-BIER at a leaf: IPv4 multicast in, BIER (Proto 4) across, IPv4 out.

No I/O here; :mod:`aidcnet.agent.bier.net_bier` moves the packets.  Pieces:

* :class:`FlowTable`: (S,G) -> BFER BFR-ids with (*,G) fallback;
* :func:`parse_ipv4`: the RFC 791 header checks a router makes before forwarding;
* :func:`decrement_ttl`: TTL - 1 with the incremental checksum update of RFC 1624 §3 (eqn. 3);
* :func:`complete_udp_checksum`: finish a UDP checksum the sender left to offload;
* :func:`multicast_mac`: the Ethernet address of a group (RFC 1112 §6.4);
* :func:`flow_entropy`: a 20-bit BIER Entropy (RFC 8296 §2.1.2) that keeps a flow on one path.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from aidcnet.ipv4 import checksum16 as checksum

IPPROTO_IGMP = 2
IPPROTO_UDP = 17
ETH_P_IP = 0x0800
MIN_HEADER = 20
MAX_ENTROPY = (1 << 20) - 1

# Why a closed set: the agent keeps one counter per reason.
MALFORMED_REASONS: frozenset[str] = frozenset(
    {
        "truncated",  # fewer octets than 20, than IHL*4, or than Total Length says
        "bad-version",  # version nibble is not 4
        "bad-ihl",  # IHL below 5
        "bad-length",  # Total Length smaller than the header
        "bad-checksum",  # header checksum does not verify (RFC 791 §3.1)
    }
)

_HDR = struct.Struct(">BBHHHBBH4s4s")


class Ipv4Error(ValueError):
    """A packet that fails the header checks; ``reason`` is one of MALFORMED_REASONS."""

    __slots__ = ("reason",)

    def __init__(self, reason: str, detail: str = "") -> None:
        if reason not in MALFORMED_REASONS:
            raise ValueError(f"unknown IPv4 malformed reason {reason!r}")
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


class Ipv4Info(NamedTuple):
    """The fields the edge needs; ``src``/``dst`` are the 4 raw octets (the flow table's key form)."""

    ihl: int  # header length in octets
    total_length: int
    ttl: int
    proto: int
    src: bytes
    dst: bytes
    fragment: bool  # MF set or fragment offset non-zero: the L4 header may be absent
    sport: int | None  # UDP ports of a non-fragment UDP packet, else None
    dport: int | None


def parse_ipv4(buf: bytes | bytearray | memoryview, verify_checksum: bool = True) -> Ipv4Info:
    """Check and read an IPv4 header at offset 0 (RFC 791 §3.1).  Raises :class:`Ipv4Error`.

    Bytes beyond Total Length (Ethernet padding) are allowed; the caller trims to
    ``total_length``.
    """
    n = len(buf)
    if n < MIN_HEADER:
        raise Ipv4Error("truncated", f"{n} octets")
    vihl, _tos, total, _ident, frag, ttl, proto, _csum, src, dst = _HDR.unpack_from(buf, 0)
    if vihl >> 4 != 4:
        raise Ipv4Error("bad-version", f"version {vihl >> 4}")
    ihl = (vihl & 0xF) * 4
    if ihl < MIN_HEADER:
        raise Ipv4Error("bad-ihl", f"IHL {ihl // 4}")
    if n < ihl:
        raise Ipv4Error("truncated", f"{n} octets, header is {ihl}")
    if total < ihl:
        raise Ipv4Error("bad-length", f"Total Length {total} < header {ihl}")
    if n < total:
        raise Ipv4Error("truncated", f"{n} octets, Total Length {total}")
    if verify_checksum and checksum(memoryview(buf)[:ihl]) != 0:
        raise Ipv4Error("bad-checksum")
    fragment = bool(frag & 0x3FFF)  # MF bit or a non-zero offset
    sport = dport = None
    if proto == IPPROTO_UDP and not fragment and total >= ihl + 4:
        sport, dport = struct.unpack_from(">HH", buf, ihl)
    return Ipv4Info(ihl, total, ttl, proto, bytes(src), bytes(dst), fragment, sport, dport)


def complete_udp_checksum(packet: bytearray, ihl: int) -> int:
    """Compute and store the UDP checksum (RFC 768) of the non-fragment IPv4/UDP ``packet``.

    Why: a packet socket sees a locally sent packet before the checksum is finished when the
    sending interface offloads it (veth does): the field holds only the pseudo-header sum
    (Linux CHECKSUM_PARTIAL, TP_STATUS_CSUMNOTREADY).  Re-emitted as is, every receiver would
    drop it.  Returns the stored value; a computed 0 is sent as 0xFFFF (RFC 768).
    """
    room = len(packet) - ihl
    udp_len = int.from_bytes(packet[ihl + 4 : ihl + 6], "big") if room >= 8 else 0
    if not 8 <= udp_len <= room:
        raise ValueError(f"UDP length {udp_len} does not fit the {room} octets after the IP header")
    packet[ihl + 6 : ihl + 8] = b"\x00\x00"
    pseudo = bytes(packet[12:20]) + struct.pack(">BBH", 0, IPPROTO_UDP, udp_len)
    value = checksum(pseudo + bytes(packet[ihl : ihl + udp_len])) or 0xFFFF
    packet[ihl + 6 : ihl + 8] = value.to_bytes(2, "big")
    return value


def is_routable_multicast(dst: bytes) -> bool:
    """224.0.0.0/4 but not 224.0.0.0/24: routers never forward the Local Network Control Block
    (RFC 5771 §4), so neither does BIER."""
    return dst[0] & 0xF0 == 0xE0 and dst[:3] != b"\xe0\x00\x00"


def decrement_ttl(packet: bytearray) -> int:
    """Decrement the TTL of the IPv4 header at offset 0 in place and return the new TTL.

    The checksum is updated incrementally (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')), so the
    result equals a full recomputation, including the 0x0000/0xFFFF corner of RFC 1624 §3.
    Raises ValueError when the TTL is already 0 (nothing to decrement); a router drops a
    packet whose new TTL is 0, which the caller decides.
    """
    ttl = packet[8]
    if ttl == 0:
        raise ValueError("TTL is already 0")
    old_word = (ttl << 8) | packet[9]
    new_word = old_word - 0x100
    hc = (packet[10] << 8) | packet[11]
    s = (~hc & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    hc_new = ~s & 0xFFFF
    packet[8] = ttl - 1
    packet[10] = hc_new >> 8
    packet[11] = hc_new & 0xFF
    return ttl - 1


def multicast_mac(group: ipaddress.IPv4Address | bytes | str) -> bytes:
    """01:00:5e followed by the low 23 bits of ``group`` (RFC 1112 §6.4)."""
    raw = _raw(group)
    if raw[0] & 0xF0 != 0xE0:
        raise ValueError(f"{ipaddress.IPv4Address(raw)} is not an IPv4 multicast group")
    return b"\x01\x00\x5e" + bytes((raw[1] & 0x7F, raw[2], raw[3]))


def ethernet_header(group: ipaddress.IPv4Address | bytes | str, src_mac: bytes) -> bytes:
    """The 14-octet Ethernet II header that carries an IPv4 packet for ``group``."""
    if len(src_mac) != 6:
        raise ValueError(f"source MAC must be 6 octets, got {len(src_mac)}")
    return multicast_mac(group) + src_mac + struct.pack(">H", ETH_P_IP)


def flow_entropy(src: bytes, group: bytes, sport: int | None = None, dport: int | None = None) -> int:
    """A 20-bit Entropy from (S, G, UDP source port, UDP destination port).

    CRC-32 rather than ``hash()``: Python salts ``hash`` of bytes per process, and every BFIR
    must give one flow the same value across restarts.  Fragments have no ports, so the
    caller passes None for them and all fragments of one flow share a value.
    """
    ports = b"" if sport is None and dport is None else struct.pack(">HH", sport or 0, dport or 0)
    return zlib.crc32(_raw(src) + _raw(group) + ports) & MAX_ENTROPY


def _raw(addr: ipaddress.IPv4Address | bytes | str) -> bytes:
    if isinstance(addr, bytes):
        if len(addr) != 4:
            raise ValueError(f"an IPv4 address is 4 octets, got {len(addr)}")
        return addr
    return packed(addr)


@functools.lru_cache(maxsize=1 << 16)
def packed(addr: ipaddress.IPv4Address | str) -> bytes:
    """The 4 octets of an address given as text or IPv4Address. Cached: a membership change rebuilds
    every flow table from the same few hundred addresses, and parsing them was most of its cost."""
    return ipaddress.IPv4Address(addr).packed


Address = ipaddress.IPv4Address | str
FlowSpec = tuple[Address, Address | None, Iterable[int]]


def _checked_flow(where: str, group: Address, bfers: Iterable[int]) -> tuple[bytes, tuple[int, ...]]:
    """A flow's group (4 octets) and sorted BFR-ids, or ValueError naming ``where``."""
    g = packed(group)
    if not is_routable_multicast(g):
        text = ipaddress.IPv4Address(g)
        raise ValueError(f"{where}: group {text} is not routable multicast (224/4 minus 224.0.0/24)")
    ids = tuple(sorted(set(bfers)))
    if not ids:
        raise ValueError(f"{where}: no BFERs")
    bad = [b for b in ids if not 1 <= b <= 65535]
    if bad:
        raise ValueError(f"{where}: BFR-ids {bad} are outside 1..65535")
    return g, ids


class FlowTable:
    """Static (S,G)/(*,G) -> BFER BFR-ids, looked up with raw 4-octet addresses.

    An (S,G) entry wins over the (*,G) entry of the same group (the usual PIM-SM precedence,
    RFC 7761 §4.1), whatever the order of the specs.
    """

    def __init__(self, specs: Iterable[FlowSpec] = ()) -> None:
        self._sg: dict[tuple[bytes, bytes], tuple[int, ...]] = {}
        self._g: dict[bytes, tuple[int, ...]] = {}
        for i, (group, source, bfers) in enumerate(specs):
            where = f"flows[{i}]"
            g, ids = _checked_flow(where, group, bfers)
            if source is None:
                if g in self._g:
                    raise ValueError(f"{where}: (*,{group}) is configured twice")
                self._g[g] = ids
            else:
                key = (packed(source), g)
                if key in self._sg:
                    raise ValueError(f"{where}: ({source},{group}) is configured twice")
                self._sg[key] = ids

    def updated(self, changes: Mapping[tuple[Address | None, Address], Iterable[int] | None]) -> FlowTable:
        """A copy with ``changes`` made: per (source or None, group), its BFR-ids, or None to remove it.
        It costs a copy of the entries, not a rebuild (a membership change touches a few of hundreds);
        the new entries are checked as the constructor checks them."""
        table = FlowTable()
        table._sg, table._g = dict(self._sg), dict(self._g)
        for (source, group), bfers in changes.items():
            where = f"flows[({source or '*'},{group})]"
            g = packed(group)
            if bfers is None:
                if source is None:
                    table._g.pop(g, None)
                else:
                    table._sg.pop((packed(source), g), None)
                continue
            g, ids = _checked_flow(where, group, bfers)
            if source is None:
                table._g[g] = ids
            else:
                table._sg[(packed(source), g)] = ids
        return table

    @classmethod
    def from_config(cls, flows: Iterable[object]) -> FlowTable:
        """From :class:`aidcnet.config.BierFlow`-shaped objects (``group``, ``source``, ``bfers``)."""
        return cls((f.group, f.source, f.bfers) for f in flows)  # type: ignore[attr-defined]

    def lookup(self, src: bytes, group: bytes) -> tuple[int, ...] | None:
        """BFER BFR-ids for (src, group), falling back to (*, group); None when neither exists."""
        ids = self._sg.get((src, group))
        return ids if ids is not None else self._g.get(group)

    def __len__(self) -> int:
        return len(self._sg) + len(self._g)
