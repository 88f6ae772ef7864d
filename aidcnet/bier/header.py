"""RFC 8296 BIER header codec.

RFC 8296 §2, Figure 1::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |              BIFT-id                  | TC  |S|     TTL       |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |Nibble |  Ver  |  BSL  |              Entropy                  |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |OAM|Rsv|    DSCP   |   Proto   |            BFIR-id            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                BitString  (first 32 bits)                     ~
    ~                                                               ~
    ~                BitString  (last 32 bits)                      |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Two layers are offered:

* :class:`BierHeader`, one object per header with symmetric :meth:`BierHeader.encode` /
  :meth:`BierHeader.decode` (control plane, tests, tools);
* :func:`parse_fields`, :func:`rewrite`, :func:`make_copy`, which read and patch the
  bytes directly for the forwarding hot path without building an object.

We use the MPLS encapsulation (RFC 8296 §2.1): the first word is an MPLS label stack
entry, so the Nibble MUST be 0101 (§2.1.2) and is checked on decode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from aidcnet.bier.bitstring import BSL_BY_CODE, BSL_CODES

BIER_NIBBLE = 0b0101
BIER_VERSION = 0
# RFC 8296 §2.1.2: 0xF is reserved for experimental use; we implement version 0 only.
SUPPORTED_VERSIONS = frozenset({BIER_VERSION})

FIXED_LEN = 12
"""Octets before the BitString (three 32-bit words)."""

MAX_TTL = 255
MAX_LABEL = (1 << 20) - 1
MAX_ENTROPY = (1 << 20) - 1

# Why a fixed set: a daemon keeps one counter per reason, so the set must be closed.
DECODE_REASONS: frozenset[str] = frozenset(
    {
        "truncated",  # fewer octets than the fixed fields plus the BitString
        "bad-nibble",  # first nibble after the label stack is not 0101 (RFC 8296 §2.1.2)
        "bad-version",  # Ver other than 0 (RFC 8296 §2.1.2: MUST discard)
        "bad-bsl",  # BSL code not in 1..7 (RFC 8296 §2.1.2: SHOULD discard)
        "bsl-mismatch",  # BSL field differs from the BSL of the BIFT-id (RFC 8296 §2.1.2)
        "bad-s-bit",  # BIER label entry without S=1 (RFC 8296 §2.1.1.2: MUST be 1)
    }
)


class BierDecodeError(ValueError):
    """A malformed BIER (or MPLS-in-UDP BIER) packet; ``reason`` is one of DECODE_REASONS."""

    __slots__ = ("reason",)

    def __init__(self, reason: str, detail: str = "") -> None:
        if reason not in DECODE_REASONS:
            raise ValueError(f"unknown BIER decode reason {reason!r}")
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


class BierProto(IntEnum):
    """IANA "BIER Next Protocol Identifiers" (RFC 8296 §4)."""

    MPLS_DOWNSTREAM = 1  # MPLS packet with downstream-assigned label at top of stack
    MPLS_UPSTREAM = 2  # MPLS packet with upstream-assigned label at top of stack
    ETHERNET = 3
    IPV4 = 4
    OAM = 5
    IPV6 = 6


KNOWN_PROTOS: frozenset[int] = frozenset(int(p) for p in BierProto)

_WORDS = struct.Struct(">III")
_WORD = struct.Struct(">I")


def parse_fields(
    buf: bytes | bytearray | memoryview, offset: int = 0, bsl: int | None = None
) -> tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int]:
    """Parse a BIER header at ``offset`` without building an object (RFC 8296 §2).

    Returns ``(bift_id, tc, s, ttl, ver, bsl, entropy, oam, rsv, dscp, proto, bfir_id,
    bitstring, end)`` where ``end`` is the offset of the payload.

    ``bsl`` is the BitString length the receiver's BIFT-id implies.  RFC 8296 §2.1.2 says
    the length MUST be inferred from the BIFT-id and not from the BSL field, and a BSL
    field that disagrees SHOULD cause a discard; pass ``bsl`` in the forwarding path.
    Without it (offline tools, tests) the BSL field gives the length.

    Raises :class:`BierDecodeError`.
    """
    if len(buf) - offset < FIXED_LEN or offset < 0:
        raise BierDecodeError("truncated", f"{len(buf) - offset} octets, need {FIXED_LEN}")
    w0, w1, w2 = _WORDS.unpack_from(buf, offset)
    if w1 >> 28 != BIER_NIBBLE:
        raise BierDecodeError("bad-nibble", f"first nibble {w1 >> 28:#x}")
    ver = (w1 >> 24) & 0xF
    if ver not in SUPPORTED_VERSIONS:
        raise BierDecodeError("bad-version", f"version {ver}")
    code = (w1 >> 20) & 0xF
    field_bsl = BSL_BY_CODE.get(code)
    if field_bsl is None:
        raise BierDecodeError("bad-bsl", f"BSL code {code}")
    if bsl is None:
        bsl = field_bsl
    elif bsl != field_bsl:
        raise BierDecodeError("bsl-mismatch", f"BSL field {field_bsl}, BIFT-id implies {bsl}")
    start = offset + FIXED_LEN
    end = start + (bsl >> 3)
    if len(buf) < end:
        raise BierDecodeError("truncated", f"BitString needs {end - offset} octets, have {len(buf) - offset}")
    bits = int.from_bytes(buf[start:end], "big")
    return (
        w0 >> 12,
        (w0 >> 9) & 0x7,
        (w0 >> 8) & 0x1,
        w0 & 0xFF,
        ver,
        bsl,
        w1 & 0xFFFFF,
        w2 >> 30,
        (w2 >> 28) & 0x3,
        (w2 >> 22) & 0x3F,
        (w2 >> 16) & 0x3F,
        w2 & 0xFFFF,
        bits,
        end,
    )


def peek_bift_id(buf: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """Return the BIFT-id (the MPLS label) so the receiver can find its BIFT and BSL first."""
    if len(buf) - offset < 4 or offset < 0:
        raise BierDecodeError("truncated", "no BIFT-id word")
    return _WORD.unpack_from(buf, offset)[0] >> 12


def rewrite(buf: bytearray | memoryview, offset: int, bift_id: int, ttl: int, bits: int, bsl: int) -> None:
    """Patch BIFT-id, TTL and BitString in place, keeping TC and S (RFC 8279 §6.5, RFC 8296 §3).

    The forwarding BFR swaps the BIFT-id to the one its neighbor advertised and writes
    the TTL it computed; everything else is carried unchanged.  No range checks: the
    values come from our own tables and forwarding decision.
    """
    w0 = _WORD.unpack_from(buf, offset)[0]
    _WORD.pack_into(buf, offset, (bift_id << 12) | (w0 & 0xF00) | ttl)
    start = offset + FIXED_LEN
    buf[start : start + (bsl >> 3)] = bits.to_bytes(bsl >> 3, "big")


def make_copy(
    pkt: bytes | bytearray | memoryview, offset: int, bift_id: int, ttl: int, bits: int, bsl: int
) -> bytearray:
    """Return a rewritten copy of ``pkt`` for one BFR-NBR (one allocation per copy)."""
    out = bytearray(pkt)
    rewrite(out, offset, bift_id, ttl, bits, bsl)
    return out


@dataclass(slots=True)
class BierHeader:
    """RFC 8296 §2 BIER header (MPLS encapsulation, §2.1).

    Field names follow Figure 1.  ``bsl`` is in bits (64..4096), not the 4-bit code, and
    ``bitstring`` is an int with bit 1 as its least-significant bit (RFC 8279 §3).
    """

    RFC: ClassVar[str] = "RFC 8296 §2"

    bift_id: int
    bitstring: int
    bsl: int = 256  # RFC 8296 §2: the default BitStringLength is 256
    ttl: int = 64
    tc: int = 0
    s: int = 1  # §2.1.1.2: the BIER label entry is the bottom of the MPLS stack
    ver: int = BIER_VERSION
    entropy: int = 0
    oam: int = 0
    rsv: int = 0
    dscp: int = 0
    proto: int = BierProto.IPV4
    bfir_id: int = 0
    nibble: int = BIER_NIBBLE

    def __len__(self) -> int:
        return FIXED_LEN + (self.bsl >> 3)

    def encode(self) -> bytes:
        """Encode to wire bytes; ValueError names any field that does not fit."""
        code = BSL_CODES.get(self.bsl)
        if code is None:
            raise ValueError(f"bsl: unsupported BitString length {self.bsl!r}")
        for name, width in _FIELD_WIDTHS:
            value = getattr(self, name)
            if not 0 <= value < (1 << width):
                raise ValueError(f"{name}: {value!r} does not fit in {width} bits")
        if self.bitstring < 0 or self.bitstring >> self.bsl:
            raise ValueError(f"bitstring: 0x{self.bitstring:x} does not fit in {self.bsl} bits")
        w0 = (self.bift_id << 12) | (self.tc << 9) | (self.s << 8) | self.ttl
        w1 = (self.nibble << 28) | (self.ver << 24) | (code << 20) | self.entropy
        w2 = (self.oam << 30) | (self.rsv << 28) | (self.dscp << 22) | (self.proto << 16) | self.bfir_id
        return _WORDS.pack(w0, w1, w2) + self.bitstring.to_bytes(self.bsl >> 3, "big")

    @classmethod
    def decode(
        cls, buf: bytes | bytearray | memoryview, offset: int = 0, bsl: int | None = None
    ) -> tuple[BierHeader, int]:
        """Decode a header at ``offset``; return it and the payload offset. See :func:`parse_fields`."""
        (bift_id, tc, s, ttl, ver, hbsl, entropy, oam, rsv, dscp, proto, bfir_id, bits, end) = parse_fields(
            buf, offset, bsl
        )
        hdr = cls(
            bift_id=bift_id,
            bitstring=bits,
            bsl=hbsl,
            ttl=ttl,
            tc=tc,
            s=s,
            ver=ver,
            entropy=entropy,
            oam=oam,
            rsv=rsv,
            dscp=dscp,
            proto=BierProto(proto) if proto in KNOWN_PROTOS else proto,
            bfir_id=bfir_id,
        )
        return hdr, end


_FIELD_WIDTHS: tuple[tuple[str, int], ...] = (
    ("bift_id", 20),
    ("tc", 3),
    ("s", 1),
    ("ttl", 8),
    ("nibble", 4),
    ("ver", 4),
    ("entropy", 20),
    ("oam", 2),
    ("rsv", 2),
    ("dscp", 6),
    ("proto", 6),
    ("bfir_id", 16),
)
