"""BIER BitString helpers (RFC 8279 §3, RFC 8296 §2.1.2).

A BitString is a plain Python ``int``: bit 1 of the BitString (RFC 8279 §3, "the
rightmost bit") is the least-significant bit of the int.  A BFR-id maps to a Set
Identifier (SI) and a 1-based bit position inside the BitString of that SI:

    SI  = (BFR-id - 1) // BSL
    bit = ((BFR-id - 1) % BSL) + 1

so BFR-id 1 is SI 0 bit 1, BFR-id BSL is SI 0 bit BSL, BFR-id BSL+1 is SI 1 bit 1.
On the wire (RFC 8296 §2.1.2) the BitString is big-endian: the last octet of the
header carries bits 8..1.
"""

from __future__ import annotations

from collections.abc import Iterable

# RFC 8296 §2.1.1.1 / IANA "BIER BSL" registry: BSL field value -> BitString length.
BSL_CODES: dict[int, int] = {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}
BSL_BY_CODE: dict[int, int] = {code: bsl for bsl, code in BSL_CODES.items()}

# BFR-id 0 is "unassigned" (RFC 8279 §2) and the 16-bit field caps the value.
MAX_BFR_ID = 0xFFFF


def _check_bsl(bsl: int) -> None:
    if bsl not in BSL_CODES:
        raise ValueError(f"unsupported BitString length {bsl!r}: must be one of {sorted(BSL_CODES)}")


def code_from_bsl(bsl: int) -> int:
    """Return the RFC 8296 BSL field code for a BitString length in bits."""
    _check_bsl(bsl)
    return BSL_CODES[bsl]


def bsl_from_code(code: int) -> int:
    """Return the BitString length in bits for an RFC 8296 BSL field code (1..7)."""
    try:
        return BSL_BY_CODE[code]
    except (KeyError, TypeError):
        raise ValueError(f"unsupported BSL code {code!r}: must be one of {sorted(BSL_BY_CODE)}") from None


def bfr_id_to_si_bit(bfr_id: int, bsl: int) -> tuple[int, int]:
    """Map a BFR-id to ``(SI, bit)`` with a 1-based bit position (RFC 8279 §3)."""
    if bfr_id <= 0 or bfr_id > MAX_BFR_ID:
        raise ValueError(f"invalid BFR-id {bfr_id!r}: must be 1..{MAX_BFR_ID}")
    _check_bsl(bsl)
    si, rem = divmod(bfr_id - 1, bsl)
    return si, rem + 1


def si_bit_to_bfr_id(si: int, bit: int, bsl: int) -> int:
    """Inverse of :func:`bfr_id_to_si_bit` (RFC 8279 §3)."""
    _check_bsl(bsl)
    if si < 0:
        raise ValueError(f"invalid SI {si!r}: must be >= 0")
    if not 1 <= bit <= bsl:
        raise ValueError(f"invalid bit position {bit!r}: must be 1..{bsl}")
    return si * bsl + bit


def bitstrings_from_ids(bfr_ids: Iterable[int], bsl: int) -> dict[int, int]:
    """Group BFR-ids into one BitString per SI: ``{SI: bits}``."""
    out: dict[int, int] = {}
    for bfr_id in bfr_ids:
        si, bit = bfr_id_to_si_bit(bfr_id, bsl)
        out[si] = out.get(si, 0) | (1 << (bit - 1))
    return out


def ids_from_bitstring(si: int, bits: int, bsl: int) -> list[int]:
    """Return the BFR-ids (ascending) whose bits are set in ``bits`` for ``si``."""
    _check_bsl(bsl)
    if bits < 0 or bits >> bsl:
        raise ValueError(f"BitString 0x{bits:x} does not fit in {bsl} bits")
    base = si * bsl
    ids: list[int] = []
    while bits:
        low = bits & -bits
        ids.append(base + low.bit_length())
        bits ^= low
    return ids


def encode_bitstring(bits: int, bsl: int) -> bytes:
    """Encode a BitString as ``bsl // 8`` big-endian bytes (RFC 8296 §2.1.2)."""
    _check_bsl(bsl)
    if bits < 0 or bits >> bsl:
        raise ValueError(f"BitString 0x{bits:x} does not fit in {bsl} bits")
    return bits.to_bytes(bsl >> 3, "big")


def decode_bitstring(buf: bytes | bytearray | memoryview) -> int:
    """Decode a big-endian BitString (any length) into an int."""
    return int.from_bytes(buf, "big")


def lowest_bit_index(bits: int) -> int:
    """1-based position of the lowest set bit; 0 for an empty BitString."""
    return (bits & -bits).bit_length()


def popcount(bits: int) -> int:
    """Number of set bits (BFERs addressed by this BitString)."""
    return bits.bit_count()
