"""The aidclab reliable-multicast header, carried over UDP (ours: see docs/reliability.md).

No standard defines reliable BIER delivery (docs/design.md §3, "reliability"); these octets are ours.  One
16-octet common header starts every message, then a body that depends on the type::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Ver  |  Type |     Flags     |            BFIR-id            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                            Flow ID                            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |               Sequence (DATA) / Cumulative (feedback)         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |        Reporter BFR-id        |  Length / Count / BSL,SI      |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

A flow is identified by (BFIR-id, Flow ID).  ``Cumulative`` is the next sequence number the reporter
expects: it holds every sequence before it (serial arithmetic, RFC 1982, :mod:`.serial`).  The bodies:

* DATA (1): the payload, exactly ``Length`` octets.
* ACK (2) and NACK (3): ``Highest`` (the sequence after the highest one received), then ``Count``
  ranges ``[First, Last]`` of *missing* sequences, 8 octets each.  An ACK reports state (cumulative
  plus selective gaps); a NACK asks for the listed ranges now.
* AGG-ACK (4): from a BFR, for the BFERs of one SI: the ``acked`` BitString (they hold everything
  before Cumulative) and the ``missing`` BitString (they were sent that range and have not confirmed
  it); flag P (partial) is set exactly when ``missing`` is not empty.  With flag S (selective) a
  ``First`` sequence precedes the BitStrings and both speak of ``[First, Cumulative)`` only: the acked
  BFERs hold that range, whatever they lack before it.
* AGG-NACK (5): from a BFR, the NACKs of its BFERs of one SI for the sequences ``[First, Last]``
  merged into one (the common header's sequence field is First): ``Last``, then the ``askers``
  BitString (they asked for those sequences) and the ``holders`` BitString (BFERs below the BFR that
  hold every one of them).  Flag A (again): the BFR saw the last repair of these sequences pass and it
  did not reach these askers, so a repair-holdoff at the BFIR would only delay the next one.

All multi-octet fields are in network byte order.  Decoding is strict: every field the encoder would
refuse is refused, so ``encode(decode(b)) == b`` for every accepted ``b``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from aidcnet.bier.bitstring import BSL_CODES, code_from_bsl, decode_bitstring, encode_bitstring
from aidcnet.reliable import serial

# Next to RoCEv2 (4791) and our INA header (4792); our choice, not a registration.
RELIABLE_UDP_PORT: Final = 4795

# Version 0 is invalid so that an all-zero buffer is rejected as bad-version.
VERSION: Final = 1
COMMON_LEN: Final = 16
RANGE_LEN: Final = 8
MAX_PAYLOAD: Final = 0xFFFF
MAX_RANGES: Final = 0xFFFF

_COMMON = struct.Struct("!BBHIIHH")
_HIGHEST = struct.Struct("!I")
_RANGE = struct.Struct("!II")
_FIRST = struct.Struct("!I")
_LAST = struct.Struct("!I")
assert _COMMON.size == COMMON_LEN

FLAG_RETRANSMIT: Final = 0x80  # DATA: R, a retransmission (its BitString is the missing set only)
FLAG_FIN: Final = 0x40  # DATA: F, the last sequence of the flow
FLAG_PARTIAL: Final = 0x80  # AGG-ACK: P, sent after the BFR's timeout with some BFERs missing
FLAG_SELECTIVE: Final = 0x40  # AGG-ACK: S, the BitStrings speak of [First, Cumulative) only
FLAG_AGAIN: Final = 0x80  # AGG-NACK: A, the last repair passed the BFR and missed these askers


class MsgType(IntEnum):
    DATA = 1
    ACK = 2
    NACK = 3
    AGG_ACK = 4
    AGG_NACK = 5


_ALLOWED_FLAGS: Final = {
    MsgType.DATA: FLAG_RETRANSMIT | FLAG_FIN,
    MsgType.ACK: 0,
    MsgType.NACK: 0,
    MsgType.AGG_ACK: FLAG_PARTIAL | FLAG_SELECTIVE,
    MsgType.AGG_NACK: FLAG_AGAIN,
}
_TYPE_BY_CODE: Final = {int(t): t for t in MsgType}
_BSL_BY_CODE: Final = {code: bsl for bsl, code in BSL_CODES.items()}

REASONS: Final = frozenset(
    {
        "truncated",  # shorter than the common header or than the body its fields announce
        "bad-version",
        "bad-type",
        "bad-flags",  # a flag the type does not define, or P that disagrees with the missing BitString
        "reserved-set",  # a field that must be zero is not (DATA reporter, AGG-ACK reserved nibble)
        "bad-bfir",  # BFIR-id 0 (RFC 8279 §2: unassigned)
        "bad-reporter",  # ACK/NACK from BFR-id 0
        "length-mismatch",  # octets after the announced body
        "bad-range",  # Highest before Cumulative, a range outside it, out of order, a NACK with none,
        # a selective AGG-ACK's First not before its Cumulative, or an AGG-NACK's Last before its First
        "bad-bsl",
        "bad-bitstring",  # AGG-ACK with no BFER in either BitString, or one in both; AGG-NACK without
        # askers, or a BFER among askers and holders
    }
)


class ReliableDecodeError(ValueError):
    """A malformed reliable-multicast message; ``reason`` (one of :data:`REASONS`) is the drop counter key."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _check_u(name: str, value: int, bits: int) -> None:
    if not 0 <= value < (1 << bits):
        raise ValueError(f"{name} {value!r} does not fit {bits} bits")


