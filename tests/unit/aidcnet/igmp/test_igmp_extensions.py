"""Our experimental RFC 9279 TLVs and the Receiver Proxy Report: bytes written from docs/igmp.md."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest

from aidcnet.igmp.codec import GroupRecord, IgmpDecodeError, RecordType, Report, Tlv, decode, encode
from aidcnet.igmp.extensions import (
    BFR_ID_TYPE,
    RECEIVER_LIST_TYPE,
    ProxyReport,
    bfr_id_tlv,
    interpret,
    proxy_report,
    receiver_list_tlv,
)
from aidcnet.ipv4 import checksum16

G, S = IPv4Address("232.1.1.1"), IPv4Address("10.0.0.1")
R1, R2 = IPv4Address("10.1.0.2"), IPv4Address("10.2.0.2")

# docs/igmp.md, "Receiver Proxy Report": (10.0.0.1, 232.1.1.1) to receivers 10.1.0.2 and 10.2.0.2.
PROXY_VECTOR = bytes.fromhex(
    "22 00 00 00"  # type 0x22, reserved, checksum (filled below)
    " 80 00 00 01"  # E bit, one group record
    " 01 00 00 01  e8 01 01 01  0a 00 00 01"  # MODE_IS_INCLUDE, no aux data, 1 source; G; S
    " ff fe 00 08  0a 01 00 02  0a 02 00 02"  # Receiver List: type 65534, length 8, two receivers
)
PROXY_VECTOR = PROXY_VECTOR[:2] + checksum16(PROXY_VECTOR).to_bytes(2, "big") + PROXY_VECTOR[4:]


def test_experimental_types_are_rfc_9279s() -> None:
    """RFC 9279 §8: 65534 and 65535 are the two Experimental Use types."""
    assert {RECEIVER_LIST_TYPE, BFR_ID_TYPE} == {65534, 65535}


def test_proxy_report_vector() -> None:
    p = ProxyReport(G, S, (R1, R2))
    assert encode(p.to_report()) == PROXY_VECTOR
    report = decode(PROXY_VECTOR)
    assert isinstance(report, Report) and proxy_report(report) == p


def test_star_g_and_removal() -> None:
    p = ProxyReport(G, None, ())
    wire = encode(p.to_report())
    assert wire[-4:] == bytes.fromhex("fffe0000")  # an empty receiver list: remove
    report = decode(wire)
    assert isinstance(report, Report) and report.records[0].record_type == RecordType.MODE_IS_EXCLUDE
    assert proxy_report(report) == p


def test_a_plain_report_is_no_proxy_report() -> None:
    assert proxy_report(Report((GroupRecord(RecordType.MODE_IS_INCLUDE, G, (S,)),))) is None


def test_bfr_id_and_unknown_types() -> None:
    ext = interpret((Tlv(0, b"pad"), bfr_id_tlv(17), Tlv(4242, b"?"), Tlv(4243)))
    assert (ext.bfr_id, ext.receivers, ext.unknown) == (17, None, (4242, 4243))  # No-op not counted
    assert bfr_id_tlv(17).value == b"\x00\x11"


def bad(tlvs: tuple[Tlv, ...], records: tuple[GroupRecord, ...] | None = None) -> str:
    records = records if records is not None else (GroupRecord(RecordType.MODE_IS_INCLUDE, G, (S,)),)
    with pytest.raises(IgmpDecodeError) as err:
        proxy_report(Report(records, tlvs))
    return err.value.reason


def test_every_extension_reason() -> None:
    rl = RECEIVER_LIST_TYPE
    assert bad((Tlv(rl, b"\x0a\x01\x00"),)) == "bad-receiver-list"
    assert bad((Tlv(rl, R1.packed * 2),)) == "bad-receiver-list"
    assert bad((Tlv(rl, b""), Tlv(rl, b""))) == "bad-receiver-list"
    assert bad((Tlv(rl, G.packed),)) == "bad-receiver"
    assert bad((Tlv(rl, bytes(4)),)) == "bad-receiver"
    assert bad((Tlv(rl, b""), Tlv(BFR_ID_TYPE, b"\0\0"))) == "bad-bfr-id"
    assert bad((Tlv(rl, b""), Tlv(BFR_ID_TYPE, b"\0\1\2"))) == "bad-bfr-id"
    assert bad((Tlv(rl, b""), bfr_id_tlv(1), bfr_id_tlv(2))) == "bad-bfr-id"
    two = (GroupRecord(RecordType.MODE_IS_INCLUDE, G, (S,)),) * 2
    assert bad((Tlv(rl, b""),), two) == "bad-proxy-report"
    assert bad((Tlv(rl, b""),), (GroupRecord(RecordType.ALLOW_NEW_SOURCES, G, (S,)),)) == "bad-proxy-report"
    assert bad((Tlv(rl, b""),), (GroupRecord(RecordType.MODE_IS_EXCLUDE, G, (S,)),)) == "bad-proxy-report"


def test_encoder_refuses_what_the_decoder_would() -> None:
    with pytest.raises(ValueError, match="unicast"):
        receiver_list_tlv((G,))
    with pytest.raises(ValueError, match="once"):
        receiver_list_tlv((R1, R1))
    with pytest.raises(ValueError, match="BFR-id 0"):
        bfr_id_tlv(0)
