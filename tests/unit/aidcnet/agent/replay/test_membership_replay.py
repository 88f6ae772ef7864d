"""The host agent's side of the igmp and proxy replay modes, on the loopback interface: kernel joins
per op that leave once the message is complete, and Receiver Proxy Reports around the data."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from aidcnet.agent.replay.protocol import Join, Receiver, ReplayLoad, ReplayOp, Report
from aidcnet.agent.replay.signalling import PROXY_REPORT_BYTES_SENT, PROXY_REPORTS_SENT
from aidcnet.igmp.codec import decode
from aidcnet.igmp.extensions import proxy_report
from aidcnet.modes import Mode
from aidcnet.replay import build_fragments

GROUP, SOURCE = "239.101.0.7", "127.0.0.1"
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(packet: bytes) -> bool:
    """Only this test's packets: other tests may join groups or send IGMP on lo meanwhile."""
    if packet[9] == 17:
        return socket.inet_ntoa(packet[16:20]) == GROUP
    try:
        report = proxy_report(decode(packet[(packet[0] & 0xF) * 4 :]))
    except Exception:
        return False
    return report is not None and str(report.group) == GROUP


def _sender() -> socket.socket:
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind((SOURCE, 0))
    tx.setsockopt(
        socket.IPPROTO_IP,
        socket.IP_MULTICAST_IF,
        struct.pack("4s4si", b"\0" * 4, b"\0" * 4, socket.if_nametoindex("lo")),
    )
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    return tx


def _receive_one_op(svc, hold_s: float) -> None:
    """An igmp receiver of op 0 only, joined at t = 0 on the loopback."""
    svc.load(
        ReplayLoad(Mode.IGMP, interface="lo", joins=(Join(0, 0.0, GROUP, SOURCE),), hold_s=hold_s).to_wire()
    )


PROXY_RECEIVERS = {"h2": Receiver("10.0.0.2"), "h3": Receiver("10.0.0.3")}


def test_igmp_receiver_joins_at_t_and_leaves_once_the_message_is_complete() -> None:
    from aidcnet.agent.replay import service as rs

    port = _free_udp_port()

    async def run() -> tuple[dict, dict]:
        svc = rs.ReplayService("127.0.0.1", port=port)
        await svc.listen()
        try:
            # Ops 0 and 1 share the group: one socket (no duplicate copies), left after both.
            joins = (Join(0, 0.05, GROUP, SOURCE), Join(1, 0.05, GROUP, SOURCE))
            load = ReplayLoad(Mode.IGMP, interface="lo", joins=joins, lead_s=0.05, hold_s=1.0)
            reply = svc.load(load.to_wire())
            assert reply["joins"] == 2
            t0 = time.time_ns()
            svc.start({"start_ns": t0})
            tx = _sender()
            for frag in build_fragments(9, 100, t0):  # before the join: nobody receives it
                tx.sendto(frag, (GROUP, port))
            await asyncio.sleep(0.1)
            held = svc.sender.signals.held
            assert len(held) == 1 and held[(GROUP, SOURCE)][1] == 2
            for msg in (0, 1):
                for frag in build_fragments(msg, 20000, t0):
                    tx.sendto(frag, (GROUP, port))
            await asyncio.sleep(0.1)
            status = svc.status()
            assert status["done"], svc.reassembly.to_dict()  # both complete: both left, long before hold_s
            assert svc.sender.signals.held == {}
            for frag in build_fragments(2, 100, t0):  # after the leave: not received
                tx.sendto(frag, (GROUP, port))
            await asyncio.sleep(0.05)
            tx.close()
            return svc.results(), status
        finally:
            svc.close()

    out, _ = asyncio.run(run())
    recs = {r["id"]: r for r in out["records"]}
    assert sorted(recs) == [0, 1]
    assert all(r["checksum_ok"] and r["duplicates"] == 0 for r in recs.values())
    joins = {op: (j, left) for op, j, left in out["joins"]}
    for op in (0, 1):
        join_ns, leave_ns = joins[op]
        assert join_ns <= recs[op]["first_ns"] <= recs[op]["complete_ns"] <= leave_ns


