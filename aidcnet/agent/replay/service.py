"""The host agent's side of a trace replay (docs/replay-payload.md): the schedule of this host's ops, each
sent at ``start + t`` from a background task by the run's sender, and the receiver accounting of every
replay message that reaches this host, each datagram timed by the kernel's receive stamp.

A run is loaded (``replay_load``: :class:`~aidcnet.agent.replay.protocol.ReplayLoad`, parsed once) and its
sender chosen then, once, by the family of its mode (:mod:`aidcnet.agent.replay.senders`; the membership
modes' signalling rides with the IP-multicast sender, :mod:`aidcnet.agent.replay.signalling`). This
service knows no mode: it keeps the schedule, the deliveries (all modes land in the same
:class:`~aidcnet.replay.Reassembly`), what each op's sending did (:class:`OpTimes`) and the status. The
orchestrator's side is ``orchestrator/experiment/modes/``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.replay.protocol import (
    DEFAULT_QPS,
    Compute,
    OpTimes,
    Receiver,
    Reduction,
    ReplayLoad,
    ReplayOp,
)
from aidcnet.agent.replay.senders import Sender, sender_class
from aidcnet.agent.replay.sockets import StampedReader, max_memberships, replay_socket
from aidcnet.agent.replay.step import StepRunner
from aidcnet.agent.service import Service
from aidcnet.ipv4 import ROCEV2_PORT
from aidcnet.replay import DEFAULT_MAX_DATAGRAM, Reassembly, build_fragments, looks_like_replay
from aidcnet.roles import Role
from aidcnet.timescale import TimeScale
from aidcnet.udpio import mreqn

if TYPE_CHECKING:
    from aidcnet.agent.bier.service import BierPart, BierService
    from aidcnet.agent.ina.service import InaPart
    from aidcnet.agent.ina.worker import InaWorkerService
    from aidcnet.agent.reliable.service import ReliablePart
    from aidcnet.config import NodeConfig
    from aidcnet.ipv4 import UdpDatagram

log = logging.getLogger("aidcnet.replay")


@dataclass
class SendTally:
    """What a run's sending handed to the kernel (``datagrams``) and what failed, by reason."""

    datagrams: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1


