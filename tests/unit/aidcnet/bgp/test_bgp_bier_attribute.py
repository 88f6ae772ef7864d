"""BGP BIER path attribute (RFC 9793): byte vectors, round trips, errors naming the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bgp.bier_attribute import (
    ATTR_TYPE_BIER,
    BSL_CODES,
    BierAttribute,
    BierAttributeDecodeError,
    BierTlv,
    MplsEncapsulationSubTlv,
    RawTlv,
)

# Hand-assembled from the figures in the module docstring, field by field.
VECTOR_VALUE = bytes.fromhex(
    "0001 000c"  # BIER TLV: Type 1, Length 12 (4 fixed + 8 sub-TLV)
    "00 0005 00"  # Sub-domain-id 0, BFR-ID 5, Reserved 0
    "0002 0004"  # MPLS Encapsulation sub-TLV: Type 2, Length 4
    "01 30 03e8"  # Lbl Range Size 1, BS Len 3 (256 bits), Label Range Base 1000
)
VECTOR_OBJECT = BierAttribute(
    (BierTlv(sub_domain_id=0, bfr_id=5, sub_tlvs=(MplsEncapsulationSubTlv(1, 256, 1000),)),)
)


def test_type_code_is_41() -> None:
    assert ATTR_TYPE_BIER == 41


def test_encode_vector() -> None:
    assert VECTOR_OBJECT.encode() == VECTOR_VALUE


def test_decode_vector() -> None:
    attr = BierAttribute.decode(VECTOR_VALUE)
    assert attr == VECTOR_OBJECT
    tlv = attr.bier_tlv(0)
    assert tlv is not None
    assert tlv.bfr_id == 5
    (mpls,) = tlv.mpls_encapsulations
    assert (mpls.bsl, mpls.label_range_base, mpls.max_si) == (256, 1000, 0)
    assert attr.bier_tlv(1) is None


def test_path_attribute_vector() -> None:
    # Flags 0xC0 (optional transitive), type 41, one-octet length 16.
    assert VECTOR_OBJECT.encode_path_attribute() == bytes.fromhex("c0 29 10") + VECTOR_VALUE
    assert BierAttribute.decode_path_attribute(bytes.fromhex("c0 29 10") + VECTOR_VALUE) == VECTOR_OBJECT


def test_second_vector_two_subdomains_bsl_4096_and_label_ranges() -> None:
    attr = BierAttribute(
        (
            BierTlv(
                1, 0x0102, (MplsEncapsulationSubTlv(4, 4096, 0xFFFFC), MplsEncapsulationSubTlv(2, 64, 16))
            ),
            BierTlv(255, 0xFFFF),
        )
    )
    assert attr.encode() == bytes.fromhex(
        "0001 0014 01 0102 000002 0004 04 7f fffc0002 0004 02 10 00100001 0004 ff ffff 00"
    )
    first = attr.bier_tlvs[0].mpls_encapsulations[0]
    assert [first.label_for_si(si) for si in range(4)] == [0xFFFFC, 0xFFFFD, 0xFFFFE, 0xFFFFF]


def test_reserved_octet_ignored_on_receipt_and_zero_on_send() -> None:
    value = bytearray(VECTOR_VALUE)
    value[7] = 0xAA  # Reserved
    attr = BierAttribute.decode(bytes(value))
    assert attr == VECTOR_OBJECT
    assert attr.encode() == VECTOR_VALUE


def test_unknown_tlvs_and_sub_tlvs_are_kept() -> None:
    value = bytes.fromhex(
        "0001 0018 02 0007 00"
        "0003 0004 01 30 0064"  # Non-MPLS Encapsulation sub-TLV: carried opaque
        "0002 0008 01 30 03e8"  # MPLS Encapsulation with one sub-sub-TLV
        "00ff 0000"  # an empty unknown sub-sub-TLV
        "0009 0002 abcd"  # unknown top-level TLV
    )
    attr = BierAttribute.decode(value)
    tlv = attr.bier_tlvs[0]
    assert tlv.sub_tlvs[0] == RawTlv(3, bytes.fromhex("01300064"))
    assert tlv.sub_tlvs[1] == MplsEncapsulationSubTlv(1, 256, 1000, (RawTlv(0xFF, b""),))
    assert attr.tlvs[1] == RawTlv(9, b"\xab\xcd")
    assert attr.encode() == value


def test_extended_length_above_255_octets() -> None:
    subs = tuple(MplsEncapsulationSubTlv(1, 256, 16 + i) for i in range(40))
    attr = BierAttribute((BierTlv(0, 1, subs),))
    wire = attr.encode_path_attribute()
    assert wire[0] == 0xD0  # optional | transitive | extended length
    assert int.from_bytes(wire[2:4], "big") == 4 + 4 + 40 * 8
    assert BierAttribute.decode_path_attribute(wire) == attr


def test_exabgp_generic_attribute() -> None:
    assert VECTOR_OBJECT.to_exabgp() == "attribute [ 0x29 0xc0 0x0001000c0000050000020004013003e8 ]"


def _exabgp_json_of(path_attributes: bytes) -> dict[str, object]:
    """What ExaBGP's own decoder reports for a received attribute block (its JSON ``attribute`` object)."""
    import json

    from exabgp.bgp.message.direction import Direction
    from exabgp.bgp.message.update.attribute.attributes import Attributes
    from exabgp.environment import getenv
    from exabgp.logger import log

    log.init(getenv())

    class Negotiated:  # only what the attribute parser reads for ORIGIN and a generic attribute
        asn4 = True
        addpath = None
        families: tuple[object, ...] = ()
        aigp = False

        def __getattr__(self, name: str) -> None:
            return None

    attrs = Attributes.unpack(path_attributes, Direction.IN, Negotiated())
    return json.loads("{" + attrs.json() + "}")