def _check_flow(bfir_id: int, flow_id: int, seq: int) -> None:
    if not 1 <= bfir_id <= 0xFFFF:
        raise ValueError(f"bfir_id {bfir_id!r} must be a BFR-id 1..65535")
    _check_u("flow_id", flow_id, 32)
    _check_u("sequence", seq, 32)


def _ranges_problem(cum: int, highest: int, ranges: tuple[tuple[int, int], ...]) -> str | None:
    """Why (cum, highest, ranges) is not canonical, or None.  Shared by encoder and decoder."""
    if not 0 <= serial.distance(cum, highest) <= serial.MAX_SPAN:
        return f"highest {highest} is not within {serial.MAX_SPAN} after cumulative {cum}"
    floor = cum
    for i, (first, last) in enumerate(ranges):
        if not (serial.le(floor, first) and serial.le(first, last) and serial.lt(last, highest)):
            return f"range {i} [{first}, {last}] is not ordered within [{floor}, {highest})"
        # Adjacent ranges would be one range: keep one canonical form.
        floor = serial.add(last, 2)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    """DATA: one sequence of a flow.  ``payload`` may be a view into the caller's buffer after decode."""

    bfir_id: int
    flow_id: int
    seq: int
    payload: bytes | memoryview = field(default=b"", repr=False)
    retransmit: bool = False
    fin: bool = False

    def encode(self) -> bytes:
        _check_flow(self.bfir_id, self.flow_id, self.seq)
        n = len(self.payload)
        if n > MAX_PAYLOAD:
            raise ValueError(f"payload of {n} octets exceeds {MAX_PAYLOAD}")
        flags = (FLAG_RETRANSMIT if self.retransmit else 0) | (FLAG_FIN if self.fin else 0)
        head = _COMMON.pack((VERSION << 4) | MsgType.DATA, flags, self.bfir_id, self.flow_id, self.seq, 0, n)
        return head + bytes(self.payload)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """ACK or NACK from one receiver (``reporter``, its BFR-id): cumulative, highest, missing ranges.

    ``ranges`` are inclusive ``(first, last)`` pairs of missing sequences, ascending, disjoint and not
    adjacent, within ``[cum, highest)``.  ``nack`` selects the NACK type (same body).
    """

    bfir_id: int
    flow_id: int
    cum: int
    reporter: int
    highest: int
    ranges: tuple[tuple[int, int], ...] = ()
    nack: bool = False

    @property
    def msg_type(self) -> MsgType:
        return MsgType.NACK if self.nack else MsgType.ACK

    def missing(self) -> list[int]:
        """Every missing sequence number the ranges name."""
        out: list[int] = []
        for first, last in self.ranges:
            out.extend(serial.span(first, serial.add(last, 1)))
        return out

    def encode(self) -> bytes:
        _check_flow(self.bfir_id, self.flow_id, self.cum)
        if not 1 <= self.reporter <= 0xFFFF:
            raise ValueError(f"reporter {self.reporter!r} must be a BFR-id 1..65535")
        _check_u("highest", self.highest, 32)
        if len(self.ranges) > MAX_RANGES:
            raise ValueError(f"{len(self.ranges)} ranges exceed {MAX_RANGES}")
        if self.nack and not self.ranges:
            raise ValueError("a NACK names at least one missing range")
        for first, last in self.ranges:
            _check_u("range first", first, 32)
            _check_u("range last", last, 32)
        problem = _ranges_problem(self.cum, self.highest, self.ranges)
        if problem:
            raise ValueError(problem)
        parts = [
            _COMMON.pack(
                (VERSION << 4) | self.msg_type,
                0,
                self.bfir_id,
                self.flow_id,
                self.cum,
                self.reporter,
                len(self.ranges),
            ),
            _HIGHEST.pack(self.highest),
        ]
        parts.extend(_RANGE.pack(first, last) for first, last in self.ranges)
        return b"".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class AggAck:
    """AGG-ACK from a BFR (``reporter``, its BFR-id or 0 for a BFR without one) for one SI.

    ``acked``/``missing`` are BitStrings of ``bsl`` bits for SI ``si`` (RFC 8279 §3 numbering).  With
    ``first`` (selective) they speak of ``[first, cum)`` only; without it of everything before ``cum``.
    """

    bfir_id: int
    flow_id: int
    cum: int
    reporter: int
    bsl: int
    si: int
    acked: int
    missing: int = 0
    first: int | None = None

    @property
    def partial(self) -> bool:
        return self.missing != 0

    @property
    def selective(self) -> bool:
        return self.first is not None

    def acked_mask(self) -> int:
        """``acked`` as an id-mask (bit BFR-id − 1), the form :mod:`.sender` and :mod:`.aggregator` use."""
        return self.acked << (self.si * self.bsl)

    def missing_mask(self) -> int:
        return self.missing << (self.si * self.bsl)

    def encode(self) -> bytes:
        _check_flow(self.bfir_id, self.flow_id, self.cum)
        _check_u("reporter", self.reporter, 16)
        _check_u("si", self.si, 8)
        code = code_from_bsl(self.bsl)
        if self.acked & self.missing or not self.acked | self.missing:
            raise ValueError(
                f"acked 0x{self.acked:x} and missing 0x{self.missing:x} must be disjoint and not both empty"
            )
        first = b""
        if self.first is not None:
            _check_u("first", self.first, 32)
            problem = _first_problem(self.first, self.cum)
            if problem:
                raise ValueError(problem)
            first = _FIRST.pack(self.first)
        head = _COMMON.pack(
            (VERSION << 4) | MsgType.AGG_ACK,
            (FLAG_PARTIAL if self.partial else 0) | (FLAG_SELECTIVE if first else 0),
            self.bfir_id,
            self.flow_id,
            self.cum,
            self.reporter,
            (code << 12) | self.si,
        )
        return (
            head + first + encode_bitstring(self.acked, self.bsl) + encode_bitstring(self.missing, self.bsl)
        )


