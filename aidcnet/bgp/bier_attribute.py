"""BGP BIER path attribute (RFC 9793 §3), type code 41, optional transitive.

The attribute value is a sequence of TLVs with 2-octet Type and 2-octet Length (Length
counts the Value only). Types come from the single IANA registry "BGP BIER TLV and Sub-TLV
Types": 1 = BIER TLV, 2 = BIER MPLS Encapsulation sub-TLV, 3 = BIER Non-MPLS Encapsulation
sub-TLV.

BIER TLV::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |         Type = 1              |            Length             |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    | Sub-domain-id |            BFR-ID             |   Reserved    |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                     Sub-TLVs (variable)                       ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

BIER MPLS Encapsulation sub-TLV (inside a BIER TLV)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |         Type = 2              |            Length             |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    | Lbl Range Size|BS Len |           Label Range Base            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                   Sub-sub-TLVs (variable)                     ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Lbl Range Size is the number of labels (one per SI: label base + SI), BS Len the RFC 8296
BSL code (1 = 64 … 7 = 4096 bits), Label Range Base a 20-bit label.

Verification: ``refs/rfc/rfc9793.txt`` is empty in this checkout, so the layout was checked
against independent sources instead: the IANA registry name ("BGP BIER TLV and Sub-TLV Types",
one registry for TLVs and sub-TLVs, hence MPLS Encapsulation = 2), bgpkit-parser's RFC 9793
attribute-41 codec (2-octet Type, 2-octet Length framing of every TLV), and freeRtr's current
``placeBier``/``parseBier`` (BIER TLV value = Sub-domain 1 octet, BFR-ID 2 octets, 1 octet
Reserved, Length 4; MPLS Encapsulation value = Lbl Range Size in octet 0, BS Len in the high
nibble of octet 1, Label Range Base in the low 20 bits of the same 32-bit word, Length 4).
freeRtr places the MPLS Encapsulation TLV *after* the BIER TLV at the top level of the
attribute rather than inside it; we nest it as the RFC's "sub-TLV" wording says, and keep a
top-level type-2 TLV from such a peer as :class:`RawTlv` (see :func:`BierAttribute.decode`).
ExaBGP (5.0) has no class for type 41: it announces it as a generic attribute and reports a
received one in JSON as ``"attribute-0x29-0xE0": "0x<hex>"`` (it adds the Partial bit), see
:meth:`BierAttribute.from_exabgp_json`.

Sub-TLVs other than MPLS Encapsulation (e.g. Non-MPLS Encapsulation, type 3) and unknown
TLVs are kept as :class:`RawTlv` so a route re-advertised through us carries them unchanged.
The Reserved octet is sent as zero and ignored on receipt.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "ATTR_FLAGS",
    "ATTR_TYPE_BIER",
    "BSL_CODES",
    "SUBTLV_MPLS_ENCAPSULATION",
    "SUBTLV_NON_MPLS_ENCAPSULATION",
    "TLV_BIER",
    "BierAttribute",
    "BierAttributeDecodeError",
    "BierTlv",
    "MplsEncapsulationSubTlv",
    "RawTlv",
]

ATTR_TYPE_BIER = 41
ATTR_FLAGS = 0xC0  # Optional | Transitive (RFC 9793 §3)
_FLAG_EXTENDED_LENGTH = 0x10

TLV_BIER = 1
SUBTLV_MPLS_ENCAPSULATION = 2
SUBTLV_NON_MPLS_ENCAPSULATION = 3

# RFC 8296 §2.1.2 BSL codes; kept local so this codec does not depend on the dataplane modules.
BSL_CODES: dict[int, int] = {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}
_BSL_BY_CODE: dict[int, int] = {code: bits for bits, code in BSL_CODES.items()}

MAX_LABEL = (1 << 20) - 1
FIRST_UNRESERVED_LABEL = 16  # RFC 3032 §2.1: labels 0-15 are reserved
MAX_TLV_VALUE = 0xFFFF

_TL = struct.Struct(">HH")
_BIER_FIXED = struct.Struct(">BHB")
_MPLS_FIXED = struct.Struct(">I")


class BierAttributeDecodeError(ValueError):
    """Malformed BIER attribute; the message names the octet offset (within the value) and field."""


def _check_int(name: str, value: int, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} {value!r}: must be an integer {lo}..{hi}")


@dataclass(frozen=True)
class RawTlv:
    """A TLV or sub-TLV carried opaquely (2-octet type, 2-octet length)."""

    type: int
    value: bytes = b""

    def __post_init__(self) -> None:
        _check_int("TLV type", self.type, 0, 0xFFFF)
        object.__setattr__(self, "value", bytes(self.value))
        if len(self.value) > MAX_TLV_VALUE:
            raise ValueError(
                f"TLV type {self.type} value of {len(self.value)} octets exceeds {MAX_TLV_VALUE}"
            )

    def encode(self) -> bytes:
        return _TL.pack(self.type, len(self.value)) + self.value


@dataclass(frozen=True)
class MplsEncapsulationSubTlv:
    """BIER MPLS Encapsulation sub-TLV: labels ``label_range_base .. base + size - 1`` for one BSL.

    ``bsl`` is the BitString length in bits (64..4096), not the 4-bit code.
    """

    label_range_size: int
    bsl: int
    label_range_base: int
    sub_sub_tlvs: tuple[RawTlv, ...] = field(default=())

    TYPE = SUBTLV_MPLS_ENCAPSULATION

    def __post_init__(self) -> None:
        _check_int("label_range_size", self.label_range_size, 1, 0xFF)
        if self.bsl not in BSL_CODES:
            raise ValueError(f"bsl {self.bsl!r}: must be one of {sorted(BSL_CODES)} bits")
        _check_int("label_range_base", self.label_range_base, FIRST_UNRESERVED_LABEL, MAX_LABEL)
        last = self.label_range_base + self.label_range_size - 1
        if last > MAX_LABEL:
            raise ValueError(
                f"label range {self.label_range_base}+{self.label_range_size} ends at {last}, beyond the "
                f"20-bit label space ({MAX_LABEL})"
            )
        object.__setattr__(self, "sub_sub_tlvs", tuple(self.sub_sub_tlvs))

    @property
    def max_si(self) -> int:
        return self.label_range_size - 1

    def label_for_si(self, si: int) -> int:
        _check_int("si", si, 0, self.max_si)
        return self.label_range_base + si

    def encode(self) -> bytes:
        word = (self.label_range_size << 24) | (BSL_CODES[self.bsl] << 20) | self.label_range_base
        value = _MPLS_FIXED.pack(word) + b"".join(t.encode() for t in self.sub_sub_tlvs)
        return _TL.pack(self.TYPE, len(value)) + value

    @classmethod
    def decode_value(cls, value: bytes, offset: int) -> MplsEncapsulationSubTlv:
        """Decode the Value of a type-2 sub-TLV whose Value starts at attribute offset ``offset``."""
        if len(value) < _MPLS_FIXED.size:
            raise BierAttributeDecodeError(
                f"offset {offset - 4}: MPLS Encapsulation sub-TLV length {len(value)} < 4 "
                f"(Lbl Range Size, BS Len, Label Range Base)"
            )
        (word,) = _MPLS_FIXED.unpack_from(value)
        size, code, base = word >> 24, (word >> 20) & 0xF, word & MAX_LABEL
        if size == 0:
            raise BierAttributeDecodeError(f"offset {offset} (Lbl Range Size): 0, must be at least 1")
        if code not in _BSL_BY_CODE:
            raise BierAttributeDecodeError(
                f"offset {offset + 1} (BS Len): code {code} is not an RFC 8296 BSL code 1..7"
            )
        if base < FIRST_UNRESERVED_LABEL:
            raise BierAttributeDecodeError(
                f"offset {offset + 1} (Label Range Base): label {base} is reserved (RFC 3032: 0-15)"
            )
        if base + size - 1 > MAX_LABEL:
            raise BierAttributeDecodeError(
                f"offset {offset} (Lbl Range Size): {size} labels from {base} exceed the 20-bit label space"
            )
        subs = tuple(_decode_raw_tlvs(value[_MPLS_FIXED.size :], offset + _MPLS_FIXED.size, "sub-sub-TLV"))
        return cls(label_range_size=size, bsl=_BSL_BY_CODE[code], label_range_base=base, sub_sub_tlvs=subs)


SubTlv = MplsEncapsulationSubTlv | RawTlv


@dataclass(frozen=True)
class BierTlv:
    """BIER TLV: the advertising BFR's sub-domain, BFR-ID (0 = none configured) and sub-TLVs."""

    sub_domain_id: int
    bfr_id: int
    sub_tlvs: tuple[SubTlv, ...] = field(default=())

    TYPE = TLV_BIER

    def __post_init__(self) -> None:
        _check_int("sub_domain_id", self.sub_domain_id, 0, 0xFF)
        _check_int("bfr_id", self.bfr_id, 0, 0xFFFF)
        object.__setattr__(self, "sub_tlvs", tuple(self.sub_tlvs))

    @property
    def mpls_encapsulations(self) -> tuple[MplsEncapsulationSubTlv, ...]:
        return tuple(s for s in self.sub_tlvs if isinstance(s, MplsEncapsulationSubTlv))

    def encode(self) -> bytes:
        value = _BIER_FIXED.pack(self.sub_domain_id, self.bfr_id, 0) + b"".join(
            s.encode() for s in self.sub_tlvs
        )
        if len(value) > MAX_TLV_VALUE:
            raise ValueError(f"BIER TLV value of {len(value)} octets exceeds {MAX_TLV_VALUE}")
        return _TL.pack(self.TYPE, len(value)) + value

    @classmethod
    def decode_value(cls, value: bytes, offset: int) -> BierTlv:
        if len(value) < _BIER_FIXED.size:
            raise BierAttributeDecodeError(
                f"offset {offset - 4}: BIER TLV length {len(value)} < 4 (Sub-domain-id, BFR-ID, Reserved)"
            )
        sub_domain_id, bfr_id, _reserved = _BIER_FIXED.unpack_from(value)
        subs: list[SubTlv] = []
        for sub_type, sub_value, sub_offset in _iter_tlvs(
            value[_BIER_FIXED.size :], offset + _BIER_FIXED.size, "sub-TLV"
        ):
            if sub_type == SUBTLV_MPLS_ENCAPSULATION:
                subs.append(MplsEncapsulationSubTlv.decode_value(sub_value, sub_offset))
            else:
                subs.append(RawTlv(sub_type, sub_value))
        return cls(sub_domain_id=sub_domain_id, bfr_id=bfr_id, sub_tlvs=tuple(subs))


