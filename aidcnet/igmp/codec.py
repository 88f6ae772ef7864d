"""IGMP messages on the wire: IGMPv3 (RFC 3376 §4), what older Linux hosts may send (RFC 2236 §2,
RFC 1112 App. I), and the RFC 9279 extension TLVs after a v3 query's sources or a report's records.

Membership Query (RFC 3376 §4.1; E bit from RFC 9279 §3.3)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Type = 0x11  | Max Resp Code |           Checksum            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                         Group Address                         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |E| Resv|S| QRV |     QQIC      |     Number of Sources (N)     |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                  Source Address [1..N]                        ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                  Extension TLVs (if E)                        ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Version 3 Membership Report (RFC 3376 §4.2; E bit from RFC 9279 §3.4)::

    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Type = 0x22  |    Reserved   |           Checksum            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |E|         Reserved            |  Number of Group Records (M)  |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Record Type  |  Aux Data Len |     Number of Sources (N)     |  group record,
    |                       Multicast Address                       |  M times
    |                  Source Address [1..N]                        ~
    |                  Auxiliary Data (Aux Data Len x 4 octets)     ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                  Extension TLVs (if E)                        ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Decoding is strict: anything malformed raises :class:`IgmpDecodeError` whose ``reason`` (one of
:data:`REASONS`) is the daemon's drop-counter key.  Two deliberate choices beyond RFC 3376:

* An E bit with TLVs that fail RFC 9279 §5 validation drops the whole message (the RFC ignores only the
  Additional Data).  A Receiver Proxy Report whose receiver list was ignored would read as "no
  receivers" and remove the set, so a half-understood report must not be acted on.
* Unknown record types (RFC 3376 §4.2.12: "silently ignored") and unknown extension types (RFC 9279 §5:
  "ignored") are not errors: they are decoded as they are, for the consumer to count and skip.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from ipaddress import IPv4Address
from typing import Final

from aidcnet.ipv4 import checksum16


class IgmpType(IntEnum):
    MEMBERSHIP_QUERY = 0x11  # RFC 3376 §4.1; v1 and v2 queries share the type (§7.1)
    V1_MEMBERSHIP_REPORT = 0x12  # RFC 1112
    V2_MEMBERSHIP_REPORT = 0x16  # RFC 2236
    V2_LEAVE_GROUP = 0x17  # RFC 2236
    V3_MEMBERSHIP_REPORT = 0x22  # RFC 3376 §4.2


class RecordType(IntEnum):
    """Group Record Types, RFC 3376 §4.2.12."""

    MODE_IS_INCLUDE = 1
    MODE_IS_EXCLUDE = 2
    CHANGE_TO_INCLUDE_MODE = 3
    CHANGE_TO_EXCLUDE_MODE = 4
    ALLOW_NEW_SOURCES = 5
    BLOCK_OLD_SOURCES = 6


# RFC 9279 §4: the only registered extension type; "MUST be ignored during processing".
NOOP_EXTENSION_TYPE: Final = 0

REASONS: Final = frozenset(
    {
        "truncated",  # shorter than its fixed part, or a count/length field runs past the end
        "bad-checksum",  # RFC 3376 §4.1.2: verified before anything else is looked at
        "unknown-type",  # an IGMP type we do not handle (DVMRP, mtrace, ...)
        "bad-query-length",  # RFC 3376 §7.1: a query of 9..11 octets is no version at all
        "bad-address",  # a group that is not multicast, a source that cannot send
        "bad-extension",  # E bit set but the TLVs fail RFC 9279 §5 validation
        # Checks of our own extension values (aidcnet/igmp/extensions.py):
        "bad-receiver-list",
        "bad-receiver",
        "bad-bfr-id",
        "bad-proxy-report",
    }
)

_HEADER = struct.Struct("!BBH4s")  # type, code, checksum, group: every IGMP message starts so
_QUERY_V3 = struct.Struct("!BBH4sBBH")
_REPORT_V3 = struct.Struct("!BBHHH")
_RECORD = struct.Struct("!BBH4s")
_TLV = struct.Struct("!HH")
_E_BIT_QUERY: Final = 0x80  # top bit of the Resv|S|QRV octet
_E_BIT_REPORT: Final = 0x8000  # top bit of the second word's reserved field
_S_BIT: Final = 0x08
_ANY: Final = IPv4Address(0)
_BROADCAST: Final = IPv4Address("255.255.255.255")

# Largest values the 8-bit codes can carry (RFC 3376 §4.1.1, §4.1.7): (0xF | 0x10) << (7 + 3).
MAX_CODE_VALUE: Final = 31744
MAX_QRV: Final = 7


class IgmpDecodeError(ValueError):
    """A malformed IGMP message; ``reason`` is one of :data:`REASONS` (the daemon's drop counter key)."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def decode_code(code: int) -> int:
    """Max Resp Code / QQIC → value (RFC 3376 §4.1.1, §4.1.7): linear below 128, else ``1|exp|mant``."""
    if code < 0x80:
        return code
    return ((code & 0x0F) | 0x10) << (((code >> 4) & 0x07) + 3)


def encode_code(value: int) -> int:
    """Value → the code of the largest representable value not above ``value``.

    Rounding down keeps a querier from promising hosts more time than it waits for them."""
    if not 0 <= value <= MAX_CODE_VALUE:
        raise ValueError(f"{value} does not fit a Max Resp Code/QQIC: 0..{MAX_CODE_VALUE}")
    if value < 0x80:
        return value
    exp = value.bit_length() - 5 - 3  # the mantissa keeps 5 significant bits, the top one implied
    return 0x80 | (exp << 4) | ((value >> (exp + 3)) & 0x0F)


@dataclass(frozen=True)
class Tlv:
    """One RFC 9279 §3 extension: type and value as carried; meaning is the consumer's business."""

    type: int
    value: bytes = b""


@dataclass(frozen=True)
class Query:
    """A Membership Query.  ``version`` follows RFC 3376 §7.1 (by length and Max Resp Code)."""

    group: IPv4Address = _ANY
    max_resp_time: int = 100  # 1/10 s (RFC 3376 §4.1.1); v1 queries carry 0
    suppress: bool = False  # S flag, RFC 3376 §4.1.5
    qrv: int = 2  # RFC 3376 §4.1.6; 0 means "above 7" or "not said"
    qqi: int = 125  # seconds, RFC 3376 §4.1.7
    sources: tuple[IPv4Address, ...] = ()
    extensions: tuple[Tlv, ...] | None = None  # None: E bit clear
    version: int = 3

    @property
    def is_general(self) -> bool:
        return self.group == _ANY


@dataclass(frozen=True)
class GroupRecord:
    """RFC 3376 §4.2.4.  ``record_type`` stays an int so an unknown one can be carried and skipped."""

    record_type: int
    group: IPv4Address
    sources: tuple[IPv4Address, ...] = ()
    aux_data: bytes = b""

    @property
    def known(self) -> bool:
        return self.record_type in _RECORD_TYPES


@dataclass(frozen=True)
class Report:
    """A Version 3 Membership Report (RFC 3376 §4.2)."""

    records: tuple[GroupRecord, ...] = ()
    extensions: tuple[Tlv, ...] | None = None  # None: E bit clear


@dataclass(frozen=True)
class LegacyReport:
    """An IGMPv1 (RFC 1112) or v2 (RFC 2236) report: joins ``group`` for any source."""

    group: IPv4Address
    version: int = 2


@dataclass(frozen=True)
class Leave:
    """An IGMPv2 Leave Group (RFC 2236 §3)."""

    group: IPv4Address


Message = Query | Report | LegacyReport | Leave

_RECORD_TYPES: Final = frozenset(int(t) for t in RecordType)
_LEGACY_TYPES: Final = {
    IgmpType.V1_MEMBERSHIP_REPORT: 1,
    IgmpType.V2_MEMBERSHIP_REPORT: 2,
    IgmpType.V2_LEAVE_GROUP: 2,
}


# -- encoding --------------------------------------------------------------------------------------


def _with_checksum(msg: bytearray) -> bytes:
    msg[2:4] = b"\0\0"
    msg[2:4] = checksum16(bytes(msg)).to_bytes(2, "big")
    return bytes(msg)


def encode_tlvs(tlvs: tuple[Tlv, ...]) -> bytes:
    """RFC 9279 §3: type, length, value; no padding.  At least one TLV (RFC 9279 §5)."""
    if not tlvs:
        raise ValueError("an RFC 9279 extension carries at least one TLV; use extensions=None for none")
    out = bytearray()
    for tlv in tlvs:
        if not 0 <= tlv.type <= 0xFFFF or len(tlv.value) > 0xFFFF:
            raise ValueError(f"extension type {tlv.type} with {len(tlv.value)} octets does not fit 16 bits")
        out += _TLV.pack(tlv.type, len(tlv.value)) + tlv.value
    return bytes(out)


def _sources(sources: tuple[IPv4Address, ...]) -> bytes:
    if len(sources) > 0xFFFF:
        raise ValueError(f"{len(sources)} sources do not fit the 16-bit Number of Sources")
    return b"".join(s.packed for s in sources)


def encode_query(q: Query) -> bytes:
    if q.version in (1, 2):
        code = 0 if q.version == 1 else q.max_resp_time
        if q.version == 2 and not 1 <= code <= 0xFF:
            raise ValueError(f"an IGMPv2 query needs Max Resp Time 1..255 (1/10 s), got {code}")
        return _with_checksum(bytearray(_HEADER.pack(IgmpType.MEMBERSHIP_QUERY, code, 0, q.group.packed)))
    if not 0 <= q.qrv <= MAX_QRV:
        raise ValueError(f"QRV {q.qrv} does not fit 3 bits (0..{MAX_QRV})")
    flags = (_E_BIT_QUERY if q.extensions is not None else 0) | (_S_BIT if q.suppress else 0) | q.qrv
    head = _QUERY_V3.pack(
        IgmpType.MEMBERSHIP_QUERY,
        encode_code(q.max_resp_time),
        0,
        q.group.packed,
        flags,
        encode_code(q.qqi),
        len(q.sources),
    )
    ext = encode_tlvs(q.extensions) if q.extensions is not None else b""
    return _with_checksum(bytearray(head + _sources(q.sources) + ext))


def encode_record(r: GroupRecord) -> bytes:
    if len(r.aux_data) % 4 or len(r.aux_data) > 0xFF * 4:
        raise ValueError(f"aux data of {len(r.aux_data)} octets is not a whole number of words up to 255")
    head = _RECORD.pack(r.record_type, len(r.aux_data) // 4, len(r.sources), r.group.packed)
    return head + _sources(r.sources) + r.aux_data


def encode_report(r: Report) -> bytes:
    if len(r.records) > 0xFFFF:
        raise ValueError(f"{len(r.records)} group records do not fit the 16-bit count")
    flags = _E_BIT_REPORT if r.extensions is not None else 0
    head = _REPORT_V3.pack(IgmpType.V3_MEMBERSHIP_REPORT, 0, 0, flags, len(r.records))
    body = b"".join(encode_record(rec) for rec in r.records)
    ext = encode_tlvs(r.extensions) if r.extensions is not None else b""
    return _with_checksum(bytearray(head + body + ext))


def encode_legacy(m: LegacyReport | Leave) -> bytes:
    if isinstance(m, Leave):
        kind = IgmpType.V2_LEAVE_GROUP
    else:
        kind = IgmpType.V1_MEMBERSHIP_REPORT if m.version == 1 else IgmpType.V2_MEMBERSHIP_REPORT
    return _with_checksum(bytearray(_HEADER.pack(kind, 0, 0, m.group.packed)))


def encode(m: Message) -> bytes:
    """The IGMP message (the IPv4 payload, Router Alert and TTL 1 are the sender's business)."""
    if isinstance(m, Query):
        return encode_query(m)
    if isinstance(m, Report):
        return encode_report(m)
    return encode_legacy(m)


# -- decoding --------------------------------------------------------------------------------------


def _check_group(group: IPv4Address, what: str) -> None:
    if not group.is_multicast:
        raise IgmpDecodeError("bad-address", f"{what} {group} is not an IPv4 multicast address")


def is_unicast(address: IPv4Address) -> bool:
    """An address a host sends from: not 0.0.0.0, multicast or the limited broadcast."""
    return not (address.is_multicast or address.is_unspecified or address == _BROADCAST)


def _check_source(source: IPv4Address, what: str) -> None:
    if not is_unicast(source):
        raise IgmpDecodeError("bad-address", f"{what} source {source} is not a unicast address")


def _read_sources(buf: memoryview, off: int, count: int, what: str) -> tuple[tuple[IPv4Address, ...], int]:
    end = off + 4 * count
    if end > len(buf):
        raise IgmpDecodeError("truncated", f"{what} says {count} sources, {len(buf) - off} octets left")
    sources = tuple(IPv4Address(bytes(buf[i : i + 4])) for i in range(off, end, 4))
    for s in sources:
        _check_source(s, what)
    return sources, end


def decode_tlvs(buf: memoryview) -> tuple[Tlv, ...]:
    """RFC 9279 §5 validation: at least one TLV, none past the end, no octet after the last."""
    if len(buf) < _TLV.size:
        raise IgmpDecodeError("bad-extension", f"E bit set but {len(buf)} octets left, a TLV needs 4")
    tlvs: list[Tlv] = []
    off = 0
    while len(buf) - off >= _TLV.size:
        kind, length = _TLV.unpack_from(buf, off)
        off += _TLV.size
        if off + length > len(buf):
            raise IgmpDecodeError("bad-extension", f"TLV type {kind} length {length} runs past the message")
        tlvs.append(Tlv(kind, bytes(buf[off : off + length])))
        off += length
    if off != len(buf):
        raise IgmpDecodeError("bad-extension", f"{len(buf) - off} octets after the last TLV")
    return tuple(tlvs)


def _decode_query(buf: memoryview) -> Query:
    code = buf[1]
    group = IPv4Address(bytes(buf[4:8]))
    if group != _ANY:
        _check_group(group, "query group")
    if len(buf) == 8:  # RFC 3376 §7.1: v1 if the code is 0, else v2
        return Query(group=group, max_resp_time=code, qrv=0, qqi=0, version=1 if code == 0 else 2)
    if len(buf) < _QUERY_V3.size:
        raise IgmpDecodeError("bad-query-length", f"a query of {len(buf)} octets (9..11 are no version)")
    _t, _c, _sum, _g, flags, qqic, count = _QUERY_V3.unpack_from(buf)
    sources, end = _read_sources(buf, _QUERY_V3.size, count, "query")
    # Without the E bit anything after the sources is Additional Data, ignored (RFC 3376 §4.1.10).
    ext = decode_tlvs(buf[end:]) if flags & _E_BIT_QUERY else None
    return Query(
        group=group,
        max_resp_time=decode_code(code),
        suppress=bool(flags & _S_BIT),
        qrv=flags & 0x07,
        qqi=decode_code(qqic),
        sources=sources,
        extensions=ext,
        version=3,
    )


def _decode_report(buf: memoryview) -> Report:
    if len(buf) < _REPORT_V3.size:
        raise IgmpDecodeError("truncated", f"a v3 report of {len(buf)} octets, the header needs 8")
    _t, _r, _sum, flags, count = _REPORT_V3.unpack_from(buf)
    off = _REPORT_V3.size
    records: list[GroupRecord] = []
    for i in range(count):
        if off + _RECORD.size > len(buf):
            raise IgmpDecodeError("truncated", f"group record {i + 1} of {count} starts past the end")
        rtype, aux_words, nsrc, group_b = _RECORD.unpack_from(buf, off)
        group = IPv4Address(group_b)
        _check_group(group, f"group record {i + 1}")
        sources, off = _read_sources(buf, off + _RECORD.size, nsrc, f"group record {i + 1} ({group})")
        aux_end = off + 4 * aux_words
        if aux_end > len(buf):
            raise IgmpDecodeError("truncated", f"group record {i + 1} aux data runs past the end")
        records.append(GroupRecord(rtype, group, sources, bytes(buf[off:aux_end])))
        off = aux_end
    ext = decode_tlvs(buf[off:]) if flags & _E_BIT_REPORT else None
    return Report(tuple(records), ext)


def _decode_legacy(buf: memoryview, kind: int) -> LegacyReport | Leave:
    if len(buf) < _HEADER.size:
        raise IgmpDecodeError("truncated", f"an IGMPv{_LEGACY_TYPES[kind]} message of {len(buf)} octets")
    group = IPv4Address(bytes(buf[4:8]))
    _check_group(group, f"IGMP type 0x{kind:02x} group")
    if kind == IgmpType.V2_LEAVE_GROUP:
        return Leave(group)
    return LegacyReport(group, _LEGACY_TYPES[kind])


def decode(data: bytes | bytearray | memoryview) -> Message:
    """Decode one IGMP message (the IPv4 payload).  Raises :class:`IgmpDecodeError` only."""
    buf = memoryview(data)
    if len(buf) < _HEADER.size:
        raise IgmpDecodeError("truncated", f"{len(buf)} octets, every IGMP message has at least 8")
    if checksum16(buf) != 0:
        raise IgmpDecodeError("bad-checksum", "the ones'-complement sum of the message is not 0xffff")
    kind = buf[0]
    if kind == IgmpType.MEMBERSHIP_QUERY:
        return _decode_query(buf)
    if kind == IgmpType.V3_MEMBERSHIP_REPORT:
        return _decode_report(buf)
    if kind in _LEGACY_TYPES:
        return _decode_legacy(buf, kind)
    raise IgmpDecodeError("unknown-type", f"IGMP type 0x{kind:02x}")