def _first_problem(first: int, cum: int) -> str | None:
    """Why a selective AGG-ACK's ``[first, cum)`` is not a range a flow can have in flight, or None."""
    if not 0 < serial.distance(first, cum) <= serial.MAX_SPAN:
        return f"first {first} is not within {serial.MAX_SPAN} before cumulative {cum}"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class AggNack:
    """AGG-NACK from a BFR (``reporter``, its BFR-id or 0) for one SI: BFERs ``askers`` asked for the
    sequences ``[first, last]``, BFERs ``holders`` (below the same BFR) hold every one of them.

    One per flow, range and repair round: the BFR passed the first NACK of each sequence upstream only after
    gathering its siblings' (``again``: the last round's repair passed here and missed these askers)."""

    bfir_id: int
    flow_id: int
    first: int
    last: int
    reporter: int
    bsl: int
    si: int
    askers: int
    holders: int = 0
    again: bool = False

    def askers_mask(self) -> int:
        """``askers`` as an id-mask (bit BFR-id − 1)."""
        return self.askers << (self.si * self.bsl)

    def holders_mask(self) -> int:
        return self.holders << (self.si * self.bsl)

    def sequences(self) -> list[int]:
        return serial.span(self.first, serial.add(self.last, 1))

    def encode(self) -> bytes:
        _check_flow(self.bfir_id, self.flow_id, self.first)
        _check_u("last", self.last, 32)
        _check_u("reporter", self.reporter, 16)
        _check_u("si", self.si, 8)
        code = code_from_bsl(self.bsl)
        if not self.askers or self.askers & self.holders:
            raise ValueError(
                f"askers 0x{self.askers:x} must not be empty nor share a BFER with holders 0x{self.holders:x}"
            )
        problem = _last_problem(self.first, self.last)
        if problem:
            raise ValueError(problem)
        head = _COMMON.pack(
            (VERSION << 4) | MsgType.AGG_NACK,
            FLAG_AGAIN if self.again else 0,
            self.bfir_id,
            self.flow_id,
            self.first,
            self.reporter,
            (code << 12) | self.si,
        )
        return (
            head
            + _LAST.pack(self.last)
            + encode_bitstring(self.askers, self.bsl)
            + encode_bitstring(self.holders, self.bsl)
        )