Tlv = BierTlv | RawTlv


def _iter_tlvs(data: bytes, base_offset: int, what: str) -> list[tuple[int, bytes, int]]:
    """Split ``data`` into (type, value, absolute offset of value) with strict framing checks."""
    out: list[tuple[int, bytes, int]] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _TL.size:
            raise BierAttributeDecodeError(
                f"offset {base_offset + pos}: {len(data) - pos} octet(s) left, too few for a {what} "
                f"header (Type 2 + Length 2)"
            )
        tlv_type, length = _TL.unpack_from(data, pos)
        start = pos + _TL.size
        if start + length > len(data):
            raise BierAttributeDecodeError(
                f"offset {base_offset + pos + 2} ({what} type {tlv_type} Length): {length} overruns the "
                f"{len(data) - start} octet(s) that remain"
            )
        out.append((tlv_type, data[start : start + length], base_offset + start))
        pos = start + length
    return out


def _decode_raw_tlvs(data: bytes, base_offset: int, what: str) -> list[RawTlv]:
    return [RawTlv(t, v) for t, v, _ in _iter_tlvs(data, base_offset, what)]


@dataclass(frozen=True)
class BierAttribute:
    """The BIER path attribute value: one BIER TLV per sub-domain, plus any TLVs kept opaque."""

    tlvs: tuple[Tlv, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "tlvs", tuple(self.tlvs))
        if not self.tlvs:
            raise ValueError("tlvs: a BIER attribute carries at least one TLV")

    @property
    def bier_tlvs(self) -> tuple[BierTlv, ...]:
        return tuple(t for t in self.tlvs if isinstance(t, BierTlv))

    def bier_tlv(self, sub_domain_id: int) -> BierTlv | None:
        return next((t for t in self.bier_tlvs if t.sub_domain_id == sub_domain_id), None)

    def encode(self) -> bytes:
        """The attribute Value (what follows the path-attribute header)."""
        return b"".join(t.encode() for t in self.tlvs)

    @classmethod
    def decode(cls, value: bytes) -> BierAttribute:
        if not value:
            raise BierAttributeDecodeError("offset 0: empty BIER attribute (no TLV)")
        tlvs: list[Tlv] = []
        for tlv_type, tlv_value, offset in _iter_tlvs(bytes(value), 0, "TLV"):
            if tlv_type == TLV_BIER:
                tlvs.append(BierTlv.decode_value(tlv_value, offset))
            else:
                tlvs.append(RawTlv(tlv_type, tlv_value))
        return cls(tuple(tlvs))

    def encode_path_attribute(self) -> bytes:
        """Flags, Type 41, Length and Value as in an UPDATE (extended length above 255 octets)."""
        value = self.encode()
        if len(value) > 0xFF:
            return struct.pack(">BBH", ATTR_FLAGS | _FLAG_EXTENDED_LENGTH, ATTR_TYPE_BIER, len(value)) + value
        return struct.pack(">BBB", ATTR_FLAGS, ATTR_TYPE_BIER, len(value)) + value

    @classmethod
    def decode_path_attribute(cls, data: bytes) -> BierAttribute:
        """Decode a whole path attribute (header + value); offsets in errors are into ``data``."""
        if len(data) < 3:
            raise BierAttributeDecodeError(
                f"offset 0: {len(data)} octet(s), too few for a path attribute header"
            )
        flags, type_code = data[0], data[1]
        if type_code != ATTR_TYPE_BIER:
            raise BierAttributeDecodeError(f"offset 1 (type code): {type_code}, expected {ATTR_TYPE_BIER}")
        if flags & 0xC0 != ATTR_FLAGS:
            raise BierAttributeDecodeError(
                f"offset 0 (flags): 0x{flags:02x}, the BIER attribute is optional transitive (0xc0)"
            )
        if flags & _FLAG_EXTENDED_LENGTH:
            if len(data) < 4:
                raise BierAttributeDecodeError("offset 2: extended Length truncated")
            length, header = struct.unpack_from(">H", data, 2)[0], 4
        else:
            length, header = data[2], 3
        if len(data) != header + length:
            raise BierAttributeDecodeError(
                f"offset 2 (Length): {length}, but {len(data) - header} octet(s) of value follow"
            )
        try:
            return cls.decode(data[header:])
        except BierAttributeDecodeError as exc:
            raise BierAttributeDecodeError(f"in value at attribute offset {header}: {exc}") from None

    @classmethod
    def from_exabgp_json(cls, attributes: dict[str, object]) -> BierAttribute | None:
        """The BIER attribute from an ExaBGP JSON ``attribute`` object, or None when the route has none.

        ExaBGP reports attributes it has no class for as ``attribute-0x<CODE>-0x<FLAGS>`` with the
        value as ``0x<hex>``; the flags vary (0xC0 as sent, 0xE0 once the Partial bit is set).
        """
        prefix = f"attribute-0x{ATTR_TYPE_BIER:02x}-"
        for key, value in attributes.items():
            if key.lower().startswith(prefix) and isinstance(value, str):
                text = value[2:] if value.lower().startswith("0x") else value
                try:
                    data = bytes.fromhex(text)
                except ValueError:
                    raise BierAttributeDecodeError(f"{key}: {value!r} is not hexadecimal") from None
                return cls.decode(data)
        return None

    def to_exabgp(self) -> str:
        """ExaBGP's generic-attribute form for announcing it: ``attribute [ 0x29 0xc0 0x<value> ]``."""
        return f"attribute [ 0x{ATTR_TYPE_BIER:02x} 0x{ATTR_FLAGS:02x} 0x{self.encode().hex()} ]"