def test_igmp_receiver_leaves_at_the_hold_deadline_without_its_message() -> None:
    from aidcnet.agent.replay import service as rs

    async def run() -> dict:
        svc = rs.ReplayService("127.0.0.1", port=_free_udp_port())
        await svc.listen()
        try:
            _receive_one_op(svc, hold_s=0.1)
            svc.start({"start_ns": time.time_ns()})
            await asyncio.sleep(0.3)
            assert svc.status()["done"] and svc.sender.signals.held == {}
            return svc.results()
        finally:
            svc.close()

    out = asyncio.run(run())
    ((op, join_ns, leave_ns),) = out["joins"]
    assert op == 0 and 0.09 < (leave_ns - join_ns) / 1e9 < 0.3
    assert out["records"] == []


def test_proxy_source_reports_before_its_data_and_withdraws_after(private_lo) -> None:
    from aidcnet.agent.replay import service as rs
    from orchestrator.experiment.igmp_plan import ReportStep, report_bytes

    port = _free_udp_port()
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    cap.bind(("lo", 0))
    cap.settimeout(0.5)
    receivers = ["10.0.0.2", "10.0.0.3"]

    async def run() -> tuple[dict, tuple[int, int]]:
        svc = rs.ReplayService("127.0.0.1", port=port)
        await svc.listen()
        try:
            load = ReplayLoad(
                Mode.PROXY,
                (ReplayOp(0, 0.0, 100, ("h2", "h3"), GROUP),),
                PROXY_RECEIVERS,
                interface="lo",
                reports=(Report(0, True, GROUP, tuple(receivers)), Report(0, False, GROUP, ())),
                hold_s=0.1,
            )
            svc.load(load.to_wire())
            svc.start({"start_ns": time.time_ns()})
            await asyncio.sleep(0.1)
            assert not svc.status()["done"]  # the withdrawal waits hold_s behind the data
            await asyncio.sleep(0.2)
            assert svc.status()["done"] and not svc.tally.errors, svc.tally.errors
            return svc.results(), (svc.counters[PROXY_REPORTS_SENT], svc.counters[PROXY_REPORT_BYTES_SENT])
        finally:
            svc.close()

    out, counted = asyncio.run(run())
    seen = []  # (protocol, packet) of what left on lo, in order
    try:
        while len(seen) < 3:
            packet, addr = cap.recvfrom(65536)
            if addr[2] == PACKET_OUTGOING and packet[9] in (2, 17) and _ours(packet):
                seen.append((packet[9], packet))
    except TimeoutError:
        pass
    finally:
        cap.close()
    assert [p for p, _ in seen] == [2, 17, 2]
    first, last = (proxy_report(decode(pkt[(pkt[0] & 0xF) * 4 :])) for p, pkt in (seen[0], seen[2]))
    assert [str(r) for r in first.receivers] == receivers and str(first.source) == SOURCE
    assert last.receivers == ()
    # What the agent counts is what went out, and what the pure planner says a report costs.
    sizes = [len(seen[0][1]), len(seen[2][1])]
    assert [e[:2] for e in out["reports"]] == [[0, True], [0, False]]
    assert (out["reports"][1][2] - out["reports"][0][2]) / 1e9 >= 0.1
    from ipaddress import IPv4Address

    addresses = {"h2": IPv4Address("10.0.0.2"), "h3": IPv4Address("10.0.0.3")}
    step = ReportStep(0, "h1", GROUP, ("h2", "h3"), True)
    assert sizes[0] == report_bytes(step, IPv4Address(SOURCE), addresses)
    assert counted == (2, sum(sizes))


