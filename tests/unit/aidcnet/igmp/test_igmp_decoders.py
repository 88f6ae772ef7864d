"""Independent decoders read our bytes: scapy's IGMPv3 layer always, tshark when the host has it."""

from __future__ import annotations

import struct
from ipaddress import IPv4Address
from pathlib import Path

from aidcnet.igmp.codec import GroupRecord, Query, RecordType, Report, encode
from aidcnet.igmp.extensions import ProxyReport
from aidcnet.ipv4 import checksum16
from tests.pcap import tshark_fields, write_pcap

G, S = IPv4Address("232.1.1.1"), IPv4Address("10.0.0.1")
R1, R2 = IPv4Address("10.1.0.2"), IPv4Address("10.2.0.2")
ALL_V3_ROUTERS = IPv4Address("224.0.0.22")  # RFC 3376 §4.2.14
PLAIN = Report(
    (
        GroupRecord(RecordType.MODE_IS_INCLUDE, G, (S, IPv4Address("10.0.0.9"))),
        GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, IPv4Address("239.1.2.3")),
    )
)
PROXY = ProxyReport(G, S, (R1, R2))


def test_scapy_reads_a_report_and_the_e_bit() -> None:
    from scapy.layers.igmp import IGMPv3
    from scapy.utils import checksum

    for report, extended in ((PLAIN, False), (PROXY.to_report(), True)):
        wire = encode(report)
        pkt = IGMPv3(wire)
        assert checksum(wire) == 0
        assert pkt.type == 0x22 and pkt.numgrp == len(report.records)
        got = [(r.rtype, r.maddr, list(r.srcaddrs)) for r in pkt.records]
        assert got == [(r.record_type, str(r.group), [str(s) for s in r.sources]) for r in report.records]
        assert ("extended" in str(pkt.flags)) == extended  # RFC 9279's E bit, by scapy's own name


def test_scapy_reads_a_query_with_float_codes() -> None:
    from scapy.layers.igmp import IGMPv3

    wire = encode(Query(group=G, max_resp_time=200, suppress=True, qrv=3, qqi=300, sources=(S,)))
    pkt = IGMPv3(wire)
    assert (pkt.mrcode, pkt.gaddr, pkt.s, pkt.qrv, pkt.numsrc) == (0x89, str(G), 1, 3, 1)
    assert pkt.qqic == 0x92  # 300 s rounds down to 288 s = (2 | 0x10) << (1 + 3)


def ipv4_igmp(src: IPv4Address, payload: bytes) -> bytes:
    """IPv4 with TTL 1 and Router Alert (RFC 3376 §4), as a Linux host sends its reports."""
    router_alert = bytes.fromhex("94040000")
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x46, 0xC0, 24 + len(payload), 0, 0, 1, 2, 0, src.packed, ALL_V3_ROUTERS.packed
    )
    header += router_alert
    header = header[:10] + checksum16(header).to_bytes(2, "big") + header[12:]
    return header + payload


def test_tshark_decodes_our_reports(tmp_path: Path) -> None:
    pcap = tmp_path / "igmp.pcap"
    write_pcap(pcap, [ipv4_igmp(S, encode(PLAIN)), ipv4_igmp(S, encode(PROXY.to_report()))])
    fields = [
        "igmp.version",
        "igmp.type",
        "igmp.num_grp_recs",
        "igmp.record_type",
        "igmp.maddr",
        "igmp.saddr",
    ]
    assert tshark_fields(pcap, fields) == [
        "3;0x22;2;1,4;232.1.1.1,239.1.2.3;10.0.0.1,10.0.0.9",
        "3;0x22;1;1;232.1.1.1;10.0.0.1",  # the Receiver List after the record is not an IGMP field
    ]
