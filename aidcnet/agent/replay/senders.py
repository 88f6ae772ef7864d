"""How a host sends its ops: one sender class per family of modes (``aidcnet/modes.py``), chosen once per run
when it is loaded (:func:`sender_class`). The service keeps the schedule and calls the sender: :meth:`open`
at the run's start, :meth:`send` for each op when it is due (with its fragments and its :class:`OpTimes`,
which the sender marks as datagrams go to the kernel), :meth:`finish` after the last, :meth:`close` in any
case.

* :class:`UnicastSender` (``PER_RECEIVER``): one datagram stream per receiver, from the host's loopback to
  the receiver's loopback, UDP destination port 4791 (RoCEv2), source port = QP;
* :class:`HostBierSender` (``HOST_BIER``): each fragment once through the BIER service with the
  receivers' BFR-ids;
* :class:`IpMulticastSender` (``IP_MULTICAST``): plain IP multicast, one socket bound to the loopback (the
  S of (S,G)) sending each op once to its group out of the fabric interface; the leaves do BIER. The
  membership modes compose their signalling with it (:mod:`aidcnet.agent.replay.signalling`);
* the reliable modes (``RELIABLE``, docs/reliability.md): each op one flow of the reliable transport (one
  sequence per fragment) through the agent's reliable service, per receiver over unicast
  (:class:`ReliableUnicastSender`), over host-BIER (:class:`ReliableHostBierSender`) or to the op's group
  over network-BIER (:class:`ReliableNetBierSender`); done when every receiver acknowledged every flow;
* :class:`NoMessages` (``COLLECTIVE``): a closed-loop step of compute phases and AllReduces only, run in a
  collective mode; it sends nothing (the AllReduces are the INA worker's).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from aidcnet.agent.reliable.node import OP_MASK, replay_flow_id
from aidcnet.agent.replay.protocol import OpTimes, ReplayLoad, ReplayOp
from aidcnet.agent.replay.signalling import Signalling, signalling_class
from aidcnet.agent.replay.sockets import writable
from aidcnet.ipv4 import QP_PORT_BASE
from aidcnet.modes import COLLECTIVE, HOST_BIER, IP_MULTICAST, MESSAGE, PER_RECEIVER, RELIABLE, Mode, in_order
from aidcnet.udpio import multicast_sender, shaped_sndbuf, size_send_buffer

if TYPE_CHECKING:
    from aidcnet.agent.replay.service import ReplayService

SNDBUF = 8 << 20
# Crossing the BIER domain costs one IP hop; 8 leaves room for a longer path (docs/bier.md).
MCAST_TTL = 8
# A datagram the shaper queue refused (ENOBUFS) is sent again after this, doubling up to the second.
ENOBUFS_BACKOFF_S = (0.0002, 0.01)
# How often a reliable run looks whether its flows have completed.
RELIABLE_CHECK_S = 0.01

Address = tuple[str, int]


class Sender(ABC):
    """Sends a run's ops in the modes of :attr:`path` (reliable or not, as :attr:`reliable` says)."""

    path: ClassVar[frozenset[Mode]]
    reliable: ClassVar[bool] = False
    # The receivers need an id in the run (their BFR-ids; the reliable modes number every host).
    needs_ids: ClassVar[bool] = False

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        self.service = service
        self.mode = load.mode
        # The fabric interface of a run whose groups this host joins (IP multicast), else None.
        self.interface: str | None = None
        self.signals: Signalling = Signalling(service, load)
        self.socks: list[socket.socket] = []

    @classmethod
    def serves(cls, mode: Mode) -> bool:
        return mode in cls.path and (mode in RELIABLE) == cls.reliable

    def check(self, load: ReplayLoad) -> None:
        """Refuse, naming the op or field, what this sender cannot send; every load of a run, appends too.
        ``load.receivers`` holds every receiver its ops name (an append: with the run's earlier ones)."""
        for op in load.ops:
            for d in op.receivers:
                if d not in load.receivers:
                    raise ValueError(f"op {op.id}: receiver {d!r} is not in the request's receivers")
                if self.needs_ids and load.receivers[d].id is None:
                    raise ValueError(f"receiver {d!r} has no BFR-id: {self.mode} needs one")
        self.signals.check(load)

    def configure(self, load: ReplayLoad) -> None:  # noqa: B027
        """A new run's settings, once its first load checked."""

    async def open(self, loop: asyncio.AbstractEventLoop) -> None:  # noqa: B027
        """The run starts: open what sending needs."""

    @abstractmethod
    async def send(self, op: ReplayOp, frags: list[bytes], times: OpTimes) -> None:
        """``op`` is due: hand its fragments on, marking ``times`` as they go to the kernel."""

    async def finish(self) -> None:  # noqa: B027
        """After the last op: until everything this sender took on has left (or is acknowledged)."""

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks = []

    def status(self) -> dict[str, Any]:
        return self.signals.status()

    def results(self) -> dict[str, Any]:
        """What ``replay_results`` adds for this sender beside its op times and signalling."""
        return self.signals.results()

    # -- shared by the socket senders ------------------------------------------------------------------
    async def sendto(self, sock: socket.socket, data: bytes, addr: Address, times: OpTimes) -> None:
        """One datagram, sent again after a full shaper queue (ENOBUFS: lossless on a shaped lab)."""
        svc = self.service
        loop = asyncio.get_running_loop()
        pause = ENOBUFS_BACKOFF_S[0]
        while True:
            try:
                await loop.sock_sendto(sock, data, addr)
                svc.tally.datagrams += 1
                times.handed(time.time_ns(), len(data))
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS or svc.queue_bytes is None:
                    svc.tally.error(exc.strerror or type(exc).__name__)
                    break
                # The queue below was full (IP_RECVERR): lossless, so wait and send it again.
                svc.tally.error("queue full, resent")
                await asyncio.sleep(pause)
                pause = min(2 * pause, ENOBUFS_BACKOFF_S[1])
        await self.pace()

    async def pace(self) -> None:
        if self.service.gap_us > 0:
            await asyncio.sleep(self.service.gap_us / 1e6)