def test_membership_fields_are_checked_and_belong_to_their_mode() -> None:
    from aidcnet.agent.replay.service import ReplayService

    svc = ReplayService("127.0.0.1")
    join, report = Join(0, 0.0, GROUP, SOURCE).to_wire(), Report(0, True, GROUP, ()).to_wire()
    base = {"interface": "lo"}
    with pytest.raises(ValueError, match="only igmp receivers"):
        svc.load({**base, "mode": "net-bier", "joins": [join]})
    with pytest.raises(ValueError, match="only proxy sources"):
        svc.load({**base, "mode": "igmp", "reports": [report]})
    with pytest.raises(ValueError, match=r"joins\.0\.group: '10\.0\.0\.1' is not an IPv4 multicast group"):
        svc.load({**base, "mode": "igmp", "joins": [{**join, "group": "10.0.0.1"}]})
    with pytest.raises(ValueError, match=r"reports\.0\.receivers: 'not-an-address' is not an IPv4 address"):
        svc.load({**base, "mode": "proxy", "reports": [{**report, "receivers": ["not-an-address"]}]})
    with pytest.raises(ValueError, match=r"reports\.0: missing 'before'"):
        svc.load({**base, "mode": "proxy", "reports": [{"op": 0, "group": GROUP, "receivers": []}]})
    with pytest.raises(ValueError, match="igmp needs the fabric interface"):
        svc.load({"mode": "igmp"})
    with pytest.raises(ValueError, match=r"proxy op 3 needs its multicast group \(group\)"):
        svc.load({**base, "mode": "proxy", "ops": [ReplayOp(3, 0.0, 10, ()).to_wire()]})
    with pytest.raises(ValueError, match=r"lead_s -1\.0 must be >= 0"):
        svc.load({**base, "mode": "proxy", "lead_s": -1})


def test_igmp_receiver_stays_while_its_message_is_still_arriving() -> None:
    """A message whose fragments keep arriving past t + lead + hold (a loaded machine) keeps its
    receiver joined until it is whole: the hold counts from the last fragment, not from the due time."""
    from aidcnet.agent.replay import service as rs

    port = _free_udp_port()
    hold_s = 0.15

    async def run() -> dict:
        svc = rs.ReplayService("127.0.0.1", port=port)
        await svc.listen()
        try:
            _receive_one_op(svc, hold_s=hold_s)
            t0 = time.time_ns()
            svc.start({"start_ns": t0})
            await asyncio.sleep(0.05)
            tx = _sender()
            frags = build_fragments(0, 40000, t0)
            assert len(frags) >= 5
            # One fragment every hold/2: the message takes about 2.5 holds, the gaps stay below one.
            for frag in frags:
                tx.sendto(frag, (GROUP, port))
                await asyncio.sleep(hold_s / 2)
            tx.close()
            await asyncio.sleep(0.05)
            assert svc.status()["done"] and svc.sender.signals.held == {}
            return svc.results()
        finally:
            svc.close()

    out = asyncio.run(run())
    (rec,) = out["records"]
    assert rec["checksum_ok"] and rec["complete_ns"] is not None
    ((_, join_ns, leave_ns),) = out["joins"]
    assert (rec["complete_ns"] - join_ns) / 1e9 > 2 * hold_s  # arrived well past the old fixed deadline
    assert rec["complete_ns"] <= leave_ns


def test_proxy_reports_leave_at_their_t_not_behind_the_op_before(private_lo) -> None:
    """With a lead, op 1's report is due at its t while op 0's data still waits out its lead: the report
    goes at t, not after op 0's data (a modelled FHR would serve it a lead late)."""
    from aidcnet.agent.replay import service as rs

    port = _free_udp_port()
    other = "239.101.0.9"

    async def run() -> dict:
        svc = rs.ReplayService("127.0.0.1", port=port)
        await svc.listen()
        try:
            load = ReplayLoad(
                Mode.PROXY,
                (ReplayOp(0, 0.0, 100, ("h2",), GROUP), ReplayOp(1, 0.05, 100, ("h3",), other)),
                PROXY_RECEIVERS,
                interface="lo",
                reports=(Report(0, True, GROUP, ("10.0.0.2",)), Report(1, True, other, ("10.0.0.3",))),
                lead_s=0.3,
                hold_s=0.1,
            )
            svc.load(load.to_wire())
            start = time.time_ns()
            svc.start({"start_ns": start})
            for _ in range(100):
                await asyncio.sleep(0.02)
                if svc.status()["done"]:
                    break
            assert svc.status()["done"] and not svc.tally.errors, svc.tally.errors
            out = svc.results()
            out["start"] = start
            return out
        finally:
            svc.close()

    out = asyncio.run(run())
    sent = {op: (ns - out["start"]) / 1e9 for op, before, ns in out["reports"] if before}
    assert sent[0] < 0.05
    assert 0.05 <= sent[1] < 0.2, sent  # at op 1's t, long before op 0's data at 0.3 s
