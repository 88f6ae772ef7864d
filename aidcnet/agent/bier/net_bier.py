"""Network-BIER at a leaf: hosts speak plain IP multicast, the leaf is BFIR and BFER.

Ingress (BFIR): one AF_PACKET socket per host port takes IPv4 packets for a routable group
(224.0.0.0/4 minus 224.0.0.0/24, IGMP excluded), looks the (S,G) up with (*,G) fallback in
the static flows, and hands the whole IPv4 packet to :meth:`BierDataplane.impose` with
Proto 4 (RFC 8296 §2.1.2) and an Entropy from S, G and the UDP ports, so one flow keeps one
ECMP path.

Egress (BFER): installed as the dataplane's ``deliver`` callback (the previous one keeps
getting every payload that is not IPv4 to a routable group).  For an IPv4 payload whose group
has member ports it decrements the IP TTL, fixes the checksum and sends the packet on each
member port in an Ethernet frame to the group's MAC (RFC 1112 §6.4), so the host kernel
hands it to sockets that joined the group.  When this leaf is also the BFIR of the packet
(own BFR-id among the BFERs), impose() delivers locally inside the same call; the ingress
port is remembered for that call so the sender's port does not get its own packet back.

The IP TTL is checked at both ends: a packet arriving with TTL <= 1 is dropped at ingress (it
would expire at every BFER, and carrying it across the domain is waste), and the BFER drops
what another BFIR let through.  The BIER domain counts as one IP hop.  Note that hosts send
multicast with TTL 1 unless told otherwise (IP_MULTICAST_TTL).

Counters (:meth:`NetBierEdge.counters`, flat), every one also per host port as
``port.<ifname>.<name>`` where marked (p):

* ingress, each captured packet ends in exactly one outcome, so
  ``captured == unmatched + imposed + impose-errors + ttl-expired-in + malformed-in`` (p):
  ``captured``/``captured-bytes`` (p), ``unmatched`` (no (S,G) or (*,G) flow) (p),
  ``imposed`` (p), ``impose-errors`` (p), ``ttl-expired-in`` (p), ``malformed-in`` (p) and
  ``malformed-in.<reason>`` for :data:`aidcnet.bier.edge.MALFORMED_REASONS`;
  ``ignored`` (p): packets the kernel filter should have kept out (no filter, or our own
  outgoing frames where PACKET_IGNORE_OUTGOING is missing); ``rx-errors`` (p);
  ``csum-completed`` (p): UDP checksums we finished because the sender left them to offload
  (see :func:`aidcnet.bier.edge.complete_udp_checksum`), not an outcome;
* egress, each IPv4 delivery ends in exactly one outcome, so ``delivered == sent +
  no-members + ingress-only + ttl-expired-out + malformed-out + not-multicast``:
  ``sent`` (at least one copy attempted), ``no-members``, ``ingress-only`` (the only member
  port is the one it came in on), ``ttl-expired-out``, ``malformed-out`` (+ ``.<reason>``),
  ``not-multicast``;
* copies: ``emitted``/``emitted-bytes``/``emit-errors`` (p);
* ``passed``: payloads handed to the previous callback (not Proto 4, or Proto 4 to a
  destination that is not a routable group), not counted in ``delivered``; ``other-proto``:
  non-IPv4 payloads with no previous callback to hand them to;
* ``ttl-expired`` and ``malformed``: the ``-in`` and ``-out`` counters summed;
* ``hook-errors``: an exception in :attr:`NetBierEdge.on_impose` or :attr:`NetBierEdge.on_emit` (the
  packet still goes, to the BFERs or ports it would have gone to without the hook).

Hooks for the reliable transport over network-BIER (``aidcnet/agent/reliable/node.py``,
:meth:`NetBierEdge.set_hooks`), for UDP packets to one destination port only (every other packet pays
nothing): ``on_impose`` sees each before imposition and may name other BFERs for it (a retransmission
goes to the BFERs that have not confirmed it), ``on_emit`` sees each delivered to member ports and which.
"""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import logging
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Mapping

from aidcnet.agent.bier.dataplane import LOSSLESS_WAIT_S, BierDataplane, DeliverFn
from aidcnet.bier.edge import (
    ETH_P_IP,
    IPPROTO_IGMP,
    IPPROTO_UDP,
    MALFORMED_REASONS,
    FlowTable,
    Ipv4Error,
    complete_udp_checksum,
    decrement_ttl,
    ethernet_header,
    flow_entropy,
    is_routable_multicast,
    parse_ipv4,
)
from aidcnet.bier.header import BierProto
from aidcnet.udpio import set_socket_buffer

