"""ReliablePart, the agent service, around a stand-in BIER service: the way back by the BIFT, host-BIER
DATA handed to the BIER host API (held while the BIER socket is full), the endpoint's counters."""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace
from typing import Any

import pytest

from aidcnet.agent.reliable.service import ReliableEndpoint, ReliablePart
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.routing import compute_birts, undirected
from aidcnet.ipv4 import parse_udp
from aidcnet.reliable.header import RELIABLE_UDP_PORT
from aidcnet.timescale import TimeScale

# L is a leaf with hosts H1 (BFR-id 1) and H2 (2); S a spine with H3 (3) behind it.
EDGES = [("H1", "L"), ("H2", "L"), ("L", "S"), ("S", "H3")]
IDS = {"H1": 1, "H2": 2, "H3": 3}
ADDRS = {"H1": "10.9.0.1", "H2": "10.9.0.3", "S": "10.9.0.5"}
PORTS = {"H1": "eth3", "H2": "eth4", "S": "eth1"}


class FakeBierPart:
    def __init__(self, sndbuf: int | None = None) -> None:
        birt = compute_birts(undirected(EDGES), IDS)["L"]
        self.sent: list[tuple[bytes, list[int], int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        host = SimpleNamespace(send=lambda d, r, entropy: self.sent.append((d, list(r), entropy)))
        self.current: Any = SimpleNamespace(
            bier=SimpleNamespace(bsl=64),
            bifts={0: build_bifts(birt, 64)[0]},
            dataplane=SimpleNamespace(neighbors={n: (a, PORTS[n]) for n, a in ADDRS.items()}, sock=self.sock),
            host=host,
            sndbuf=sndbuf,
            loopback="10.255.0.7",
            ebpf=None,
            edge=None,
            report_error=None,
        )

    def add_listener(self, _fn: Any) -> None:
        pass

    def add_forward_listener(self, _fn: Any) -> None:
        pass

    def add_report_listener(self, _port: int, _fn: Any) -> None:
        pass

    def set_edge_hooks(self, on_impose: Any, on_emit: Any, dport: int) -> None:
        self.edge_hooks = (on_impose, on_emit, dport)


def test_a_leaf_knows_the_hosts_behind_each_port_from_its_bift() -> None:
    # Network-BIER's BFER leaf acknowledges for the hosts on the ports it emitted on.
    part = ReliablePart(FakeBierPart())  # type: ignore[arg-type]
    assert part.hosts_behind() == {"eth3": 0b001, "eth4": 0b010, "eth1": 0b100}


def test_toward_follows_the_bift() -> None:
    bier = FakeBierPart()
    part = ReliablePart(bier)  # type: ignore[arg-type]
    assert part.toward(1) == ADDRS["H1"] and part.toward(2) == ADDRS["H2"] and part.toward(3) == ADDRS["S"]
    assert part.toward(9) is None, "no BIFT row: no way back"
    bier.current = None
    assert part.toward(1) is None
    bier.sock.close()


def test_impose_wraps_data_in_ipv4_udp_to_port_4795() -> None:
    async def main() -> None:
        bier = FakeBierPart()
        part = ReliablePart(bier)  # type: ignore[arg-type]
        part._impose(b"\x11data", [2, 3], 0x123456, 4796)
        ((datagram, receivers, entropy),) = bier.sent
        d = parse_udp(datagram)
        assert (d.src, d.dst, d.sport, d.dport, d.payload) == (
            "10.255.0.7",
            "232.1.0.1",
            4796,
            4795,
            b"\x11data",
        )
        assert receivers == [2, 3] and entropy == 0x23456  # 20 bits of entropy (RFC 8296)
        bier.sock.close()

    asyncio.run(main())


def test_impose_waits_while_the_bier_socket_is_full() -> None:
    async def main() -> None:
        bier = FakeBierPart(sndbuf=4096)
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        try:
            while True:  # fill a's buffer: not writable until b reads
                a.send(b"x" * 1024)
        except BlockingIOError:
            pass
        bier.current.dataplane.sock = a
        part = ReliablePart(bier)  # type: ignore[arg-type]
        part._impose(b"one", [2], 1, RELIABLE_UDP_PORT)
        part._impose(b"two", [2], 1, RELIABLE_UDP_PORT)
        assert bier.sent == [] and len(part._pending) == 2
        b.setblocking(False)
        while True:
            try:
                b.recv(2048)
            except BlockingIOError:
                break
        for _ in range(50):
            await asyncio.sleep(0.01)
            if len(bier.sent) == 2:
                break
        assert [parse_udp(d).payload for d, _r, _e in bier.sent] == [b"one", b"two"], "in order, once"
        assert not part._pending
        a.close()
        b.close()
        bier.sock.close()

    asyncio.run(main())


def test_unconfigured_node_says_how_to_fix_it() -> None:
    async def main() -> None:
        bier = FakeBierPart()
        part = ReliablePart(bier)  # type: ignore[arg-type]
        await part.reload(None)
        assert part.counters() == {}
        with pytest.raises(ValueError, match="aidclab configure"):
            part.node()
        bier.sock.close()

    asyncio.run(main())


def test_reset_forgets_the_aggregation_windows_of_earlier_runs() -> None:
    from aidcnet.agent.control import Op
    from aidcnet.reliable.header import Data

    async def main() -> None:
        bier = FakeBierPart()
        part = ReliablePart(bier)  # type: ignore[arg-type]
        python = {"forward": "python", "impose": None, "why": None}
        assert await part.handlers()[Op.RELIABLE_RESET]({}) == {
            "ok": True,
            "forgotten": 0,
            "aggregation": python,
        }
        ep = ReliableEndpoint(4, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0)
        part.endpoint = ep
        ep.node.aggregator.on_data(Data(bfir_id=1, flow_id=7, seq=0, payload=b"x"), 0b110, "up", 0.0)
        assert await part.reset({}) == {"ok": True, "forgotten": 1, "aggregation": python}
        assert ep.node.aggregator.entries == 0 and part.counters()["reliable.agg.forgotten"] == 1
        ep.close()
        bier.sock.close()

    asyncio.run(main())


def test_reset_gives_the_bfr_timers_the_runs_round_trip_and_refuses_one_that_is_not() -> None:
    from aidcnet.agent.reliable.service import bfr_aggregator
    from aidcnet.reliable.timers import timers
    from aidcnet.timescale import TimeScale

    async def main() -> None:
        bier = FakeBierPart()
        part = ReliablePart(bier)  # type: ignore[arg-type]
        scale = TimeScale(1000)
        ep = ReliableEndpoint(4, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0, scale=scale)
        part.endpoint = ep
        near = ep.node.aggregator.config
        assert near == bfr_aggregator(timers(scale))
        await part.reset({"round_trip_s": 0.004})  # the interdc lab's DCI, there and back
        far = ep.node.aggregator.config
        assert far == bfr_aggregator(timers(scale, 0.004)) and far.partial_after > near.partial_after + 0.004
        ep.rescale(TimeScale(2000))  # a rescale keeps the round trip
        assert ep.node.aggregator.config == bfr_aggregator(timers(TimeScale(2000), 0.004))
        for bad in (-1.0, "4ms", True, float("nan")):
            with pytest.raises(ValueError, match="round_trip_s"):
                await part.reset({"round_trip_s": bad})
        await part.reset({})  # a run over links without delay: back to the tuned timers
        assert ep.node.aggregator.config == bfr_aggregator(timers(TimeScale(2000)))
        ep.close()
        bier.sock.close()

    asyncio.run(main())


def test_an_ack_finds_the_entry_its_datas_report_makes_though_both_wait_together() -> None:
    """The eBPF fast path reports a DATA before the DATA leaves the BFR, so its ACK comes back after; the
    two wait on their own fds, and a turn of the loop that served the socket first passed the ACK upstream
    unaggregated (``agg.passed-no-entry``) and left the report's entry waiting for it until its partial
    timer. Every read of the socket takes the reports first."""
    from aidcnet.reliable.header import Ack, Data

    bier = FakeBierPart()
    part = ReliablePart(bier)  # type: ignore[arg-type]
    ep = ReliableEndpoint(5, lambda _b: "127.0.0.1", source="127.0.0.1", bind="127.0.0.1", port=0)
    part.endpoint = ep
    ep.before_read = part._poll_reports  # as reload wires it
    # A report waiting in the ring: DATA seq 0 of flow 7 from BFIR 1 forwarded toward BFR 2 (bit 0b10).
    ring = [
        lambda: ep.node.aggregator.on_data(Data(bfir_id=1, flow_id=7, seq=0, payload=b"x"), 0b10, "u", 0.0)
    ]

    def poll_reports() -> int:
        while ring:
            ring.pop()()
        return 1

    bier.current.ebpf = SimpleNamespace(poll_reports=poll_reports)
    try:
        port = ep.rx.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # its ACK, already on the socket
            s.sendto(Ack(bfir_id=1, flow_id=7, cum=1, reporter=2, highest=1).encode(), ("127.0.0.1", port))
        time.sleep(0.05)
        ep._read()
        agg = ep.node.aggregator.counters
        assert agg.get("passed-no-entry", 0) == 0, dict(agg)
        assert agg.get("absorbed", 0) == 1, dict(agg)
    finally:
        ep.close()
        bier.sock.close()


def test_an_ack_late_in_a_batch_finds_the_entry_of_a_report_written_during_the_batch() -> None:
    """A loop turn that ran late reads many datagrams at once. The fast path goes on forwarding (and
    reporting) meanwhile, so an ACK late in the batch may answer DATA reported after the batch began:
    read with the reports taken once per batch, it went upstream unaggregated, and over the interdc DCI
    the entries left waiting sent 1,657 partials and 21 retransmissions at 0% loss. The reports are taken
    before every datagram."""
    from aidcnet.reliable.header import Ack, Data

    bier = FakeBierPart()
    part = ReliablePart(bier)  # type: ignore[arg-type]
    ep = ReliableEndpoint(5, lambda _b: "127.0.0.1", source="127.0.0.1", bind="127.0.0.1", port=0)
    part.endpoint = ep
    ep.before_read = part._poll_reports

    def forwarded(flow: int) -> None:
        ep.node.aggregator.on_data(Data(bfir_id=1, flow_id=flow, seq=0, payload=b"x"), 0b10, "u", 0.0)

    # What the ring holds at each poll: flow 7's report first, flow 8's written once a datagram was read.
    ring = [[lambda: forwarded(7)], [lambda: forwarded(8)]]

    def poll_reports() -> int:
        batch = ring.pop(0) if ring else []
        for report in batch:
            report()
        return len(batch)

    bier.current.ebpf = SimpleNamespace(poll_reports=poll_reports)
    try:
        port = ep.rx.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for flow in (7, 8):
                s.sendto(
                    Ack(bfir_id=1, flow_id=flow, cum=1, reporter=2, highest=1).encode(), ("127.0.0.1", port)
                )
        time.sleep(0.05)
        assert ep._read() == 2
        agg = ep.node.aggregator.counters
        assert agg.get("passed-no-entry", 0) == 0 and agg.get("absorbed", 0) == 2, dict(agg)
    finally:
        ep.close()
        bier.sock.close()


def test_endpoint_counts_and_receives_on_its_port() -> None:
    async def main() -> None:
        ep = ReliableEndpoint(None, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0)
        ep.attach(asyncio.get_running_loop())
        port = ep.rx.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"\x00" * 16, ("127.0.0.1", port))
            for _ in range(50):
                await asyncio.sleep(0.01)
                if ep.node.totals().get("rx.malformed.bad-version"):
                    break
        assert ep.node.totals()["rx.malformed.bad-version"] == 1
        ep.close()

    asyncio.run(main())


def test_the_agents_udp_ports_are_distinct() -> None:
    """Every port an agent binds by default is its own: the reliable transport first took 4793, the ring
    baseline's (INA's + 1), and every INA worker's config then failed with EADDRINUSE."""
    from aidcnet.agent.bier.ebpf import DELIVER_PORT
    from aidcnet.agent.reliable.node import E2E_SPORT
    from aidcnet.bier.mpls import MPLS_IN_UDP_PORT
    from aidcnet.config import Ina
    from aidcnet.ipv4 import ROCEV2_PORT
    from aidcnet.reliable.header import RELIABLE_UDP_PORT

    ina = Ina.model_fields["port"].default
    ports = {
        "RoCEv2 (replay receivers)": ROCEV2_PORT,
        "INA/PS": ina,
        "ring (INA + 1, aidcnet.agent.ina.worker)": ina + 1,
        "reliable": RELIABLE_UDP_PORT,
        "reliable end-to-end source port": E2E_SPORT,
        "MPLS-in-UDP (BIER)": MPLS_IN_UDP_PORT,
        "eBPF own-bit delivery": DELIVER_PORT,
    }
    assert len(set(ports.values())) == len(ports), ports


def test_an_idle_endpoint_sleeps_long_and_an_event_wakes_it_at_once():
    import asyncio

    from aidcnet.agent.reliable import service as reliable_service
    from aidcnet.agent.reliable.service import ReliableEndpoint

    loop = asyncio.new_event_loop()
    # The endpoint's wall clock stands still: "kicked just now" must not depend on how fast this machine
    # gets from one line to the next (a loaded CI run took over MIN_KICK_S between two nudges).
    ep = ReliableEndpoint(1, lambda _bfr: None, bind="127.0.0.1", port=0, wall=lambda: 1000.0)
    try:
        ep.attach(loop)  # nothing pending: one wake-up a second, not every 10 ms
        assert ep._idle and ep._timer.when() - loop.time() > reliable_service.MAX_SLEEP_S * 10
        kicks = []
        ep.kick = lambda: kicks.append(1)  # type: ignore[method-assign]
        ep.nudge()  # within MIN_KICK_S of the last kick, but idle: kicked anyway
        assert kicks == [1]
        ep._idle = False
        ep.nudge()  # busy and kicked just now: the ≤10 ms timer covers it
        assert kicks == [1]
        ep._kicked -= 2 * reliable_service.MIN_KICK_S
        ep.nudge()  # busy, but the last kick was longer than MIN_KICK_S ago: kicked
        assert kicks == [1, 1]
    finally:
        ep.close()
        loop.close()


def test_a_timer_pass_reads_the_feedback_waiting_on_the_socket_first() -> None:
    """The superpod's spurious retransmissions at 0 % loss: its source hears 63 ACKs per packet end to end,
    fell behind its socket, and a timer pass (a kick, here after its first 256 datagrams) ran the senders'
    timers while ACKs of packets that had arrived waited unread, and resent them. A pass reads first."""
    from aidcnet.agent.reliable.node import ReliableSettings
    from aidcnet.reliable.header import Ack

    wall = [100.0]
    loop = asyncio.new_event_loop()
    ep = ReliableEndpoint(
        1, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0, wall=lambda: wall[0]
    )
    try:
        ep.node.configure(ReliableSettings(initial_rto=1.0, min_rto=1.0, max_rto=2.0), 1)
        receivers = {r: "127.0.0.1" for r in range(2, 302)}  # 300 unicast flows, one packet each
        ep.node.open_unicast_flows(5, receivers, [b"x"], ep.clock())
        assert ep.node.totals()["sender.sent"] == 300
        ep._loop = loop
        port = ep.rx.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for r in receivers:  # every packet arrived: its ACK is on the socket before any timer runs out
                s.sendto(
                    Ack(bfir_id=1, flow_id=5, cum=1, reporter=r, highest=1).encode(), ("127.0.0.1", port)
                )
        wall[0] += 1.5  # past the RTO: the agent was busy while they came
        for _ in range(100):  # the reader callback, with the timer pass it nudges
            ep._drain()
            if not ep.node.sending_done:
                continue
            break
        totals = ep.node.totals()
        assert totals.get("source.rx.ack.packets") == 300 and ep.node.sending_done
        assert totals.get("sender.retransmitted", 0) == 0, "a timer fired for a packet whose ACK was unread"
    finally:
        ep._loop = None
        ep.close()
        loop.close()


def test_a_pass_held_past_a_quarter_of_the_least_rto_is_counted_late_and_an_early_one_is_not() -> None:
    """A retransmission at 0 % loss in a run the sampler judged faithful: the loop that runs the transport's
    timers was held (a busy machine) while the links kept their pace. The endpoint counts the passes that
    came later than a quarter of the least RTO after they were due, in wall time at the lab's scale."""
    from aidcnet.agent.reliable.node import ReliableSettings
    from aidcnet.agent.reliable.service import LATE_SHARE
    from aidcnet.reliable.timers import timers

    scale = TimeScale(50000)
    quarter = scale.wall_s(LATE_SHARE * timers(scale).min_rto)  # 0.625 s of wall time / 4
    assert quarter == pytest.approx(0.15625)
    wall = [100.0]
    loop = asyncio.new_event_loop()
    ep = ReliableEndpoint(
        1, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0, wall=lambda: wall[0], scale=scale
    )
    try:
        ep.node.configure(ReliableSettings(initial_rto=1.0, min_rto=1.0, max_rto=2.0), 1)
        ep.node.open_unicast_flows(5, {2: "127.0.0.1"}, [b"x"], ep.clock())
        ep._loop = loop
        ep.kick()  # work pending: the timer is set at most MAX_SLEEP_S ahead
        assert not ep._idle and ep._due_wall is not None
        wall[0] = ep._due_wall + quarter * 0.9  # late, but within the share
        ep.kick()
        assert (ep.late_wakeups, ep.late_us) == (0, 0)
        wall[0] = ep._due_wall - 0.005  # an event before the timer is not late at all
        ep.kick()
        assert ep.late_wakeups == 0
        wall[0] = ep._due_wall + 0.4  # held 0.4 s: past the quarter
        ep.kick()
        assert ep.late_wakeups == 1 and ep.late_us == pytest.approx(400_000, abs=1)
        ep.rescale(TimeScale(20000))  # a faster scale: the same wall lateness is a larger share
        assert ep._late_after == pytest.approx(0.0625)
        # Over a 4 ms round trip (a DCI) the least RTO is 8 ms longer: lateness of a few ms fires nothing.
        ep.over_round_trip(0.004)
        assert ep._late_after == pytest.approx(TimeScale(20000).wall_s(LATE_SHARE * (12.5e-6 + 0.008)))
        assert ep._late_after == pytest.approx(timers(TimeScale(20000), 0.004).min_rto / 4 * 20000)
    finally:
        ep._loop = None
        ep.close()
        loop.close()


def test_a_datagram_taken_in_a_quarter_of_the_least_rto_after_it_arrived_is_counted_late() -> None:
    """An ACK that waited in a busy agent's socket: the kernel stamped it on arrival, the node got it late.
    Counted by the endpoint's real socket, stamped by the kernel."""
    import socket
    import time

    scale = TimeScale(50000)
    ep = ReliableEndpoint(1, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0, scale=scale)
    try:
        assert ep._late_after == pytest.approx(0.15625)
        ep.count_late_arrival(0)  # no stamp: not counted
        ep.count_late_arrival(time.time_ns() - 100_000_000)  # 0.1 s: within the share
        assert (ep.late_arrivals, ep.late_arrival_us) == (0, 0)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"not a reliable message", ep.rx.getsockname())
            time.sleep(0.25)  # held past the quarter before the endpoint reads it
            assert ep._read() == 1
        assert ep.late_arrivals == 1 and ep.late_arrival_us >= 250_000
    finally:
        ep.close()


