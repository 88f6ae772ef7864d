"""The agent's reliable-transport service (docs/reliability.md): a :class:`ReliableNode` behind UDP port
4795 on every node with a loopback, driven by a timer in the agent's event loop.

On a GPU host it is the senders and the receiver of the reliable replay modes (the replay service
opens flows through :meth:`ReliablePart.node` and gets deliveries back); on a BFR it is the ACK
aggregator: the BIER service's Python dataplane reports every forwarded packet
(``BierDataplane.on_forward``), from which the aggregator learns each window's downstream BFERs, and
feedback arrives on the socket addressed to this BFR hop by hop.  With ``bier.dataplane: ebpf`` the
tc program forwards DATA in the kernel (the agent never sees it) and passes every non-BIER UDP packet
up the stack untouched (``aidcnet/ebpf/bier.c``: only port 6635 addressed to the BFR is its), so
feedback still reaches this socket; without DATA the aggregator holds no entry and relays feedback
toward the BFIR unchanged (``agg.passed-no-entry``): end-to-end ACKs, never lost data.

**Time.** The node runs on :class:`FabricClock`: fabric seconds on a shaped lab (the wall clock divided by
the node file's ``time_scale``, continuous when a run rescales the agents), so every timer of the
transport is in fabric time (:mod:`aidcnet.reliable.timers`) and a run behaves the same at any scale. The
agent's own pacing (how often it wakes) stays in wall time: that is CPU, not fabric.

**Feedback before timers.** Every timer pass reads the socket first: a source hearing 63 ACKs per packet
end to end (the superpod) fell behind its socket, and a pass that ran the senders' timers between two
batches of 256 datagrams resent packets whose ACKs were waiting unread (10 retransmissions at 0 % loss).

Counters are exported as ``reliable.<name>`` (:meth:`ReliableNode.totals`). Control op
``reliable_reset``: the driver's prepare of every reliable run makes every node forget what earlier runs
left (:meth:`ReliableNode.forget_flows`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.outbox import Outbox
from aidcnet.agent.reliable.node import GAUGES, NET_SPORT, ReliableNode
from aidcnet.agent.service import Service
from aidcnet.bier.bitstring import bfr_id_to_si_bit, si_bit_to_bfr_id
from aidcnet.ipv4 import build_udp
from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.header import RELIABLE_UDP_PORT
from aidcnet.reliable.timers import Timers, timers
from aidcnet.timescale import TimeScale
from aidcnet.udpio import (
    STAMP_SPACE,
    BatchIO,
    enable_backpressure,
    enable_rx_stamps,
    multicast_sender,
    rx_stamp_ns,
    set_socket_buffer,
    shaped_sndbuf,
)

if TYPE_CHECKING:
    from aidcnet.agent.bier.ebpf import Reported
    from aidcnet.agent.bier.service import BierPart
    from aidcnet.config import NodeConfig
    from aidcnet.ipv4 import UdpDatagram

log = logging.getLogger("aidcnet.reliable")

# Host-BIER DATA goes to this group (the host-BIER API's) with the reliable port.
DATA_GROUP = "232.1.0.1"
RECV_SIZE = 65536
SOCKET_BUFFER = 16 << 20
# The timer never sleeps longer than this while a flow has work pending, so a clock jump or a missed
# wake-up costs little.
MAX_SLEEP_S = 0.01
# With nothing pending only an event can make work, and an event kicks an idle endpoint at once: it then
# wakes once a second. (Every agent waking each 10 ms while idle kept the 280 agents of the bsl256 lab
# busy enough to saturate two cores: 3.4% of a core each.)
IDLE_SLEEP_S = 1.0
# Events reschedule the timer at most this often: a poll walks every flow, and what an event makes a
# node say now (ACKs, NACKs, AGG-ACKs, DATA a window opened) it says in the event itself.
MIN_KICK_S = 0.001
# Datagrams one read takes before the timers run (a bound, so a flood cannot hold the loop forever).
READ_MAX = 8192
# A wake-up with work pending later than this share of the least retransmission timeout is counted
# (``reliable.late-wakeups``, ``reliable.late-us``): the loop was held (a busy machine, a long read), and a
# stall some 0.6 RTO long already fires timers for feedback that was only late (a retransmission at 0 %
# loss in a run whose links kept their pace). The fidelity verdict takes the count as our software's.
LATE_SHARE = 0.25


class FabricClock:
    """The reliable transport's clock: fabric seconds at ``scale`` (wall seconds when it is unshaped),
    read from ``wall``. :meth:`rescale` keeps it continuous: a deadline set before a change of scale is
    still ahead of it after, as much fabric time as it was."""

    def __init__(self, scale: TimeScale, wall: Callable[[], float] = time.monotonic) -> None:
        self.wall = wall
        self.scale = scale
        self._wall0 = wall()
        self._fabric0 = 0.0

    def __call__(self) -> float:
        return self._fabric0 + self.scale.fabric_s(self.wall() - self._wall0)

    def rescale(self, scale: TimeScale) -> None:
        if scale == self.scale:
            return
        now = self()
        self._wall0, self._fabric0, self.scale = self.wall(), now, scale

    def wall_s(self, fabric_s: float) -> float:
        """How long ``fabric_s`` seconds of this clock take on the wall clock."""
        return self.scale.wall_s(fabric_s)


def bfr_aggregator(t: Timers) -> AggregatorConfig:
    """A BFR's aggregation timers on the clock the node runs on."""
    return AggregatorConfig(
        partial_after=t.partial_after,
        partial_floor=t.partial_floor,
        lifetime=t.lifetime,
        report_delay=t.report_delay,
        report_max=t.report_max,
    )