class UnicastSender(Sender):
    """One queue and one sending task per QP, as a NIC serves its QPs side by side: a QP whose path is
    backed up must not hold back the others (they may leave on other planes). Receiver j of op i goes on
    QP (i + j) mod qps."""

    path = PER_RECEIVER

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        super().__init__(service, load)
        self.queues: list[asyncio.Queue[tuple[bytes, Address, OpTimes] | None]] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def open(self, loop: asyncio.AbstractEventLoop) -> None:
        svc = self.service
        self.close()
        for k in range(svc.qps):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.socks.append(sock)
            size_send_buffer(sock, shaped_sndbuf(svc.queue_bytes, svc.qps), SNDBUF)
            sock.bind((svc.loopback, QP_PORT_BASE + k))
            sock.setblocking(False)
        self.queues = [asyncio.Queue() for _ in self.socks]
        self.tasks = [
            loop.create_task(self._qp(sock, queue))
            for sock, queue in zip(self.socks, self.queues, strict=True)
        ]

    async def _qp(
        self, sock: socket.socket, queue: asyncio.Queue[tuple[bytes, Address, OpTimes] | None]
    ) -> None:
        while (item := await queue.get()) is not None:
            await self.sendto(sock, *item)

    async def send(self, op: ReplayOp, frags: list[bytes], times: OpTimes) -> None:
        svc = self.service
        for j, name in enumerate(op.receivers):
            queue = self.queues[(op.id + j) % len(self.queues)]
            addr = (svc.receivers[name].address, svc.port)
            for frag in frags:
                queue.put_nowait((frag, addr, times))

    async def finish(self) -> None:
        for queue in self.queues:
            queue.put_nowait(None)
        await asyncio.gather(*self.tasks)

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.tasks = []
        super().close()


class HostBierSender(Sender):
    """The host is the BFIR: each fragment once through the BIER service with the receivers' BFR-ids."""

    path = HOST_BIER
    needs_ids = True

    def check(self, load: ReplayLoad) -> None:
        check_host_bier(self)
        super().check(load)

    async def send(self, op: ReplayOp, frags: list[bytes], times: OpTimes) -> None:
        svc = self.service
        loop = asyncio.get_running_loop()
        bits = [svc.receivers[name].id for name in op.receivers]
        bier = svc.bier
        assert bier is not None
        # Nothing to wait for between fragments: the message leaves in one batch.
        one_batch = svc.queue_bytes is None and svc.gap_us <= 0
        batches = [frags] if one_batch else [[f] for f in frags]
        for batch in batches:
            if svc.queue_bytes is not None:
                # Wait here, not in the BFR's send: a blocked loop would stop receiving.
                await writable(loop, bier.dataplane.sock)
            try:
                bier.send_message(batch, bits, flow=op.id)  # type: ignore[arg-type]
                svc.tally.datagrams += len(batch)
                times.handed(time.time_ns(), sum(map(len, batch)), len(batch))
            except OSError as exc:
                svc.tally.error(type(exc).__name__)
            await self.pace()