def test_the_fabric_clock_runs_scale_times_slower_and_stays_continuous_when_rescaled() -> None:
    from aidcnet.agent.reliable.service import FabricClock

    wall = [50.0]
    clock = FabricClock(TimeScale(20000), lambda: wall[0])
    wall[0] += 2.0
    assert clock() == pytest.approx(2.0 / 20000)
    clock.rescale(TimeScale(40000))  # --confirm's second run: the same fabric time, twice the wall time
    assert clock() == pytest.approx(2.0 / 20000)
    wall[0] += 2.0
    assert clock() == pytest.approx(2.0 / 20000 + 2.0 / 40000)
    assert clock.wall_s(1e-6) == pytest.approx(0.04)
    unshaped = FabricClock(TimeScale.unshaped(), lambda: wall[0])
    wall[0] += 1.0
    assert unshaped() == pytest.approx(1.0)


def test_a_node_says_what_its_aggregation_sees() -> None:
    """The reliable modes refuse to start where a BFR would relay instead of aggregating: it says why."""
    bier = FakeBierPart()
    part = ReliablePart(bier)  # type: ignore[arg-type]
    assert part.aggregation() == {"forward": "python", "impose": None, "why": None}
    bier.current.ebpf = SimpleNamespace(ring=object())
    assert part.aggregation()["forward"] == "ebpf"
    bier.current.edge, bier.current.net_ebpf = object(), object()
    assert part.aggregation()["impose"] == "ebpf"
    bier.current.ebpf = SimpleNamespace(ring=None)
    bier.current.report_error = "eBPF reports not started: no bier_report ring buffer: rebuild the images"
    said = part.aggregation()
    assert said["forward"] is None and said["impose"] is None and "rebuild the images" in said["why"]
    assert said["impose_why"] == said["why"]
    bier.current = None
    assert part.aggregation()["forward"] is None
    bier.sock.close()


