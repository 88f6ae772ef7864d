"""Link Bandwidth extended community: byte vectors, ExaBGP text, effective bandwidth, errors."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.fare.linkbw import (
    FLOAT32_MAX,
    LinkBandwidth,
    LinkBandwidthDecodeError,
    effective_bandwidth,
    float32,
    parse_extended_communities,
)

GBPS = 1e9 / 8  # bytes/s in one Gb/s


# --- byte vectors ---------------------------------------------------------------------------


def test_float32_vector_is_what_struct_says() -> None:
    # Independent check of the vector used below: 400 Gb/s = 5e10 bytes/s.
    assert struct.pack(">f", 5e10) == bytes.fromhex("513A43B7")
    assert struct.pack(">f", 1e11) == bytes.fromhex("51BA43B7")


def test_encode_non_transitive_400g() -> None:
    lb = LinkBandwidth(asn=65000, bytes_per_s=400 * GBPS)
    assert lb.encode() == bytes.fromhex("40 04 FDE8 513A43B7")


def test_encode_transitive_800g() -> None:
    lb = LinkBandwidth(asn=65000, bytes_per_s=800 * GBPS, transitive=True)
    assert lb.encode() == bytes.fromhex("00 04 FDE8 51BA43B7")


def test_decode_vector() -> None:
    lb = LinkBandwidth.decode(bytes.fromhex("4004FDE8513A43B7"))
    assert lb.asn == 65000
    assert not lb.transitive
    # float32 cannot hold 5e10 exactly: the wire value is the nearest single.
    assert lb.bytes_per_s == 49999998976.0
    assert lb == LinkBandwidth(65000, 5e10)
    assert lb.bits_per_s == pytest.approx(400e9, rel=1e-7)


def test_decode_transitive_flag() -> None:
    assert LinkBandwidth.decode(bytes.fromhex("0004000151BA43B7")).transitive


def test_negative_zero_is_folded_to_zero() -> None:
    lb = LinkBandwidth.decode(bytes.fromhex("4004000180000000"))
    assert lb.bytes_per_s == 0.0
    assert lb.encode() == bytes.fromhex("4004000100000000")


# --- decode errors name the bad byte/field --------------------------------------------------


@pytest.mark.parametrize(
    ("hexbytes", "needle"),
    [
        ("4004FDE8513A43", "length 7"),
        ("4004FDE8513A43B700", "length 9"),
        ("4104FDE8513A43B7", "byte 0 (type) = 0x41"),
        ("0304FDE8513A43B7", "byte 0 (type) = 0x03"),
        ("4005FDE8513A43B7", "byte 1 (sub-type) = 0x05"),
        ("4004FDE87FC00000", "bytes 4-7 (bandwidth) = 0x7fc00000"),  # NaN
        ("4004FDE87F800000", "bytes 4-7 (bandwidth) = 0x7f800000"),  # +inf
        ("4004FDE8BF800000", "bytes 4-7 (bandwidth) = 0xbf800000"),  # -1.0
    ],
)
def test_decode_errors_name_field(hexbytes: str, needle: str) -> None:
    with pytest.raises(LinkBandwidthDecodeError) as info:
        LinkBandwidth.decode(bytes.fromhex(hexbytes))
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"asn": 65536, "bytes_per_s": 1.0}, "asn 65536"),
        ({"asn": -1, "bytes_per_s": 1.0}, "asn -1"),
        ({"asn": True, "bytes_per_s": 1.0}, "asn True"),
        ({"asn": 1, "bytes_per_s": -1.0}, "bytes_per_s -1.0"),
        ({"asn": 1, "bytes_per_s": math.nan}, "bytes_per_s nan"),
        ({"asn": 1, "bytes_per_s": math.inf}, "bytes_per_s inf"),
        ({"asn": 1, "bytes_per_s": 1e39}, "float32 range"),
        ({"asn": 1, "bytes_per_s": "800G"}, "bytes_per_s '800G'"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError) as info:
        LinkBandwidth(**kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)


# --- ExaBGP text ----------------------------------------------------------------------------


def test_exabgp_non_transitive_text() -> None:
    assert LinkBandwidth(65000, 1e9).to_exabgp() == "bandwidth:65000:1000000000"  # exact in float32
    # The text carries the float32 value, so ExaBGP re-encodes the very same octets.
    assert LinkBandwidth(65000, 5e10).to_exabgp() == "bandwidth:65000:49999998976"


def test_exabgp_transitive_is_hex() -> None:
    assert LinkBandwidth(65000, 5e10, transitive=True).to_exabgp() == "0x0004FDE8513A43B7"


def test_exabgp_non_integral_value_round_trips() -> None:
    lb = LinkBandwidth(1, 1.5)
    assert lb.to_exabgp() == "bandwidth:1:1.5"
    assert LinkBandwidth.from_exabgp(lb.to_exabgp()) == lb


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bandwidth:65000:50000000000", LinkBandwidth(65000, 5e10)),
        ("bandwidth:65000:5e10", LinkBandwidth(65000, 5e10)),
        ("  BANDWIDTH:7:125  ", LinkBandwidth(7, 125.0)),
        ("0x4004FDE8513A43B7", LinkBandwidth(65000, 5e10)),
        ("0x0004fde8513a43b7", LinkBandwidth(65000, 5e10, transitive=True)),
    ],
)
def test_from_exabgp(text: str, expected: LinkBandwidth) -> None:
    assert LinkBandwidth.from_exabgp(text) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("bandwidth:AS1:100", "ASN field 'AS1'"),
        ("bandwidth:65000:fast", "bandwidth field 'fast'"),
        ("bandwidth:70000:100", "asn 70000"),
        ("bandwidth:1:-5", "bytes_per_s -5.0"),
        ("0x4004FDE8", "8 digits, expected 16"),
        ("0x4104FDE8513A43B7", "byte 0 (type)"),
        ("target:65000:1", "expected 'bandwidth:ASN:bytes_per_s'"),
    ],
)
def test_from_exabgp_errors(text: str, needle: str) -> None:
    with pytest.raises(LinkBandwidthDecodeError) as info:
        LinkBandwidth.from_exabgp(text)
    assert needle in str(info.value)
    assert repr(text) in str(info.value)


def test_parse_extended_community_list() -> None:
    line = "extended-community [ target:65000:1 bandwidth:65000:1000 0x0004FDE8513A43B7 ]"
    assert parse_extended_communities(line) == [
        "target:65000:1",
        "bandwidth:65000:1000",
        "0x0004FDE8513A43B7",
    ]
    assert parse_extended_communities("bandwidth:1:2") == ["bandwidth:1:2"]
    with pytest.raises(LinkBandwidthDecodeError, match="closing"):
        parse_extended_communities("[ bandwidth:1:2")


# --- effective bandwidth --------------------------------------------------------------------


def test_effective_bandwidth_is_the_lowest() -> None:
    communities: list[object] = [
        "target:65000:1",
        "bandwidth:65000:100000000000",
        LinkBandwidth(65001, 5e10, transitive=True).encode(),
        "0x0002FDE800000001",  # route target in hex: not ours
        int.from_bytes(LinkBandwidth(65002, 7e10).encode(), "big"),  # ExaBGP JSON value
    ]
    assert effective_bandwidth(communities) == float32(5e10)


def test_effective_bandwidth_none_without_link_bandwidth() -> None:
    assert effective_bandwidth([]) is None
    assert effective_bandwidth(["target:65000:1", bytes.fromhex("0002FDE800000001")]) is None


def test_effective_bandwidth_zero_wins() -> None:
    assert effective_bandwidth([LinkBandwidth(1, 0.0), LinkBandwidth(1, 1e9)]) == 0.0


def test_effective_bandwidth_rejects_malformed_rather_than_skipping() -> None:
    with pytest.raises(LinkBandwidthDecodeError, match="bytes 4-7"):
        effective_bandwidth([LinkBandwidth(1, 1e9), bytes.fromhex("4004FDE87FC00000")])
    with pytest.raises(LinkBandwidthDecodeError, match="length 4"):
        effective_bandwidth([b"\x40\x04\x00\x01"])
    with pytest.raises(TypeError):
        effective_bandwidth([1.5])


# --- properties -----------------------------------------------------------------------------

finite_bw = st.floats(min_value=0.0, max_value=FLOAT32_MAX, allow_nan=False, allow_infinity=False)
link_bandwidths = st.builds(
    LinkBandwidth, asn=st.integers(0, 0xFFFF), bytes_per_s=finite_bw, transitive=st.booleans()
)


@given(link_bandwidths)
def test_decode_encode_round_trip(lb: LinkBandwidth) -> None:
    assert LinkBandwidth.decode(lb.encode()) == lb


@given(link_bandwidths)
def test_exabgp_text_round_trip(lb: LinkBandwidth) -> None:
    assert LinkBandwidth.from_exabgp(lb.to_exabgp()) == lb


@given(
    st.sampled_from([0x00, 0x40]),
    st.integers(0, 0xFFFF),
    st.integers(0, 0x7F7FFFFF),  # every non-negative finite float32 bit pattern
)
def test_encode_decode_bytes_round_trip(type_octet: int, asn: int, bits: int) -> None:
    raw = struct.pack(">BBHI", type_octet, 0x04, asn, bits)
    assert LinkBandwidth.decode(raw).encode() == raw


@given(st.lists(link_bandwidths, min_size=1, max_size=6))
def test_effective_bandwidth_property(lbs: list[LinkBandwidth]) -> None:
    assert effective_bandwidth(lbs) == min(lb.bytes_per_s for lb in lbs)
    assert effective_bandwidth(lb.encode() for lb in lbs) == min(lb.bytes_per_s for lb in lbs)
