"""The host agent's side of a trace replay: a schedule of this host's ops, sent from a background task
at ``start + t``, and the receiver accounting of every replay message that reaches this host.

Unicast: one datagram stream per receiver, from the host's loopback to the receiver's loopback, UDP
destination port 4791 (RoCEv2), source port = QP. Host-BIER: each fragment once through the BIER
service with the receivers' BFR-ids. Network-BIER: plain IP multicast, one socket bound to the loopback
(the S of (S,G)) sending each op once to its group out of the fabric interface; the leaves do BIER.
Receivers join their groups on the replay port. The membership modes (docs/igmp.md) send as net-bier
does, the BitString learned at run time: ``igmp`` receivers join each op's (S,G) through their kernel
when its receivers are known and leave once they have the message (or once no data has reached the
host for ``hold_s``); a ``proxy`` source sends its
first-hop router a Receiver Proxy Report naming the receivers before a group's first op and an empty
one ``hold_s`` after its last. Both send the data ``lead_s`` after the receivers are known. The reliable modes
(``aidcnet.modes.RELIABLE``) send each op as one flow of the reliable transport (one sequence per
fragment; docs/reliability.md) through the agent's reliable service, over host-BIER or per receiver
over unicast, and complete when every receiver has acknowledged every flow (or was declared failed).
All modes land in the same :class:`~aidcnet.replay.Reassembly`.
The payload format is ``docs/replay-payload.md``; the orchestrator side is
``orchestrator/experiment/driver.py``.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.reliable_node import replay_flow_id
from aidcnet.agent.service import Service
from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT
from aidcnet.modes import RELIABLE, Mode
from aidcnet.replay import DEFAULT_MAX_DATAGRAM, Reassembly, build_fragments, looks_like_replay
from aidcnet.roles import Role
from aidcnet.udpio import mreqn, multicast_sender, set_socket_buffer, shaped_sndbuf, size_send_buffer

if TYPE_CHECKING:
    from aidcnet.agent.bier_service import BierPart, BierService
    from aidcnet.agent.reliable_service import ReliablePart
    from aidcnet.config import NodeConfig
    from aidcnet.ipv4 import UdpDatagram

log = logging.getLogger("aidcnet.replay")

# The modes whose messages this service sends and receives (collectives are the INA worker's).
MODES = (Mode.UNICAST, Mode.HOST_BIER, Mode.NET_BIER, Mode.IGMP, Mode.PROXY, *RELIABLE)
# The modes that send plain IP multicast, one group per op, out of the fabric interface.
MCAST_MODES = (Mode.NET_BIER, Mode.IGMP, Mode.PROXY, Mode.RELIABLE_NET_BIER)
# Where IGMPv3 reports go (RFC 3376 §4.2.14): the Receiver Proxy Report too.
ALL_IGMPV3_ROUTERS = "224.0.0.22"
IP_OPTIONS = 4
# Linux: join one source of a group (struct ip_mreq_source), RFC 4604's SSM join.
IP_ADD_SOURCE_MEMBERSHIP = getattr(socket, "IP_ADD_SOURCE_MEMBERSHIP", 39)
SIOCGIFADDR = 0x8915
# How often a reliable run looks whether its flows have completed.
RELIABLE_CHECK_S = 0.01
DEFAULT_QPS = 8
# A burst of ops at one t from 8 senders can put megabytes into one receiver's socket at once.
RCVBUF = 32 << 20
SNDBUF = 8 << 20
# Crossing the BIER domain costs one IP hop; 8 leaves room for a longer path (docs/bier.md).
MCAST_TTL = 8
# Not in Python 3.11's socket module (Linux 2.6.31): 0 = a socket gets only the groups it joined itself.
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
# net.ipv4.igmp_max_memberships: the per-socket join limit; containers cannot raise it (/proc/sys is
# read-only), so the groups are spread over as many sockets as they need.
IGMP_MAX_MEMBERSHIPS_FILE = "/proc/sys/net/ipv4/igmp_max_memberships"
RECV_SIZE = 65536
# A datagram the shaper queue refused (ENOBUFS) is sent again after this, doubling up to the second.
ENOBUFS_BACKOFF_S = (0.0002, 0.01)


def _group_socket() -> socket.socket:
    """A socket on the replay port that receives only the groups it joins itself (IP_MULTICAST_ALL 0)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        set_socket_buffer(sock, socket.SO_RCVBUF, RCVBUF)
        sock.bind(("0.0.0.0", ROCEV2_PORT))
    except OSError:
        sock.close()
        raise
    return sock


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, service: ReplayService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.service.received(data, addr[0])


