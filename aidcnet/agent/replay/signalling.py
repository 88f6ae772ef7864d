"""The membership modes' signalling around a host's replay (docs/igmp.md), composed with the IP-multicast
sender (:class:`aidcnet.agent.replay.senders.IpMulticastSender`): the data is sent as in net-bier, the
BitString learned at run time.

* ``igmp`` (:class:`ReceiverJoins`): a receiver joins each op's (S,G) through its kernel at the op's t,
  when its receivers are known, and leaves once it has the message (or once no data has reached the host
  for ``hold_s``);
* ``proxy`` (:class:`ProxyReports`): a source sends its first-hop router a Receiver Proxy Report naming
  the receivers at a group's first op's t, and an empty one ``hold_s`` after the group's last op.

Both send the data ``lead_s`` after the receivers are known. Every other mode has no signalling
(:class:`Signalling`): its data leaves at t. :func:`signalling_class` picks one per run, by mode.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

from aidcnet.agent.replay.protocol import Join, ReplayLoad, ReplayOp
from aidcnet.agent.replay.sockets import StampedReader, interface_address, replay_socket
from aidcnet.modes import Mode
from aidcnet.udpio import mreqn

if TYPE_CHECKING:
    from aidcnet.agent.replay.service import ReplayService

# Where IGMPv3 reports go (RFC 3376 §4.2.14): the Receiver Proxy Report too.
ALL_IGMPV3_ROUTERS = "224.0.0.22"
IP_OPTIONS = 4
# Linux: join one source of a group (struct ip_mreq_source), RFC 4604's SSM join.
IP_ADD_SOURCE_MEMBERSHIP = getattr(socket, "IP_ADD_SOURCE_MEMBERSHIP", 39)
# The agent counters a proxy source keeps (cumulative, as agent counters are: the driver takes deltas).
PROXY_REPORTS_SENT = "replay.proxy-reports-sent"
PROXY_REPORT_BYTES_SENT = "replay.proxy-report-bytes-sent"


class Signalling:
    """No signalling: the data of an op leaves at its t. The base of the membership modes' signalling,
    which the service drives around its schedule: :meth:`start` at the run's start, :meth:`before` each
    op (before waiting for it to be due), :meth:`after` each op is sent, :meth:`finish` after the last,
    :meth:`close` in any case."""

    mode: ClassVar[Mode | None] = None
    takes_joins: ClassVar[bool] = False
    takes_reports: ClassVar[bool] = False

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        self.service = service
        self.lead_s = 0.0
        self.hold_s = load.hold_s

    def check(self, load: ReplayLoad) -> None:
        """Refuse the steps of another mode's signalling."""
        if load.joins and not self.takes_joins:
            raise ValueError(f"joins: only {ReceiverJoins.mode} receivers join per op, not {load.mode}")
        if load.reports and not self.takes_reports:
            raise ValueError(
                f"reports: only {ProxyReports.mode} sources send Receiver Proxy Reports, not {load.mode}"
            )

    def add(self, load: ReplayLoad) -> None:
        """The steps of one load of the run (its first, or an append)."""

    def reply(self) -> dict[str, Any]:
        """What the load's reply says of the steps loaded."""
        return {}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    async def before(self, op: ReplayOp) -> None:
        pass

    def after(self, loop: asyncio.AbstractEventLoop, op: ReplayOp) -> None:
        pass

    async def finish(self) -> None:
        pass

    def close(self) -> None:
        pass

    def leave(self) -> None:
        """Drop what the signalling holds joined (the run is over, or a new one is loaded)."""

    def status(self) -> dict[str, Any]:
        return {}

    def results(self) -> dict[str, Any]:
        return {}


class MembershipSignalling(Signalling):
    """What igmp and proxy share: the lead, and the count of steps loaded."""

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        super().__init__(service, load)
        self.lead_s = load.lead_s
        self.joins: list[Join] = []
        self.reports: dict[tuple[int, bool], list[tuple[str, tuple[str, ...]]]] = {}
        self.interface = load.interface

    def add(self, load: ReplayLoad) -> None:
        self.joins.extend(load.joins)
        for r in load.reports:
            self.reports.setdefault((r.op, r.before), []).append((r.group, r.receivers))

    def reply(self) -> dict[str, Any]:
        return {"joins": len(self.joins), "reports": sum(len(v) for v in self.reports.values())}


