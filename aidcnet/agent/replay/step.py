"""A closed-loop step on one host (docs/training.md): its items (sends, compute phases, AllReduce joins)
started by :class:`aidcnet.step.HostSchedule` as the events they wait for happen here, on the lab's clock.

The events: a message op arrived whole here (the kernel's receive stamp of its last datagram, from the
replay service's reassembly), or one of this host's own items ended. A send is handed to the run's sender
(the same senders an open-loop replay uses); a compute phase waits its fabric seconds times the time scale
(or, with ``compute_work``, does real arithmetic for that long, off the event loop); an AllReduce join runs
the host's INA worker (``aidcnet.agent.ina.worker``) with the op's request, whatever its collective mode.
The schedule counts in fabric seconds from the run's zero; every wall/fabric conversion is the service's
:class:`~aidcnet.timescale.TimeScale`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from aidcnet.agent.replay.protocol import Compute, ItemTimes, OpTimes, Reduction, ReplayOp
from aidcnet.replay import build_fragments
from aidcnet.step import HostSchedule, Item, Kind, Start

if TYPE_CHECKING:
    from aidcnet.agent.ina.worker import InaWorkerService
    from aidcnet.agent.replay.senders import Sender
    from aidcnet.agent.replay.service import ReplayService

log = logging.getLogger("aidcnet.replay")

# Real work: numpy matrix products of this side, repeated until the phase's wall time has passed.
WORK_SIDE = 128


def busy_work(wall_s: float) -> int:
    """Arithmetic on this thread for ``wall_s`` seconds (a compute phase as real work); its products."""
    import numpy as np

    a = np.random.default_rng(0).random((WORK_SIDE, WORK_SIDE), dtype=np.float32)
    end = time.monotonic() + wall_s
    done = 0
    while time.monotonic() < end:
        a = a @ a
        a /= np.abs(a).max() or 1.0
        done += 1
    return done


class StepRunner:
    """One host's part of a closed-loop run: :meth:`run` until every item here has ended."""

    def __init__(
        self, service: ReplayService, sender: Sender, sends: list[ReplayOp], computes: list[Compute],
        reductions: list[Reduction], work: bool = False,
    ) -> None:  # fmt: skip
        self.service, self.sender = service, sender
        self.sends: dict[int, ReplayOp] = {op.id: op for op in sends}
        self.computes: dict[int, Compute] = {c.id: c for c in computes}
        self.reductions: dict[int, Reduction] = {r.id: r for r in reductions}
        self.work = work
        items = [Item(op.id, Kind.SEND, op.t, op.after) for op in self.sends.values()]
        items += [Item(c.id, Kind.COMPUTE, c.t, c.after, c.seconds) for c in self.computes.values()]
        items += [Item(r.id, Kind.REDUCE, r.t, r.after, job=r.job) for r in self.reductions.values()]
        self.schedule = HostSchedule.of(items)
        self.times: dict[int, ItemTimes] = {}
        self.reduced: dict[int, dict[str, Any]] = {}
        self.errors: list[str] = []
        self._finished = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        # One send at a time, as an open-loop replay hands them on: the senders wait on their socket
        # (writable, sock_sendto), and two waits on one socket displace each other (the first never wakes).
        self._sending = asyncio.Lock()

    @property
    def items(self) -> int:
        return len(self.schedule.items)

    def hold(self, worker: InaWorkerService | None) -> None:
        """Before the start: the rings this host joins later hold what reaches them early."""
        if worker is None:
            return
        worker.release_rings()
        for r in self.reductions.values():
            if "addresses" in r.request:
                worker.hold_ring(r.job, r.request["addresses"])

    # -- the clock: fabric seconds from the run's zero ---------------------------------------------------
    def fabric(self, wall_ns: int) -> float:
        assert self.service.start_ns is not None
        return self.service.clock.fabric_s_of_ns(wall_ns - self.service.start_ns)

    async def run(self) -> None:
        self._launch(self.schedule.begin(0.0))
        self._check_done()
        await self._finished.wait()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def arrived(self, msg_id: int, stamp_ns: int) -> None:
        """Message ``msg_id`` is whole here, its last datagram stamped ``stamp_ns`` by the kernel."""
        self._launch(self.schedule.happened(msg_id, self.fabric(stamp_ns)))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._finished.set()

    # -- items ----------------------------------------------------------------------------------------
    def _launch(self, starts: list[Start]) -> None:
        for s in starts:
            task = asyncio.get_running_loop().create_task(self._item(s))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _item(self, start: Start) -> None:
        item = start.item
        assert self.service.start_ns is not None
        ready_ns = self.service.start_ns + self.service.clock.wall_ns(self.schedule.ready[item.id])
        try:
            await self.service.until(start.at)
            begun = time.time_ns()
            self.times[item.id] = ItemTimes(item.id, str(item.kind), ready_ns, begun)
            if item.kind is Kind.SEND:
                await self._send(self.sends[item.id], begun)
                ended = begun  # issued: its bytes are the sender's now
            elif item.kind is Kind.COMPUTE:
                await self._compute(self.computes[item.id])
                ended = time.time_ns()
            else:
                ended = await self._reduce(self.reductions[item.id])
        except Exception as exc:  # a failed item ends the step here: say why in replay_status
            log.exception("step item %s failed", item.id)
            self.errors.append(f"op {item.id} ({item.kind}): {exc}")
            self.service.tally.error("exception")
            self.stop()
            return
        self.times[item.id].end_ns = ended
        self._launch(self.schedule.happened(item.id, self.fabric(ended)))
        self._check_done()

    async def _send(self, op: ReplayOp, now_ns: int) -> None:
        svc = self.service
        frags = build_fragments(op.id, op.size, now_ns, svc.max_datagram)
        times = svc.op_times[op.id] = OpTimes(op.id, now_ns)
        async with self._sending:
            await self.sender.send(op, frags, times)
        svc.sent_ops += 1

    async def _compute(self, phase: Compute) -> None:
        wall_s = self.service.clock.wall_s(phase.seconds)
        if self.work and wall_s > 0:
            await asyncio.get_running_loop().run_in_executor(None, busy_work, wall_s)
        elif wall_s > 0:
            await asyncio.sleep(wall_s)

    async def _reduce(self, r: Reduction) -> int:
        worker = self.service.ina_worker()
        if worker is None:
            raise ValueError("this host runs no INA worker: a step's AllReduce needs the lab's ina.jobs")
        reply = await worker.allreduce({**r.request, "start_at": 0.0})
        self.reduced[r.id] = reply
        return round(float(reply["finished"]) * 1e9)

    def _check_done(self) -> None:
        if self.schedule.done:
            self._finished.set()

    def results(self) -> dict[str, Any]:
        """``replay_results``' part of a step: each item's times, each AllReduce's reply, what failed."""
        return {
            "step": [t.to_wire() for t in self.times.values()],
            "reductions": {str(i): reply for i, reply in self.reduced.items()},
            "step_errors": self.errors,
        }