def _last_problem(first: int, last: int) -> str | None:
    if not 0 <= serial.distance(first, last) < serial.MAX_SPAN:
        return f"last {last} is not within {serial.MAX_SPAN} after first {first}"
    return None


Message = Data | Ack | AggAck | AggNack
Feedback = Ack | AggAck | AggNack


def feedback_kind(msg: Feedback) -> str:
    """The name counters and lines give a feedback message: ``ack``, ``nack``, ``agg-ack``,
    ``agg-ack-partial`` or ``agg-nack``."""
    if isinstance(msg, AggNack):
        return "agg-nack"
    if isinstance(msg, AggAck):
        return "agg-ack-partial" if msg.partial else "agg-ack"
    return "nack" if msg.nack else "ack"


def agg_acks(
    bfir_id: int,
    flow_id: int,
    cum: int,
    reporter: int,
    acked: int,
    missing: int,
    bsl: int,
    first: int | None = None,
) -> list[AggAck]:
    """AGG-ACKs for id-masks (bit BFR-id − 1) ``acked``/``missing``: one per SI they touch, ascending.
    ``first``: selective ones, for ``[first, cum)`` only."""
    if acked < 0 or missing < 0 or acked & missing:
        raise ValueError(f"acked 0x{acked:x} and missing 0x{missing:x} must be disjoint id-masks")
    out = []
    word = (1 << bsl) - 1
    si = 0
    while acked or missing:
        a, m = acked & word, missing & word
        if a or m:
            out.append(
                AggAck(
                    bfir_id=bfir_id,
                    flow_id=flow_id,
                    cum=cum,
                    reporter=reporter,
                    bsl=bsl,
                    si=si,
                    acked=a,
                    missing=m,
                    first=first,
                )
            )
        acked >>= bsl
        missing >>= bsl
        si += 1
    return out


def agg_nacks(
    bfir_id: int,
    flow_id: int,
    first: int,
    last: int,
    reporter: int,
    askers: int,
    holders: int,
    bsl: int,
    again: bool = False,
) -> list[AggNack]:
    """AGG-NACKs for id-masks ``askers``/``holders`` (bit BFR-id − 1): one per SI with an asker, ascending
    (holders of an SI nobody asked in say nothing the BFIR needs now)."""
    if askers <= 0 or holders < 0 or askers & holders:
        raise ValueError(f"askers 0x{askers:x} and holders 0x{holders:x} must be disjoint, askers not empty")
    out = []
    word = (1 << bsl) - 1
    si = 0
    while askers:
        if askers & word:
            mine = AggNack(
                bfir_id=bfir_id, flow_id=flow_id, first=first, last=last, reporter=reporter, bsl=bsl,
                si=si, askers=askers & word, holders=holders & word, again=again,
            )  # fmt: skip
            out.append(mine)
        askers >>= bsl
        holders >>= bsl
        si += 1
    return out