class ReliableEndpoint:
    """The sockets and timer around one :class:`ReliableNode`.  ``port`` and ``bind`` are for tests (the
    lab always uses 0.0.0.0:4795); ``source`` is the address DATA and end-to-end feedback leave from
    (the host's loopback, which the receivers and the BFIR answer to)."""

    def __init__(
        self,
        bfr_id: int | None,
        toward: Callable[[int], str | None],
        source: str = "0.0.0.0",
        bind: str = "0.0.0.0",
        port: int = RELIABLE_UDP_PORT,
        wall: Callable[[], float] = time.monotonic,
        aggregator: AggregatorConfig | None = None,
        queue_bytes: int | None = None,
        scale: TimeScale | None = None,
    ) -> None:
        """``queue_bytes``: on a shaped lab, the smallest shaper queue of this node's links: the send
        socket waits for room (the :class:`Outbox`) instead of overrunning it. ``scale``: the lab's time
        scale (None: unshaped), the node's clock and its BFR timers' (:mod:`aidcnet.reliable.timers`)."""
        self.port = port
        scale = scale or TimeScale.unshaped()
        self.clock = FabricClock(scale, wall)
        self.source = source
        self.queue_bytes = queue_bytes
        # The BFR timers follow the lab's clock, and the run's round trip, unless given (tests).
        self._timed = aggregator is None
        self.round_trip_s = 0.0
        self.node = ReliableNode(
            bfr_id, self._send, toward, aggregator=aggregator or bfr_aggregator(timers(scale))
        )
        self.node.wall_ns = time.time_ns
        # What else holds this node's DATA before the kernel (the BIER service's queue, set by the part):
        # while anything does, the node is not waiting on its protocol.
        self.queued: Callable[[], bool] = lambda: False
        # Network-BIER DATA to the groups (open_multicast): its socket and outbox.
        self.group_out: Outbox | None = None
        self.errors = 0
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            set_socket_buffer(self.rx, socket.SO_RCVBUF, SOCKET_BUFFER)
            enable_backpressure(self.tx, sndbuf=shaped_sndbuf(queue_bytes) or SOCKET_BUFFER)
            self.rx.bind((bind, port))
            self.tx.bind((source, 0))
            self.rx.setblocking(False)
            self.tx.setblocking(False)
        except OSError:
            self.rx.close()
            self.tx.close()
            raise
        self.out = Outbox(BatchIO(self.tx))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._kicked = float("-inf")
        self._idle = True
        # The wall time the timer was set for while work was pending (None: idle), and how late it ran.
        self._due_wall: float | None = None
        self._late_after = self._late_threshold()
        # Called before every read of the socket: a BFR whose fast path reports DATA drains those reports.
        self.before_read: Callable[[], object] | None = None
        self.late_wakeups = 0
        self.late_us = 0
        # Datagrams handed to the node later than the same share after the kernel received them: an ACK
        # that sat in our socket while the loop was busy reaches its sender late, and the sender's timer
        # may fire for it, with no pass of this node's own timer late (that counts only while one is due).
        self.late_arrivals = 0
        self.late_arrival_us = 0
        # Every datagram carries the kernel's receive stamp (:attr:`ReliableNode.rx_stamp_ns`): what the
        # late count is timed by, and a host's deliveries to its replay, as the network delivered them.
        enable_rx_stamps(self.rx)

    def _send(self, message: bytes, address: str) -> None:
        # A full buffer or queue keeps the datagram for later (in order); a refused one is counted
        # (outbox.refused) and left to the protocol's timers.
        self.out.send([(message, (address, self.port))])

    def open_multicast(self, interface: str, ttl: int) -> None:
        """Send this node's network-BIER DATA as IP multicast from its loopback, port 4797
        (:data:`NET_SPORT`), out of ``interface``; replaces the socket of an earlier run."""
        self.close_multicast()
        # A send buffer either way, so IP_RECVERR is on (the Outbox's ENOBUFS), as on the unicast socket.
        sndbuf = shaped_sndbuf(self.queue_bytes) or SOCKET_BUFFER
        sock = multicast_sender((self.source, NET_SPORT), interface, ttl, sndbuf, SOCKET_BUFFER)
        self.group_out = Outbox(BatchIO(sock))
        if self._loop is not None:
            self.group_out.attach(self._loop)
        self.node.multicast = self._send_group

    def _send_group(self, message: bytes, group: str) -> None:
        assert self.group_out is not None
        self.group_out.send([(message, (group, self.port))])

    def close_multicast(self) -> None:
        if self.group_out is not None:
            self.group_out.close()
            self.group_out.io.sock.close()
            self.group_out = None
        self.node.multicast = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.out.attach(loop)
        if self.group_out is not None:
            self.group_out.attach(loop)
        loop.add_reader(self.rx.fileno(), self._drain)
        self.kick()

    def _read(self) -> int:
        """Hand the node every datagram waiting on the socket (at most :data:`READ_MAX`)."""
        n = 0
        while n < READ_MAX:
            # Before each datagram, not once per batch: an ACK read late in a long batch may answer DATA
            # the fast path forwarded (and reported) after the batch began.
            if self.before_read is not None:
                self.before_read()
            try:
                data, anc, _flags, (src, sport) = self.rx.recvmsg(RECV_SIZE, STAMP_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.node.counters["rx.errors"] += 1
                log.warning("reliable socket receive failed: %s", exc)
                break
            self.node.rx_stamp_ns = rx_stamp_ns(anc)
            self.count_late_arrival(self.node.rx_stamp_ns)
            self.node.on_datagram(data, src, self.clock(), sport)
            n += 1
        return n

    def _drain(self) -> None:
        self._read()
        self.nudge()

    def nudge(self) -> None:
        """After an event: reschedule the timer, unless that was done less than MIN_KICK_S ago."""
        if self._idle or self.clock.wall() - self._kicked >= MIN_KICK_S:
            self.kick()

    def kick(self) -> None:
        """Run what is due now and set the timer for the next deadline (after every event). The feedback
        waiting on the socket goes first: a timer must not fire for a packet whose answer is unread."""
        if self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._read()
        self._kicked = self.clock.wall()
        self._count_late(self._kicked)
        now = self.clock()
        waits = self.node.waits
        waits.end(time.time_ns())
        try:
            due = self.node.poll(now)
        except Exception:
            self.errors += 1
            log.exception("reliable poll failed")
            due = None
        self._idle = due is None
        wait = IDLE_SLEEP_S if due is None else min(MAX_SLEEP_S, max(0.0, self.clock.wall_s(due - now)))
        self._due_wall = None if due is None else self._kicked + wait
        self._timer = self._loop.call_later(wait, self.kick)
        if self.node.sending and not self._holding():
            # The pass sent all the protocol allows: until an answer, or the timer just set, it waits.
            now_ns = time.time_ns()
            until = None if due is None else now_ns + round(max(0.0, self.clock.wall_s(due - now)) * 1e9)
            waits.begin(now_ns, until)

    def _holding(self) -> bool:
        """DATA of this node waits in a queue of ours before the kernel (a full socket's)."""
        return self.out.waiting or (self.group_out is not None and self.group_out.waiting) or self.queued()

    def _count_late(self, wall: float) -> None:
        """Count a pass that came later than :data:`LATE_SHARE` of the least RTO after the time it was due
        (one an event brought early is not late)."""
        if self._due_wall is None:
            return
        late = wall - self._due_wall
        if late > self._late_after:
            self.late_wakeups += 1
            self.late_us += int(late * 1e6)

    def count_late_arrival(self, stamp_ns: int) -> None:
        """Count a datagram handed to the node later than :data:`LATE_SHARE` of the least RTO after the
        kernel stamped its arrival (``stamp_ns``, the realtime clock's ns; 0: no stamp, not counted)."""
        if not stamp_ns:
            return
        late = (time.time_ns() - stamp_ns) / 1e9
        if late > self._late_after:
            self.late_arrivals += 1
            self.late_arrival_us += int(late * 1e6)

    def _late_threshold(self) -> float:
        """:data:`LATE_SHARE` of the transport's least RTO over the run's paths (its round trip included,
        as the senders' is), in wall seconds at the clock's scale."""
        return self.clock.wall_s(LATE_SHARE * timers(self.clock.scale, self.round_trip_s).min_rto)

    def rescale(self, scale: TimeScale) -> None:
        """The lab's time scale changed (a run rescales links and agents together): the clock follows,
        and so do the BFR timers when the lab went from unshaped to shaped or back."""
        if scale == self.clock.scale:
            return
        self.clock.rescale(scale)
        self._late_after = self._late_threshold()
        if self._timed:
            self.node.aggregator.config = bfr_aggregator(timers(scale, self.round_trip_s))

    def over_round_trip(self, round_trip_s: float) -> None:
        """The run's paths are this long (their longest propagation round trip, fabric seconds): the BFR
        timers wait for answers from that far (:meth:`aidcnet.reliable.timers.Timers.over`)."""
        self.round_trip_s = round_trip_s
        self._late_after = self._late_threshold()
        if self._timed:
            self.node.aggregator.config = bfr_aggregator(timers(self.clock.scale, round_trip_s))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.out.close()
        self.close_multicast()
        if self._loop is not None:
            self._loop.remove_reader(self.rx.fileno())
            self._loop = None
        self.rx.close()
        self.tx.close()


class ReliablePart(Service):
    """The agent's reliable transport: one :class:`ReliableEndpoint` per applied node file (rebuilt
    when the loopback changes), wired to the BIER service that runs."""

    def __init__(self, bier: BierPart) -> None:
        self.bier = bier
        self.endpoint: ReliableEndpoint | None = None
        self._source: str | None = None
        self._queue: int | None = None
        # Host-BIER DATA waiting for room in the BIER socket: the lossless dataplane would otherwise
        # block the event loop in its send (and stop it from hearing the ACKs that free the window).
        self._pending: deque[tuple[bytes, list[int], int]] = deque()
        self._writer_fd: int | None = None
        bier.add_listener(self._on_bier_udp)
        bier.add_forward_listener(self._on_forward)
        bier.add_report_listener(RELIABLE_UDP_PORT, self._on_report)
        bier.set_edge_hooks(self._on_impose, self._on_emit, RELIABLE_UDP_PORT)
        # Host port -> id-mask of the BFRs behind it (its hosts), per BIER service (built on first use).
        self._port_hosts: tuple[tuple[object, ...], dict[str, int]] | None = None

    async def reload(self, config: NodeConfig | None) -> None:
        source = str(config.loopback.ip) if config is not None and config.loopback is not None else None
        bfr_id = config.bier.bfr_id if config is not None and config.bier is not None else None
        queue = config.smallest_queue_bytes if config is not None else None
        scale = config.clock if config is not None else TimeScale.unshaped()
        if self.endpoint is not None and (source, queue) == (self._source, self._queue):
            if self.endpoint.node.receiver is None:
                self.endpoint.node.bfr_id = bfr_id
            self.endpoint.rescale(scale)
            return
        self._close()
        if source is None:
            return
        self.endpoint = ReliableEndpoint(bfr_id, self.toward, source=source, queue_bytes=queue, scale=scale)
        self.endpoint.node.impose = self._impose
        self.endpoint.queued = lambda: bool(self._pending)
        self.endpoint.before_read = self._poll_reports
        self.endpoint.attach(asyncio.get_running_loop())
        self._source, self._queue = source, queue

    def _close(self) -> None:
        self._stop_writer()
        self._pending.clear()
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None
            self._source = self._queue = None

    async def stop(self) -> None:
        self._close()

    def node(self) -> ReliableNode:
        if self.endpoint is None:
            raise ValueError(
                "the reliable transport runs on configured nodes only (aidclab configure LAB first)"
            )
        return self.endpoint.node

    def kick(self) -> None:
        if self.endpoint is not None:
            self.endpoint.kick()

    def open_multicast(self, interface: str, ttl: int) -> None:
        """This host's network-BIER DATA leaves as IP multicast out of ``interface`` (a reliable-net-bier
        run); :meth:`ReliableEndpoint.open_multicast`."""
        self.node()  # an unconfigured node says so
        assert self.endpoint is not None
        self.endpoint.open_multicast(interface, ttl)

    def close_multicast(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close_multicast()

    def toward(self, bfr_id: int) -> str | None:
        """The address of the BIER neighbor toward BFR-id ``bfr_id`` (the first alternative of its BIFT
        row): where feedback for that BFIR goes when no DATA told us the way back."""
        service = self.bier.current
        if service is None:
            return None
        si, bit = bfr_id_to_si_bit(bfr_id, service.bier.bsl)
        bift = service.bifts.get(si)
        alts = bift.entries[bit] if bift is not None and bit < len(bift.entries) else None
        if not alts:
            return None
        nbr = alts[0][1]
        hop = service.dataplane.neighbors.get(nbr) if nbr is not None else None
        return hop[0] if hop else None

    def _impose(self, data: bytes, receivers: list[int], entropy: int, sport: int) -> None:
        service = self.bier.current
        if service is None or service.host is None:
            raise ValueError("host-BIER flows need this host's BIER service (no bier section applied)")
        datagram = build_udp(service.loopback, DATA_GROUP, sport, RELIABLE_UDP_PORT, data)
        self._pending.append((datagram, receivers, entropy & 0xFFFFF))
        self._flush()

    def _flush(self) -> None:
        service = self.bier.current
        if service is None or service.host is None:
            self._pending.clear()  # the BIER service went away: the senders' timers resend later
            self._stop_writer()
            return
        sock = service.dataplane.sock
        while self._pending:
            if service.sndbuf is not None and not select.select([], [sock], [], 0)[1]:
                if self._writer_fd is None:
                    self._writer_fd = sock.fileno()
                    asyncio.get_running_loop().add_writer(self._writer_fd, self._on_writable)
                return
            datagram, receivers, entropy = self._pending.popleft()
            service.host.send(datagram, receivers, entropy=entropy)
        self._stop_writer()

    def _on_writable(self) -> None:
        self._stop_writer()
        self._flush()

    def _stop_writer(self) -> None:
        if self._writer_fd is not None:
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                asyncio.get_running_loop().remove_writer(self._writer_fd)
            self._writer_fd = None

    def _on_bier_udp(self, datagram: UdpDatagram) -> bool:
        if self.endpoint is None or datagram.dport != RELIABLE_UDP_PORT:
            return False
        service = self.bier.current
        self.endpoint.node.rx_stamp_ns = service.dataplane.rx_stamp_ns if service is not None else 0
        self.endpoint.count_late_arrival(self.endpoint.node.rx_stamp_ns)
        self.endpoint.node.on_bier_delivery(datagram, self.endpoint.clock())
        self.endpoint.nudge()
        return True

    def _on_forward(self, src: str, inner: bytes, downstream: int) -> None:
        if self.endpoint is not None:
            self.endpoint.node.on_forward(inner, src, downstream, self.endpoint.clock())

    def _poll_reports(self) -> None:
        """Take the fast path's DATA reports before the feedback on the socket. The kernel writes a DATA's
        report before the DATA leaves, so the ACK it brings back always arrives after; but both wait on
        their own fd, and one turn of the loop may serve the socket first. The ACK then found no entry
        and went upstream unaggregated (``agg.passed-no-entry``), and the entry the report made a moment
        later waited for it until its partial timer, past the source's RTO: 2 retransmissions on a timer
        at 0% loss on leaf-spine, more on a busy machine. Called before each datagram, not each batch:
        the fast path reports on while a late turn reads a long batch."""
        service = self.bier.current
        if service is not None and service.ebpf is not None:
            service.ebpf.poll_reports()

    def _on_report(self, report: Reported) -> None:
        if self.endpoint is not None:
            node = self.endpoint.node
            node.on_report(report.head, report.src, report.downstream, report.imposed, self.endpoint.clock())

    def _on_impose(self, packet: bytes, bfers: tuple[int, ...], src: str) -> tuple[int, ...]:
        if self.endpoint is None:
            return bfers
        return self.endpoint.node.on_impose(packet, bfers, src, self.endpoint.clock())

    def _on_emit(self, packet: bytes, ports: tuple[str, ...]) -> None:
        if self.endpoint is None:
            return
        hosts = self.hosts_behind()
        mask = 0
        for port in ports:
            mask |= hosts.get(port, 0)
        self.endpoint.node.on_emit(packet, mask, self.endpoint.clock())
        self.endpoint.nudge()

    def hosts_behind(self) -> dict[str, int]:
        """Per interface, the id-mask of the BFR-ids whose BIFT row leads out of it (on a leaf's host
        port: the host on it). Network-BIER's BitString names the leaf; this is who answers for it."""
        service = self.bier.current
        if service is None:
            return {}
        # BGP rebuilds the BIFTs in place of the old ones: a new table, a new map.
        key = (service, *map(id, service.bifts.values()))
        if self._port_hosts is not None and self._port_hosts[0] == key:
            return self._port_hosts[1]
        ifname = {nbr: port for nbr, (_addr, port) in service.dataplane.neighbors.items()}
        out: dict[str, int] = {}
        for si, bift in service.bifts.items():
            for bit, alts in enumerate(bift.entries):
                if bit and alts and alts[0][1] in ifname:
                    port = ifname[alts[0][1]]
                    out[port] = out.get(port, 0) | 1 << (si_bit_to_bfr_id(si, bit, service.bier.bsl) - 1)
        self._port_hosts = (key, out)
        return out

    async def reset(self, request: dict[str, Any]) -> dict[str, Any]:
        """Forget the flows of earlier runs (:meth:`ReliableNode.forget_flows`); a node the reliable
        transport does not run on has nothing to forget. ``round_trip_s``: the next run's longest
        propagation round trip (fabric seconds; 0 or absent: links without delay), which the BFR timers
        wait for. Says too what this node's aggregation sees (:meth:`aggregation`), so a run that needs it
        refuses to start where it is missing."""
        round_trip_s = request.get("round_trip_s", 0.0)
        if (
            isinstance(round_trip_s, bool)
            or not isinstance(round_trip_s, int | float)
            or not (0 <= round_trip_s < 3600)
        ):
            raise ValueError(
                f"round_trip_s: {round_trip_s!r} is not a round trip in seconds (0 up to an hour)"
            )
        forgotten = 0
        if self.endpoint is not None:
            forgotten = self.endpoint.node.forget_flows()
            self.endpoint.over_round_trip(float(round_trip_s))
        return {"ok": True, "forgotten": forgotten, "aggregation": self.aggregation()}

    def aggregation(self) -> dict[str, Any]:
        """How this node's ACK aggregation learns the DATA it forwards: ``forward`` is ``python`` (the Python
        dataplane forwards it and tells), ``ebpf`` (the fast path forwards it and reports it), or None
        with ``why``; ``impose`` the same for network-BIER's imposition at a leaf (None: no host port
        here, or, with ``impose_why``, the kernel imposes without reports)."""
        service = self.bier.current
        if service is None:
            return {"forward": None, "impose": None, "why": "no BIER configured here"}
        out: dict[str, Any] = {"forward": "python", "impose": None, "why": None}
        if service.ebpf is not None:
            if service.ebpf.ring is None:
                why = service.report_error or "the eBPF fast path reports nothing here"
                out.update(forward=None, why=why)
            else:
                out["forward"] = "ebpf"
        if service.edge is not None:
            # Network-BIER's BFIR leaf: the Python edge imposes (and tells), or the fast path imposes first
            # transmissions and reports them, leaving retransmissions to the Python edge, which narrows them.
            if service.net_ebpf is None:
                out["impose"] = "python"
            elif service.ebpf is not None and service.ebpf.ring is not None:
                out["impose"] = "ebpf"
            else:
                out["impose_why"] = out["why"]
        return out

    def handlers(self) -> dict[Op, Handler]:
        return {Op.RELIABLE_RESET: self.reset}

    def counters(self) -> dict[str, int]:
        if self.endpoint is None:
            return {}
        # Counters only: they must only grow (a run's deltas); the gauges are in replay_status.
        out = {f"reliable.{k}": v for k, v in self.endpoint.node.totals().items() if k not in GAUGES}
        out["reliable.poll-errors"] = self.endpoint.errors
        out["reliable.tx.deferred"] = self.endpoint.out.deferred
        out["reliable.tx.refused"] = self.endpoint.out.refused
        out["reliable.tx.overflow"] = self.endpoint.out.overflow
        out["reliable.late-wakeups"] = self.endpoint.late_wakeups
        out["reliable.late-us"] = self.endpoint.late_us
        out["reliable.late-arrivals"] = self.endpoint.late_arrivals
        out["reliable.late-arrival-us"] = self.endpoint.late_arrival_us
        return out

    def status(self) -> dict[str, Any]:
        # With the gauges: DATA held now until the BIER socket has room.
        return {**self.node().totals(), "bier.waiting": len(self._pending)}