log = logging.getLogger("aidcnet.bier.net")

SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20; not in Python 3.11's socket module
SO_ATTACH_FILTER = 26
PACKET_AUXDATA = 8
TP_STATUS_CSUMNOTREADY = 1 << 3
_AUX_SPACE = socket.CMSG_SPACE(20)  # struct tpacket_auxdata
_ACCEPTED_PKTTYPES = frozenset({socket.PACKET_HOST, socket.PACKET_MULTICAST})
_RCVBUF = 16 << 20
_RECV_SIZE = 65536  # the largest IPv4 packet plus one


def _bpf_program() -> list[tuple[int, int, int, int]]:
    """Classic BPF over the network header (SOCK_DGRAM): keep IPv4 to 224/4 minus 224.0.0/24,
    not IGMP, arriving as PACKET_HOST or PACKET_MULTICAST.  ``(code, jt, jf, k)``."""
    ld_b, ld_w, and_k, jeq, ret = 0x30, 0x20, 0x54, 0x15, 0x06
    pkttype = 0xFFFFF004  # SKF_AD_OFF + SKF_AD_PKTTYPE
    prog: list[tuple[int, int, int, int]] = [
        (ld_w, 0, 0, pkttype),
        (jeq, 1, 0, socket.PACKET_HOST),
        (jeq, 0, -1, socket.PACKET_MULTICAST),
        (ld_b, 0, 0, 0),
        (and_k, 0, 0, 0xF0),
        (jeq, 0, -1, 0x40),
        (ld_b, 0, 0, 16),
        (and_k, 0, 0, 0xF0),
        (jeq, 0, -1, 0xE0),
        (ld_w, 0, 0, 16),
        (and_k, 0, 0, 0xFFFFFF00),
        (jeq, -1, 0, 0xE0000000),
        (ld_b, 0, 0, 9),
        (jeq, -1, 0, IPPROTO_IGMP),
        (ret, 0, 0, 0x40000),
    ]
    drop = len(prog)
    prog.append((ret, 0, 0, 0))
    # -1 marks "to the drop instruction"; BPF jumps are relative to the next instruction.
    return [
        (code, drop - i - 1 if jt == -1 else jt, drop - i - 1 if jf == -1 else jf, k)
        for i, (code, jt, jf, k) in enumerate(prog)
    ]


def _attach_filter(sock: socket.socket) -> bool:
    prog = _bpf_program()
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))  # struct sock_fprog, native layout
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        log.warning("classic BPF filter refused (%s): filtering in Python", exc)
        return False
    return True


def _fixed_counter_names() -> list[str]:
    return [
        *("captured", "captured-bytes", "unmatched", "imposed", "impose-errors", "ignored", "rx-errors"),
        *("ttl-expired-in", "malformed-in", "delivered", "sent", "no-members", "ingress-only"),
        *("ttl-expired-out", "malformed-out", "not-multicast", "emitted", "emitted-bytes", "emit-errors"),
        *("passed", "other-proto", "csum-completed", "hook-errors"),
        *(f"malformed-in.{r}" for r in sorted(MALFORMED_REASONS)),
        *(f"malformed-out.{r}" for r in sorted(MALFORMED_REASONS)),
    ]


_PORT_COUNTERS = (
    "captured",
    "captured-bytes",
    "unmatched",
    "imposed",
    "impose-errors",
    "ttl-expired-in",
    "malformed-in",
    "ignored",
    "rx-errors",
    "csum-completed",
    "emitted",
    "emitted-bytes",
    "emit-errors",
)


class _Port:
    __slots__ = ("capture", "emit", "keys", "mac", "name", "sndbuf")

    def __init__(self, name: str, sndbuf: int | None = None) -> None:
        self.name = name
        self.sndbuf = sndbuf
        self.keys = {k: f"port.{name}.{k}" for k in _PORT_COUNTERS}
        self.capture: socket.socket | None = None
        self.emit: socket.socket | None = None
        self.mac = b""

    def open(self) -> None:
        # Protocol 0 until bound: a packet socket with a protocol receives from every interface
        # between socket() and bind(), and the filter must be in place before the first packet.
        cap = self.capture = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)
        set_socket_buffer(cap, socket.SO_RCVBUF, _RCVBUF)
        try:
            cap.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            log.warning("%s: no PACKET_IGNORE_OUTGOING; own frames are dropped in Python", self.name)
        _attach_filter(cap)
        cap.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        cap.bind((self.name, ETH_P_IP))
        cap.setblocking(False)
        emit = self.emit = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        emit.bind((self.name, 0))  # protocol 0: send only, never receives
        if self.sndbuf is None:
            emit.setblocking(False)
        else:
            # A shaped, lossless host port: a full buffer (the port's queue is backed up) makes the
            # sender wait for room, as a paused port would, up to LOSSLESS_WAIT_S (then emit-errors).
            set_socket_buffer(emit, socket.SO_SNDBUF, self.sndbuf)
            emit.settimeout(LOSSLESS_WAIT_S)
        self.mac = emit.getsockname()[4]
        if len(self.mac) != 6:
            raise OSError(f"{self.name}: not an Ethernet interface (hardware address {self.mac.hex(':')})")

    def close(self) -> None:
        for s in (self.capture, self.emit):
            if s is not None:
                s.close()