class ReplayService:
    def __init__(
        self,
        loopback: str,
        bier: BierService | None = None,
        queue_bytes: int | None = None,
        reliable: ReliablePart | None = None,
    ) -> None:
        self.loopback = loopback
        self.reliable = reliable
        # Shaped lab: the host's uplink queue, which the send sockets together must never fill (lossless).
        self.queue_bytes = queue_bytes
        self.bier = bier
        self.mode = Mode.UNICAST
        self.ops: list[list[Any]] = []
        self.receivers: dict[str, tuple[str, int | None]] = {}
        self.max_datagram = DEFAULT_MAX_DATAGRAM
        self.qps = DEFAULT_QPS
        self.gap_us = 0.0
        self.reassembly = Reassembly()
        self.sent_ops = 0
        self.sent_datagrams = 0
        self.send_errors: dict[str, int] = {}
        self.start_ns: int | None = None
        self.finished_ns: int | None = None
        self.task: asyncio.Task[None] | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._send_socks: list[socket.socket] = []
        # net-bier: the fabric interface, the groups joined here and the sockets holding the joins.
        self.interface: str | None = None
        self.groups: list[str] = []
        self._group_socks: list[socket.socket] = []
        # igmp: this host's joins as a receiver ([op id, t, group, source]); per (group, source) the
        # socket holding the join and how many ops need it; per op the join and leave times (wall ns)
        # and the future a complete message resolves.
        self.lead_s = 0.0
        self.hold_s = 2.0
        self.memberships: list[list[Any]] = []
        self._member_socks: dict[tuple[str, str], list[Any]] = {}
        self.join_events: dict[int, list[int | None]] = {}
        self._complete_waiters: dict[int, asyncio.Future[None]] = {}
        self._last_rx_ns = 0  # wall ns of the last replay datagram, what keeps an incomplete op joined
        # proxy: this host's reports as a source, by (op id, before the op), and when each was sent.
        self.reports: dict[tuple[int, bool], list[tuple[str, list[str]]]] = {}
        self.report_events: list[list[Any]] = []
        # Cumulative, as agent counters are (the driver takes deltas over a run).
        self.proxy_reports_sent = 0
        self.proxy_report_bytes_sent = 0

    # -- receiving -------------------------------------------------------------------------------------
    async def listen(self) -> None:
        if self._transport is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        set_socket_buffer(sock, socket.SO_RCVBUF, RCVBUF)
        # Group sockets share this port; without this every one of them would get every joined group.
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        sock.bind(("0.0.0.0", ROCEV2_PORT))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Receiver(self), sock=sock)
        self._transport = transport  # type: ignore[assignment]

    def join(self, groups: list[str], interface: str) -> None:
        """Join ``groups`` on ``interface`` for the replay port; each datagram reaches exactly one
        socket (the one that joined its group), which feeds the common reassembly. Synchronous (a
        reader on the running loop, not a transport) because control handlers call load() unawaited."""
        self.leave()
        ifindex = socket.if_nametoindex(interface)
        per_socket = _max_memberships()
        loop = asyncio.get_running_loop()
        for i in range(0, len(groups), per_socket):
            sock = _group_socket()
            try:
                for group in groups[i : i + per_socket]:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn(group, ifindex))
                sock.setblocking(False)
            except OSError:
                sock.close()
                self.leave()
                raise
            loop.add_reader(sock.fileno(), self._drain_group_socket, sock)
            self._group_socks.append(sock)
        self.groups = list(groups)

    def _drain_group_socket(self, sock: socket.socket) -> None:
        while True:
            try:
                data, addr = sock.recvfrom(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("group socket receive failed: %s", exc)
                return
            self.received(data, addr[0])

    def received(self, data: bytes, src: str) -> None:
        """Account one replay datagram; a message now complete frees its igmp receiver to leave."""
        now = self._last_rx_ns = time.time_ns()
        rec = self.reassembly.add(data, now, src=src)
        if rec is not None and rec.complete and self._complete_waiters:
            fut = self._complete_waiters.pop(rec.msg_id, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

    # -- igmp memberships --------------------------------------------------------------------------
    def member_join(self, group: str, source: str) -> None:
        """Join (S,G) on the fabric interface through the kernel (IGMPv3 INCLUDE {S}); one socket per
        (S,G) however many ops need it, so a message reaches the reassembly once."""
        held = self._member_socks.get((group, source))
        if held is not None:
            held[1] += 1
            return
        assert self.interface is not None
        sock = _group_socket()
        try:
            mreq = socket.inet_aton(group) + _interface_address(self.interface) + socket.inet_aton(source)
            sock.setsockopt(socket.IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, mreq)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        asyncio.get_running_loop().add_reader(sock.fileno(), self._drain_group_socket, sock)
        self._member_socks[(group, source)] = [sock, 1]

    def member_leave(self, group: str, source: str) -> None:
        """The last op needing (S,G) is over: closing the socket makes the kernel report the leave."""
        held = self._member_socks.get((group, source))
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del self._member_socks[(group, source)]
        asyncio.get_running_loop().remove_reader(held[0].fileno())
        held[0].close()

    async def _memberships(self) -> None:
        assert self.start_ns is not None
        loop = asyncio.get_running_loop()
        leaving: list[asyncio.Task[None]] = []
        for op_id, t, group, source in sorted(self.memberships, key=lambda m: (m[1], m[0])):
            await self._at(t)
            fut: asyncio.Future[None] = loop.create_future()
            self._complete_waiters[op_id] = fut
            try:
                self.member_join(group, source)
            except OSError as exc:
                self._complete_waiters.pop(op_id, None)
                self._error(f"join {group}: {exc.strerror or exc}")
                continue
            self.join_events[op_id] = [time.time_ns(), None]
            deadline = self.start_ns + int((t + self.lead_s + self.hold_s) * 1e9)
            leaving.append(loop.create_task(self._leave_when_done(op_id, group, source, fut, deadline)))
        await asyncio.gather(*leaving)

    async def _leave_when_done(
        self, op_id: int, group: str, source: str, fut: asyncio.Future[None], deadline_ns: int
    ) -> None:
        """Leave once the message is whole, or once ``hold_s`` passed with no replay data reaching this
        host, counted from the later of the op's due time (``deadline_ns`` - hold) and the host's last
        packet. While data still arrives the fabric may be draining a queue that holds this op's message
        too (a source sends its ops back to back; a loaded machine drains slower): leaving then would
        cut the message short and blame the membership signalling for our own speed."""
        hold_ns = int(self.hold_s * 1e9)
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(fut), max(0.0, (deadline_ns - time.time_ns()) / 1e9))
                break
            except TimeoutError:
                if self._last_rx_ns + hold_ns <= time.time_ns():
                    self._complete_waiters.pop(op_id, None)
                    break
                deadline_ns = self._last_rx_ns + hold_ns
        self.member_leave(group, source)
        self.join_events[op_id][1] = time.time_ns()

    def _leave_members(self) -> None:
        if self._member_socks:
            loop = asyncio.get_running_loop()
            for sock, _ in self._member_socks.values():
                loop.remove_reader(sock.fileno())
                sock.close()
        self._member_socks = {}

    # -- proxy reports -----------------------------------------------------------------------------
    def _send_reports(self, sock: socket.socket | None, op_id: int, before: bool) -> None:
        from ipaddress import IPv4Address

        from aidcnet.igmp.codec import encode
        from aidcnet.igmp.extensions import ProxyReport

        for group, receivers in self.reports.get((op_id, before), []):
            report = ProxyReport(
                IPv4Address(group), IPv4Address(self.loopback), tuple(map(IPv4Address, receivers))
            )
            data = encode(report.to_report())
            if sock is None:
                self._error("no proxy report socket")
                continue
            try:
                sock.sendto(data, (ALL_IGMPV3_ROUTERS, 0))
            except OSError as exc:
                self._error(f"proxy report: {exc.strerror or exc}")
                continue
            self.report_events.append([op_id, before, time.time_ns()])
            self.proxy_reports_sent += 1
            # On the wire: IPv4 with Router Alert (24 octets) and the IGMPv3 message.
            self.proxy_report_bytes_sent += 24 + len(data)

    # -- the membership modes' signalling around the sends ---------------------------------------
    def _signals_start(self, loop: asyncio.AbstractEventLoop) -> None:
        """igmp: this receiver's joins and leaves run beside the sends; proxy: the report socket."""
        self._signal_task: asyncio.Task[None] | None = None
        self._report_sock: socket.socket | None = None
        self._withdrawals: list[asyncio.Task[None]] = []
        self._reported: set[int] = set()
        if self.mode == Mode.IGMP and self.memberships:
            self._signal_task = loop.create_task(self._memberships())
        if self.mode == Mode.PROXY and self.reports:
            self._report_sock = self._open_report_socket()
            # Each report at its op's t, beside the sends: the op before may still be waiting out its
            # lead, and a report held behind that data would reach the FHR a lead late.
            self._signal_task = loop.create_task(self._report_schedule())

    async def _at(self, t: float) -> None:
        """Sleep until the run's time ``t`` (seconds after its start); at once if it has passed."""
        assert self.start_ns is not None
        delay = (self.start_ns + int(t * 1e9) - time.time_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

    async def _report_schedule(self) -> None:
        for msg_id, t, *_rest in self.ops:
            await self._signals_before(msg_id, t)

    async def _signals_before(self, msg_id: int, t: float) -> None:
        """proxy: the reports due before op ``msg_id``, at its t (when its receivers are known). The
        schedule sends them, and so does the data loop if the schedule has not come to it yet: a report
        always leaves ahead of its own op's data, and once."""
        if (msg_id, True) in self.reports:
            await self._at(t)
            if msg_id not in self._reported:
                self._reported.add(msg_id)
                self._send_reports(self._report_sock, msg_id, True)

    def _signals_after(self, loop: asyncio.AbstractEventLoop, msg_id: int) -> None:
        if (msg_id, False) in self.reports:
            self._withdrawals.append(loop.create_task(self._withdraw_later(self._report_sock, msg_id)))

    async def _signals_finish(self) -> None:
        if self._signal_task is not None:
            await self._signal_task
        await asyncio.gather(*self._withdrawals)

    def _signals_close(self) -> None:
        task = getattr(self, "_signal_task", None)
        if task is not None:
            task.cancel()
        for task in getattr(self, "_withdrawals", []):
            task.cancel()
        sock = getattr(self, "_report_sock", None)
        if sock is not None:
            sock.close()
        self._report_sock = None

    async def _withdraw_later(self, sock: socket.socket | None, op_id: int) -> None:
        """The empty report, ``hold_s`` after the group's last data: an FHR reads reports before each
        lookup (before_lookup), so one sent right behind the data could overtake packets still waiting
        for its edge and leave them without a BitString."""
        await asyncio.sleep(self.hold_s)
        self._send_reports(sock, op_id, False)

    def _open_report_socket(self) -> socket.socket:
        """A raw IGMP socket out of the fabric interface: TTL 1 and Router Alert, as reports go."""
        from aidcnet.igmp.node import ROUTER_ALERT

        assert self.interface is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, self.interface.encode())
            sock.setsockopt(socket.IPPROTO_IP, IP_OPTIONS, ROUTER_ALERT)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
            sock.setsockopt(
                socket.IPPROTO_IP,
                socket.IP_MULTICAST_IF,
                mreqn("0.0.0.0", socket.if_nametoindex(self.interface)),
            )
        except OSError:
            sock.close()
            raise
        return sock

    def leave(self) -> None:
        """Drop every group joined for the run (closing a socket leaves its groups)."""
        if self._group_socks:
            loop = asyncio.get_running_loop()
            for sock in self._group_socks:
                loop.remove_reader(sock.fileno())
                sock.close()
        self._group_socks = []
        self.groups = []
        self._leave_members()

    def on_bier_datagram(self, datagram: UdpDatagram) -> bool:
        """BIER service hook: take host-BIER deliveries of replay fragments to the replay port; others
        (``bier_send``'s payloads use the same port) stay with the service, also after a replay ran."""
        if datagram.dport != ROCEV2_PORT or not looks_like_replay(datagram.payload):
            return False
        self.received(datagram.payload, datagram.src)
        return True

    # -- control ops -----------------------------------------------------------------------------------
    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            raise ValueError("a replay is running on this host; wait for replay_status done")
        mode = str(request.get("mode", Mode.UNICAST))
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        mode = Mode(mode)
        bier_mode = mode in (Mode.HOST_BIER, Mode.RELIABLE_HOST_BIER, Mode.RELIABLE_HOST_BIER_E2E)
        if bier_mode and (self.bier is None or self.bier.host is None):
            raise ValueError(f"{mode} replay needs this host's BIER service (no bier section applied)")
        if mode in RELIABLE and self.reliable is None:
            raise ValueError(f"{mode} replay needs the agent's reliable service")
        receivers = {
            name: (str(addr), None if bfr_id is None else int(bfr_id))
            for name, (addr, bfr_id) in request.get("receivers", {}).items()
        }
        ops = [_op(mode, raw) for raw in request.get("ops", [])]
        for op in ops:
            for d in op[3]:
                if d not in receivers:
                    raise ValueError(f"op receiver {d!r} is not in the request's receivers")
                if (bier_mode or mode in RELIABLE) and receivers[d][1] is None:
                    raise ValueError(f"receiver {d!r} has no BFR-id: {mode} needs one")
            if mode in RELIABLE:
                replay_flow_id(0, op[0])  # the op id must fit its 24 bits of the Flow ID
        joins = [str(g) for g in request.get("groups", [])]
        bad = [g for g in joins if not _is_multicast(g)]
        if bad:
            raise ValueError(f"groups: {', '.join(bad)} not multicast")
        memberships, reports = _membership_fields(request, mode)
        interface = request.get("interface")
        if mode in MCAST_MODES and not request.get("append"):
            if not interface:
                raise ValueError(f"{mode} needs the fabric interface (interface)")
            try:
                socket.if_nametoindex(str(interface))
            except OSError:
                raise ValueError(f"interface {interface!r} does not exist on this host") from None
        if request.get("append"):
            if mode != self.mode:
                raise ValueError(f"append in mode {mode} to a schedule loaded in mode {self.mode}")
            self.receivers.update(receivers)
            self.ops.extend(ops)
            self._add_membership(memberships, reports, None)
            if joins:
                if self.interface is None:
                    raise ValueError("groups to join in a schedule without a net-bier interface")
                self.join([*self.groups, *joins], self.interface)
        else:
            self.mode, self.receivers, self.ops = mode, receivers, ops
            self.interface = str(interface) if mode in MCAST_MODES else None
            # A new run's groups replace the last run's (or none for other modes).
            self.leave()
            self._add_membership(memberships, reports, request)
            if self.interface is not None and joins:
                self.join(joins, self.interface)
            self.max_datagram = int(request.get("max_datagram", DEFAULT_MAX_DATAGRAM))
            self.qps = max(1, int(request.get("qps", DEFAULT_QPS)))
            self.gap_us = float(request.get("gap_us", 0.0))
            # A new load is a new run: forget what was received and sent before.
            self.reassembly = Reassembly(max_datagram=self.max_datagram)
            if mode in RELIABLE:
                self._configure_reliable(mode, request.get("reliable") or {})
            self.sent_ops = self.sent_datagrams = 0
            self.send_errors = {}
            self.start_ns = self.finished_ns = None
        self.ops.sort(key=lambda op: (op[1], op[0]))
        out = {"ok": True, "ops": len(self.ops), "mode": self.mode, "groups": len(self.groups)}
        if self.mode in (Mode.IGMP, Mode.PROXY):
            out.update(memberships=len(self.memberships), reports=sum(len(v) for v in self.reports.values()))
        return out

    def _add_membership(
        self,
        memberships: list[list[Any]],
        reports: dict[tuple[int, bool], list[tuple[str, list[str]]]],
        new_run: dict[str, Any] | None,
    ) -> None:
        """igmp joins and proxy reports of a load: a new run's (``new_run``: its request) replace the
        last run's, with its lead and hold; an append's are added."""
        if new_run is not None:
            lead_s, hold_s = float(new_run.get("lead_s", 0.0)), float(new_run.get("hold_s", 2.0))
            if lead_s < 0 or hold_s <= 0:
                raise ValueError(f"lead_s {lead_s} must be >= 0 and hold_s {hold_s} > 0")
            self.lead_s, self.hold_s = lead_s, hold_s
            self.memberships, self.reports = [], {}
            self.join_events, self.report_events = {}, []
        self.memberships.extend(memberships)
        for key, items in reports.items():
            self.reports.setdefault(key, []).extend(items)

    def _configure_reliable(self, mode: Mode, raw: dict[str, Any]) -> None:
        from aidcnet.agent.reliable_node import ReliableSettings

        assert self.reliable is not None
        raw = dict(raw)
        self_id = raw.pop("self_id", None)
        if self_id is None:
            raise ValueError(f"{mode} needs reliable.self_id: this host's id in the run (its BFR-id)")
        settings = ReliableSettings.from_request({**raw, "feedback": RELIABLE[mode]})
        node = self.reliable.node()
        node.configure(settings, int(self_id))
        if mode == Mode.RELIABLE_NET_BIER:
            assert self.interface is not None
            self.reliable.open_multicast(self.interface, MCAST_TTL)
        else:
            self.reliable.close_multicast()
        node.deliver = lambda payload, src: self.reassembly.add(payload, time.time_ns(), src=src)

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            raise ValueError("a replay is already running on this host")
        self.start_ns = int(request["start_ns"])
        self.finished_ns = None
        self.task = asyncio.get_running_loop().create_task(self._run())
        return {"ok": True, "ops": len(self.ops), "starts_in_s": (self.start_ns - time.time_ns()) / 1e9}

    def status(self) -> dict[str, Any]:
        return {
            "ok": True,
            "mode": self.mode,
            "ops": len(self.ops),
            "sent_ops": self.sent_ops,
            "sent_datagrams": self.sent_datagrams,
            "send_errors": dict(self.send_errors),
            "done": self.finished_ns is not None,
            "finished_ns": self.finished_ns,
            "received_messages": len(self.reassembly.records),
            "received_complete": self.reassembly.complete_good(),
            "groups": len(self.groups),
            "proxy_reports_sent": self.proxy_reports_sent,
        } | self._reliable_status()

    def _reliable_status(self) -> dict[str, Any]:
        if self.mode not in RELIABLE or self.reliable is None:
            return {}
        try:
            return {"reliable": self.reliable.node().totals()}
        except ValueError:  # the node file was removed since the load: nothing to report
            return {}

    def results(self) -> dict[str, Any]:
        # The driver asks for results once the run is over: the groups are no longer needed (a net-bier
        # receiver has no task of its own whose end could leave them). The records stay.
        if self.task is None or self.task.done():
            self.leave()
        out = {"ok": True, **self.reassembly.to_dict()}
        if self.mode == Mode.IGMP:
            out["joins"] = [[op, j, left] for op, (j, left) in sorted(self.join_events.items())]
        if self.mode == Mode.PROXY:
            out["reports"] = list(self.report_events)
        return out

    # -- sending ---------------------------------------------------------------------------------------
    def _open_send_sockets(self) -> None:
        self._close_send_sockets()
        for k in range(self.qps):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            size_send_buffer(sock, shaped_sndbuf(self.queue_bytes, self.qps), SNDBUF)
            sock.bind((self.loopback, QP_PORT_BASE + k))
            sock.setblocking(False)
            self._send_socks.append(sock)

    def _open_mcast_socket(self) -> None:
        """One socket for every group: S = the loopback (the leaf matches (S,G)), out of the fabric
        interface, never looped back to this host."""
        self._close_send_sockets()
        assert self.interface is not None
        sndbuf = shaped_sndbuf(self.queue_bytes)
        sock = multicast_sender((self.loopback, QP_PORT_BASE), self.interface, MCAST_TTL, sndbuf, SNDBUF)
        self._send_socks.append(sock)

    def _close_send_sockets(self) -> None:
        for sock in self._send_socks:
            sock.close()
        self._send_socks = []

    def _error(self, reason: str) -> None:
        self.send_errors[reason] = self.send_errors.get(reason, 0) + 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.start_ns is not None
        # Unicast: one queue and one sending task per QP, as a NIC serves its QPs side by side; a QP whose
        # path is backed up must not hold back the others (they may leave on other planes).
        qp_queues: list[asyncio.Queue[tuple[bytes, tuple[str, int]] | None]] = []
        qp_tasks: list[asyncio.Task[None]] = []
        # The membership modes: an op's receivers are known at t, its data leaves at t + lead.
        lead = self.lead_s if self.mode in (Mode.IGMP, Mode.PROXY) else 0.0
        try:
            self._signals_start(loop)
            if self.mode == Mode.UNICAST:
                self._open_send_sockets()
                qp_queues = [asyncio.Queue() for _ in self._send_socks]
                qp_tasks = [
                    loop.create_task(self._qp_sender(loop, sock, queue))
                    for sock, queue in zip(self._send_socks, qp_queues, strict=True)
                ]
            elif self.mode in MCAST_MODES and self.mode not in RELIABLE:
                self._open_mcast_socket()
            for msg_id, t, size, dst, *group in self.ops:
                await self._signals_before(msg_id, t)
                due = self.start_ns + int((t + lead) * 1e9)
                delay = (due - time.time_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                # The scheduled time, not the actual one: a late sender shows up as latency.
                send_ns = max(due, 0)
                frags = build_fragments(msg_id, size, send_ns, self.max_datagram)
                if self.mode in RELIABLE:
                    self._open_reliable(msg_id, dst, frags, *group)
                elif self.mode == Mode.UNICAST:
                    for j, name in enumerate(dst):
                        queue = qp_queues[(msg_id + j) % len(qp_queues)]
                        addr = (self.receivers[name][0], ROCEV2_PORT)
                        for frag in frags:
                            queue.put_nowait((frag, addr))
                elif self.mode in MCAST_MODES:
                    addr = (group[0], ROCEV2_PORT)
                    for frag in frags:
                        await self._sendto(loop, self._send_socks[0], frag, addr)
                    self._signals_after(loop, msg_id)
                else:
                    bits = [self.receivers[name][1] for name in dst]
                    assert self.bier is not None
                    # Nothing to wait for between fragments: the message leaves in one batch.
                    one_batch = self.queue_bytes is None and self.gap_us <= 0
                    batches = [frags] if one_batch else [[f] for f in frags]
                    for batch in batches:
                        if self.queue_bytes is not None:
                            # Wait here, not in the BFR's send: a blocked loop would stop receiving.
                            await _writable(loop, self.bier.dataplane.sock)
                        try:
                            self.bier.send_message(batch, bits, flow=msg_id)
                            self.sent_datagrams += len(batch)
                        except OSError as exc:
                            self._error(type(exc).__name__)
                        await self._pace()
                self.sent_ops += 1
                # Let the receive side run between ops so a burst does not starve it.
                await asyncio.sleep(0)
            for queue in qp_queues:
                queue.put_nowait(None)
            await asyncio.gather(*qp_tasks)
            await self._signals_finish()
            if self.mode in RELIABLE:
                # Done when every receiver acknowledged every flow (or was declared failed).
                assert self.reliable is not None
                while not self.reliable.node().sending_done:
                    await asyncio.sleep(RELIABLE_CHECK_S)
        except Exception:  # the task's failure must show in replay_status, not vanish
            log.exception("replay failed")
            self._error("exception")
        finally:
            for task in qp_tasks:
                task.cancel()
            self._signals_close()
            self._close_send_sockets()
            self.finished_ns = time.time_ns()

    def _open_reliable(
        self, msg_id: int, dst: list[str], frags: list[bytes], group: str = "", bfers: list[int] | None = None
    ) -> None:
        assert self.reliable is not None
        node = self.reliable.node()
        now = self.reliable.endpoint.clock() if self.reliable.endpoint else time.monotonic()
        ids = {self.receivers[name][1]: self.receivers[name][0] for name in dst}
        flow_id = replay_flow_id(node.settings.run or 0, msg_id)
        if self.mode == Mode.RELIABLE_UNICAST:
            node.open_unicast_flows(flow_id, ids, frags, now)  # type: ignore[arg-type]
            self.sent_datagrams += len(frags) * len(ids)
        elif self.mode == Mode.RELIABLE_NET_BIER:
            node.open_net_flow(flow_id, bfers or [], group, frags, now)
            self.sent_datagrams += len(frags)
        else:
            node.open_bier_flow(flow_id, list(ids), frags, now)  # type: ignore[arg-type]
            self.sent_datagrams += len(frags)
        self.reliable.kick()

    async def _qp_sender(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        queue: asyncio.Queue[tuple[bytes, tuple[str, int]] | None],
    ) -> None:
        while (item := await queue.get()) is not None:
            await self._sendto(loop, sock, *item)

    async def _sendto(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes, addr: tuple[str, int]
    ) -> None:
        pause = ENOBUFS_BACKOFF_S[0]
        while True:
            try:
                await loop.sock_sendto(sock, data, addr)
                self.sent_datagrams += 1
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS or self.queue_bytes is None:
                    self._error(exc.strerror or type(exc).__name__)
                    break
                # The queue below was full (IP_RECVERR): lossless, so wait and send it again.
                self._error("queue full, resent")
                await asyncio.sleep(pause)
                pause = min(2 * pause, ENOBUFS_BACKOFF_S[1])
        await self._pace()

    async def _pace(self) -> None:
        if self.gap_us > 0:
            await asyncio.sleep(self.gap_us / 1e6)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self._close_send_sockets()
        self.leave()
        if self._transport is not None:
            self._transport.close()
            self._transport = None


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Until ``sock`` has room (POLLOUT: at least half its send buffer free)."""
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()
    loop.add_writer(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        loop.remove_writer(fd)


def _op(mode: Mode, raw: list[Any]) -> list[Any]:
    """One op of a load: ``[id, t, bytes, [receivers]]``, then the group in the multicast modes, then the
    BFR-ids of the group's BFERs in reliable-net-bier (what its flow is acknowledged per)."""
    i, t, size, dst = raw[:4]
    op: list[Any] = [int(i), float(t), int(size), [str(d) for d in dst]]
    if mode in MCAST_MODES:
        if len(raw) < 5 or not _is_multicast(raw[4]):
            raise ValueError(f"{mode} op {i} needs a multicast group as its fifth element")
        op.append(str(raw[4]))
    if mode == Mode.RELIABLE_NET_BIER:
        bfers = raw[5] if len(raw) > 5 else None
        if not bfers or not all(isinstance(b, int) and 1 <= b <= 0xFFFF for b in bfers):
            raise ValueError(f"{mode} op {i} needs its group's BFER BFR-ids (1..65535) as its sixth element")
        op.append([int(b) for b in bfers])
    return op


def _interface_address(ifname: str) -> bytes:
    """The IPv4 address of ``ifname``: struct ip_mreq_source names its interface by address."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()))[20:24]
        except OSError as exc:
            raise OSError(exc.errno, f"interface {ifname} has no IPv4 address to join on") from exc


def _membership_fields(
    request: dict[str, Any], mode: Mode
) -> tuple[list[list[Any]], dict[tuple[int, bool], list[tuple[str, list[str]]]]]:
    memberships = _memberships(request.get("memberships", []))
    reports = _reports(request.get("reports", []))
    if memberships and mode != Mode.IGMP:
        raise ValueError(f"memberships: only igmp receivers join per op, not {mode}")
    if reports and mode != Mode.PROXY:
        raise ValueError(f"reports: only proxy sources send Receiver Proxy Reports, not {mode}")
    return memberships, reports


def _memberships(raw: list[Any]) -> list[list[Any]]:
    """igmp joins ``[op id, t, group, source]``, checked."""
    out = []
    for k, item in enumerate(raw):
        try:
            op_id, t, group, source = item
            ipaddress.IPv4Address(str(source))
        except ValueError as exc:
            raise ValueError(f"memberships.{k}: want [op id, t, group, source address]: {exc}") from None
        if not _is_multicast(group):
            raise ValueError(f"memberships.{k}: group {group!r} is not multicast")
        out.append([int(op_id), float(t), str(group), str(source)])
    return out


def _reports(raw: list[Any]) -> dict[tuple[int, bool], list[tuple[str, list[str]]]]:
    """proxy reports ``[op id, before, group, [receiver addresses]]`` keyed by (op id, before)."""
    out: dict[tuple[int, bool], list[tuple[str, list[str]]]] = {}
    for k, item in enumerate(raw):
        try:
            op_id, before, group, receivers = item
            receivers = [str(ipaddress.IPv4Address(str(r))) for r in receivers]
        except (TypeError, ValueError) as exc:
            want = "[op id, before, group, [receiver addresses]]"
            raise ValueError(f"reports.{k}: want {want}: {exc}") from None
        if not _is_multicast(group):
            raise ValueError(f"reports.{k}: group {group!r} is not multicast")
        out.setdefault((int(op_id), bool(before)), []).append((str(group), receivers))
    return out


def _is_multicast(value: object) -> bool:
    try:
        return ipaddress.IPv4Address(str(value)).is_multicast
    except ValueError:
        return False


def _max_memberships() -> int:
    try:
        with open(IGMP_MAX_MEMBERSHIPS_FILE) as f:
            return max(1, int(f.read().strip()))
    except (OSError, ValueError):
        return 20  # the kernel default


class ReplayPart(Service):
    """The agent's replay service on a GPU host: the ``replay_*`` ops over a :class:`ReplayService` made
    at first use (it needs the host's loopback), sending host-BIER through whichever BIER service runs."""

    def __init__(self, role: Role, bier: BierPart, reliable: ReliablePart | None = None) -> None:
        self.role = role
        self.bier = bier
        self.reliable = reliable
        self.config: NodeConfig | None = None
        self.current: ReplayService | None = None
        bier.add_listener(self.on_bier_udp)

    async def reload(self, config: NodeConfig | None) -> None:
        self.config = config
        if self.current is not None and config is not None:
            self.current.queue_bytes = config.smallest_queue_bytes

    async def stop(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def on_bier_udp(self, datagram: UdpDatagram) -> bool:
        return self.current is not None and self.current.on_bier_datagram(datagram)

    async def _service(self) -> ReplayService:
        if self.role != Role.GPU_HOST or self.config is None or self.config.loopback is None:
            raise ValueError("replay runs on configured gpu-host nodes only (aidclab configure LAB first)")
        if self.current is None:
            self.current = ReplayService(
                str(self.config.loopback.ip),
                queue_bytes=self.config.smallest_queue_bytes,
                reliable=self.reliable,
            )
            await self.current.listen()
        # The BIER service is rebuilt on reload: send through whichever one runs now.
        self.current.bier = self.bier.current
        return self.current

    async def load(self, request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).load(request)

    async def start_run(self, request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).start(request)

    async def status(self, _request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).status()

    async def results(self, _request: dict[str, Any]) -> dict[str, Any]:
        return (await self._service()).results()

    def counters(self) -> dict[str, int]:
        c = self.current
        if c is None or not c.proxy_reports_sent:
            return {}
        return {
            "replay.proxy-reports-sent": c.proxy_reports_sent,
            "replay.proxy-report-bytes-sent": c.proxy_report_bytes_sent,
        }

    def handlers(self) -> dict[Op, Handler]:
        return {
            Op.REPLAY_LOAD: self.load,
            Op.REPLAY_START: self.start_run,
            Op.REPLAY_STATUS: self.status,
            Op.REPLAY_RESULTS: self.results,
        }