class ReceiverJoins(MembershipSignalling):
    """igmp: this host's joins as a receiver; per (group, source) the reader holding the join and how many
    ops need it; per op the join and leave times (wall ns)."""

    mode = Mode.IGMP
    takes_joins = True

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        super().__init__(service, load)
        self.held: dict[tuple[str, str], list[Any]] = {}
        self.join_events: dict[int, list[int | None]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.joins:
            self._task = loop.create_task(self._run())

    async def finish(self) -> None:
        if self._task is not None:
            await self._task

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def member_join(self, group: str, source: str) -> None:
        """Join (S,G) on the fabric interface through the kernel (IGMPv3 INCLUDE {S}); one socket per
        (S,G) however many ops need it, so a message reaches the reassembly once."""
        held = self.held.get((group, source))
        if held is not None:
            held[1] += 1
            return
        assert self.interface is not None
        sock = replay_socket(self.service.port)
        try:
            mreq = socket.inet_aton(group) + interface_address(self.interface) + socket.inet_aton(source)
            sock.setsockopt(socket.IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, mreq)
        except OSError:
            sock.close()
            raise
        reader = StampedReader(sock, self.service.received)
        reader.attach(asyncio.get_running_loop())
        self.held[(group, source)] = [reader, 1]

    def member_leave(self, group: str, source: str) -> None:
        """The last op needing (S,G) is over: closing the socket makes the kernel report the leave."""
        held = self.held.get((group, source))
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del self.held[(group, source)]
        held[0].close()

    def leave(self) -> None:
        for reader, _ in self.held.values():
            reader.close()
        self.held = {}

    async def _run(self) -> None:
        svc = self.service
        assert svc.start_ns is not None
        loop = asyncio.get_running_loop()
        leaving: list[asyncio.Task[None]] = []
        for j in sorted(self.joins, key=lambda j: (j.t, j.op)):
            await svc.until(j.t)
            fut = svc.wait_complete(j.op)
            try:
                self.member_join(j.group, j.source)
            except OSError as exc:
                svc.forget_complete(j.op)
                svc.tally.error(f"join {j.group}: {exc.strerror or exc}")
                continue
            self.join_events[j.op] = [time.time_ns(), None]
            deadline = svc.at_ns(j.t, self.lead_s + self.hold_s)
            leaving.append(loop.create_task(self._leave_when_done(j, fut, deadline)))
        await asyncio.gather(*leaving)

    async def _leave_when_done(self, j: Join, fut: asyncio.Future[None], deadline_ns: int) -> None:
        """Leave once the message is whole, or once ``hold_s`` passed with no replay data reaching this
        host, counted from the later of the op's due time (``deadline_ns`` - hold) and the host's last
        packet. While data still arrives the fabric may be draining a queue that holds this op's message
        too (a source sends its ops back to back; a loaded machine drains slower): leaving then would
        cut the message short and blame the membership signalling for our own speed."""
        svc = self.service
        hold_ns = int(self.hold_s * 1e9)
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(fut), max(0.0, (deadline_ns - time.time_ns()) / 1e9))
                break
            except TimeoutError:
                if svc.last_rx_ns + hold_ns <= time.time_ns():
                    svc.forget_complete(j.op)
                    break
                deadline_ns = svc.last_rx_ns + hold_ns
        self.member_leave(j.group, j.source)
        self.join_events[j.op][1] = time.time_ns()

    def results(self) -> dict[str, Any]:
        return {"joins": [[op, j, left] for op, (j, left) in sorted(self.join_events.items())]}


class ProxyReports(MembershipSignalling):
    """proxy: this host's reports as a source, by (op id, before the op), and when each was sent."""

    mode = Mode.PROXY
    takes_reports = True

    def __init__(self, service: ReplayService, load: ReplayLoad) -> None:
        super().__init__(service, load)
        self.events: list[list[Any]] = []
        self.sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._withdrawals: list[asyncio.Task[None]] = []
        self._reported: set[int] = set()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.reports:
            self.sock = self.open_socket()
            # Each report at its op's t, beside the sends: the op before may still be waiting out its
            # lead, and a report held behind that data would reach the FHR a lead late.
            self._task = loop.create_task(self._schedule())

    async def _schedule(self) -> None:
        for op in self.service.ops:
            await self.before(op)

    async def before(self, op: ReplayOp) -> None:
        """The reports due before ``op``, at its t (when its receivers are known). The schedule sends
        them, and so does the data loop if the schedule has not come to it yet: a report always leaves
        ahead of its own op's data, and once."""
        if (op.id, True) in self.reports:
            await self.service.until(op.t)
            if op.id not in self._reported:
                self._reported.add(op.id)
                self.send(op.id, True)

    def after(self, loop: asyncio.AbstractEventLoop, op: ReplayOp) -> None:
        if (op.id, False) in self.reports:
            self._withdrawals.append(loop.create_task(self._withdraw_later(op.id)))

    async def _withdraw_later(self, op_id: int) -> None:
        """The empty report, ``hold_s`` after the group's last data: an FHR reads reports before each
        lookup (before_lookup), so one sent right behind the data could overtake packets still waiting
        for its edge and leave them without a BitString."""
        await asyncio.sleep(self.hold_s)
        self.send(op_id, False)

    async def finish(self) -> None:
        if self._task is not None:
            await self._task
        await asyncio.gather(*self._withdrawals)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self._withdrawals:
            task.cancel()
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def send(self, op_id: int, before: bool) -> None:
        """The reports of ``op_id`` (``before`` its data, or the withdrawals after it), each counted."""
        from ipaddress import IPv4Address

        from aidcnet.igmp.codec import encode
        from aidcnet.igmp.extensions import ProxyReport

        svc = self.service
        for group, receivers in self.reports.get((op_id, before), []):
            report = ProxyReport(
                IPv4Address(group), IPv4Address(svc.loopback), tuple(map(IPv4Address, receivers))
            )
            data = encode(report.to_report())
            if self.sock is None:
                svc.tally.error("no proxy report socket")
                continue
            try:
                self.sock.sendto(data, (ALL_IGMPV3_ROUTERS, 0))
            except OSError as exc:
                svc.tally.error(f"proxy report: {exc.strerror or exc}")
                continue
            self.events.append([op_id, before, time.time_ns()])
            counters: Counter[str] = svc.counters
            counters[PROXY_REPORTS_SENT] += 1
            # On the wire: IPv4 with Router Alert (24 octets) and the IGMPv3 message.
            counters[PROXY_REPORT_BYTES_SENT] += 24 + len(data)

    def open_socket(self) -> socket.socket:
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

    def status(self) -> dict[str, Any]:
        return {"proxy_reports_sent": self.service.counters[PROXY_REPORTS_SENT]}

    def results(self) -> dict[str, Any]:
        return {"reports": list(self.events)}


# The membership modes' signalling, by mode; every other mode has none.
_BY_MODE: dict[Mode, type[Signalling]] = {cls.mode: cls for cls in (ReceiverJoins, ProxyReports) if cls.mode}


def signalling_class(mode: Mode) -> type[Signalling]:
    return _BY_MODE.get(mode, Signalling)