class IpMulticastSender(Sender):
    """One socket for every group: S = the loopback (the leaf matches (S,G)), out of the fabric interface,
    never looped back to this host. The membership modes' signalling runs around its sends."""

    path = IP_MULTICAST

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        super().__init__(service, load)
        self.interface = load.interface
        self.signals = signalling_class(load.mode)(service, load)

    def check(self, load: ReplayLoad) -> None:
        check_ip_multicast(self.mode, load)
        super().check(load)

    async def open(self, loop: asyncio.AbstractEventLoop) -> None:
        svc = self.service
        self.close()
        assert self.interface is not None
        sndbuf = shaped_sndbuf(svc.queue_bytes)
        self.socks.append(
            multicast_sender((svc.loopback, QP_PORT_BASE), self.interface, MCAST_TTL, sndbuf, SNDBUF)
        )

    async def send(self, op: ReplayOp, frags: list[bytes], times: OpTimes) -> None:
        assert op.group is not None
        addr = (op.group, self.service.port)
        for frag in frags:
            await self.sendto(self.socks[0], frag, addr, times)


def check_host_bier(sender: Sender) -> None:
    """A host-BIER sender's host must be a BFIR: its BIER service runs."""
    bier = sender.service.bier
    if bier is None or bier.host is None:
        raise ValueError(f"{sender.mode} replay needs this host's BIER service (no bier section applied)")


def check_ip_multicast(mode: Mode, load: ReplayLoad) -> None:
    """An IP-multicast run names its fabric interface (in its first load) and every op's group."""
    if not load.append:
        if not load.interface:
            raise ValueError(f"{mode} needs the fabric interface (interface)")
        try:
            socket.if_nametoindex(load.interface)
        except OSError:
            raise ValueError(f"interface {load.interface!r} does not exist on this host") from None
    for op in load.ops:
        if op.group is None:
            raise ValueError(f"{mode} op {op.id} needs its multicast group (group)")


class ReliableSender(Sender):
    """Each op one flow of the reliable transport (its id holds the run's number and the op id), opened when
    the op is due; done when every receiver acknowledged every flow (or was declared failed). The transport
    sends DATA under its window: each transmission marks its op's times as it goes to the socket."""

    reliable = True
    needs_ids = True

    def check(self, load: ReplayLoad) -> None:
        if self.service.reliable is None:
            raise ValueError(f"{self.mode} replay needs the agent's reliable service")
        super().check(load)
        for op in load.ops:
            replay_flow_id(0, op.id)  # the op id must fit its 24 bits of the Flow ID

    def configure(self, load: ReplayLoad) -> None:
        from aidcnet.agent.reliable.node import ReliableSettings

        part = self.service.reliable
        assert part is not None
        raw = dict(load.reliable or {})
        self_id = raw.pop("self_id", None)
        if self_id is None:
            raise ValueError(f"{self.mode} needs reliable.self_id: this host's id in the run (its BFR-id)")
        settings = ReliableSettings.from_request({**raw, "feedback": RELIABLE[self.mode]})
        node = part.node()
        node.configure(settings, int(self_id))
        self.open_transport(load)
        svc = self.service
        node.deliver = lambda payload, src: svc.reassembly.add(
            payload, node.rx_stamp_ns or time.time_ns(), src=src
        )
        node.on_data_sent = self._data_sent

    def open_transport(self, load: ReplayLoad) -> None:
        """What the flows travel on beyond the transport's own sockets (network-BIER: a multicast one)."""
        assert self.service.reliable is not None
        self.service.reliable.close_multicast()

    def _data_sent(self, flow_id: int, size: int) -> None:
        times = self.service.op_times.get(flow_id & OP_MASK)
        if times is not None:
            times.handed(time.time_ns(), size)

    async def send(self, op: ReplayOp, frags: list[bytes], times: OpTimes) -> None:
        part = self.service.reliable
        assert part is not None
        node = part.node()
        node.waits.end(times.due_ns)  # a wait on the protocol ends when there is new data to send
        now = part.endpoint.clock() if part.endpoint else time.monotonic()
        self.open_flow(node, replay_flow_id(node.settings.run or 0, op.id), op, frags, now)
        part.kick()

    @abstractmethod
    def open_flow(self, node: Any, flow_id: int, op: ReplayOp, frags: list[bytes], now: float) -> None:
        """Open ``op``'s flow(s) on the transport's ``node`` (which sends the first window at once)."""

    async def finish(self) -> None:
        part = self.service.reliable
        assert part is not None
        while not part.node().sending_done:
            await asyncio.sleep(RELIABLE_CHECK_S)

    def close(self) -> None:
        part = self.service.reliable
        if part is not None and part.endpoint is not None:
            part.node().on_data_sent = None
        super().close()

    def results(self) -> dict[str, Any]:
        """And ``protocol_waits``: [start, end) wall ns of each span in which this source could send nothing
        until an answer or a timer (aidcnet/reliable/waits.py)."""
        part = self.service.reliable
        waits = [] if part is None or part.endpoint is None else part.endpoint.node.waits.spans
        return super().results() | {"protocol_waits": [list(span) for span in waits]}

    def status(self) -> dict[str, Any]:
        part = self.service.reliable
        if part is None:
            return {}
        try:
            return {"reliable": part.node().totals()}
        except ValueError:  # the node file was removed since the load: nothing to report
            return {}


