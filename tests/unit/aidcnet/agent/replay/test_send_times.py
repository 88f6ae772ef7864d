"""What the replay service says of its own timing: per op, when it was due and when its first and last
datagram went to the kernel (what a fidelity verdict needs to see a host whose link idled while it had data
due); and every delivery timed by the kernel's receive stamp, so a receiver that reads late does not
stretch what it measures."""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace
from typing import Any

from aidcnet.agent.replay.protocol import Receiver, ReplayLoad, ReplayOp
from aidcnet.agent.replay.service import ReplayPart, ReplayService
from aidcnet.ipv4 import UdpDatagram
from aidcnet.modes import Mode
from aidcnet.replay import build_fragments, fragment_sizes
from aidcnet.rocev2 import BTH_SIZE
from aidcnet.roles import Role
from aidcnet.timescale import TimeScale
from aidcnet.udpio import mreqn

PORT = 4791
GROUP = "239.100.0.5"


def test_a_unicast_source_says_when_each_op_was_due_and_left(private_lo) -> None:
    # Two receivers on this host's loopback: each op leaves twice, one copy per receiver.
    receivers = {"h2": Receiver("127.0.0.1"), "h3": Receiver("127.0.0.1")}
    ops = (ReplayOp(0, 0.0, 20_000, ("h2", "h3")), ReplayOp(1, 0.05, 9_000, ("h3",)))

    async def run() -> tuple[dict, int]:
        svc = ReplayService("127.0.0.1", port=PORT)
        await svc.listen()
        try:
            svc.load(ReplayLoad(Mode.UNICAST, ops, receivers, max_datagram=4000).to_wire())
            start = time.time_ns() + 20_000_000
            svc.start({"start_ns": start})
            assert svc.task is not None
            await asyncio.wait_for(svc.task, 5.0)
            await asyncio.sleep(0.05)
            return svc.results(), start
        finally:
            svc.close()

    out, start = asyncio.run(run())
    times = {t["id"]: t for t in out["op_times"]}
    assert sorted(times) == [0, 1]
    for op in ops:
        t = times[op.id]
        frags = fragment_sizes(op.size, 4000)
        copies = len(op.receivers)
        assert t["due_ns"] == start + int(op.t * 1e9)
        assert t["due_ns"] <= t["first_ns"] <= t["last_ns"] < t["due_ns"] + 1_000_000_000
        # UDP payload bytes handed to the kernel: each fragment behind its RoCEv2 BTH.
        sent = (op.size + BTH_SIZE * len(frags)) * copies
        assert (t["datagrams"], t["bytes"]) == (len(frags) * copies, sent)
    recs = {r["id"]: r for r in out["records"]}
    assert recs[0]["duplicates"] == 1 and recs[1]["checksum_ok"]


def test_deliveries_are_timed_when_the_kernel_received_them_not_when_we_read(private_lo) -> None:
    """The loop is held (a busy receiver) while a message arrives on the replay port and another on a
    joined group: each is timed at its arrival, not a hold later when the reader runs."""
    hold_s = 0.3

    async def run() -> tuple[dict, int, int]:
        svc = ReplayService("127.0.0.1", port=PORT)
        await svc.listen()
        try:
            svc.load(ReplayLoad(Mode.NET_BIER, interface="lo", groups=(GROUP,)).to_wire())
            # The kernel turns receive stamping on for everyone a moment after the first socket asks (a
            # deferred work item); a packet that arrives before is stamped when read. An agent's sockets
            # ask at its first replay request, a second and more before any run's data.
            await asyncio.sleep(0.1)
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            tx.setsockopt(
                socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn("0.0.0.0", socket.if_nametoindex("lo"))
            )
            sent = time.time_ns()
            for frag in build_fragments(0, 20_000, sent):
                tx.sendto(frag, ("127.0.0.1", PORT))
            for frag in build_fragments(1, 20_000, sent):
                tx.sendto(frag, (GROUP, PORT))
            tx.close()
            done = time.time_ns()
            time.sleep(hold_s)  # the event loop is held: nothing reads the sockets meanwhile
            await asyncio.sleep(0.05)
            return svc.results(), sent, done
        finally:
            svc.close()

    out, sent, done = asyncio.run(run())
    recs = {r["id"]: r for r in out["records"]}
    assert sorted(recs) == [0, 1] and all(r["checksum_ok"] for r in recs.values())
    for rec in recs.values():
        # Read no earlier than done + hold_s; received (on lo: as it was sent) well before.
        assert sent <= rec["first_ns"] <= rec["complete_ns"] < done + int(hold_s / 2 * 1e9), rec