def test_a_source_waits_on_its_protocol_from_a_pass_to_the_answer_that_lets_it_send() -> None:
    """A window of one over a long round trip: after the first DATA the source may send nothing until its
    ACK arrives. That wait is the protocol's (the fidelity verdict leaves it out of the time the host had
    data due); it ends at the kernel's stamp of the ACK, so the time our loop took to read it stays ours.
    An ACK that opens nothing ends no wait, and a timer ends one when it runs out."""
    from aidcnet.agent.reliable.node import ReliableSettings
    from aidcnet.reliable.header import Ack

    loop = asyncio.new_event_loop()
    ep = ReliableEndpoint(1, lambda _b: None, source="127.0.0.1", bind="127.0.0.1", port=0)
    try:
        ep.node.configure(ReliableSettings(window=1, initial_rto=5.0, min_rto=5.0, max_rto=10.0), 1)
        ep._loop = loop
        ep.node.open_unicast_flows(5, {2: "127.0.0.1"}, [b"a", b"b", b"c"], ep.clock())
        assert ep.node.totals()["sender.sent"] == 1
        before = time.time_ns()
        ep.kick()  # the pass: one DATA out, two behind the window
        waits = ep.node.waits
        assert waits.waiting and waits.spans == []
        port = ep.rx.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(Ack(bfir_id=1, flow_id=5, cum=0, reporter=2, highest=0).encode(), ("127.0.0.1", port))
            time.sleep(0.05)
            assert ep._read() == 1  # a duplicate of nothing: the window stays shut, the wait goes on
            assert waits.waiting and waits.spans == []
            s.sendto(Ack(bfir_id=1, flow_id=5, cum=1, reporter=2, highest=1).encode(), ("127.0.0.1", port))
            arrived = time.time_ns()
            time.sleep(0.2)  # the loop is busy: the ACK waits in the socket
            assert ep._read() == 1
        assert ep.node.totals()["sender.sent"] == 2
        ((start, end),) = waits.spans
        assert before <= start and arrived - 10_000_000 <= end <= arrived + 10_000_000  # the kernel's stamp
        assert time.time_ns() - end >= 200_000_000  # the 0.2 s the ACK sat unread are not in it
        ep.kick()  # the next pass: waiting again, now until the retransmission timer
        assert waits.waiting
        waits.end(time.time_ns() + 60 * 10**9)  # a pass long after the timer ran out ends it at the timer
        assert waits.spans[-1][1] - waits.spans[-1][0] <= 10 * 10**9
    finally:
        ep._loop = None
        ep.close()
        loop.close()
