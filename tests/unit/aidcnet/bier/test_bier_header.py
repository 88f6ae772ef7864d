"""RFC 8296 §2 header codec: hand-built vectors from Figure 1, round trips, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.bitstring import BSL_CODES
from aidcnet.bier.header import (
    DECODE_REASONS,
    FIXED_LEN,
    BierDecodeError,
    BierHeader,
    BierProto,
    make_copy,
    parse_fields,
    peek_bift_id,
    rewrite,
)

# Vector 1, built bit by bit from RFC 8296 Figure 1:
#   word 0: BIFT-id 0x12345 | TC 101 | S 1 | TTL 0x40
#           0001 0010 0011 0100 0101 | 101 | 1 | 0100 0000            -> 12 34 5B 40
#   word 1: Nibble 0101 | Ver 0000 | BSL 0001 (64) | Entropy 0xABCDE  -> 50 1A BC DE
#   word 2: OAM 10 | Rsv 01 | DSCP 101010 | Proto 000100 (IPv4) | BFIR-id 0x0102
#           1001 1010 1000 0100 | 0000 0001 0000 0010                  -> 9A 84 01 02
#   BitString (64 bits): bits 64, 9 and 1                              -> 80 00 00 00 00 00 01 01
VECTOR_1 = bytes.fromhex("12345B40501ABCDE9A8401028000000000000101")
FIELDS_1 = {
    "bift_id": 0x12345,
    "tc": 5,
    "s": 1,
    "ttl": 64,
    "ver": 0,
    "bsl": 64,
    "entropy": 0xABCDE,
    "oam": 2,
    "rsv": 1,
    "dscp": 0x2A,
    "proto": 4,
    "bfir_id": 0x0102,
    "bitstring": (1 << 63) | (1 << 8) | 1,
}

# Vector 2: label 100, TC 0, S 1, TTL 255, BSL 256 (code 3), entropy 1, Proto 6 (IPv6),
# BFIR-id 65535, only bit 256 set.
#   word 0: 0x00064 << 12 | 0x100 | 0xFF = 0x000641FF
#   word 1: 0x5 << 28 | 3 << 20 | 1     = 0x50300001
#   word 2: Proto 6 << 16 | 0xFFFF      = 0x0006FFFF
VECTOR_2 = bytes.fromhex("000641FF503000010006FFFF") + b"\x80" + bytes(31)


def test_vector_1_encode() -> None:
    assert BierHeader(**FIELDS_1).encode() == VECTOR_1


def test_vector_1_decode() -> None:
    hdr, end = BierHeader.decode(VECTOR_1 + b"payload")
    assert end == len(VECTOR_1) == 20
    for name, value in FIELDS_1.items():
        assert getattr(hdr, name) == value, name
    assert hdr.nibble == 0b0101
    assert hdr.proto is BierProto.IPV4


def test_vector_2() -> None:
    hdr = BierHeader(bift_id=100, bitstring=1 << 255, bsl=256, ttl=255, entropy=1, proto=6, bfir_id=65535)
    assert hdr.encode() == VECTOR_2
    assert len(hdr) == 44
    assert BierHeader.decode(VECTOR_2)[0] == hdr


def test_parse_fields_matches_figure_order() -> None:
    fields = parse_fields(memoryview(b"\xee\xee" + VECTOR_1 + b"xy"), 2)
    assert fields == (0x12345, 5, 1, 64, 0, 64, 0xABCDE, 2, 1, 0x2A, 4, 0x0102, FIELDS_1["bitstring"], 22)
    assert peek_bift_id(VECTOR_1) == 0x12345
    assert peek_bift_id(b"\x00" + VECTOR_1, 1) == 0x12345


def test_proto_codepoints_iana() -> None:
    # RFC 8296 §4 "BIER Next Protocol Identifiers" initial values
    assert {p.name: int(p) for p in BierProto} == {
        "MPLS_DOWNSTREAM": 1,
        "MPLS_UPSTREAM": 2,
        "ETHERNET": 3,
        "IPV4": 4,
        "OAM": 5,
        "IPV6": 6,
    }


def test_unknown_proto_kept_as_int() -> None:
    # Transit BFRs ignore Proto; only a BFER discards an unknown one (RFC 8296 §2.1.2).
    raw = BierHeader(**{**FIELDS_1, "proto": 63}).encode()
    # octet 9 = DSCP low 2 bits | Proto 6 bits; octet 8 keeps OAM, Rsv, DSCP high 4 bits
    assert raw[8:10] == bytes([0x9A, 0b10_111111])
    hdr, _ = BierHeader.decode(raw)
    assert hdr.proto == 63
    assert not isinstance(hdr.proto, BierProto)


def test_default_header_is_mpls_bottom_of_stack() -> None:
    raw = BierHeader(bift_id=16, bitstring=1).encode()
    assert raw[2] & 0x01 == 1  # S
    assert raw[4] >> 4 == 0b0101  # nibble
    assert len(raw) == FIXED_LEN + 32  # default BSL 256 (RFC 8296 §2)


# --- malformed input: one reason per check -------------------------------------------


def _reason(buf: bytes, bsl: int | None = None) -> str:
    with pytest.raises(BierDecodeError) as info:
        parse_fields(buf, 0, bsl)
    assert isinstance(info.value, ValueError)
    return info.value.reason


@pytest.mark.parametrize("cut", [0, 1, 4, 11, 12, 19])
def test_truncated(cut: int) -> None:
    assert _reason(VECTOR_1[:cut]) == "truncated"


def test_truncated_by_expected_bsl() -> None:
    # The BIFT-id says 256 bits; the BSL field says 64 and would fit: length from BIFT-id wins.
    buf = bytearray(VECTOR_2[:20])
    assert _reason(bytes(buf), 256) == "truncated"


def test_truncated_offset_past_end() -> None:
    with pytest.raises(BierDecodeError) as info:
        parse_fields(VECTOR_1, 30)
    assert info.value.reason == "truncated"
    with pytest.raises(BierDecodeError):
        peek_bift_id(b"\x00\x00\x00")


@pytest.mark.parametrize("nibble", [0x0, 0x4, 0x6, 0xF])
def test_bad_nibble(nibble: int) -> None:
    buf = bytearray(VECTOR_1)
    buf[4] = (nibble << 4) | (buf[4] & 0x0F)
    assert _reason(bytes(buf)) == "bad-nibble"


@pytest.mark.parametrize("ver", [1, 2, 0xF])
def test_bad_version(ver: int) -> None:
    buf = bytearray(VECTOR_1)
    buf[4] = 0x50 | ver
    assert _reason(bytes(buf)) == "bad-version"


@pytest.mark.parametrize("code", [0, 8, 9, 0xF])
def test_bad_bsl(code: int) -> None:
    buf = bytearray(VECTOR_1)
    buf[5] = (code << 4) | (buf[5] & 0x0F)
    assert _reason(bytes(buf) + bytes(600)) == "bad-bsl"


def test_bsl_mismatch() -> None:
    assert _reason(VECTOR_1 + bytes(64), 128) == "bsl-mismatch"
    assert parse_fields(VECTOR_1, 0, 64)[5] == 64


def test_decode_error_reasons_closed_set() -> None:
    assert {
        "truncated",
        "bad-nibble",
        "bad-version",
        "bad-bsl",
        "bsl-mismatch",
        "bad-s-bit",
    } == DECODE_REASONS
    with pytest.raises(ValueError):
        BierDecodeError("made-up")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("bift_id", 1 << 20),
        ("tc", 8),
        ("s", 2),
        ("ttl", 256),
        ("ttl", -1),
        ("entropy", 1 << 20),
        ("oam", 4),
        ("rsv", 4),
        ("dscp", 64),
        ("proto", 64),
        ("bfir_id", 1 << 16),
        ("bsl", 96),
        ("bitstring", 1 << 64),
    ],
)
def test_encode_rejects_out_of_range(field: str, value: int) -> None:
    kwargs = dict(FIELDS_1)
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        BierHeader(**kwargs).encode()


# --- hot path rewrite -----------------------------------------------------------------


def test_rewrite_changes_only_label_ttl_bitstring() -> None:
    pkt = VECTOR_1 + b"PAYLOAD"
    out = make_copy(pkt, 0, bift_id=0xFEDCB, ttl=63, bits=0x1, bsl=64)
    assert pkt == VECTOR_1 + b"PAYLOAD"  # source untouched
    hdr, end = BierHeader.decode(out)
    assert (hdr.bift_id, hdr.ttl, hdr.bitstring) == (0xFEDCB, 63, 1)
    assert (hdr.tc, hdr.s) == (5, 1)
    assert out[4:12] == VECTOR_1[4:12]
    assert out[end:] == b"PAYLOAD"
    # byte-exact: word 0 = FEDCB << 12 | 101 1 | 0x3F
    assert out[:4] == bytes.fromhex("FEDCBB3F")


def test_rewrite_in_place_at_offset() -> None:
    buf = bytearray(b"UDPH" + VECTOR_2)
    rewrite(memoryview(buf), 4, 7, 1, (1 << 255) | 2, 256)
    fields = parse_fields(buf, 4)
    assert fields[0] == 7
    assert fields[3] == 1
    assert fields[12] == (1 << 255) | 2
    assert buf[:4] == b"UDPH"


headers = st.builds(
    BierHeader,
    bift_id=st.integers(0, (1 << 20) - 1),
    bitstring=st.just(0),
    bsl=st.sampled_from(sorted(BSL_CODES)),
    ttl=st.integers(0, 255),
    tc=st.integers(0, 7),
    s=st.integers(0, 1),
    entropy=st.integers(0, (1 << 20) - 1),
    oam=st.integers(0, 3),
    rsv=st.integers(0, 3),
    dscp=st.integers(0, 63),
    proto=st.integers(0, 63),
    bfir_id=st.integers(0, 65535),
)


@given(headers, st.data(), st.binary(max_size=16))
def test_roundtrip(hdr: BierHeader, data: st.DataObject, payload: bytes) -> None:
    hdr.bitstring = data.draw(st.integers(0, (1 << hdr.bsl) - 1))
    raw = hdr.encode()
    assert len(raw) == len(hdr) == 12 + hdr.bsl // 8
    back, end = BierHeader.decode(raw + payload)
    assert back == hdr
    assert end == len(raw)
    assert back.encode() == raw


@given(headers, st.data())
def test_rewrite_equals_reencode(hdr: BierHeader, data: st.DataObject) -> None:
    label = data.draw(st.integers(0, (1 << 20) - 1))
    ttl = data.draw(st.integers(0, 255))
    bits = data.draw(st.integers(0, (1 << hdr.bsl) - 1))
    out = make_copy(hdr.encode(), 0, label, ttl, bits, hdr.bsl)
    hdr.bift_id, hdr.ttl, hdr.bitstring = label, ttl, bits
    assert bytes(out) == hdr.encode()