class ReplayService:
    def __init__(
        self,
        loopback: str,
        bier: BierService | None = None,
        queue_bytes: int | None = None,
        reliable: ReliablePart | None = None,
        port: int = ROCEV2_PORT,
        ina: InaPart | None = None,
    ) -> None:
        self.loopback = loopback
        self.reliable = reliable
        self.ina = ina
        # Shaped lab: the host's uplink queue, which the send sockets together must never fill (lossless).
        self.queue_bytes = queue_bytes
        self.bier = bier
        # The replay port (RoCEv2's): where every mode's data goes and is received.
        self.port = port
        self.sender: Sender | None = None
        self.ops: list[ReplayOp] = []
        # A closed-loop step (docs/training.md): this host's compute phases and AllReduce joins, and the
        # runner that starts each item when its inputs are here.
        self.closed_loop = False
        self.compute_work = False
        self.computes: list[Compute] = []
        self.reductions: list[Reduction] = []
        self.step: StepRunner | None = None
        self.receivers: dict[str, Receiver] = {}
        self.max_datagram = DEFAULT_MAX_DATAGRAM
        self.qps = DEFAULT_QPS
        self.gap_us = 0.0
        self.reassembly = Reassembly()
        self.sent_ops = 0
        self.tally = SendTally()
        self.op_times: dict[int, OpTimes] = {}
        self.start_ns: int | None = None
        self.finished_ns: int | None = None
        # The lab's time scale: a trace's t is fabric time, waited for on the wall clock.
        self.clock = TimeScale.unshaped()
        self.task: asyncio.Task[None] | None = None
        self._reader: StampedReader | None = None
        # The groups joined here for the run, and the readers of the sockets holding the joins.
        self.groups: list[str] = []
        self._group_readers: list[StampedReader] = []
        # Per message id, the future its completion resolves (what an igmp receiver waits for to leave).
        self._complete_waiters: dict[int, asyncio.Future[None]] = {}
        self.last_rx_ns = 0  # wall ns of the last replay datagram read (what keeps an incomplete op joined)
        # Agent counters, cumulative as agent counters are (the driver takes deltas over a run).
        self.counters: Counter[str] = Counter()

    # -- receiving -------------------------------------------------------------------------------------
    async def listen(self) -> None:
        if self._reader is not None:
            return
        # Group sockets share this port: it takes no group of theirs (IP_MULTICAST_ALL 0).
        self._reader = StampedReader(replay_socket(self.port), self.received, batched=True)
        self._reader.attach(asyncio.get_running_loop())

    def join(self, groups: list[str], interface: str) -> None:
        """Join ``groups`` on ``interface`` for the replay port; each datagram reaches exactly one
        socket (the one that joined its group), which feeds the common reassembly. Synchronous (a
        reader on the running loop) because control handlers call load() unawaited."""
        self._leave_groups()
        ifindex = socket.if_nametoindex(interface)
        per_socket = max_memberships()
        loop = asyncio.get_running_loop()
        for i in range(0, len(groups), per_socket):
            sock = replay_socket(self.port)
            try:
                for group in groups[i : i + per_socket]:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn(group, ifindex))
            except OSError:
                sock.close()
                self._leave_groups()
                raise
            reader = StampedReader(sock, self.received)
            reader.attach(loop)
            self._group_readers.append(reader)
        self.groups = list(groups)

    def received(self, data: bytes | memoryview, src: str, stamp_ns: int = 0) -> None:
        """Account one replay datagram the kernel received at ``stamp_ns`` (0: unknown, now); a message
        now complete resolves its waiter."""
        now = self.last_rx_ns = time.time_ns()
        rec = self.reassembly.add(data, stamp_ns or now, src=src)  # type: ignore[arg-type]
        if rec is not None and rec.complete_ns is not None and self.step is not None:
            self.step.arrived(rec.msg_id, rec.complete_ns)
        if rec is not None and rec.complete and self._complete_waiters:
            fut = self._complete_waiters.pop(rec.msg_id, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def wait_complete(self, msg_id: int) -> asyncio.Future[None]:
        """A future that message ``msg_id``'s completion here resolves."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._complete_waiters[msg_id] = fut
        return fut

    def forget_complete(self, msg_id: int) -> None:
        self._complete_waiters.pop(msg_id, None)

    def on_bier_datagram(self, datagram: UdpDatagram, stamp_ns: int = 0) -> bool:
        """BIER service hook: take host-BIER deliveries of replay fragments to the replay port; others
        (``bier_send``'s payloads use the same port) stay with the service, also after a replay ran."""
        if datagram.dport != self.port or not looks_like_replay(datagram.payload):
            return False
        self.received(datagram.payload, datagram.src, stamp_ns)
        return True

    def _leave_groups(self) -> None:
        for reader in self._group_readers:
            reader.close()
        self._group_readers = []
        self.groups = []

    def leave(self) -> None:
        """Drop every group joined for the run (closing a socket leaves its groups)."""
        self._leave_groups()
        if self.sender is not None:
            self.sender.signals.leave()

    # -- control ops -----------------------------------------------------------------------------------
    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            raise ValueError("a replay is running on this host; wait for replay_status done")
        load = ReplayLoad.from_wire(request)
        if load.append:
            self._append(load)
        else:
            self._new_run(load)
        self.ops.sort(key=lambda op: (op.t, op.id))
        assert self.sender is not None
        out = {"ok": True, "ops": len(self.ops), "mode": self.sender.mode, "groups": len(self.groups)}
        if self.closed_loop:
            out |= {"computes": len(self.computes), "reductions": len(self.reductions)}
        return out | self.sender.signals.reply()

    def _new_run(self, load: ReplayLoad) -> None:
        """The first load of a run: its sender, chosen here once; what the last run held is let go."""
        sender = sender_class(load.mode)(self, load)
        sender.check(load)
        sender.configure(load)
        # A new run's groups replace the last run's (or none).
        self.leave()
        self.sender = sender
        self.receivers, self.ops = dict(load.receivers), list(load.ops)
        sender.signals.add(load)
        if sender.interface is not None and load.groups:
            self.join(list(load.groups), sender.interface)
        self.max_datagram, self.qps, self.gap_us = load.max_datagram, load.qps, load.gap_us
        self.closed_loop, self.compute_work = load.closed_loop, load.compute_work
        self.computes, self.reductions = list(load.computes), list(load.reductions)
        self.step = None
        # A new load is a new run: forget what was received and sent before.
        self.reassembly = Reassembly(max_datagram=self.max_datagram)
        self.sent_ops = 0
        self.tally = SendTally()
        self.op_times = {}
        self.start_ns = self.finished_ns = None

    def _append(self, load: ReplayLoad) -> None:
        sender = self.sender
        if sender is None or load.mode != sender.mode:
            loaded = "nothing" if sender is None else f"a schedule in mode {sender.mode}"
            raise ValueError(f"append in mode {load.mode} to {loaded}")
        receivers = {**self.receivers, **load.receivers}
        sender.check(replace(load, receivers=receivers))
        if load.groups and sender.interface is None:
            raise ValueError(f"groups to join in a {sender.mode} schedule, which has no fabric interface")
        self.receivers = receivers
        self.ops.extend(load.ops)
        self.computes.extend(load.computes)
        self.reductions.extend(load.reductions)
        sender.signals.add(load)
        if load.groups:
            assert sender.interface is not None
            self.join([*self.groups, *load.groups], sender.interface)

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            raise ValueError("a replay is already running on this host")
        if self.sender is None:
            raise ValueError("no replay loaded on this host (replay_load first)")
        self.start_ns = int(request["start_ns"])
        self.finished_ns = None
        if self.closed_loop:
            self.step = StepRunner(
                self, self.sender, self.ops, self.computes, self.reductions, self.compute_work
            )
            self.step.hold(self.ina_worker())
        self.task = asyncio.get_running_loop().create_task(self._run(self.sender))
        return {"ok": True, "ops": len(self.ops), "starts_in_s": (self.start_ns - time.time_ns()) / 1e9}

    def status(self) -> dict[str, Any]:
        return {
            "ok": True,
            "mode": None if self.sender is None else self.sender.mode,
            "ops": len(self.ops),
            "sent_ops": self.sent_ops,
            "sent_datagrams": self.tally.datagrams,
            "send_errors": dict(self.tally.errors),
            "done": self.finished_ns is not None,
            "finished_ns": self.finished_ns,
            "received_messages": len(self.reassembly.records),
            "received_complete": self.reassembly.complete_good(),
            "groups": len(self.groups),
        } | ({} if self.sender is None else self.sender.status()) | (
            {} if self.step is None else {"step_items": self.step.items, "step_errors": self.step.errors}
        )

    def stop(self) -> dict[str, Any]:
        """End a run the driver gave up on (its timeout passed with this host still sending): what is
        left of its schedule is not sent, and the next ``replay_load`` is not refused on its account.
        What was sent and received stays for ``replay_results``."""
        running = self.task is not None and not self.task.done()
        if running:
            assert self.task is not None
            self.task.cancel()
        return {"ok": True, "stopped": running, "sent_ops": self.sent_ops, "ops": len(self.ops)}

    def results(self) -> dict[str, Any]:
        # The driver asks for results once the run is over: the groups are no longer needed (a net-bier
        # receiver has no task of its own whose end could leave them). The records stay.
        if self.task is None or self.task.done():
            self.leave()
        out = {
            "ok": True,
            **self.reassembly.to_dict(),
            "op_times": [t.to_wire() for t in self.op_times.values()],
        } | ({} if self.step is None else self.step.results())
        return out | ({} if self.sender is None else self.sender.results())

    # -- the schedule ----------------------------------------------------------------------------------
    def at_ns(self, t: float, wall_s: float = 0.0) -> int:
        """The wall clock's ns when the run's time ``t`` comes: a trace's t is fabric seconds after the
        run's start (docs/trace-format.md), which the lab's time scale stretches; ``wall_s`` is added as
        it is (a lead or a hold the user gave in wall time)."""
        assert self.start_ns is not None
        return self.start_ns + self.clock.wall_ns(t) + round(wall_s * 1e9)

    async def until(self, t: float) -> None:
        """Sleep until the run's time ``t`` (fabric seconds after its start); at once if it has passed."""
        delay = (self.at_ns(t) - time.time_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

    def ina_worker(self) -> InaWorkerService | None:
        """The host's INA worker, which a closed-loop step's AllReduce joins run on (None: no ina section)."""
        return None if self.ina is None else self.ina.worker

    async def _run(self, sender: Sender) -> None:
        loop = asyncio.get_running_loop()
        assert self.start_ns is not None
        signals = sender.signals
        try:
            signals.start(loop)
            await sender.open(loop)
            if self.step is not None:
                await self.until(0.0)
                await self.step.run()
            else:
                await self._open_loop(sender, loop)
            await sender.finish()
            await signals.finish()
        except Exception:  # the task's failure must show in replay_status, not vanish
            log.exception("replay failed")
            self.tally.error("exception")
        finally:
            signals.close()
            sender.close()
            self.finished_ns = time.time_ns()

    async def _open_loop(self, sender: Sender, loop: asyncio.AbstractEventLoop) -> None:
        """Every op at its t (fabric seconds after the run's start)."""
        signals = sender.signals
        for op in self.ops:
            await signals.before(op)
            # The membership modes: an op's receivers are known at t, its data leaves at t + lead.
            due = self.at_ns(op.t, signals.lead_s)
            delay = (due - time.time_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            # The scheduled time, not the actual one: a late sender shows up as latency.
            send_ns = max(due, 0)
            frags = build_fragments(op.id, op.size, send_ns, self.max_datagram)
            times = self.op_times[op.id] = OpTimes(op.id, due)
            await sender.send(op, frags, times)
            signals.after(loop, op)
            self.sent_ops += 1
            # Let the receive side run between ops so a burst does not starve it.
            await asyncio.sleep(0)

    def close(self) -> None:
        if self.step is not None:
            self.step.stop()
        if self.task is not None:
            self.task.cancel()
        if self.sender is not None:
            self.sender.close()
        self.leave()
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class ReplayPart(Service):
    """The agent's replay service on a GPU host: the ``replay_*`` ops over a :class:`ReplayService` made
    at first use (it needs the host's loopback), sending host-BIER through whichever BIER service runs."""

    def __init__(
        self, role: Role, bier: BierPart, reliable: ReliablePart | None = None, ina: InaPart | None = None
    ) -> None:
        self.role = role
        self.bier = bier
        self.reliable = reliable
        self.ina = ina
        self.config: NodeConfig | None = None
        self.current: ReplayService | None = None
        bier.add_listener(self.on_bier_udp)

    async def reload(self, config: NodeConfig | None) -> None:
        self.config = config
        if self.current is not None and config is not None:
            self.current.queue_bytes = config.smallest_queue_bytes
            self.current.clock = config.clock

    async def stop(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def on_bier_udp(self, datagram: UdpDatagram) -> bool:
        if self.current is None:
            return False
        bier = self.bier.current
        return self.current.on_bier_datagram(datagram, bier.dataplane.rx_stamp_ns if bier is not None else 0)

    async def _service(self) -> ReplayService:
        if self.role != Role.GPU_HOST or self.config is None or self.config.loopback is None:
            raise ValueError("replay runs on configured gpu-host nodes only (aidclab configure LAB first)")
        if self.current is None:
            self.current = ReplayService(
                str(self.config.loopback.ip),
                queue_bytes=self.config.smallest_queue_bytes,
                reliable=self.reliable,
                ina=self.ina,
            )
            self.current.clock = self.config.clock
            await self.current.listen()
        # The BIER service is rebuilt on reload: send through whichever one runs now, and time what it
        # delivers by the kernel's receive stamps (asked once per BIER service).
        bier = self.bier.current
        if bier is not None and bier is not self.current.bier:
            bier.dataplane.enable_rx_stamps()
        self.current.bier = bier
        return self.current

    async def load(self, request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).load(request)

    async def start_run(self, request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).start(request)

    async def status(self, _request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).status()

    async def results(self, _request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).results()

    async def stop_run(self, _request: dict[str, Any]) -> dict[str, Any]:
        service = await self._service()
        reply = service.stop()
        if service.task is not None and reply["stopped"]:
            # Its own cleanup (sockets, finished_ns) runs before the reply: a load that follows finds the
            # host idle.
            await asyncio.wait([service.task])
        return reply

    def counters(self) -> dict[str, int]:
        return {} if self.current is None else dict(self.current.counters)

    def handlers(self) -> dict[Op, Handler]:
        return {
            Op.REPLAY_LOAD: self.load,
            Op.REPLAY_START: self.start_run,
            Op.REPLAY_STATUS: self.status,
            Op.REPLAY_RESULTS: self.results,
            Op.REPLAY_STOP: self.stop_run,
        }
