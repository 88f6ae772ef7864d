"""The BFIR's receiver sets: per-BFER IGMP state over BIER and Receiver Proxy Reports → BitStrings."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest

from aidcnet.igmp.bfir import BferMemberships, ProxyReceivers, ProxyRefused
from aidcnet.igmp.codec import GroupRecord, IgmpDecodeError, RecordType, Report, Tlv
from aidcnet.igmp.extensions import ProxyReport, bfr_id_tlv
from aidcnet.igmp.router import IgmpTimers

G = IPv4Address("232.1.1.1")
S1, S2, S3 = (IPv4Address(f"10.0.0.{n}") for n in (1, 2, 3))
T = RecordType
GMI = 260.0


def from_bfer(bfr_id: int, kind: RecordType, *sources: IPv4Address) -> Report:
    return Report((GroupRecord(kind, G, sources),), (bfr_id_tlv(bfr_id),))


def test_per_bfer_state_gives_bitstrings() -> None:
    b = BferMemberships(IgmpTimers(), bsl=64)
    assert b.receive(from_bfer(1, T.MODE_IS_INCLUDE, S1), 0.0) == 1
    b.receive(from_bfer(3, T.MODE_IS_EXCLUDE, S2), 0.0)  # wants every source but S2
    b.receive(from_bfer(66, T.MODE_IS_INCLUDE, S1, S2), 0.0)  # SI 1, bit 2
    assert b.bitstring(S1, G, 1.0) == {0: 0b101, 1: 0b10}
    assert b.bitstring(S2, G, 1.0) == {1: 0b10}
    assert b.bitstring(S3, G, 1.0) == {0: 0b100}
    assert b.entries(1.0) == {
        (S1, G): {0: 0b101, 1: 0b10},
        (S2, G): {1: 0b10},
        (None, G): {0: 0b100},
    }
    b.receive(from_bfer(1, T.BLOCK_OLD_SOURCES, S1), 2.0)  # no queries over BIER: the BFER left S1
    assert b.bitstring(S1, G, 3.0) == {0: 0b101, 1: 0b10}  # ... but the state ages on the RFC timers
    assert b.bitstring(S1, G, GMI) == {}  # every BFER's state set at 0 ran out


def test_bfer_reports_need_a_bfr_id_and_unknown_tlvs_are_counted() -> None:
    b = BferMemberships(IgmpTimers(), bsl=64)
    with pytest.raises(IgmpDecodeError) as err:
        b.receive(Report((GroupRecord(T.MODE_IS_INCLUDE, G, (S1,)),)), 0.0)
    assert err.value.reason == "bad-bfr-id"
    b.receive(Report((GroupRecord(T.MODE_IS_INCLUDE, G, (S1,)),), (Tlv(999), bfr_id_tlv(2))), 0.0)
    assert b.counters["unknown-extension-999"] == 1 and b.bitstring(S1, G, 0.0) == {0: 0b10}


R1, R2, R3 = IPv4Address("10.1.0.2"), IPv4Address("10.2.0.2"), IPv4Address("10.3.0.2")
TABLE = {R1: 1, R2: 2, R3: 65}


def test_proxy_report_replaces_and_removes() -> None:
    p = ProxyReceivers(TABLE, allowed_ports={"eth3"}, bsl=64)
    change = p.receive("eth3", ProxyReport(G, S1, (R1, R3)))
    assert change.bfr_ids == {1, 65} and change.previous == frozenset()
    assert p.bitstring(S1, G) == {0: 0b1, 1: 0b1}
    p.receive("eth3", ProxyReport(G, S1, (R2,)))  # the whole set, not an addition
    assert p.bitstring(S1, G) == {0: 0b10}
    p.receive("eth3", ProxyReport(G, None, (R1,)))
    assert p.bitstring(S2, G) == {0: 0b1}  # (*,G) when no (S,G) matches
    change = p.receive("eth3", ProxyReport(G, S1, ()))
    assert change.bfr_ids == frozenset() and change.previous == {2}
    assert p.bitstring(S1, G) == {0: 0b1}  # falls back to (*,G)
    assert p.counters == {"installed": 3, "removed": 1}


def test_proxy_refusals_are_counted_and_change_nothing() -> None:
    p = ProxyReceivers(TABLE, allowed_ports={"eth3"}, bsl=64, max_channels=1)
    p.receive("eth3", ProxyReport(G, S1, (R1,)))
    for port, report, reason in (
        ("eth4", ProxyReport(G, S1, (R2,)), "port-not-allowed"),
        ("eth3", ProxyReport(G, S1, (R2, IPv4Address("10.9.9.9"))), "unknown-receiver"),
        ("eth3", ProxyReport(G, S2, (R2,)), "too-many-channels"),
    ):
        with pytest.raises(ProxyRefused) as err:
            p.receive(port, report)
        assert err.value.reason == reason
        assert p.counters[f"refused-{reason}"] == 1
        assert port in str(err.value) or reason != "port-not-allowed"  # names the port at fault
    assert p.channels == {(S1, G): frozenset({1})}
