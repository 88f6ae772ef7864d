"""IGMP codec: hand-computed byte vectors, the 8-bit float codes, every malformed reason, round trips."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.igmp.codec import (
    MAX_CODE_VALUE,
    REASONS,
    GroupRecord,
    IgmpDecodeError,
    Leave,
    LegacyReport,
    Query,
    RecordType,
    Report,
    Tlv,
    decode,
    decode_code,
    encode,
    encode_code,
)
from aidcnet.ipv4 import checksum16

G = IPv4Address("232.1.1.1")
S1, S2 = IPv4Address("10.0.0.1"), IPv4Address("10.0.0.2")

# What Linux sends when a socket joins 224.0.0.251 with IP_ADD_MEMBERSHIP: one CHANGE_TO_EXCLUDE_MODE
# record with no sources.  Checksum worked out by hand: ~(0x2200 + 0x0001 + 0x0400 + 0xe000 + 0x00fb).
LINUX_JOIN = bytes.fromhex("22 00 f9 02  00 00 00 01  04 00 00 00  e0 00 00 fb")
# A General Query with the RFC 3376 §8 defaults: Max Resp 10 s (code 100), QRV 2, QQIC 125.
# Checksum: ~(0x1164 + 0x027d) = 0xec1e.
GENERAL_QUERY = bytes.fromhex("11 64 ec 1e  00 00 00 00  02 7d 00 00")


def with_checksum(msg: bytes) -> bytes:
    msg = msg[:2] + b"\0\0" + msg[4:]
    return msg[:2] + checksum16(msg).to_bytes(2, "big") + msg[4:]


def test_linux_join_vector() -> None:
    report = decode(LINUX_JOIN)
    rec = GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, IPv4Address("224.0.0.251"))
    assert report == Report((rec,))
    assert encode(report) == LINUX_JOIN


def test_general_query_vector() -> None:
    q = decode(GENERAL_QUERY)
    assert q == Query(max_resp_time=100, qrv=2, qqi=125)
    assert isinstance(q, Query) and q.is_general and q.version == 3
    assert encode(q) == GENERAL_QUERY


@pytest.mark.parametrize(
    ("code", "value"),
    [(0, 0), (100, 100), (127, 127), (0x80, 128), (0x81, 136), (0x8F, 248), (0x90, 256), (0xFF, 31744)],
)
def test_float_codes(code: int, value: int) -> None:
    """RFC 3376 §4.1.1: (mant | 0x10) << (exp + 3) from 128 up."""
    assert decode_code(code) == value
    assert encode_code(value) == code


def test_every_code_round_trips_and_encoding_rounds_down() -> None:
    values = [decode_code(c) for c in range(256)]
    assert values == sorted(values) and len(set(values)) == 256  # one code per value, in order
    assert all(encode_code(v) == c for c, v in enumerate(values))
    for v in range(0, MAX_CODE_VALUE + 1, 7):
        assert (
            decode_code(encode_code(v)) <= v < decode_code(min(255, encode_code(v) + 1))
            or v == MAX_CODE_VALUE
        )
    with pytest.raises(ValueError, match="31744"):
        encode_code(MAX_CODE_VALUE + 1)


def test_query_flags_and_sources() -> None:
    q = Query(group=G, max_resp_time=10, suppress=True, qrv=7, qqi=60, sources=(S1, S2))
    wire = encode(q)
    assert wire[8] == 0x0F and wire[9] == 60 and wire[10:12] == b"\0\x02"
    assert wire[12:20] == S1.packed + S2.packed
    assert decode(wire) == q


def test_query_versions_by_length() -> None:
    """RFC 3376 §7.1: 8 octets with code 0 is v1, with code > 0 v2; 9..11 is no query."""
    v1 = with_checksum(bytes.fromhex("1100000000000000"))
    v2 = with_checksum(bytes.fromhex("11640000e8010101"))
    assert decode(v1) == Query(max_resp_time=0, qrv=0, qqi=0, version=1)
    assert decode(v2) == Query(group=G, max_resp_time=100, qrv=0, qqi=0, version=2)
    assert encode(decode(v2)) == v2
    for extra in (1, 2, 3):
        with pytest.raises(IgmpDecodeError) as err:
            decode(with_checksum(v2 + b"\0" * extra))
        assert err.value.reason == "bad-query-length"


def test_legacy_messages() -> None:
    for kind, msg in ((0x12, LegacyReport(G, 1)), (0x16, LegacyReport(G, 2)), (0x17, Leave(G))):
        wire = with_checksum(bytes([kind, 0, 0, 0]) + G.packed)
        assert decode(wire) == msg
        assert encode(msg) == wire


def test_all_six_record_types_and_aux_data() -> None:
    records = tuple(GroupRecord(t, G, (S1,) if t != 2 else ()) for t in RecordType)
    records += (GroupRecord(RecordType.ALLOW_NEW_SOURCES, G, (S2,), b"abcd"),)
    report = Report(records)
    wire = encode(report)
    assert wire[6:8] == b"\0\x07"
    assert decode(wire) == report


def test_unknown_record_type_is_carried_not_an_error() -> None:
    rep = Report((GroupRecord(9, G, (S1,)),))
    got = decode(encode(rep))
    assert isinstance(got, Report) and got.records[0].record_type == 9 and not got.records[0].known


def test_extension_e_bit_and_tlvs() -> None:
    """RFC 9279 §3.4: the E bit is the top bit of the report's second word, TLVs follow the records."""
    rep = Report((GroupRecord(RecordType.MODE_IS_INCLUDE, G, (S1,)),), (Tlv(0), Tlv(40000, b"xyz")))
    wire = encode(rep)
    assert wire[4] == 0x80
    assert wire[-11:] == bytes.fromhex("000000009c400003") + b"xyz"
    assert decode(wire) == rep
    q = Query(group=G, sources=(S1,), extensions=(Tlv(7, b"\1"),))
    qwire = encode(q)
    assert qwire[8] & 0x80 and decode(qwire) == q