def test_exabgp_decodes_our_attribute_and_we_read_its_json() -> None:
    origin_igp = bytes.fromhex("400101 00")
    reported = _exabgp_json_of(origin_igp + VECTOR_OBJECT.encode_path_attribute())
    # ExaBGP has no class for type 41: generic, with the Partial bit added on receipt.
    assert reported["attribute-0x29-0xE0"] == "0x" + VECTOR_VALUE.hex()
    assert BierAttribute.from_exabgp_json(reported) == VECTOR_OBJECT


def test_from_exabgp_json_without_the_attribute_and_with_bad_hex() -> None:
    assert BierAttribute.from_exabgp_json({"origin": "igp"}) is None
    assert BierAttribute.from_exabgp_json({"attribute-0x29-0xC0": VECTOR_VALUE.hex()}) == VECTOR_OBJECT
    with pytest.raises(BierAttributeDecodeError, match="not hexadecimal"):
        BierAttribute.from_exabgp_json({"attribute-0x29-0xE0": "0xzz"})


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hexvalue", "needles"),
    [
        ("", ["offset 0", "empty"]),
        ("0001 00", ["offset 0", "header"]),
        ("0001 0010 00 0005 00", ["offset 2", "Length", "16 overruns"]),
        ("0001 0003 00 0005", ["BIER TLV length 3 < 4"]),
        ("0001 000c 00 0005 00 0002 0004 00 30 03e8", ["offset 12 (Lbl Range Size)", ": 0"]),
        ("0001 000c 00 0005 00 0002 0004 01 00 03e8", ["offset 13 (BS Len)", "code 0"]),
        ("0001 000c 00 0005 00 0002 0004 01 80 03e8", ["offset 13 (BS Len)", "code 8"]),
        ("0001 000c 00 0005 00 0002 0004 01 30 000f", ["offset 13 (Label Range Base)", "label 15"]),
        ("0001 000c 00 0005 00 0002 0004 02 3f ffff", ["offset 12 (Lbl Range Size)", "20-bit"]),
        ("0001 000b 00 0005 00 0002 0003 01 30 03", ["offset 8", "MPLS Encapsulation sub-TLV length 3"]),
        ("0001 0008 00 0005 00 0002 0009", ["offset 10", "sub-TLV type 2 Length", "9 overruns"]),
        ("0001 000f 00 0005 00 0002 0007 01 30 03e8 00ff00", ["offset 16", "sub-sub-TLV header"]),
    ],
)
def test_decode_errors_name_offset_and_field(hexvalue: str, needles: list[str]) -> None:
    with pytest.raises(BierAttributeDecodeError) as info:
        BierAttribute.decode(bytes.fromhex(hexvalue))
    for needle in needles:
        assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("hexwire", "with_value", "needle"),
    [
        ("c0", False, "too few for a path attribute header"),
        ("c0 28 10", True, "offset 1 (type code): 40"),
        ("40 29 10", True, "offset 0 (flags): 0x40"),
        ("80 29 10", True, "offset 0 (flags): 0x80"),
        ("c0 29 11", True, "offset 2 (Length): 17"),
        ("d0 29 00", False, "extended Length truncated"),
    ],
)
def test_path_attribute_errors(hexwire: str, with_value: bool, needle: str) -> None:
    data = bytes.fromhex(hexwire) + (VECTOR_VALUE if with_value else b"")
    with pytest.raises(BierAttributeDecodeError) as info:
        BierAttribute.decode_path_attribute(data)
    assert needle in str(info.value)


