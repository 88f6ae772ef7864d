"""A closed-loop step on one host's replay service (aidcnet/agent/replay/step.py): each item starts when
what it waits for has happened here, compute phases take their fabric seconds on the lab's clock, and the
results say when each item was ready, started and ended."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from aidcnet.agent.replay.protocol import Compute, ItemTimes, Receiver, ReplayLoad, ReplayOp
from aidcnet.agent.replay.service import ReplayService
from aidcnet.agent.replay.step import busy_work
from aidcnet.modes import Mode
from aidcnet.replay import build_fragments
from aidcnet.timescale import TimeScale

PORT = 4791


def run_step(
    load: ReplayLoad, scale: TimeScale, inject_after_s: float | None = None
) -> tuple[dict, int, int]:
    """The step on a service of this host's loopback; message 7 (from 'elsewhere') is sent to it
    ``inject_after_s`` wall seconds after the start. Returns its results, the start and the injection."""

    async def run() -> tuple[dict, int, int]:
        svc = ReplayService("127.0.0.1", port=PORT)
        svc.clock = scale
        await svc.listen()
        try:
            svc.load(load.to_wire())
            start = time.time_ns() + 20_000_000
            svc.start({"start_ns": start})
            injected = 0
            if inject_after_s is not None:
                await asyncio.sleep((start - time.time_ns()) / 1e9 + inject_after_s)
                tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                injected = time.time_ns()
                for frag in build_fragments(7, 3000, injected):
                    tx.sendto(frag, ("127.0.0.1", PORT))
                tx.close()
            assert svc.task is not None
            await asyncio.wait_for(svc.task, 10.0)
            await asyncio.sleep(0.05)
            return svc.results(), start, injected
        finally:
            svc.close()

    return asyncio.run(run())


def test_items_wait_for_an_arrival_and_for_each_other(private_lo) -> None:
    # Compute 0 (2 µs fabric at 1:20000: 40 ms), send 1 after it (to this host itself); compute 2 waits for
    # message 7, which arrives 150 ms after the start, and for send 1.
    load = ReplayLoad(
        Mode.UNICAST,
        ops=(ReplayOp(1, 0.0, 5000, ("h2",), after=(0,)),),
        receivers={"h2": Receiver("127.0.0.1")},
        closed_loop=True,
        computes=(Compute(0, 0.0, 2e-6), Compute(2, 0.0, 1e-6, after=(1, 7))),
    )
    out, start, injected = run_step(load, TimeScale(20000), inject_after_s=0.15)
    assert out["step_errors"] == []
    t = {x["id"]: ItemTimes.from_wire(x) for x in out["step"]}
    assert t[0].start_ns >= start and t[0].end_ns - t[0].start_ns >= 40_000_000 * 0.95
    assert t[1].start_ns >= t[0].end_ns  # the send waited for its compute
    stamp = {r["id"]: r["complete_ns"] for r in out["records"]}
    assert stamp[7] >= injected and t[2].ready_ns >= stamp[7] - 1000  # ready when 7 was whole here
    assert t[2].start_ns >= stamp[7] and t[2].end_ns - t[2].start_ns >= 20_000_000 * 0.95
    assert {x["id"] for x in out["op_times"]} == {1}  # a send says what it handed to the kernel
    assert 1 in stamp  # the message it sent to itself arrived


def test_a_step_with_nothing_to_wait_for_ends_at_once_and_real_work_computes(private_lo) -> None:
    load = ReplayLoad(Mode.UNICAST, closed_loop=True, computes=(Compute(0, 0.0, 1e-6),), compute_work=True)
    out, _, _ = run_step(load, TimeScale(20000))
    (item,) = out["step"]
    assert item["end_ns"] - item["start_ns"] >= 20_000_000 * 0.95
    assert busy_work(0.01) >= 1


def test_a_closed_loop_load_survives_the_wire_and_its_cut() -> None:
    from aidcnet.agent.replay.protocol import Reduction

    load = ReplayLoad(
        Mode.HOST_BIER,
        ops=tuple(ReplayOp(i, 0.0, 100, ("h2",), after=(i - 1,) if i else ()) for i in range(300)),
        receivers={"h2": Receiver("10.0.0.2", 2)},
        closed_loop=True,
        computes=tuple(Compute(1000 + i, 0.0, 1e-6, (i,)) for i in range(300)),
        reductions=(Reduction(5000, 0.0, {"job": 1, "mode": "ring", "elements": 16}, (1299,)),),
    )
    lines = load.lines(budget=4000)
    assert len(lines) > 3 and all(len(str(line.to_wire())) < 8000 for line in lines)
    back = [ReplayLoad.from_wire(line.to_wire()) for line in lines]
    assert back[0].closed_loop and not any(b.closed_loop for b in back[1:])
    assert sum((b.ops for b in back), ()) == load.ops
    assert sum((b.computes for b in back), ()) == load.computes
    assert sum((b.reductions for b in back), ()) == load.reductions
    with pytest.raises(ValueError, match=r"reductions\.0\.request: want the allreduce request"):
        ReplayLoad.from_wire({"mode": "unicast", "reductions": [{"id": 1, "t": 0, "request": {}}]})


def test_a_hosts_sends_go_to_its_sender_one_at_a_time() -> None:
    """Sends that become ready together (an MoE layer's dispatches after its attention) are handed on one
    after the other, as an open-loop replay does: a sender waiting on its socket is not re-entered (two
    waits on one socket displace each other, and the first never wakes: found on leaf-spine, host-bier)."""
    from types import SimpleNamespace

    from aidcnet.agent.replay.step import StepRunner

    class OneAtATime:
        def __init__(self) -> None:
            self.busy, self.overlaps, self.sent = False, 0, []

        async def send(self, op, frags, times) -> None:
            self.overlaps += self.busy
            self.busy = True
            await asyncio.sleep(0.01)  # waiting for room on the socket
            self.sent.append(op.id)
            self.busy = False

    async def run() -> OneAtATime:
        service = SimpleNamespace(start_ns=time.time_ns(), clock=TimeScale(1000), op_times={}, sent_ops=0,
                                  max_datagram=1500)  # fmt: skip

        async def until(t: float) -> None:
            return None

        service.until = until
        sender = OneAtATime()
        sends = [ReplayOp(i, 0.0, 3000, ("h2",), after=(0,)) for i in (1, 2, 3)]
        runner = StepRunner(service, sender, sends, [Compute(0, 0.0, 1e-6)], [])  # type: ignore[arg-type]
        await asyncio.wait_for(runner.run(), 5.0)
        return sender

    sender = asyncio.run(run())
    assert sorted(sender.sent) == [1, 2, 3] and sender.overlaps == 0