def test_additional_data_without_e_bit_is_ignored() -> None:
    """RFC 3376 §4.1.10: covered by the checksum, otherwise ignored."""
    wire = with_checksum(GENERAL_QUERY + b"junk")
    assert decode(wire) == decode(GENERAL_QUERY)


def reason(data: bytes) -> str:
    with pytest.raises(IgmpDecodeError) as err:
        decode(data)
    assert err.value.reason in REASONS
    return err.value.reason


def test_every_decode_reason() -> None:
    e_report = bytearray(LINUX_JOIN)
    e_report[4] = 0x80
    record = bytes.fromhex("01000001") + G.packed
    assert reason(b"\x11\0\0") == "truncated"
    assert reason(LINUX_JOIN[:-1] + b"\0") == "bad-checksum"
    assert reason(with_checksum(bytes.fromhex("13000000") + G.packed)) == "unknown-type"
    assert reason(with_checksum(GENERAL_QUERY[:9])) == "bad-query-length"
    assert reason(with_checksum(LINUX_JOIN[:-1])) == "truncated"
    assert reason(with_checksum(bytes.fromhex("2200000000000001") + record)) == "truncated"  # source missing
    assert reason(with_checksum(bytes.fromhex("220000000000000101010000") + G.packed)) == "truncated"
    assert reason(with_checksum(bytes.fromhex("2200000000000001040000000a000001"))) == "bad-address"
    assert reason(with_checksum(bytes.fromhex("2200000000000001") + record + G.packed)) == "bad-address"
    assert reason(with_checksum(bytes.fromhex("1164000008080808027d0000"))) == "bad-address"
    assert reason(with_checksum(bytes(e_report))) == "bad-extension"  # E bit, no TLV
    assert reason(with_checksum(bytes(e_report) + bytes.fromhex("0001000500"))) == "bad-extension"  # overrun
    assert reason(with_checksum(bytes(e_report) + bytes.fromhex("0000000000"))) == "bad-extension"  # leftover


addresses = st.integers(0x0A000001, 0x0AFFFFFE).map(IPv4Address)
groups = st.integers(0xE0000001, 0xEFFFFFFF).map(IPv4Address)
codes = st.integers(0, 255).map(decode_code)
tlvs = st.lists(st.builds(Tlv, st.integers(0, 0xFFFF), st.binary(max_size=12)), min_size=1, max_size=3)
queries = st.builds(
    Query,
    group=st.one_of(st.just(IPv4Address(0)), groups),
    max_resp_time=codes,
    suppress=st.booleans(),
    qrv=st.integers(0, 7),
    qqi=codes,
    sources=st.lists(addresses, max_size=5).map(tuple),
    extensions=st.one_of(st.none(), tlvs.map(tuple)),
)
records = st.builds(
    GroupRecord,
    st.integers(0, 255),
    groups,
    st.lists(addresses, max_size=4).map(tuple),
    st.integers(0, 2).map(lambda n: b"\xaa" * 4 * n),
)
reports = st.builds(Report, st.lists(records, max_size=4).map(tuple), st.one_of(st.none(), tlvs.map(tuple)))


@given(st.one_of(queries, reports))
def test_round_trip(msg: Query | Report) -> None:
    wire = encode(msg)
    assert checksum16(wire) == 0
    assert decode(wire) == msg