def test_path_attribute_error_inside_value_names_both_offsets() -> None:
    bad = bytearray(bytes.fromhex("c0 29 10") + VECTOR_VALUE)
    bad[3 + 13] = 0x03  # BS Len 0
    with pytest.raises(BierAttributeDecodeError, match=r"attribute offset 3: offset 13 \(BS Len\)"):
        BierAttribute.decode_path_attribute(bytes(bad))


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: BierTlv(256, 1), "sub_domain_id 256"),
        (lambda: BierTlv(0, 65536), "bfr_id 65536"),
        (lambda: MplsEncapsulationSubTlv(0, 256, 1000), "label_range_size 0"),
        (lambda: MplsEncapsulationSubTlv(1, 100, 1000), "bsl 100"),
        (lambda: MplsEncapsulationSubTlv(1, 256, 3), "label_range_base 3"),
        (lambda: MplsEncapsulationSubTlv(2, 256, 0xFFFFF), "beyond the 20-bit label space"),
        (lambda: MplsEncapsulationSubTlv(2, 256, 100).label_for_si(2), "si 2"),
        (lambda: RawTlv(70000), "TLV type 70000"),
        (lambda: BierAttribute(()), "at least one TLV"),
    ],
)
def test_constructor_errors_name_field(build: object, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        build()  # type: ignore[operator]
    assert needle in str(info.value)


# --- properties -----------------------------------------------------------------------------

raw_tlvs = st.builds(RawTlv, type=st.integers(4, 0xFFFF), value=st.binary(max_size=12))


@st.composite
def mpls_sub_tlvs(draw: st.DrawFn) -> MplsEncapsulationSubTlv:
    size = draw(st.integers(1, 255))
    base = draw(st.integers(16, (1 << 20) - size))
    return MplsEncapsulationSubTlv(
        size, draw(st.sampled_from(sorted(BSL_CODES))), base, tuple(draw(st.lists(raw_tlvs, max_size=2)))
    )


bier_tlvs = st.builds(
    BierTlv,
    sub_domain_id=st.integers(0, 255),
    bfr_id=st.integers(0, 0xFFFF),
    sub_tlvs=st.lists(st.one_of(mpls_sub_tlvs(), raw_tlvs), max_size=4).map(tuple),
)
attributes = st.lists(st.one_of(bier_tlvs, raw_tlvs), min_size=1, max_size=4).map(
    lambda tlvs: BierAttribute(tuple(tlvs))
)


@given(attributes)
def test_decode_encode_round_trip(attr: BierAttribute) -> None:
    assert BierAttribute.decode(attr.encode()) == attr


@given(attributes)
def test_path_attribute_round_trip(attr: BierAttribute) -> None:
    wire = attr.encode_path_attribute()
    assert BierAttribute.decode_path_attribute(wire) == attr
    assert BierAttribute.decode_path_attribute(wire).encode_path_attribute() == wire


@given(st.binary(max_size=64))
def test_decode_never_raises_anything_but_decode_error(data: bytes) -> None:
    try:
        attr = BierAttribute.decode(data)
    except BierAttributeDecodeError:
        return
    # Whatever decodes re-encodes to a value that decodes the same (Reserved aside).
    assert BierAttribute.decode(attr.encode()) == attr
