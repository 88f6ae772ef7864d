"""IPv4/UDP codec: round trip, checksums against a reference, and every decode reason."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.ipv4 import Ipv4DecodeError, build_udp, checksum16, parse_udp


def reference_checksum(data: bytes) -> int:
    s = 0
    for i in range(0, len(data), 2):
        s += (data[i] << 8) + (data[i + 1] if i + 1 < len(data) else 0)
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return 0xFFFF - s


def test_rfc1071_example():
    # RFC 1071 §3's example words 0001 f203 f4f5 f6f7 sum to ddf2 before complement.
    assert checksum16(bytes.fromhex("0001f203f4f5f6f7")) == 0xFFFF - 0xDDF2


@given(st.binary(max_size=64))
def test_checksum_matches_reference(data):
    assert checksum16(data) == reference_checksum(data)


@given(st.binary(max_size=2000), st.integers(0, 65535), st.integers(0, 65535), st.integers(1, 255))
def test_round_trip(payload, sport, dport, ttl):
    packet = build_udp("10.255.0.1", "232.1.0.1", sport, dport, payload, ttl=ttl)
    assert checksum16(packet[:20]) == 0
    d = parse_udp(packet)
    assert (d.src, d.dst, d.sport, d.dport, d.ttl, d.payload) == (
        "10.255.0.1",
        "232.1.0.1",
        sport,
        dport,
        ttl,
        payload,
    )


def test_header_fields():
    packet = build_udp("10.0.0.1", "10.0.0.2", 1234, 4791, b"abc")
    ver_ihl, _tos, total, _id, frag, ttl, proto = struct.unpack_from("!BBHHHBB", packet)
    assert (ver_ihl, total, frag, ttl, proto) == (0x45, 31, 0x4000, 64, 17)
    assert struct.unpack_from("!HHHH", packet, 20) == (1234, 4791, 11, 0)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda p: p[:10], "truncated"),
        (lambda p: b"\x65" + p[1:], "not-ipv4"),
        (lambda p: p[:9] + b"\x06" + p[10:], "not-udp"),
        (lambda p: p[:2] + struct.pack("!H", 200) + p[4:], "bad-length"),
        (lambda p: p[:12] + b"\x0b" + p[13:], "bad-checksum"),
    ],
)
def test_decode_reasons(mutate, reason):
    packet = build_udp("10.0.0.1", "10.0.0.2", 1, 2, b"payload")
    with pytest.raises(Ipv4DecodeError) as info:
        parse_udp(mutate(packet))
    assert info.value.reason == reason