class ReliableUnicastSender(ReliableSender):
    """One flow per receiver, loopback to loopback, acknowledged end to end."""

    path = PER_RECEIVER

    def open_flow(self, node: Any, flow_id: int, op: ReplayOp, frags: list[bytes], now: float) -> None:
        receivers = self.service.receivers
        ids = {receivers[name].id: receivers[name].address for name in op.receivers}
        node.open_unicast_flows(flow_id, ids, frags, now)
        self.service.tally.datagrams += len(frags) * len(ids)


class ReliableHostBierSender(ReliableSender):
    """One host-BIER flow per op to the receivers' BFR-ids."""

    path = HOST_BIER

    def check(self, load: ReplayLoad) -> None:
        check_host_bier(self)
        super().check(load)

    def open_flow(self, node: Any, flow_id: int, op: ReplayOp, frags: list[bytes], now: float) -> None:
        receivers = self.service.receivers
        node.open_bier_flow(flow_id, [receivers[name].id for name in op.receivers], frags, now)
        self.service.tally.datagrams += len(frags)


class ReliableNetBierSender(ReliableSender):
    """One flow per op to its group over network-BIER, acknowledged per BFER leaf (the op's ``bfers``)."""

    path = IP_MULTICAST

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        super().__init__(service, load)
        self.interface = load.interface

    def check(self, load: ReplayLoad) -> None:
        check_ip_multicast(self.mode, load)
        super().check(load)
        for op in load.ops:
            if not op.bfers:
                raise ValueError(f"{self.mode} op {op.id} needs its group's BFER BFR-ids (bfers)")

    def open_transport(self, load: ReplayLoad) -> None:
        assert self.service.reliable is not None and self.interface is not None
        self.service.reliable.open_multicast(self.interface, MCAST_TTL)

    def open_flow(self, node: Any, flow_id: int, op: ReplayOp, frags: list[bytes], now: float) -> None:
        assert op.group is not None
        node.open_net_flow(flow_id, list(op.bfers), op.group, frags, now)
        self.service.tally.datagrams += len(frags)


class NoMessages(Sender):
    """A closed-loop step in a collective mode: compute phases and AllReduce joins only (docs/training.md)."""

    path = COLLECTIVE

    def check(self, load: ReplayLoad) -> None:
        if not load.append and not load.closed_loop:
            raise ValueError(
                f"mode {self.mode} is not a message mode: the replay sends {', '.join(in_order(MESSAGE))} "
                "(collectives are the INA worker's, op allreduce; a closed-loop step may load them here)"
            )
        if load.ops:
            raise ValueError(
                f"op {load.ops[0].id}: mode {self.mode} runs AllReduces, it sends no messages (a step with "
                f"messages travels in one of {', '.join(in_order(MESSAGE))})"
            )
        super().check(load)

    async def send(self, op: ReplayOp, frags: list[bytes], times: OpTimes) -> None:
        raise ValueError(f"mode {self.mode} sends no messages (op {op.id})")


# In the order a mode is looked up: each mode is served by exactly one (a test checks).
SENDERS: tuple[type[Sender], ...] = (
    UnicastSender,
    HostBierSender,
    IpMulticastSender,
    ReliableUnicastSender,
    ReliableHostBierSender,
    ReliableNetBierSender,
    NoMessages,
)


def sender_class(mode: Mode) -> type[Sender]:
    """The sender of ``mode``'s family (every mode has one; a collective mode's sends nothing and takes
    only a closed-loop step)."""
    for cls in SENDERS:
        if cls.serves(mode):
            return cls
    raise ValueError(f"mode {mode} has no sender")  # a Mode added without its family