class _Dataplane:
    def __init__(self, stamp: int) -> None:
        self.rx_stamp_ns = stamp
        self.stamping = 0

    def enable_rx_stamps(self) -> None:
        self.stamping += 1


class _BierPart:
    """The BIER service part as the replay sees it: the running service's dataplane, and its listeners."""

    def __init__(self) -> None:
        self.current: Any = SimpleNamespace(dataplane=_Dataplane(777), host=object())
        self.listeners: list[Any] = []

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)


def test_host_bier_deliveries_carry_the_bier_dataplanes_receive_stamp(private_lo) -> None:
    bier = _BierPart()
    part = ReplayPart(Role.GPU_HOST, bier)  # type: ignore[arg-type]
    part.config = SimpleNamespace(  # type: ignore[assignment]
        loopback=SimpleNamespace(ip="127.0.0.1"), smallest_queue_bytes=None, clock=TimeScale.unshaped()
    )
    fragment = build_fragments(3, 100, 0)[0]

    async def run() -> None:
        first = bier.current
        await part._service()
        await part._service()
        assert first.dataplane.stamping == 1  # asked once per BIER service
        (listener,) = bier.listeners
        assert listener(UdpDatagram("10.0.0.1", "232.1.0.1", 49152, PORT, 64, fragment))
        assert part.current is not None and part.current.reassembly.records[3].first_ns == 777
        bier.current = SimpleNamespace(dataplane=_Dataplane(0), host=object())  # a reload rebuilt it
        await part._service()
        assert bier.current.dataplane.stamping == 1
        await part.stop()

    asyncio.run(run())


def test_a_run_given_up_on_is_stopped_what_it_sent_stays_and_the_next_load_is_taken(private_lo) -> None:
    """One op now, one a minute later: stopped between them, the host is idle again, the first op's times
    and delivery stay, the second was never sent, and a new load is not refused as "a replay is running"."""
    receivers = {"h2": Receiver("127.0.0.1")}
    ops = (ReplayOp(0, 0.0, 5_000, ("h2",)), ReplayOp(1, 60.0, 5_000, ("h2",)))

    async def run() -> tuple[dict, dict, dict, dict]:
        svc = ReplayService("127.0.0.1", port=PORT)
        await svc.listen()
        try:
            svc.load(ReplayLoad(Mode.UNICAST, ops, receivers).to_wire())
            svc.start({"start_ns": time.time_ns()})
            while svc.sent_ops < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            idle = ReplayService("127.0.0.1", port=PORT + 1).stop()  # nothing ever ran there
            stopped = svc.stop()
            assert svc.task is not None
            await asyncio.wait([svc.task], timeout=5.0)
            status, results = svc.status(), svc.results()
            svc.load(ReplayLoad(Mode.UNICAST, ops[:1], receivers).to_wire())
            return idle, stopped, status, results
        finally:
            svc.close()

    idle, stopped, status, results = asyncio.run(run())
    assert idle == {"ok": True, "stopped": False, "sent_ops": 0, "ops": 0}
    assert stopped == {"ok": True, "stopped": True, "sent_ops": 1, "ops": 2}
    assert status["done"] and status["sent_ops"] == 1
    assert [t["id"] for t in results["op_times"] if t["last_ns"] is not None] == [0]
    assert [r["id"] for r in results["records"]] == [0]
