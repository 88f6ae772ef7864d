"""Our two RFC 9279 extension TLVs and the Receiver Proxy Report built on them (docs/igmp.md).

RFC 9279 §8 keeps Extension Types 65534 and 65535 for Experimental Use, confined to closed environments.
A lab is one.  The Receiver Proxy Report of draft-zzhang-bier-optimized-use-in-aidc has no public
codepoints, and draft-ietf-bier-mld's BFR-id identification is not ours to guess, so both take an
experimental type.  These two constants are the only place the numbers are written::

    Receiver List (in a Receiver Proxy Report, source host -> first-hop router):
     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |      Type = 65534 (0xFFFE)    |     Length = 4 x receivers    |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Receiver IPv4 Address [1..R]                  ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

    BFER Identity (in a report a BFER sends its BFIRs over BIER):
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |      Type = 65535 (0xFFFF)    |           Length = 2          |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |         BFR-id (1..65535)     |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

A Receiver Proxy Report is a Version 3 Membership Report with exactly one group record and a Receiver
List: ``MODE_IS_INCLUDE {S}`` names (S,G), ``MODE_IS_EXCLUDE {}`` names (*,G).  The list is the whole
receiver set: it replaces the one installed before, and a list of length 0 removes it.  Both TLVs are
defined for reports only; in a query they are ignored like any unknown type.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Final

from aidcnet.bier.bitstring import MAX_BFR_ID
from aidcnet.igmp.codec import GroupRecord, IgmpDecodeError, RecordType, Report, Tlv, is_unicast

RECEIVER_LIST_TYPE: Final = 65534
BFR_ID_TYPE: Final = 65535


@dataclass(frozen=True)
class Extensions:
    """What a report's TLVs say, to us.  ``unknown`` lists the types we skipped, for counting."""

    receivers: tuple[IPv4Address, ...] | None = None
    bfr_id: int | None = None
    unknown: tuple[int, ...] = ()


def receiver_list_tlv(receivers: tuple[IPv4Address, ...]) -> Tlv:
    for r in receivers:
        if not is_unicast(r):
            raise ValueError(f"receiver {r} is not a unicast address")
    if len(set(receivers)) != len(receivers):
        raise ValueError("a receiver list names each receiver once")
    return Tlv(RECEIVER_LIST_TYPE, b"".join(r.packed for r in receivers))


def bfr_id_tlv(bfr_id: int) -> Tlv:
    if not 1 <= bfr_id <= MAX_BFR_ID:
        raise ValueError(f"BFR-id {bfr_id} is not 1..{MAX_BFR_ID}")
    return Tlv(BFR_ID_TYPE, bfr_id.to_bytes(2, "big"))


def _check_receiver(r: IPv4Address) -> None:
    if not is_unicast(r):
        raise IgmpDecodeError("bad-receiver", f"receiver {r} is not a unicast address")


def _decode_receivers(value: bytes) -> tuple[IPv4Address, ...]:
    if len(value) % 4:
        raise IgmpDecodeError("bad-receiver-list", f"{len(value)} octets are not whole IPv4 addresses")
    receivers = tuple(IPv4Address(value[i : i + 4]) for i in range(0, len(value), 4))
    for r in receivers:
        _check_receiver(r)
    if len(set(receivers)) != len(receivers):
        raise IgmpDecodeError("bad-receiver-list", "a receiver is listed twice")
    return receivers


def _decode_bfr_id(value: bytes) -> int:
    if len(value) != 2:
        raise IgmpDecodeError("bad-bfr-id", f"a BFR-id TLV has 2 octets of value, this one {len(value)}")
    bfr_id = int.from_bytes(value, "big")
    if bfr_id == 0:
        raise IgmpDecodeError("bad-bfr-id", "BFR-id 0 is unassigned (RFC 8279 §2)")
    return bfr_id


def interpret(tlvs: tuple[Tlv, ...] | None) -> Extensions:
    """Read our TLVs out of a decoded report; each of ours at most once, others skipped and listed."""
    receivers: tuple[IPv4Address, ...] | None = None
    bfr_id: int | None = None
    unknown: list[int] = []
    for tlv in tlvs or ():
        if tlv.type == RECEIVER_LIST_TYPE:
            if receivers is not None:
                raise IgmpDecodeError("bad-receiver-list", "two receiver lists in one report")
            receivers = _decode_receivers(tlv.value)
        elif tlv.type == BFR_ID_TYPE:
            if bfr_id is not None:
                raise IgmpDecodeError("bad-bfr-id", "two BFR-id TLVs in one report")
            bfr_id = _decode_bfr_id(tlv.value)
        elif tlv.type != 0:  # No-op (RFC 9279 §4) is ignored without being counted
            unknown.append(tlv.type)
    return Extensions(receivers, bfr_id, tuple(unknown))


@dataclass(frozen=True)
class ProxyReport:
    """(S,G) or, with ``source`` None, (*,G), and its whole receiver set (empty: remove)."""

    group: IPv4Address
    source: IPv4Address | None
    receivers: tuple[IPv4Address, ...]

    def to_report(self) -> Report:
        if self.source is None:
            record = GroupRecord(RecordType.MODE_IS_EXCLUDE, self.group)
        else:
            record = GroupRecord(RecordType.MODE_IS_INCLUDE, self.group, (self.source,))
        return Report((record,), (receiver_list_tlv(self.receivers),))


def proxy_report(report: Report) -> ProxyReport | None:
    """The Receiver Proxy Report ``report`` carries, or None if it has no Receiver List (a plain report)."""
    ext = interpret(report.extensions)
    if ext.receivers is None:
        return None
    if len(report.records) != 1:
        n = len(report.records)
        raise IgmpDecodeError("bad-proxy-report", f"{n} group records, a proxy report has 1")
    rec = report.records[0]
    if rec.record_type == RecordType.MODE_IS_INCLUDE and len(rec.sources) == 1:
        return ProxyReport(rec.group, rec.sources[0], ext.receivers)
    if rec.record_type == RecordType.MODE_IS_EXCLUDE and not rec.sources:
        return ProxyReport(rec.group, None, ext.receivers)
    raise IgmpDecodeError(
        "bad-proxy-report",
        f"record type {rec.record_type} with {len(rec.sources)} sources: use MODE_IS_INCLUDE {{S}} or "
        "MODE_IS_EXCLUDE {}",
    )
