"""The agent's IGMP service at a leaf: a thin shell over :class:`aidcnet.igmp.node.IgmpLeaf`.

It opens one raw IGMP socket per host port (IPPROTO_IGMP, bound to the port: Linux hands a raw IGMP
socket every IGMP packet delivered locally, reports to 224.0.0.22 included), sends the queries the leaf
asks for (TTL 1, Router Alert, from the port's address), imposes the leaf's reports to its BFIRs over
BIER (Proto 4), takes the BFERs' reports out of the BIER deliveries, and pushes the resulting flows and
member ports into the running net-BIER edge and the eBPF imposition map.

A Receiver Proxy Report must change the BitString of the very next data packet: the edge asks
:meth:`IgmpService.before_lookup` before each lookup on a port that may send proxy reports, so every
report the kernel queued before the packet is read first, whichever socket the event loop serves first.
The eBPF imposition looks up in the kernel: there a new channel (a map miss) still gets the new BitString
on its first packet through this path, a changed one from the moment the agent has read the report.

The leaf is incremental (:mod:`aidcnet.igmp.node`): each call says which flows and member ports changed,
and only those are written (the edge's table, the eBPF map). Without a modelled control plane, the
reports a port's socket holds are taken together and derived once: one overlay report for a burst of
joins, not one per join. A new time scale rescales the running leaf (:meth:`IgmpService.rescale`): its
memberships stay, its timers and the modelled costs follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from ipaddress import IPv4Address
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.service import Service
from aidcnet.bier.header import BierProto
from aidcnet.igmp.control_plane import ControlPlane, group_records
from aidcnet.timescale import TimeScale
from aidcnet.udpio import STAMP_SPACE, enable_rx_stamps, rx_stamp_ns, set_socket_buffer

if TYPE_CHECKING:
    from aidcnet.agent.bier.service import BierPart, BierService
    from aidcnet.config import Igmp, NodeConfig
    from aidcnet.igmp.codec import Query
    from aidcnet.igmp.node import IgmpLeaf, Sends

log = logging.getLogger("aidcnet.igmp")

SO_BINDTODEVICE = 25
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6  # struct tpacket_stats {tp_packets, tp_drops}, zeroed by each read
# A port's receive buffer. Every receiver of a trace joins at once (803 joins on the MoE sample, some
# hundred per port), and IGMPv3 sends an unsolicited report only twice: a report the kernel drops at a
# full buffer while the agent is busy may be a lost join. The drops are counted (rx-drops).
RX_BUFFER = 4 << 20
ETH_P_IP = 0x0800
IP_OPTIONS = 4
ALL_SYSTEMS = "224.0.0.1"
_RECV = 65536
# A receive stamp further back than this is not one (a clock other than the wall clock, or none).
_STAMP_SANE_NS = 60 * 10**9
# Late modelled messages logged with their circumstances (all are counted).
_LATE_LOGGED = 20
# Changes kept per channel and per group (a run's joins and leaves of one (S,G) are a few dozen).
HISTORY_DEPTH = 256
_BATCH = 64


def _igmp_filter() -> bytes:
    """Classic BPF over the IPv4 header (SOCK_DGRAM): keep protocol 2, drop the rest."""
    ld_b, jeq, ret = 0x30, 0x15, 0x06
    prog = [(ld_b, 0, 0, 9), (jeq, 0, 1, socket.IPPROTO_IGMP), (ret, 0, 0, 0x40000), (ret, 0, 0, 0)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


class _Port:
    """Receive: an AF_PACKET socket with a kernel filter for IGMP.  A raw IGMP socket would see only
    what the IP layer delivers locally, and Linux delivers an IGMP packet only for a group the port has
    joined (ip_check_mc_rcv): a v2 report goes to its own group, which a router has not joined.
    Send: a raw IGMP socket (TTL 1, Router Alert, the port's address as source)."""

    def __init__(self, name: str, address: IPv4Address) -> None:
        from aidcnet.igmp.node import ROUTER_ALERT

        self.name = name
        self.dropped = 0
        self.rx = rx = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)
        self.sock = sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
        try:
            code = _igmp_filter()
            buf = ctypes.create_string_buffer(code, len(code))
            rx.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", 4, ctypes.addressof(buf)))
            with contextlib.suppress(OSError):  # Linux 4.20+; our own queries are also told by address
                rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            rx.bind((name, ETH_P_IP))
            set_socket_buffer(rx, socket.SO_RCVBUF, RX_BUFFER)
            rx.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, name.encode())
            sock.setsockopt(socket.IPPROTO_IP, IP_OPTIONS, ROUTER_ALERT)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, address.packed)
            sock.setblocking(False)
        except OSError:
            self.close()
            raise

    def drops(self) -> int:
        """Reports the kernel dropped at this port's full receive buffer since the port opened."""
        with contextlib.suppress(OSError):
            _packets, dropped = struct.unpack("=II", self.rx.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.dropped += dropped
        return self.dropped

    def close(self) -> None:
        self.rx.close()
        self.sock.close()


class IgmpService:
    def __init__(self, igmp: Igmp, bier: BierService, config: NodeConfig) -> None:
        from aidcnet.igmp.node import IgmpLeaf, PortConfig

        edge = bier.edge
        if edge is None:
            raise ValueError("igmp: needs net-BIER host ports (bier.host_ports) on this leaf")
        addresses = {i.name: i.ipv4.ip for i in config.interfaces if i.ipv4 is not None}
        wanted = igmp.ports or [_default_port(n) for n in bier.bier.host_ports]
        ports = []
        for i, p in enumerate(wanted):
            if p.name not in addresses:
                raise ValueError(
                    f"igmp.ports.{i}: host port {p.name} has no IPv4 address in interfaces; the querier "
                    "sends from it and elects on it (RFC 3376 §6.6.2): give the port an address"
                )
            ports.append(PortConfig(p.name, addresses[p.name], p.querier, p.proxy))
        self.igmp = igmp
        self.bier = bier
        self.edge = edge
        self.counters: Counter[str] = Counter()
        self.leaf: IgmpLeaf = IgmpLeaf(
            ports,
            igmp.timers(),
            bier.bier.bfr_id,
            bier.bier.bsl,
            config.loopback.ip,
            igmp.bfirs,
            igmp.receivers,
            igmp.groups,
            bier.bier.flows,
            time.monotonic(),
            max_channels=igmp.max_channels,
            max_groups=igmp.max_groups,
        )
        self.static_members = (
            {str(m.group): list(m.interfaces) for m in bier.bier.members} if "static" in igmp.groups else {}
        )
        self._ports: dict[str, _Port] = {}
        self._proxy_ports: dict[str, _Port] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._chain = bier.dataplane.deliver
        try:
            for p in ports:
                try:
                    self._ports[p.name] = _Port(p.name, p.address)
                except OSError as exc:
                    raise OSError(exc.errno, f"igmp host port {p.name!r}: {exc.strerror or exc}") from exc
        except BaseException:
            self.close()
            raise
        self._members: dict[str, list[str]] | None = {}
        # The modelled control plane (aidcnet/igmp/control_plane.py): messages wait for their moment.
        clock = TimeScale.of(igmp.time_scale)
        cost_ns = clock.wall_ns(igmp.control_cost)
        self.control: ControlPlane[tuple[str | None, bytes]] | None = (
            ControlPlane(cost_ns, clock.wall_ns(igmp.control_cost_record)) if cost_ns > 0 else None
        )
        self._late_seen = 0
        self._last_busy_ns = 0
        # Per channel its BFR-ids, per group its member ports, as they changed (wall ns, value).
        self._flow_history: dict[Any, deque[tuple[int, tuple[Any, ...]]]] = {}
        self._port_history: dict[Any, deque[tuple[int, tuple[Any, ...]]]] = {}
        if self.control is not None:
            # Only then: a socket that asks for stamps makes the kernel stamp every packet it receives.
            bier.dataplane.enable_rx_stamps()
            for p in self._ports.values():
                enable_rx_stamps(p.rx)
        self._wake = asyncio.Event()
        # Why a lock: BIER deliveries may come from the dataplane's thread, host ports from the loop's.
        self._lock = threading.RLock()
        bier.dataplane.deliver = self._deliver
        self._proxy_ports = {p.name: self._ports[p.name] for p in ports if p.proxy}
        edge.before_lookup = self.before_lookup
        self._write_all()

    # -- input ------------------------------------------------------------------------------------
    def _read(self, port: _Port, limit: int | None = _BATCH) -> int:
        """Take what the kernel queued on a host port (at most ``limit`` messages; None: all of it).
        Unmodelled, they are applied together and derived once; modelled, each is admitted."""
        space = 0 if self.control is None else STAMP_SPACE
        taken = 0
        while limit is None or taken < limit:
            try:
                packet, anc, _flags, _addr = port.rx.recvmsg(_RECV, space)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.counters["rx-errors"] += 1
                log.warning("%s: receive failed: %s", port.name, exc)
                break
            taken += 1
            self._handle(port.name, packet, rx_stamp_ns(anc), derive=False)
        if taken and self.control is None:
            with self._lock:
                self._do(self.leaf.derive(time.monotonic()))
        return taken

    def before_lookup(self, port: str) -> None:
        """The edge's hook before each lookup: on a port that may send Receiver Proxy Reports, take every
        report its kernel queued first (other ports pay nothing). With a modelled control plane, what has
        become due by now takes effect first, and no more than that."""
        p = self._proxy_ports.get(port)
        if p is not None:
            self._read(p, limit=None)
            if self.control is not None:
                self.serve_due()

    def _deliver(self, payload: bytes, bfir_id: int, proto: int, header: bytes) -> None:
        # IGMP over BIER (a BFER's report) is ours; every other delivery goes on to the edge.
        if proto == BierProto.IPV4 and len(payload) >= 20 and payload[9] == 2:
            self._handle(None, payload, self.bier.dataplane.rx_stamp_ns)
            return
        if self._chain is not None:
            self._chain(payload, bfir_id, proto, header)

    def _handle(self, port: str | None, packet: bytes, stamp_ns: int, derive: bool = True) -> None:
        """One control message: from a host port (``port``) or over BIER (None). Applied at once (derived
        now, or with the rest of its burst), or, with a modelled control plane, queued from the moment
        the kernel received it."""
        with self._lock:
            if self.control is None:
                self._apply_message(port, packet, derive)
                return
            now = time.time_ns()
            if not 0 < now - stamp_ns < _STAMP_SANE_NS:  # none, or not on the wall clock: count from now
                self.counters["control-unstamped"] += 1
                stamp_ns = now
            self.control.admit(stamp_ns, (port, packet), group_records(packet))
        if self._loop is not None:  # the timers task sleeps until the next moment: it may be sooner now
            self._loop.call_soon_threadsafe(self._wake.set)

    def _apply_message(
        self, port: str | None, packet: bytes, derive: bool = True, at_ns: int | None = None
    ) -> None:
        """One message into the leaf; what it changes took effect ``at_ns`` (its modelled moment), or now."""
        now = time.monotonic()
        if port is None:
            self._do(self.leaf.receive_over_bier(packet, now, derive), at_ns=at_ns)
        else:
            self._do(self.leaf.receive(port, packet, now, derive), at_ns=at_ns)

    def serve_due(self) -> None:
        """Apply every modelled message whose moment has come."""
        if self.control is None:
            return
        with self._lock:
            # One at a time: the time spent on one makes the next late if it must wait for it.
            while due := self.control.pop_due(now := time.time_ns(), limit=1):
                ((moment, (port, packet)),) = due
                late = self.control.counters["late"]
                if late != self._late_seen and late <= _LATE_LOGGED:
                    log.warning(
                        "igmp: control message from %s applied %.1f ms after its modelled moment "
                        "(%d records, %d queued, our last one took %.1f ms)",
                        port or "BIER", (now - moment) / 1e6, group_records(packet), len(self.control),
                        self._last_busy_ns / 1e6,
                    )  # fmt: skip
                self._late_seen = late
                started = time.perf_counter_ns()
                try:
                    self._apply_message(port, packet, at_ns=moment)
                except Exception:  # one bad message must not stop the rest
                    self.counters["control-errors"] += 1
                    log.exception("igmp: a modelled control message failed")
                # Our own time per message, to set against the model's cost.
                self._last_busy_ns = time.perf_counter_ns() - started
                self.counters["control-busy-ns"] += self._last_busy_ns

    # -- output -----------------------------------------------------------------------------------
    def _do(self, sends: Sends, wake: bool = True, at_ns: int | None = None) -> None:
        """Send what the leaf asks and write what it changed, which took effect ``at_ns`` (wall ns; None:
        now)."""
        from aidcnet.igmp.codec import encode

        for port, query in sends.queries:
            self._send_query(port, query, encode(query))
        for packet in sends.over_bier:
            try:
                self.bier.dataplane.impose(packet, self.leaf.bfirs, proto=BierProto.IPV4)
                self.counters["bier-reports-imposed"] += 1
            except Exception as exc:
                self.counters["bier-report-errors"] += 1
                log.warning("igmp report over BIER to %s failed: %s", self.leaf.bfirs, exc)
        self._write(sends, time.time_ns() if at_ns is None else at_ns)
        changed = sends.flow_changes or sends.member_changes or sends.queries or sends.over_bier
        if wake and changed and self._loop is not None:  # the timers may be due sooner now
            self._loop.call_soon_threadsafe(self._wake.set)  # set() itself is not thread-safe

    def _send_query(self, port: str, query: Query, data: bytes) -> None:
        dst = ALL_SYSTEMS if query.is_general else str(query.group)
        try:
            self._ports[port].sock.sendto(data, (dst, 0))
        except OSError as exc:
            self.counters["tx-errors"] += 1
            log.warning("%s: query to %s failed: %s", port, dst, exc)
            return
        self.counters[f"port.{port}.queries-sent"] += 1
        self.counters["queries-sent"] += 1
        # On the wire: IPv4 with Router Alert (24 octets) and the query.
        self.counters["query-bytes-sent"] += 24 + len(data)

    def _write(self, sends: Sends, at_ns: int) -> None:
        """What changed into the running edge and the eBPF imposition map (those channels and groups
        alone: a membership change touches a few of hundreds), and into the history at ``at_ns``."""
        if sends.flow_changes:
            for ch, ids in sends.flow_changes.items():
                self._remember(self._flow_history, ch, at_ns, ids or ())
            self.edge.update_flows(sends.flow_changes)
            if self.bier.net_ebpf is not None:
                try:
                    self.bier.net_ebpf.update_flows(sends.flow_changes)
                except OSError as exc:  # the Python edge still imposes what the map misses
                    self.counters["ebpf-flow-errors"] += 1
                    log.warning("eBPF imposition map not updated: %s", exc)
            self.counters["flow-updates"] += 1
        if sends.member_changes and self._members is not None:
            changes = {str(g): self._with_static(str(g), ports) for g, ports in sends.member_changes.items()}
            changes = {g: ports for g, ports in changes.items() if ports != self._members.get(g)}
            if changes:
                self.edge.update_members(changes)
                for g, ports in changes.items():
                    self._remember(self._port_history, g, at_ns, tuple(ports or ()))
                    if ports:
                        self._members[g] = ports
                    else:
                        self._members.pop(g, None)
                self.counters["member-updates"] += 1

    def _with_static(self, group: str, ports: Iterable[str] | None) -> list[str] | None:
        """A group's member ports: the leaf's, and the node file's static ones when static is on."""
        static = self.static_members.get(group)
        merged = sorted(set(ports or ()) | set(static)) if static else list(ports or ())
        return merged or None

    def _write_all(self) -> None:
        """The whole of the leaf's flows and member ports (at the start: the edge had the node file's)."""
        flows = self.leaf.flows()
        self.edge.set_flows(flows)
        if self.bier.net_ebpf is not None:
            try:
                self.bier.net_ebpf.set_flows(flows)
            except OSError as exc:
                self.counters["ebpf-flow-errors"] += 1
                log.warning("eBPF imposition map not updated: %s", exc)
        groups = {str(g) for g in self.leaf.member_map()} | set(self.static_members)
        leaf = {str(g): ports for g, ports in self.leaf.member_map().items()}
        members = {g: ports for g in groups if (ports := self._with_static(g, leaf.get(g)))}
        self.edge.set_members(members)
        self._members = members
        now = time.time_ns()
        for f in flows:
            self._remember(self._flow_history, (f.source, f.group), now, f.bfers)
        for g, ports in members.items():
            self._remember(self._port_history, g, now, tuple(ports))

    @staticmethod
    def _remember(
        history: dict[Any, deque[tuple[int, tuple[Any, ...]]]], key: Any, ns: int, value: tuple[Any, ...]
    ) -> None:
        entries = history.get(key)
        if entries is None:
            entries = history[key] = deque(maxlen=HISTORY_DEPTH)
        entries.append((ns, value))

    def history(self, since_ns: int) -> dict[str, Any]:
        """The flows' and member ports' changes from ``since_ns`` on (wall ns; each as it took effect: a
        modelled message at its modelled moment), each key with the value it had at ``since_ns`` first:
        when a receiver was carried (docs/igmp.md, "What a run measures")."""

        def since(entries: deque[tuple[int, tuple[Any, ...]]]) -> list[list[Any]]:
            out = [[ns, list(value)] for ns, value in entries if ns >= since_ns]
            before = [e for e in entries if e[0] < since_ns]
            if before:
                out.insert(0, [before[-1][0], list(before[-1][1])])
            return out if any(value for _ns, value in out) or len(out) > 1 else []

        with self._lock:
            flows = [
                [str(s) if s else None, str(g), h]
                for (s, g), e in self._flow_history.items()
                if (h := since(e))
            ]
            ports = [[g, h] for g, e in self._port_history.items() if (h := since(e))]
        return {"flows": flows, "member_ports": ports}

    def rescale(self, igmp: Igmp) -> None:
        """The lab's time scale changed (``igmp`` is the running section with another ``time_scale``):
        the leaf keeps every membership and channel, its running timers stretched to the new wall clock;
        the modelled control plane takes its costs at the new scale (what it holds keeps its arrival)."""
        clock = TimeScale.of(igmp.time_scale)
        with self._lock:
            self.igmp = igmp
            self._do(self.leaf.rescale(igmp.timers(), time.monotonic()), wake=False)
            if self.control is not None:
                self.control.rescale(
                    clock.wall_ns(igmp.control_cost), clock.wall_ns(igmp.control_cost_record)
                )
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    # -- running ----------------------------------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        for p in self._ports.values():
            loop.add_reader(p.rx.fileno(), self._read, p)
        self._loop = loop
        self._task = loop.create_task(self._timers())

    async def _timers(self) -> None:
        while True:
            self.serve_due()
            now = time.monotonic()
            try:
                with self._lock:
                    self._do(self.leaf.tick(now), wake=False)
            except Exception:  # a bug in one tick must not stop the querier
                self.counters["tick-errors"] += 1
                log.exception("igmp tick failed")
            self._wake.clear()
            with self._lock:
                wait = max(0.001, self.leaf.next_deadline(time.monotonic()) - time.monotonic())
                due = None if self.control is None else self.control.next_due()
            if due is not None:  # a modelled moment is kept to the wakeup's own precision
                wait = min(wait, max(0.0, (due - time.time_ns()) / 1e9))
            wait = min(wait, 60.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._loop is not None:
            for p in self._ports.values():
                self._loop.remove_reader(p.rx.fileno())
            self._loop = None
        for p in self._ports.values():
            p.close()
        self._ports = {}
        if getattr(self.bier.dataplane, "deliver", None) == self._deliver:
            self.bier.dataplane.deliver = self._chain
        if self.edge.before_lookup == self.before_lookup:
            self.edge.before_lookup = None
        self._proxy_ports = {}
        if getattr(self, "_members", None) is not None:
            # The edge goes on without IGMP: back to the node file's static flows and members.
            static = self.bier.bier
            self.edge.set_flows(static.flows)
            self.edge.set_members({str(m.group): list(m.interfaces) for m in static.members})
            if self.bier.net_ebpf is not None:
                with contextlib.suppress(OSError):
                    self.bier.net_ebpf.set_flows(static.flows)
            self._members = None

    def status(self) -> dict[str, Any]:
        with self._lock:
            out = self.leaf.status(time.monotonic())
        out["counters"].update({f"shell.{k}": v for k, v in self.counters.items()})
        out["member_ports"] = self._members
        if self.control is not None:
            with self._lock:
                out["control_plane"] = {
                    "cost_ns": self.control.cost_ns,
                    "cost_record_ns": self.control.per_record_ns,
                    "queued": len(self.control),
                    **self.control.counters,
                }
        return out

    def all_counters(self) -> dict[str, int]:
        shell = {**self.counters, "rx-drops": sum(p.drops() for p in self._ports.values())}
        out = {**self.leaf.all_counters(), **{f"shell.{k}": v for k, v in shell.items()}}
        if self.control is not None:
            with self._lock:
                out.update({f"control.{k}": v for k, v in self.control.counters.items()})
                out["control.cost-ns"] = self.control.cost_ns
                out["control.cost-record-ns"] = self.control.per_record_ns
        return out


def _rescaled(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """Whether two IgmpPart keys differ in the igmp section's time scale alone."""
    (igmp_old, *rest_old), (igmp_new, *rest_new) = old, new
    if rest_old != rest_new or igmp_old is None or igmp_new is None:
        return False
    return (
        igmp_old != igmp_new and igmp_old.model_copy(update={"time_scale": igmp_new.time_scale}) == igmp_new
    )


def _default_port(name: str) -> Any:
    from aidcnet.config import IgmpPort

    return IgmpPort(name=name)


class IgmpPart(Service):
    """Rebuilt when the node file's ``igmp`` section, the interfaces or the BIER service change."""

    def __init__(self, bier: BierPart) -> None:
        self.bier = bier
        self.current: IgmpService | None = None
        self._key: tuple[Any, ...] | None = None

    async def reload(self, config: NodeConfig | None) -> None:
        igmp = config.igmp if config else None
        key = (igmp, id(self.bier.current), tuple(config.interfaces) if config else ())
        if key == self._key and (self.current is not None) == (igmp is not None):
            return
        if (
            self.current is not None
            and igmp is not None
            and self._key is not None
            and _rescaled(self._key, key)
        ):
            # Only the time scale changed (a replay's automatic scale, a confirmation): the running leaf
            # follows it. Rebuilt, it would forget every membership its hosts have and query them all
            # again at once, in the middle of what the new scale is for.
            self.current.rescale(igmp)
            self._key = key
            return
        if self.current is not None:
            self.current.close()
            self.current = None
            self._key = None
        if igmp is None or config is None:
            return
        if self.bier.current is None:
            raise ValueError("igmp: needs a bier section (the leaf is BFIR and BFER)")
        service = IgmpService(igmp, self.bier.current, config)
        service.attach(asyncio.get_running_loop())
        self.current = service
        self._key = key

    async def stop(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    async def show(self, request: dict[str, Any]) -> dict[str, Any]:
        """``show igmp``; with ``history_since_ns``, the flows' and member ports' changes from then on."""
        if self.current is None:
            raise ValueError("this node runs no IGMP (no igmp section applied)")
        since = request.get("history_since_ns")
        if since is not None:
            return {"ok": True, **self.current.history(int(since))}
        return {"ok": True, **self.current.status()}

    def handlers(self) -> dict[Op, Handler]:
        return {Op.IGMP: self.show}

    def counters(self) -> dict[str, int]:
        if self.current is None:
            return {}
        return {f"igmp.{k}": v for k, v in self.current.all_counters().items()}