def decode(buf: bytes | bytearray | memoryview) -> Message:
    """Parse one message (the whole UDP payload).  Raises :class:`ReliableDecodeError` when malformed.

    Checks run in wire order, so the reason names the first field that is wrong.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    total = len(mv)
    if total < COMMON_LEN:
        raise ReliableDecodeError("truncated", f"{total} octets, the common header needs {COMMON_LEN}")
    b0, flags, bfir_id, flow_id, seq, reporter, last16 = _COMMON.unpack_from(mv, 0)
    if b0 >> 4 != VERSION:
        raise ReliableDecodeError("bad-version", f"version {b0 >> 4}, expected {VERSION}")
    mtype = _TYPE_BY_CODE.get(b0 & 0xF)
    if mtype is None:
        raise ReliableDecodeError(
            "bad-type", f"type {b0 & 0xF} is not DATA, ACK, NACK, AGG-ACK or AGG-NACK (1..5)"
        )
    if flags & ~_ALLOWED_FLAGS[mtype]:
        raise ReliableDecodeError("bad-flags", f"flags 0x{flags:02x} on {mtype.name}")
    if bfir_id == 0:
        raise ReliableDecodeError("bad-bfir", "BFIR-id 0 is unassigned")
    if mtype is MsgType.DATA:
        return _decode_data(mv, total, flags, bfir_id, flow_id, seq, reporter, last16)
    if mtype is MsgType.AGG_ACK:
        return _decode_agg(mv, total, flags, bfir_id, flow_id, seq, reporter, last16)
    if mtype is MsgType.AGG_NACK:
        return _decode_agg_nack(mv, total, flags, bfir_id, flow_id, seq, reporter, last16)
    return _decode_ack(mv, total, mtype, bfir_id, flow_id, seq, reporter, last16)


def decode_data_head(buf: bytes | bytearray | memoryview) -> Data:
    """A DATA's common header alone (its payload left out: ``payload`` is empty), as the eBPF BFR reports
    the DATA it forwards (their first octets only). The checks :func:`decode` makes of the header."""
    if len(buf) < COMMON_LEN:
        raise ReliableDecodeError("truncated", f"{len(buf)} octets, the common header needs {COMMON_LEN}")
    b0, flags, bfir_id, flow_id, seq, reporter, _length = _COMMON.unpack_from(buf, 0)
    if b0 >> 4 != VERSION:
        raise ReliableDecodeError("bad-version", f"version {b0 >> 4}, expected {VERSION}")
    if b0 & 0xF != MsgType.DATA:
        raise ReliableDecodeError("bad-type", f"type {b0 & 0xF} is not DATA (1)")
    if flags & ~_ALLOWED_FLAGS[MsgType.DATA]:
        raise ReliableDecodeError("bad-flags", f"flags 0x{flags:02x} on DATA")
    if bfir_id == 0:
        raise ReliableDecodeError("bad-bfir", "BFIR-id 0 is unassigned")
    if reporter:
        raise ReliableDecodeError("reserved-set", f"DATA carries reporter {reporter}, must be 0")
    return Data(
        bfir_id=bfir_id,
        flow_id=flow_id,
        seq=seq,
        retransmit=bool(flags & FLAG_RETRANSMIT),
        fin=bool(flags & FLAG_FIN),
    )


def _decode_data(
    mv: memoryview, total: int, flags: int, bfir_id: int, flow_id: int, seq: int, reporter: int, n: int
) -> Data:
    if reporter:
        raise ReliableDecodeError("reserved-set", f"DATA carries reporter {reporter}, must be 0")
    end = COMMON_LEN + n
    if total < end:
        raise ReliableDecodeError("truncated", f"{total} octets, payload length {n} needs {end}")
    if total != end:
        raise ReliableDecodeError("length-mismatch", f"{total} octets, payload length {n} implies {end}")
    return Data(
        bfir_id=bfir_id,
        flow_id=flow_id,
        seq=seq,
        payload=mv[COMMON_LEN:end],
        retransmit=bool(flags & FLAG_RETRANSMIT),
        fin=bool(flags & FLAG_FIN),
    )


def _decode_ack(
    mv: memoryview,
    total: int,
    mtype: MsgType,
    bfir_id: int,
    flow_id: int,
    cum: int,
    reporter: int,
    count: int,
) -> Ack:
    if reporter == 0:
        raise ReliableDecodeError("bad-reporter", f"{mtype.name} from BFR-id 0")
    end = COMMON_LEN + _HIGHEST.size + count * RANGE_LEN
    if total < end:
        raise ReliableDecodeError("truncated", f"{total} octets, {count} ranges need {end}")
    if total != end:
        raise ReliableDecodeError("length-mismatch", f"{total} octets, {count} ranges imply {end}")
    (highest,) = _HIGHEST.unpack_from(mv, COMMON_LEN)
    ranges = tuple(_RANGE.iter_unpack(mv[COMMON_LEN + _HIGHEST.size : end]))
    if mtype is MsgType.NACK and not ranges:
        raise ReliableDecodeError("bad-range", "a NACK names at least one missing range")
    problem = _ranges_problem(cum, highest, ranges)
    if problem:
        raise ReliableDecodeError("bad-range", problem)
    return Ack(
        bfir_id=bfir_id,
        flow_id=flow_id,
        cum=cum,
        reporter=reporter,
        highest=highest,
        ranges=ranges,
        nack=mtype is MsgType.NACK,
    )


def _bsl_si(bsl_si: int) -> tuple[int, int]:
    """An AGG-ACK's or AGG-NACK's last 16 bits: the BSL its code names, and the SI."""
    code, rsv, si = bsl_si >> 12, (bsl_si >> 8) & 0xF, bsl_si & 0xFF
    if rsv:
        raise ReliableDecodeError("reserved-set", f"reserved nibble {rsv} after the BSL code")
    bsl = _BSL_BY_CODE.get(code)
    if bsl is None:
        raise ReliableDecodeError("bad-bsl", f"BSL code {code} is not an RFC 8296 code (1..7)")
    return bsl, si


def _decode_agg(
    mv: memoryview,
    total: int,
    flags: int,
    bfir_id: int,
    flow_id: int,
    cum: int,
    reporter: int,
    bsl_si: int,
) -> AggAck:
    bsl, si = _bsl_si(bsl_si)
    width = bsl >> 3
    at = COMMON_LEN + (_FIRST.size if flags & FLAG_SELECTIVE else 0)
    end = at + 2 * width
    if total < end:
        raise ReliableDecodeError("truncated", f"{total} octets, two {bsl}-bit BitStrings need {end}")
    if total != end:
        raise ReliableDecodeError("length-mismatch", f"{total} octets, BSL {bsl} implies {end}")
    first = None
    if flags & FLAG_SELECTIVE:
        (first,) = _FIRST.unpack_from(mv, COMMON_LEN)
        problem = _first_problem(first, cum)
        if problem:
            raise ReliableDecodeError("bad-range", problem)
    acked = decode_bitstring(mv[at : at + width])
    missing = decode_bitstring(mv[at + width : end])
    if bool(flags & FLAG_PARTIAL) != bool(missing):
        raise ReliableDecodeError(
            "bad-flags", f"P flag {bool(flags & FLAG_PARTIAL)} with missing 0x{missing:x}"
        )
    if acked & missing or not acked | missing:
        raise ReliableDecodeError(
            "bad-bitstring", f"acked 0x{acked:x} and missing 0x{missing:x} must be disjoint, not both empty"
        )
    return AggAck(
        bfir_id=bfir_id,
        flow_id=flow_id,
        cum=cum,
        reporter=reporter,
        bsl=bsl,
        si=si,
        acked=acked,
        missing=missing,
        first=first,
    )


def _decode_agg_nack(
    mv: memoryview,
    total: int,
    flags: int,
    bfir_id: int,
    flow_id: int,
    first: int,
    reporter: int,
    bsl_si: int,
) -> AggNack:
    bsl, si = _bsl_si(bsl_si)
    width = bsl >> 3
    at = COMMON_LEN + _LAST.size
    end = at + 2 * width
    if total < end:
        raise ReliableDecodeError("truncated", f"{total} octets, Last and two {bsl}-bit BitStrings: {end}")
    if total != end:
        raise ReliableDecodeError("length-mismatch", f"{total} octets, BSL {bsl} implies {end}")
    (last,) = _LAST.unpack_from(mv, COMMON_LEN)
    problem = _last_problem(first, last)
    if problem:
        raise ReliableDecodeError("bad-range", problem)
    askers = decode_bitstring(mv[at : at + width])
    holders = decode_bitstring(mv[at + width : end])
    if not askers or askers & holders:
        raise ReliableDecodeError(
            "bad-bitstring", f"askers 0x{askers:x}: none, or one among holders 0x{holders:x}"
        )
    return AggNack(
        bfir_id=bfir_id, flow_id=flow_id, first=first, last=last, reporter=reporter, bsl=bsl, si=si,
        askers=askers, holders=holders, again=bool(flags & FLAG_AGAIN),
    )  # fmt: skip
