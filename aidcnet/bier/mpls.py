"""MPLS label stack entries (RFC 3032 §2.1) and MPLS-in-UDP (RFC 7510 §3) for BIER.

Between our BFRs a BIER packet travels as (RFC 8296 §2.1.3, RFC 7510 §3)::

    IPv4 | UDP (src = entropy-derived, dst 6635) | BIER header | payload

and nothing else: RFC 8296 §2.1.1.1 says the first 32-bit word of the BIER header *is*
the last MPLS label stack entry (label = BIFT-id, S = 1), so the UDP payload is exactly
one label stack entry followed by the remaining 8 + BSL/8 octets of the BIER header.
A decoder such as Wireshark sees an MPLS stack of one entry and, because the first
nibble after the bottom of stack is 0101 (RFC 8296 §2.1.2), dissects the rest as BIER.

RFC 3032 §2.1 label stack entry::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                Label                  | TC  |S|       TTL     |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from aidcnet.bier.header import FIXED_LEN, BierDecodeError, parse_fields

MPLS_IN_UDP_PORT = 6635
"""IANA UDP destination port for MPLS-in-UDP (RFC 7510 §3)."""

# RFC 3032 §2.1: labels 0..15 are reserved and never name a BIFT.
MAX_RESERVED_LABEL = 15
MAX_LABEL = (1 << 20) - 1

# RFC 7510 §3: a 14-bit hash in the low bits and 11 in the top two bits keeps the source
# port inside 49152..65535.
_SRC_PORT_BASE = 0xC000
_SRC_PORT_MASK = 0x3FFF

_WORD = struct.Struct(">I")


class LabelEntry(NamedTuple):
    """One MPLS label stack entry (RFC 3032 §2.1; TC renamed from EXP by RFC 5462)."""

    label: int
    tc: int
    s: int
    ttl: int


def pack_lse(label: int, tc: int, s: int, ttl: int) -> int:
    """Return the 32-bit label stack entry word (RFC 3032 §2.1)."""
    if not 0 <= label <= MAX_LABEL:
        raise ValueError(f"label {label!r} does not fit in 20 bits")
    if not 0 <= tc <= 7:
        raise ValueError(f"tc {tc!r} does not fit in 3 bits")
    if s not in (0, 1):
        raise ValueError(f"s {s!r} must be 0 or 1")
    if not 0 <= ttl <= 255:
        raise ValueError(f"ttl {ttl!r} does not fit in 8 bits")
    return (label << 12) | (tc << 9) | (s << 8) | ttl


def unpack_lse(word: int) -> LabelEntry:
    """Split a 32-bit label stack entry word into its fields (RFC 3032 §2.1)."""
    return LabelEntry(word >> 12, (word >> 9) & 0x7, (word >> 8) & 0x1, word & 0xFF)


def encode_lse(label: int, tc: int = 0, s: int = 1, ttl: int = 64) -> bytes:
    """Encode one label stack entry as 4 octets, network order."""
    return _WORD.pack(pack_lse(label, tc, s, ttl))


def decode_lse(buf: bytes | bytearray | memoryview, offset: int = 0) -> LabelEntry:
    """Decode one label stack entry at ``offset``."""
    if offset < 0 or len(buf) - offset < 4:
        raise BierDecodeError("truncated", "label stack entry needs 4 octets")
    return unpack_lse(_WORD.unpack_from(buf, offset)[0])


def decode_label_stack(buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[list[LabelEntry], int]:
    """Decode entries up to and including the one with S=1; return them and the next offset."""
    entries: list[LabelEntry] = []
    while True:
        entry = decode_lse(buf, offset)
        entries.append(entry)
        offset += 4
        if entry.s:
            return entries, offset


def entropy_to_src_port(entropy: int) -> int:
    """UDP source port carrying the BIER entropy (RFC 7510 §3, RFC 8296 §2.1.3).

    RFC 8296 §2.1.3 asks an outer encapsulation to preserve "same entropy"; RFC 7510 §3
    puts the flow entropy in the source port and recommends a 14-bit hash with the two
    top bits set to 11 (ports 49152..65535).  The 20-bit entropy is mixed before folding
    so that entropies differing only in high bits still spread over the port range.
    """
    h = (entropy * 0x9E3779B1) & 0xFFFFFFFF
    h ^= h >> 15
    return _SRC_PORT_BASE | ((h ^ (h >> 14)) & _SRC_PORT_MASK)


def encode_bier_udp_payload(bier_header: bytes | bytearray, payload: bytes | bytearray = b"") -> bytes:
    """Return the MPLS-in-UDP payload for a BIER packet.

    The encoded RFC 8296 header already starts with the label stack entry (BIFT-id as
    the label, S=1, TTL), so the UDP payload is the header followed by the BIER payload;
    this function only checks that the first word is a valid bottom-of-stack entry.
    """
    if len(bier_header) < FIXED_LEN:
        raise ValueError("BIER header shorter than its 12 fixed octets")
    if not (bier_header[2] & 0x01):
        raise ValueError("BIER label entry must have S=1 (RFC 8296 §2.1.1.2)")
    return bytes(bier_header) + bytes(payload)


def parse_bier_udp_payload(
    buf: bytes | bytearray | memoryview, offset: int = 0, bsl: int | None = None
) -> tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int]:
    """Parse a UDP/6635 payload carrying MPLS-BIER; same result as :func:`header.parse_fields`.

    Our links carry exactly one label stack entry, the BIER one, so S must be 1
    (RFC 8296 §2.1.1.2); a packet with S=0 would need MPLS forwarding we do not have.
    """
    fields = parse_fields(buf, offset, bsl)
    if not fields[2]:
        raise BierDecodeError("bad-s-bit", "BIER label entry has S=0")
    return fields
