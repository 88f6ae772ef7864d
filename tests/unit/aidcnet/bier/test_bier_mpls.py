"""RFC 3032 label stack entries, RFC 7510 MPLS-in-UDP, RFC 8296 §2.1.1 overlap of LSE and BIER."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.header import BierDecodeError, BierHeader
from aidcnet.bier.mpls import (
    MPLS_IN_UDP_PORT,
    LabelEntry,
    decode_label_stack,
    decode_lse,
    encode_bier_udp_payload,
    encode_lse,
    entropy_to_src_port,
    pack_lse,
    parse_bier_udp_payload,
    unpack_lse,
)


def test_port_is_iana_6635() -> None:
    assert MPLS_IN_UDP_PORT == 6635


def test_lse_vectors() -> None:
    # RFC 3032 §2.1: Label(20) | Exp/TC(3) | S(1) | TTL(8)
    # label 16, TC 0, S 1, TTL 64: 0000 0000 0000 0001 0000 | 000 | 1 | 0100 0000
    assert encode_lse(16, 0, 1, 64) == bytes.fromhex("00010140")
    # label 0xFFFFF, TC 7, S 0, TTL 1
    assert encode_lse(0xFFFFF, 7, 0, 1) == bytes.fromhex("FFFFFE01")
    assert decode_lse(bytes.fromhex("FFFFFE01")) == LabelEntry(0xFFFFF, 7, 0, 1)


@pytest.mark.parametrize(
    ("label", "tc", "s", "ttl", "field"),
    [
        (1 << 20, 0, 1, 1, "label"),
        (-1, 0, 1, 1, "label"),
        (1, 8, 1, 1, "tc"),
        (1, 0, 2, 1, "s"),
        (1, 0, 1, 256, "ttl"),
    ],
)
def test_lse_range(label: int, tc: int, s: int, ttl: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        pack_lse(label, tc, s, ttl)


@given(st.integers(0, (1 << 20) - 1), st.integers(0, 7), st.integers(0, 1), st.integers(0, 255))
def test_lse_roundtrip(label: int, tc: int, s: int, ttl: int) -> None:
    word = pack_lse(label, tc, s, ttl)
    assert 0 <= word < 1 << 32
    assert unpack_lse(word) == (label, tc, s, ttl)
    assert decode_lse(encode_lse(label, tc, s, ttl)) == (label, tc, s, ttl)


def test_label_stack_stops_at_bottom() -> None:
    buf = encode_lse(100, 0, 0, 10) + encode_lse(200, 1, 0, 20) + encode_lse(300, 2, 1, 30) + b"\x45rest"
    entries, end = decode_label_stack(buf)
    assert [e.label for e in entries] == [100, 200, 300]
    assert end == 12
    assert buf[end] >> 4 == 4


def test_label_stack_truncated() -> None:
    with pytest.raises(BierDecodeError) as info:
        decode_label_stack(encode_lse(100, 0, 0, 10) + b"\x00\x01")
    assert info.value.reason == "truncated"


def test_bier_header_first_word_is_the_label_entry() -> None:
    """RFC 8296 §2.1.1.1: the first four octets of the BIER header are the last LSE."""
    hdr = BierHeader(bift_id=1234, bitstring=0b101, bsl=64, ttl=17, tc=3, entropy=0x12345, bfir_id=9)
    payload = encode_bier_udp_payload(hdr.encode(), b"inner")
    lse = decode_lse(payload)
    assert lse == LabelEntry(label=1234, tc=3, s=1, ttl=17)
    entries, end = decode_label_stack(payload)
    assert len(entries) == 1 and end == 4
    # What follows the bottom of stack starts with nibble 0101, Ver 0, BSL code 1
    assert payload[4] == 0x50 and payload[5] >> 4 == 1
    # total: 4-octet LSE + 8 remaining fixed octets + 8 BitString octets + payload
    assert len(payload) == 4 + 8 + 8 + 5
    assert payload[-5:] == b"inner"
    fields = parse_bier_udp_payload(payload, 0, 64)
    assert (fields[0], fields[3], fields[6], fields[11], fields[12]) == (1234, 17, 0x12345, 9, 0b101)


def test_s_bit_zero_rejected() -> None:
    raw = BierHeader(bift_id=20, bitstring=1, bsl=64, s=0).encode()
    with pytest.raises(ValueError, match="S=1"):
        encode_bier_udp_payload(raw)
    with pytest.raises(BierDecodeError) as info:
        parse_bier_udp_payload(raw)
    assert info.value.reason == "bad-s-bit"


def test_entropy_port_range_and_determinism() -> None:
    ports = [entropy_to_src_port(e) for e in range(0, 1 << 20, 3)]
    # RFC 7510 §3: two top bits 11 -> 49152..65535
    assert min(ports) >= 49152 and max(ports) <= 65535
    assert entropy_to_src_port(0xABCDE) == entropy_to_src_port(0xABCDE)
    # a 14-bit hash of 20 bits should use (nearly) all 16384 ports
    assert len(set(ports)) > 16000


def test_entropy_port_spreads_nearby_values() -> None:
    # consecutive entropies (a BFIR counting flows) must not collapse onto few ports
    assert len({entropy_to_src_port(e) for e in range(256)}) > 240
    # entropies that differ only above bit 14 must still differ in port
    assert len({entropy_to_src_port(e << 14) for e in range(64)}) > 60


def test_wire_format_doc_example() -> None:
    """The worked example in docs/bier-wire-format.md."""
    hdr = BierHeader(bift_id=1003, bitstring=0b0101, bsl=64, ttl=62, entropy=0x12345, proto=4, bfir_id=4)
    assert hdr.encode() == bytes.fromhex("003eb13e 50112345 00040004 00000000 00000005")
    assert entropy_to_src_port(0x12345) == 50720 == 0xC620