class NetBierEdge:
    """IP multicast <-> BIER Proto 4 at a leaf that is BFIR and BFER for its host ports.

    ``host_ports`` are interface names; ``flows`` are :class:`aidcnet.config.BierFlow`-shaped
    (``group``, ``source`` or None, ``bfers``); ``members`` are
    :class:`aidcnet.config.BierMembership`-shaped (``group``, ``interfaces``).  The
    constructor opens the sockets and installs :meth:`deliver` as ``dataplane.deliver``; the
    callback it replaces still receives every payload that is not IPv4 to a routable group.
    Bad configuration raises ValueError, an interface that cannot be opened OSError naming it.
    """

    def __init__(
        self,
        dataplane: BierDataplane,
        host_ports: Iterable[str],
        flows: Iterable[object],
        members: Iterable[object],
        max_batch: int = 64,
        sndbuf: int | None = None,
    ) -> None:
        if dataplane.bfr_id is None:
            raise ValueError("network-BIER needs a BFR-id: the leaf is BFIR and BFER")
        names = list(host_ports)
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"host_ports: {', '.join(dups)} listed twice")
        self.dataplane = dataplane
        self.table = FlowTable.from_config(flows)
        self.max_batch = max_batch
        self._ports = {n: _Port(n, sndbuf) for n in names}
        member_ports: dict[bytes, list[str]] = {}
        for i, m in enumerate(members):
            group = _group(m.group, f"members[{i}]")  # type: ignore[attr-defined]
            for ifname in m.interfaces:  # type: ignore[attr-defined]
                if ifname not in self._ports:
                    raise ValueError(f"members[{i}]: interface {ifname!r} is not in host_ports {names}")
                ports = member_ports.setdefault(group, [])
                if ifname not in ports:
                    ports.append(ifname)
        self._c: dict[str, int] = dict.fromkeys(_fixed_counter_names(), 0)
        for p in self._ports.values():
            self._c.update(dict.fromkeys(p.keys.values(), 0))
        # Why a lock: deliver() may run in the dataplane's thread while capture runs in the loop's.
        self._lock = threading.Lock()
        # Why thread-local: impose() calls deliver() synchronously in the capturing thread for
        # the own bit, and only that call may see the ingress port; a delivery from the network
        # in another thread meanwhile must not.
        self._tls = threading.local()
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            for p in self._ports.values():
                try:
                    p.open()
                except OSError as exc:
                    msg = f"net-BIER host port {p.name!r}: {exc.strerror or exc}"
                    raise (OSError(exc.errno, msg) if exc.errno else OSError(msg)) from exc
        except BaseException:
            for p in self._ports.values():
                p.close()
            raise
        # group -> ((port, Ethernet header), ...): the frame prefix is fixed per group and port.
        self._members: dict[bytes, tuple[tuple[_Port, bytes], ...]] = {
            g: tuple((self._ports[n], ethernet_header(g, self._ports[n].mac)) for n in ports)
            for g, ports in member_ports.items()
        }
        self._chain: DeliverFn | None = dataplane.deliver
        dataplane.deliver = self.deliver
        # Called with the ingress port before each lookup: the IGMP service reads a Receiver Proxy
        # Report the kernel queued before this packet, so the packet right after the report gets the
        # new BitString whichever socket the event loop serves first.
        self.before_lookup: Callable[[str], object] | None = None
        # on_impose(packet, BFR-ids, source address) -> the BFR-ids to impose for.
        self.on_impose: Callable[[bytes, tuple[int, ...], str], tuple[int, ...]] | None = None
        # on_emit(packet, member ports it goes out on).
        self.on_emit: Callable[[bytes, tuple[str, ...]], object] | None = None
        self.hook_dport: int | None = None  # the UDP destination port of the packets the hooks see

    def set_hooks(
        self,
        on_impose: Callable[[bytes, tuple[int, ...], str], tuple[int, ...]],
        on_emit: Callable[[bytes, tuple[str, ...]], object],
        dport: int,
    ) -> None:
        """Call ``on_impose`` and ``on_emit`` for UDP packets to port ``dport`` (unfragmented ones: the
        edge reads no ports of a fragment)."""
        self.on_impose, self.on_emit, self.hook_dport = on_impose, on_emit, dport

    # -- dynamic state (IGMP, Receiver Proxy Reports) ----------------------------------------------
    def set_flows(self, flows: Iterable[object]) -> None:
        """Replace the ingress flows (BierFlow-shaped); one assignment, so a packet sees old or new."""
        self.table = FlowTable.from_config(flows)

    def update_flows(self, changes: Mapping[tuple[object | None, object], Iterable[int] | None]) -> None:
        """Change some ingress flows: per (source or None, group), its BFER BFR-ids, or None to remove it.
        One assignment of a patched copy (:meth:`FlowTable.updated`): a packet sees old or new."""
        if changes:
            self.table = self.table.updated(changes)  # type: ignore[arg-type]

    def set_members(self, members: Mapping[str, Iterable[str]]) -> None:
        """Replace the egress member ports: ``{group: [host port, ...]}``."""
        self._members = self._member_entries(members, {})

    def update_members(self, changes: Mapping[str, Iterable[str] | None]) -> None:
        """Change some groups' member ports (None or none: the group has no member port here)."""
        if changes:
            self._members = self._member_entries(changes, self._members)

    def _member_entries(
        self,
        members: Mapping[str, Iterable[str] | None],
        base: Mapping[bytes, tuple[tuple[_Port, bytes], ...]],
    ) -> dict[bytes, tuple[tuple[_Port, bytes], ...]]:
        table = dict(base)
        for group, names in members.items():
            g = _group(group, f"members[{group}]")
            names = list(names or ())
            unknown = [n for n in names if n not in self._ports]
            if unknown:
                raise ValueError(f"members[{group}]: {unknown} not in host_ports {list(self._ports)}")
            if names:
                table[g] = tuple((self._ports[n], ethernet_header(g, self._ports[n].mac)) for n in names)
            else:
                table.pop(g, None)
        return table

    # -- ingress (BFIR) ---------------------------------------------------------------------------
    def _drain(self, port: _Port) -> int:
        """Read up to ``max_batch`` packets from one host port; return how many were read."""
        sock = port.capture
        if sock is None:
            return 0
        n = 0
        for _ in range(self.max_batch):
            try:
                data, anc, _flags, addr = sock.recvmsg(_RECV_SIZE, _AUX_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._count(port, "rx-errors")
                log.warning("%s: receive failed: %s", port.name, exc)
                break
            n += 1
            status = 0
            for level, kind, value in anc:
                if level == SOL_PACKET and kind == PACKET_AUXDATA and len(value) >= 4:
                    status = int.from_bytes(value[:4], sys.byteorder)  # tp_status, host order
            self._ingress(port, data, addr[2], bool(status & TP_STATUS_CSUMNOTREADY))
        return n

    def drain(self) -> int:
        """Read what is waiting on every host port (for callers without an event loop)."""
        return sum(self._drain(p) for p in self._ports.values())

    def _ingress(self, port: _Port, data: bytes, pkttype: int, csum_not_ready: bool = False) -> None:
        # The kernel filter normally did this; repeat it cheaply for kernels that refused it.
        if (
            pkttype not in _ACCEPTED_PKTTYPES
            or len(data) < 20
            or data[0] >> 4 != 4
            or not is_routable_multicast(data[16:20])
            or data[9] == IPPROTO_IGMP
        ):
            self._count(port, "ignored")
            return
        self._count(port, "captured")
        self._count(port, "captured-bytes", len(data))
        try:
            info = parse_ipv4(data)
        except Ipv4Error as exc:
            self._count(port, "malformed-in")
            self._count(None, "malformed-in." + exc.reason)
            return
        if info.ttl <= 1:
            self._count(port, "ttl-expired-in")
            return
        if self.before_lookup is not None:
            self.before_lookup(port.name)
        bfers = self.table.lookup(info.src, info.dst)
        if bfers is None:
            self._count(port, "unmatched")
            return
        entropy = flow_entropy(info.src, info.dst, info.sport, info.dport)
        packet = data if len(data) == info.total_length else data[: info.total_length]  # Ethernet padding
        if csum_not_ready and info.proto == IPPROTO_UDP and not info.fragment:
            buf = bytearray(packet)
            try:
                complete_udp_checksum(buf, info.ihl)
            except ValueError:
                self._count(port, "malformed-in")
                self._count(None, "malformed-in.truncated")
                return
            packet = bytes(buf)
            self._count(port, "csum-completed")
        if self.on_impose is not None and info.dport == self.hook_dport:
            try:
                bfers = self.on_impose(packet, bfers, socket.inet_ntoa(info.src))
            except Exception:
                self._count(None, "hook-errors")
                log.exception("%s: on_impose failed", port.name)
        self._tls.ingress = port.name
        try:
            self.dataplane.impose(packet, bfers, proto=BierProto.IPV4, entropy=entropy)
        except Exception:
            self._count(port, "impose-errors")
            log.exception("%s: impose failed for a packet to %s", port.name, bfers)
            return
        finally:
            self._tls.ingress = None
        self._count(port, "imposed")

    # -- egress (BFER) ----------------------------------------------------------------------------
    def deliver(self, payload: bytes, bfir_id: int, proto: int, header: bytes) -> None:
        """The dataplane's ``deliver`` callback: re-emit an IPv4 multicast payload on member ports."""
        if proto != BierProto.IPV4:
            chain = self._chain
            if chain is None:
                self._count(None, "other-proto")
                return
            self._count(None, "passed")
            chain(payload, bfir_id, proto, header)
            return
        try:
            info = parse_ipv4(payload)
        except Ipv4Error as exc:
            self._count(None, "delivered")
            self._count(None, "malformed-out")
            self._count(None, "malformed-out." + exc.reason)
            return
        if not is_routable_multicast(info.dst):
            # Not network-BIER traffic (e.g. host-BIER's IPv4/UDP to a unicast address): the
            # previous callback may know it.
            if self._chain is not None:
                self._count(None, "passed")
                self._chain(payload, bfir_id, proto, header)
                return
            self._count(None, "delivered")
            self._count(None, "not-multicast")
            return
        self._count(None, "delivered")
        targets = self._members.get(info.dst)
        if not targets:
            self._count(None, "no-members")
            return
        ingress = getattr(self._tls, "ingress", None)
        if ingress is not None:
            targets = tuple(t for t in targets if t[0].name != ingress)
            if not targets:
                self._count(None, "ingress-only")
                return
        if info.ttl <= 1:
            self._count(None, "ttl-expired-out")
            return
        packet = bytearray(payload[: info.total_length])
        decrement_ttl(packet)
        self._count(None, "sent")
        if self.on_emit is not None and info.dport == self.hook_dport:
            try:
                self.on_emit(bytes(packet), tuple(port.name for port, _eth in targets))
            except Exception:
                self._count(None, "hook-errors")
                log.exception("on_emit failed for a packet to %s", ipaddress.IPv4Address(info.dst))
        for port, eth in targets:
            frame = eth + packet
            try:
                port.emit.send(frame)  # type: ignore[union-attr]
            except OSError as exc:
                self._count(port, "emit-errors")
                log.debug("%s: send failed: %s", port.name, exc)
                continue
            self._count(port, "emitted")
            self._count(port, "emitted-bytes", len(frame))

    # -- plumbing ---------------------------------------------------------------------------------
    def _count(self, port: _Port | None, name: str, n: int = 1) -> None:
        with self._lock:
            self._c[name] += n
            if port is not None:
                self._c[port.keys[name]] += n

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve the capture sockets from ``loop`` (the dataplane needs its own ``attach``)."""
        for p in self._ports.values():
            loop.add_reader(p.capture.fileno(), self._drain, p)  # type: ignore[union-attr]
        self._loop = loop

    def detach(self) -> None:
        if self._loop is None:
            return
        for p in self._ports.values():
            if p.capture is not None:
                self._loop.remove_reader(p.capture.fileno())
        self._loop = None

    def close(self) -> None:
        """Stop serving, close the sockets and give the dataplane its previous callback back."""
        self.detach()
        if self.dataplane.deliver == self.deliver:
            self.dataplane.deliver = self._chain
        for p in self._ports.values():
            p.close()
            p.capture = p.emit = None

    def __enter__(self) -> NetBierEdge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def counters(self) -> dict[str, int]:
        """Flat ``{name: int}``, every counter present even when zero (see the module doc)."""
        with self._lock:
            out = dict(self._c)
        out["ttl-expired"] = out["ttl-expired-in"] + out["ttl-expired-out"]
        out["malformed"] = out["malformed-in"] + out["malformed-out"]
        return out


def _group(value: object, where: str) -> bytes:
    try:
        g = ipaddress.IPv4Address(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not is_routable_multicast(g.packed):
        raise ValueError(f"{where}: group {g} is not routable multicast (224/4 minus 224.0.0/24)")
    return g.packed
