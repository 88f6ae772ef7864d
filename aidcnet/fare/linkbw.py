"""BGP Link Bandwidth Extended Community (RFC 10005, formerly draft-ietf-idr-link-bandwidth).

Wire form (8 octets, RFC 4360 extended community layout)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Type 0x40/0x00 | Sub-Type 0x04 |   Global Administrator (AS)   |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |        Bandwidth: IEEE-754 single precision, bytes per second   |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Type 0x40 is the non-transitive Two-Octet AS-Specific type (the historical form that FRR
and ExaBGP emit by default); 0x00 is the transitive one. The bandwidth is big-endian
float32 in **bytes** per second (docs/design.md §3, FARE row).

Text forms follow ExaBGP's ``extended-community [ ... ]``: the non-transitive community is
``bandwidth:ASN:bytes_per_s``; anything else, including the transitive form, is the 8 octets
as hex ``0x...``.

:class:`LinkBandwidth` normalises the bandwidth to the nearest float32 at construction, so
``decode(encode(x)) == x`` always holds and comparisons see exactly what the wire carries.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "EXTENDED_COMMUNITY_LEN",
    "LINK_BANDWIDTH_SUBTYPE",
    "MAX_ASN",
    "TYPE_NON_TRANSITIVE",
    "TYPE_TRANSITIVE",
    "LinkBandwidth",
    "LinkBandwidthDecodeError",
    "effective_bandwidth",
    "float32",
    "parse_extended_communities",
]

EXTENDED_COMMUNITY_LEN = 8
TYPE_TRANSITIVE = 0x00  # Transitive Two-Octet AS-Specific
TYPE_NON_TRANSITIVE = 0x40  # Non-Transitive Two-Octet AS-Specific
LINK_BANDWIDTH_SUBTYPE = 0x04
MAX_ASN = 0xFFFF
FLOAT32_MAX = struct.unpack(">f", b"\x7f\x7f\xff\xff")[0]

_WIRE = struct.Struct(">BBHf")
_EXABGP_BANDWIDTH = re.compile(r"^bandwidth:(?P<asn>[^:]+):(?P<bw>[^:]+)$", re.IGNORECASE)
_HEX = re.compile(r"^0x(?P<hex>[0-9a-f]+)$", re.IGNORECASE)


class LinkBandwidthDecodeError(ValueError):
    """Malformed link-bandwidth community; the message names the offending byte offset or field."""


def float32(value: float) -> float:
    """Round ``value`` to the nearest IEEE-754 single (what the community can carry)."""
    try:
        return struct.unpack(">f", struct.pack(">f", value))[0]
    except OverflowError:
        raise ValueError(
            f"bandwidth {value!r} bytes/s exceeds the float32 range (max {FLOAT32_MAX!r})"
        ) from None


@dataclass(frozen=True)
class LinkBandwidth:
    """One link-bandwidth extended community: ``asn`` (2-octet) and ``bytes_per_s`` (float32)."""

    asn: int
    bytes_per_s: float
    transitive: bool = field(default=False)

    def __post_init__(self) -> None:
        if isinstance(self.asn, bool) or not isinstance(self.asn, int) or not 0 <= self.asn <= MAX_ASN:
            # A 4-octet AS does not fit the 2-octet Global Administrator; AS_TRANS (23456,
            # RFC 6793) is the conventional stand-in.
            raise ValueError(
                f"asn {self.asn!r}: must be an integer 0..{MAX_ASN} (use 23456 for a 4-octet AS)"
            )
        bw = self.bytes_per_s
        if isinstance(bw, bool) or not isinstance(bw, int | float):
            raise ValueError(f"bytes_per_s {bw!r}: must be a number")
        if not math.isfinite(bw) or bw < 0:
            raise ValueError(f"bytes_per_s {bw!r}: must be finite and >= 0")
        # "+ 0.0" folds -0.0 into 0.0 so equal bandwidths always encode to equal octets.
        object.__setattr__(self, "bytes_per_s", float32(float(bw)) + 0.0)

    @property
    def type_octet(self) -> int:
        return TYPE_TRANSITIVE if self.transitive else TYPE_NON_TRANSITIVE

    @property
    def bits_per_s(self) -> float:
        return self.bytes_per_s * 8.0

    def encode(self) -> bytes:
        return _WIRE.pack(self.type_octet, LINK_BANDWIDTH_SUBTYPE, self.asn, self.bytes_per_s)

    @classmethod
    def decode(cls, data: bytes) -> LinkBandwidth:
        if len(data) != EXTENDED_COMMUNITY_LEN:
            raise LinkBandwidthDecodeError(
                f"length {len(data)}: an extended community is exactly {EXTENDED_COMMUNITY_LEN} octets"
            )
        type_octet, subtype, asn, bw = _WIRE.unpack(data)
        if type_octet not in (TYPE_TRANSITIVE, TYPE_NON_TRANSITIVE):
            raise LinkBandwidthDecodeError(
                f"byte 0 (type) = 0x{type_octet:02x}: link bandwidth uses 0x00 (transitive) "
                f"or 0x40 (non-transitive)"
            )
        if subtype != LINK_BANDWIDTH_SUBTYPE:
            raise LinkBandwidthDecodeError(
                f"byte 1 (sub-type) = 0x{subtype:02x}: link bandwidth is 0x{LINK_BANDWIDTH_SUBTYPE:02x}"
            )
        if not math.isfinite(bw) or bw < 0:
            raise LinkBandwidthDecodeError(
                f"bytes 4-7 (bandwidth) = 0x{data[4:8].hex()}: float32 {bw!r} is not a finite value >= 0"
            )
        return cls(asn=asn, bytes_per_s=bw, transitive=type_octet == TYPE_TRANSITIVE)

    @staticmethod
    def is_link_bandwidth(data: bytes) -> bool:
        """True when 8 octets carry the link-bandwidth type/sub-type (valid or not)."""
        return (
            len(data) == EXTENDED_COMMUNITY_LEN
            and data[0] in (TYPE_TRANSITIVE, TYPE_NON_TRANSITIVE)
            and data[1] == LINK_BANDWIDTH_SUBTYPE
        )

    # ExaBGP text forms -------------------------------------------------------------------

    def to_exabgp(self) -> str:
        """``bandwidth:ASN:bytes_per_s`` (non-transitive) or ``0x<16 hex digits>`` (transitive).

        ExaBGP's ``bandwidth:`` keyword always builds the non-transitive community, so the
        transitive one can only be announced as raw hex.
        """
        if self.transitive:
            return "0x" + self.encode().hex().upper()
        return f"bandwidth:{self.asn}:{_format_float(self.bytes_per_s)}"

    @classmethod
    def from_exabgp(cls, text: str) -> LinkBandwidth:
        """Parse ``bandwidth:ASN:value`` or a hex ``0x...`` link-bandwidth community."""
        stripped = text.strip()
        match = _EXABGP_BANDWIDTH.match(stripped)
        if match is not None:
            try:
                asn = int(match["asn"], 10)
            except ValueError:
                raise LinkBandwidthDecodeError(
                    f"{text!r}: ASN field {match['asn']!r} is not an integer"
                ) from None
            try:
                bw = float(match["bw"])
            except ValueError:
                raise LinkBandwidthDecodeError(
                    f"{text!r}: bandwidth field {match['bw']!r} is not a number of bytes/s"
                ) from None
            try:
                return cls(asn=asn, bytes_per_s=bw, transitive=False)
            except ValueError as exc:
                raise LinkBandwidthDecodeError(f"{text!r}: {exc}") from None
        raw = _hex_octets(stripped)
        if raw is None:
            raise LinkBandwidthDecodeError(
                f"{text!r}: expected 'bandwidth:ASN:bytes_per_s' or a hex community '0x' + 16 hex digits"
            )
        try:
            return cls.decode(raw)
        except LinkBandwidthDecodeError as exc:
            raise LinkBandwidthDecodeError(f"{text!r}: {exc}") from None


def _format_float(value: float) -> str:
    # Integral values print without exponent or ".0" (ExaBGP configs and FRR show them so);
    # the rest use repr, which float() reads back exactly.
    if value.is_integer():
        return str(int(value))
    return repr(value)


def _hex_octets(text: str) -> bytes | None:
    match = _HEX.match(text)
    if match is None:
        return None
    digits = match["hex"]
    if len(digits) != 2 * EXTENDED_COMMUNITY_LEN:
        raise LinkBandwidthDecodeError(
            f"{text!r}: hex community has {len(digits)} digits, expected {2 * EXTENDED_COMMUNITY_LEN}"
        )
    return bytes.fromhex(digits)


def _to_link_bandwidth(item: object) -> LinkBandwidth | None:
    """One community in any form we meet → LinkBandwidth, or None when it is some other community."""
    if isinstance(item, LinkBandwidth):
        return item
    if isinstance(item, bytes | bytearray | memoryview):
        raw = bytes(item)
        if len(raw) != EXTENDED_COMMUNITY_LEN:
            raise LinkBandwidthDecodeError(
                f"length {len(raw)}: an extended community is exactly {EXTENDED_COMMUNITY_LEN} octets"
            )
        return LinkBandwidth.decode(raw) if LinkBandwidth.is_link_bandwidth(raw) else None
    if isinstance(item, int) and not isinstance(item, bool):
        # ExaBGP's JSON gives each extended community's 64-bit "value".
        if not 0 <= item < 1 << 64:
            raise LinkBandwidthDecodeError(f"extended community value {item!r} does not fit 8 octets")
        return _to_link_bandwidth(item.to_bytes(EXTENDED_COMMUNITY_LEN, "big"))
    if isinstance(item, str):
        text = item.strip()
        if _EXABGP_BANDWIDTH.match(text):
            return LinkBandwidth.from_exabgp(text)
        raw = _hex_octets(text)
        if raw is not None:
            return _to_link_bandwidth(raw)
        # target:, origin:, redirect:, l2info: ... are other communities, not ours to judge.
        return None
    raise TypeError(f"extended community {item!r} has unsupported type {type(item).__name__}")


def parse_extended_communities(text: str) -> list[str]:
    """Split ExaBGP's ``extended-community [ a b c ]`` (or just ``[ a b ]`` / ``a``) into items."""
    body = text.strip()
    if body.lower().startswith("extended-community"):
        body = body[len("extended-community") :].strip()
    if body.startswith("["):
        if not body.endswith("]"):
            raise LinkBandwidthDecodeError(f"{text!r}: '[' without a closing ']'")
        body = body[1:-1]
    return body.split()


def effective_bandwidth(communities: Iterable[object]) -> float | None:
    """Lowest link bandwidth (bytes/s) among a route's extended communities, None if there is none.

    Items may be :class:`LinkBandwidth`, 8-octet ``bytes``, 64-bit ``int`` values (ExaBGP JSON),
    or ExaBGP text (``bandwidth:ASN:bw`` / ``0x...``). Other communities are ignored; a
    malformed link-bandwidth community raises :class:`LinkBandwidthDecodeError` rather than
    being skipped, because skipping it could silently raise the route's bandwidth.
    """
    lowest: float | None = None
    for item in communities:
        lb = _to_link_bandwidth(item)
        if lb is not None and (lowest is None or lb.bytes_per_s < lowest):
            lowest = lb.bytes_per_s
    return lowest
