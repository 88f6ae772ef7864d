"""The node agent's BIER service: builds the BIFTs from the node file's ``bier`` section and runs the
dataplane on UDP 6635 inside the agent's event loop.

On a GPU host it is also the host-BIER BFIR/BFER: ``send`` imposes a BitString chosen by the
application, and payloads for the host's own bit are kept for the control API (and forwarded to a
local application socket when one is configured).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aidcnet.agent.bier.dataplane import BierDataplane, ForwardFn
from aidcnet.agent.bier.ebpf import Direct, EbpfUnavailable, Reported, start_fast_path, start_net_fast_path
from aidcnet.agent.bier.host import BierHost
from aidcnet.agent.bier.net_bier import NetBierEdge
from aidcnet.agent.control import Handler, Op
from aidcnet.agent.service import Service
from aidcnet.bgp.bier_attribute import BierAttribute
from aidcnet.bgp.bier_routes import BgpBirt, BgpPath, bgp_paths, birt_from_bgp, loopback_attribute
from aidcnet.bier.bift import SELF, Bift, LabelKey, birt_around, build_bifts
from aidcnet.bier.bitstring import bfr_id_to_si_bit
from aidcnet.bier.edge_policy import PortPolicy, from_config
from aidcnet.bier.fast_reroute import NnhTunnel, rows_kept_for_bypass, usable_bypasses, usable_nnh_tunnels
from aidcnet.bier.header import BierProto
from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT, Ipv4DecodeError, UdpDatagram, build_udp, parse_udp
from aidcnet.roles import Role
from aidcnet.udpio import shaped_sndbuf

if TYPE_CHECKING:
    from aidcnet.config import Bier, NodeConfig

log = logging.getLogger("aidcnet.bier.service")

# Deliveries kept for `aidcnet ctl bier received`; older ones fall off (and are counted).
RECEIVED_KEEP = 100_000


def si_count(bier: Bier, birt: Mapping[int, Sequence[str]] | None = None) -> int:
    ids = [bier.bfr_id, *(bier.birt if birt is None else birt)]
    return max(bfr_id_to_si_bit(i, bier.bsl)[0] for i in ids) + 1


def build_tables(
    bier: Bier, birt: Mapping[int, Sequence[str]] | None = None
) -> tuple[dict[int, Bift], dict[str, tuple[str, str]], dict[LabelKey, int]]:
    """BIFTs, neighbor addresses and our own labels from the node file.

    ``birt`` (``{BFR-id: neighbor names}``) replaces the node file's static one: in ``bift: bgp`` mode
    it comes from the BGP best paths (:func:`aidcnet.bgp.bier_routes.birt_from_bgp`)."""
    rows = bier.birt if birt is None else birt
    sis = range(si_count(bier, rows))
    table: dict[int, Any] = {bier.bfr_id: SELF}
    table.update({bfr_id: list(hops) for bfr_id, hops in rows.items() if bfr_id != bier.bfr_id})
    used = {hop for hops in rows.values() for hop in hops}
    nbr_labels = {
        n.name: {(bier.sub_domain, bier.bsl, si): n.label_base + si for si in sis}
        for n in bier.neighbors
        if n.name in used
    }
    bifts = build_bifts(table, bier.bsl, nbr_labels, sd=bier.sub_domain)
    neighbors = {n.name: (str(n.address), n.interface) for n in bier.neighbors}
    local_labels = {(bier.sub_domain, bier.bsl, si): bier.label_base + si for si in sis}
    return bifts, neighbors, local_labels


def edge_policies(bier: Bier) -> dict[str, PortPolicy]:
    """The node file's ``bier.edge_policy`` as the dataplane takes it: a policy per ingress ifname."""
    return from_config(bier.model_dump(mode="json")["edge_policy"], bier.bsl)


# Fast-reroute switches kept for `show bift` (a run reads the ones its faults caused).
BYPASS_EVENTS_KEPT = 256
# bift: bgp: how long (wall) a row BGP lost to a dead link keeps that neighbour through its bypass. Long
# enough for the other BFRs' BGP to move off this one (well under a second in our labs: BGP runs in wall
# time at any scale), and not for ever: a neighbour whose every link died (a node failure) is behind no
# bypass, and its rows must go with BGP's.
BGP_BYPASS_HOLD_S = 1.0

# Host-BIER wraps application data as IPv4/UDP from the host's loopback to this SSM group and RoCEv2's
# port, so captures decode as MPLS-in-UDP / BIER / IPv4 / UDP; the UDP source port is the QP.
HOST_BIER_GROUP = "232.1.0.1"
# The replay's host-BIER data: a group of its own, which the hosts' eBPF program decapsulates and hands
# straight to the replay's socket (bier_cfg.direct_*) as a unicast datagram is handed, while `bier send`
# datagrams to HOST_BIER_GROUP still reach the agent (aidcnet ctl bier received).
REPLAY_BIER_GROUP = "232.1.0.2"


class BierService:
    def __init__(
        self, bier: Bier, host: bool, loopback: str = "0.0.0.0", sndbuf: tuple[int, int] | None = None
    ):
        """``sndbuf``: on a shaped lab, (bytes per port, ports) from :func:`bfr_sndbuf`."""
        self.bier = bier
        self.loopback = loopback
        self.sndbuf = sndbuf
        self._init_routing(bier)
        bifts, neighbors, local_labels = build_tables(bier, {} if self.bgp_birt is not None else None)
        self.bifts = bifts
        self.dataplane = BierDataplane(
            bier.bfr_id,
            bier.bsl,
            bier.sub_domain,
            bifts,
            neighbors,
            local_labels,
            sndbuf=None if sndbuf is None else sndbuf[0] * sndbuf[1],
        )
        # bier.dataplane: ebpf puts the tc fast path in front; None (and ebpf_error) when the kernel refuses.
        self.ebpf, self.ebpf_error = (None, None)
        self.report_error: str | None = None  # why the fast path does not report what it forwards
        if bier.edge_policy:
            self.dataplane.set_edge_policy(edge_policies(bier))
        if bier.adjacency_labels:
            self.dataplane.set_adjacency_labels({label: nbr for nbr, label in bier.adjacency_labels.items()})
        if bier.dataplane == "ebpf":
            # the tc program enforces the same policy (EbpfBier.write_policy); refused: Python checks it
            direct = None
            if host and loopback != "0.0.0.0":  # a host's replay data goes straight to its replay socket
                direct = Direct(ROCEV2_PORT, REPLAY_BIER_GROUP, loopback)
            self.ebpf, self.ebpf_error = start_fast_path(self.dataplane, direct=direct)
        self.received: deque[dict[str, Any]] = deque(maxlen=RECEIVED_KEEP)
        self.app = ("127.0.0.1", bier.app_port) if bier.app_port else None
        self.app_dropped = 0
        # A consumer in the agent (the replay service) may claim decoded deliveries before they are kept.
        self.on_udp: Callable[[UdpDatagram], bool] | None = None
        self.app_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if self.app else None
        if self.app_sock is not None:
            self.app_sock.setblocking(False)
        self.host = BierHost(self.dataplane, on_payload=self._keep) if host else None
        if not host:
            # A BFR with its own bit set only counts deliveries: it has no application.
            self.dataplane.deliver = lambda payload, bfir_id, proto, header: self._keep(
                payload, bfir_id, proto
            )
        # Network-BIER at a leaf: captures (S,G) on host ports and re-emits deliveries to members; it
        # chains in front of the deliver callback above, so it must be built after it.
        self.edge = (
            NetBierEdge(
                self.dataplane,
                bier.host_ports,
                bier.flows,
                bier.members,
                sndbuf=None if sndbuf is None else sndbuf[0],
            )
            if bier.host_ports
            else None
        )
        # With the eBPF BFR running, imposition on the host ports goes into the kernel too (bier_impose);
        # what it leaves alone still reaches the Python edge.
        self.net_ebpf, self.net_ebpf_error = (None, None)
        if self.edge is not None and self.ebpf is not None:
            self.net_ebpf, self.net_ebpf_error = start_net_fast_path(
                self.ebpf, self.edge, bier.host_ports, bier.flows
            )

    def _init_routing(self, bier: Bier) -> None:
        """Where the BIRT comes from, and what forwarding around dead links keeps (links_down, apply_bgp)."""
        # bift: bgp starts with only the own row; apply_bgp() fills the BIRT as best paths arrive.
        self.bgp_birt: BgpBirt | None = BgpBirt() if bier.bift == "bgp" else None
        # bift: static: the node file's BIRT as forwarding uses it, around the links that are down.
        self.static_birt: dict[int, list[str]] = dict(bier.birt)
        self.rerouted = 0  # times the static BIFTs were rebuilt around a link going down or coming up
        # fast reroute (aidcnet/bier/fast_reroute.py): the bypass per BFR-NBR, the ones on now, and how often
        # they changed
        self.bypasses = {nbr: (b.via, tuple(b.labels)) for nbr, b in bier.bypass.items()}
        self.nnh_tunnels = {
            nbr: tuple(
                NnhTunnel(t.nnh, t.label_base, t.via, tuple(t.labels), tuple(t.bfr_ids)) for t in tunnels
            )
            for nbr, tunnels in bier.nnh_bypass.items()
        }
        # every tunnel's first hop per protected neighbour: a row BGP lost is kept while one is up
        self._tunnel_first_hops: dict[str, set[str]] = {}
        for nbr, (via, _labels) in self.bypasses.items():
            self._tunnel_first_hops.setdefault(nbr, set()).add(via)
        for nbr, tunnels in self.nnh_tunnels.items():
            self._tunnel_first_hops.setdefault(nbr, set()).update(t.via for t in tunnels)
        self.active_bypass: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.active_nnh: dict[str, tuple[NnhTunnel, ...]] = {}
        self.bypass_switches = 0
        # when each switch happened and the neighbours whose bypass was on from then (a run's fault record)
        self.bypass_events: deque[dict[str, Any]] = deque(maxlen=BYPASS_EVENTS_KEPT)
        self._down_nbrs: frozenset[str] = frozenset()
        # bift: bgp: every BFR-id's last next hops BGP gave, and the BIRT the BIFTs were built from (BGP's,
        # plus the rows it lost to a dead link that a bypass carries: rows_kept_for_bypass)
        self._last_hops: dict[int, list[str]] = {}
        self.bgp_forwarding: dict[int, list[str]] = {}
        self._down_since: dict[str, float] = {}  # monotonic seconds each down neighbour went down
        self._loop: asyncio.AbstractEventLoop | None = None

    def _keep(self, payload: bytes, bfir_id: int, proto: int) -> None:
        entry: dict[str, Any] = {"bfir_id": bfir_id, "proto": proto}
        if proto == BierProto.IPV4:
            try:
                datagram = parse_udp(payload)
            except Ipv4DecodeError as exc:
                entry.update(error=exc.reason, payload=payload.hex())
            else:
                if self.on_udp is not None and self.on_udp(datagram):
                    return
                if self.app_sock is not None:
                    # A missing or slow application must never stall forwarding: drop and count.
                    try:
                        self.app_sock.sendto(datagram.payload, self.app)
                    except OSError:
                        self.app_dropped += 1
                entry.update(
                    src=datagram.src,
                    dst=datagram.dst,
                    sport=datagram.sport,
                    dport=datagram.dport,
                    payload=datagram.payload.hex(),
                )
        else:
            entry["payload"] = payload.hex()
        self.received.append(entry)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.dataplane.attach(loop)
        if self.ebpf is not None:
            self.ebpf.attach_loop(loop)
        if self.edge is not None:
            self.edge.attach(loop)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if self.net_ebpf is not None:
            self.net_ebpf.stop()
        if self.ebpf is not None:
            self.ebpf.close(loop)
        if self.app_sock is not None:
            self.app_sock.close()
        if self.edge is not None:
            self.edge.close()
        if loop is not None:
            self.dataplane.detach(loop)
        if self.host is not None:
            self.host.close()
        else:
            self.dataplane.close()

    def send(
        self, payloads: list[bytes], receivers: list[int], entropy: int = 0, group: str = HOST_BIER_GROUP
    ) -> int:
        """Each payload becomes one IPv4/UDP datagram to ``group``:4791 imposed with the receivers' bits."""
        if self.host is None:
            raise ValueError("bier send is the host-BIER API: only gpu-host nodes are BFIRs for applications")
        datagrams = []
        for i, data in enumerate(payloads):
            flow = (entropy + i) & 0xFFFFF
            datagram = build_udp(
                self.loopback, group, QP_PORT_BASE + (flow & 0x3FFF), ROCEV2_PORT, data, ident=i
            )
            datagrams.append((datagram, flow))
        return self.host.send_many(datagrams, receivers)

    def send_message(
        self, fragments: list[bytes], receivers: list[int], flow: int, group: str = REPLAY_BIER_GROUP
    ) -> int:
        """One replay message's fragments on one QP: every datagram carries ``flow`` as its Entropy and
        source port, so the whole message takes one path, and all of them leave in one batch."""
        if self.host is None:
            raise ValueError("bier send is the host-BIER API: only gpu-host nodes are BFIRs for applications")
        flow &= 0xFFFFF
        sport = QP_PORT_BASE + (flow & 0x3FFF)
        datagrams = [(build_udp(self.loopback, group, sport, ROCEV2_PORT, data), flow) for data in fragments]
        return self.host.send_many(datagrams, receivers)

    # -- BIER over BGP (RFC 9793) -------------------------------------------------------------------
    def bgp_attribute(self) -> BierAttribute:
        """The BIER attribute for our loopback announcement (``.to_exabgp()`` gives ExaBGP's syntax)."""
        return loopback_attribute(self.bier)

    def apply_bgp(self, routes: Mapping[str, BgpPath | tuple[Sequence[str], str | None]]) -> bool:
        """Rebuild the BIRT and BIFTs from the BGP best paths; True when the BIRT changed.

        ``routes`` is :func:`aidcnet.bgp.rib.bier_view` (``{prefix: (next hops, attribute-41 hex)}``) or
        ``{prefix: BgpPath}``. Cheap when nothing changed (the common case on every RIB update), so the agent
        may call it on every best-path change. Ignored (False) in static mode."""
        if self.bgp_birt is None:
            return False
        addresses = {str(n.address): n.name for n in self.bier.neighbors}
        paths, problems = bgp_paths(routes)
        new = birt_from_bgp(self.bier.bfr_id, self.bier.sub_domain, paths, addresses)
        new.problems[:0] = problems
        for problem in new.problems:
            if problem not in self.bgp_birt.problems:
                log.warning("BIER over BGP: %s", problem)
        for bfr_id, hops in new.birt.items():
            self._last_hops[bfr_id] = list(hops)
        changed = new.birt != self.bgp_birt.birt
        forwarding = self._kept(new.birt)
        if forwarding != self.bgp_forwarding and (problem := self._install(forwarding)) is not None:
            self.bgp_birt.problems = [*new.problems, problem]
            return False
        self.bgp_birt = new
        self.switch_bypasses()
        return changed

    def _install(self, birt: Mapping[int, Sequence[str]]) -> str | None:
        """BIFTs from ``birt`` into the dataplane(s); the problem (and the previous BIFTs kept) when they
        cannot be built: BGP must not stop over a table we cannot build, and the problem shows in ``show
        bift``."""
        try:
            bifts, _neighbors, local_labels = build_tables(self.bier, birt)
            self.dataplane.set_bifts(bifts, local_labels)
            if self.ebpf is not None:
                self.ebpf.write_tables()
        except ValueError as exc:
            log.error("BIER: BIFTs not rebuilt, keeping the previous ones: %s", exc)
            return f"BIFTs not rebuilt: {exc}"
        self.bifts = bifts
        if self.bgp_birt is None:
            self.static_birt = dict(birt)
        else:
            self.bgp_forwarding = dict(birt)
        return None

    def links_down(self, down: frozenset[str]) -> bool:
        """Forward around the neighbors behind the interfaces in ``down``: a static BIFT drops them from every
        row that has an equal-cost alternative (:func:`aidcnet.bier.bift.birt_around`), and where a row has
        none, fast reroute sends their copies through their bypass (:meth:`switch_bypasses`). With ``bift:
        bgp``, BGP withdraws what it learned over the dead link and :meth:`apply_bgp` rebuilds; the rows it
        finds no other way for keep the dead neighbour, through its bypass, until it does. True when anything
        changed."""
        self._down_nbrs = frozenset(n.name for n in self.bier.neighbors if n.interface in down)
        now = time.monotonic()
        self._down_since = {n: self._down_since.get(n, now) for n in self._down_nbrs}
        if self.bgp_birt is not None and self._loop is not None and now in self._down_since.values():
            self._loop.call_later(BGP_BYPASS_HOLD_S, self.hold_expired)
        changed = False
        if self.bgp_birt is None:
            birt = birt_around(self.bier.birt, set(self._down_nbrs))
            if birt != self.static_birt and self._install(birt) is None:
                self.rerouted += 1
                changed = True
        else:
            birt = self._kept(self.bgp_birt.birt)
            changed = birt != self.bgp_forwarding and self._install(birt) is None
        return self.switch_bypasses() or changed

    def _kept(self, birt: Mapping[int, Sequence[str]], now: float | None = None) -> dict[int, list[str]]:
        """bift: bgp: BGP's ``birt`` plus the rows it lost to a neighbour held down whose tunnels carry them
        (:func:`rows_kept_for_bypass`)."""
        return rows_kept_for_bypass(birt, self._last_hops, self._held_down(now), self._tunnel_first_hops)

    def _held_down(self, now: float | None = None) -> frozenset[str]:
        """The down neighbours whose rows BGP lost are still kept for their bypass (BGP_BYPASS_HOLD_S)."""
        now = time.monotonic() if now is None else now
        return frozenset(n for n, since in self._down_since.items() if now - since < BGP_BYPASS_HOLD_S)

    def hold_expired(self, now: float | None = None) -> bool:
        """bift: bgp: drop the kept rows of neighbours down for BGP_BYPASS_HOLD_S; True when the BIFTs
        changed. By then BGP has moved the other BFRs off this one, or never will (a node failure)."""
        if self.bgp_birt is None:
            return False
        birt = self._kept(self.bgp_birt.birt, now)
        changed = birt != self.bgp_forwarding and self._install(birt) is None
        return self.switch_bypasses() or changed

    def switch_bypasses(self) -> bool:
        """Turn on the bypass of every down neighbor the BIRT still forwards to, and off the others; True
        when that changed. The eBPF program hands the packets that need one to the Python dataplane."""
        birt = self.static_birt if self.bgp_birt is None else self.bgp_forwarding
        needed = {hop for hops in birt.values() for hop in hops}
        bypass = usable_bypasses(needed, self.bypasses, self._down_nbrs)
        nnh = usable_nnh_tunnels(needed, self.nnh_tunnels, self._down_nbrs)
        if bypass == self.active_bypass and nnh == self.active_nnh:
            return False
        self.dataplane.set_bypass(bypass, nnh)
        on = sorted({*bypass, *nnh})
        if self.ebpf is not None:
            self.ebpf.punt(on)
        self.active_bypass, self.active_nnh = bypass, nnh
        self.bypass_switches += 1
        self.bypass_events.append({"at_ns": time.time_ns(), "on": on})
        routes = [f"{t.nnh} via {t.via} (node protection of {n})" for n, ts in nnh.items() for t in ts]
        routes += [f"{n} via {via}" for n, (via, _labels) in bypass.items()]
        log.info("BIER fast reroute: bypass on for %s", ", ".join(routes) or "none")
        return True

    def counters(self) -> dict[str, int]:
        """The dataplane counters, whichever dataplane forwarded (names as
        :mod:`aidcnet.agent.bier.dataplane` documents)."""
        return self.ebpf.counters() if self.ebpf is not None else self.dataplane.counters()

    def take_received(self, clear: bool) -> list[dict[str, Any]]:
        out = list(self.received)
        if clear:
            self.received.clear()
        return out

    def bift_rows(self) -> dict[str, Any]:
        return {
            "bfr_id": self.bier.bfr_id,
            "bift_mode": self.bier.bift,
            # who holds the table: ebpf (the tc program's maps) or python; the configured one differs
            # when the kernel refused the program (dataplane_error says why)
            "dataplane": "ebpf" if self.ebpf is not None else "python",
            "dataplane_configured": self.bier.dataplane,
            "dataplane_error": self.ebpf_error,
            "imposition": "ebpf" if self.net_ebpf is not None else "python",
            "imposition_error": self.net_ebpf_error,
            **(self.ebpf.describe() if self.ebpf is not None else {}),
            "bgp_prefixes": (
                {str(i): p for i, p in sorted(self.bgp_birt.prefixes.items())} if self.bgp_birt else None
            ),
            "bgp_problems": self.bgp_birt.problems if self.bgp_birt else None,
            "sub_domain": self.bier.sub_domain,
            "bsl": self.bier.bsl,
            "label_base": self.bier.label_base,
            # BIER fast reroute: every bypass this BFR has, and the neighbours whose copies take theirs now
            "fast_reroute": {
                "bypass": {n: {"via": v, "labels": list(ls)} for n, (v, ls) in self.bypasses.items()},
                # node protection: per neighbour, its next-next hops' tunnels and the BFR-ids each carries
                "nnh_bypass": {
                    n: [
                        {"nnh": t.nnh, "via": t.via, "labels": list(t.labels), "bfr_ids": list(t.bfr_ids)}
                        for t in tunnels
                    ]
                    for n, tunnels in self.nnh_tunnels.items()
                },
                "on": sorted({*self.active_bypass, *self.active_nnh}),
                "events": list(self.bypass_events),
                # the first copy into each bypass after it went on: the first packet on the new path
                "first_copies": [{"neighbor": n, "at_ns": t} for n, t in self.dataplane.first_bypassed],
            },
            "bift": {
                str(si): [
                    {
                        "bfr_id": bfr_id,
                        "entries": [{"f_bm": f"0x{fbm:x}", "bfr_nbr": nbr} for fbm, nbr in alts],
                    }
                    for bfr_id, alts in bift.rows()
                ]
                for si, bift in sorted(self.bifts.items())
            },
        }


def bfr_sndbuf(config: NodeConfig) -> tuple[int, int] | None:
    """(send buffer per port, ports) on a shaped lab. The BFR's one socket sends to every port, so it gets
    a quarter of a queue per port: a port whose queue is backed up then does not stop the others
    (head-of-line blocking in our socket, which a switch with a buffer per port would not have). A port
    sent more than its own queue holds shows as a queue drop, never as a silent loss."""
    per_port = shaped_sndbuf(config.smallest_queue_bytes)
    return None if per_port is None else (per_port, max(1, len(config.interfaces)))


class BierPart(Service):
    """The agent's BIER service: a :class:`BierService` rebuilt whenever the node file's ``bier``
    section changes, with the control ops that read and drive it. Other services reach the running one
    through :attr:`current` and receive host-BIER deliveries through :meth:`add_listener`."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self.current: BierService | None = None
        self._listeners: list[Callable[[UdpDatagram], bool]] = []
        self._forward_listeners: list[ForwardFn] = []
        self._report_listeners: list[Callable[[Reported], None]] = []
        self._report_port = 0
        self._edge_hooks: tuple[Callable[..., Any], Callable[..., Any], int] | None = None
        self._down: frozenset[str] = frozenset()  # interfaces without carrier, as the agent last heard

    def set_edge_hooks(self, on_impose: Callable[..., Any], on_emit: Callable[..., Any], dport: int) -> None:
        """Network-BIER's edge hooks (``NetBierEdge.on_impose`` and ``on_emit``, for UDP to ``dport``) in
        every BIER service this part runs, now and after each reload; the Python edge only (the eBPF one
        never calls them)."""
        self._edge_hooks = (on_impose, on_emit, dport)
        if self.current is not None and self.current.edge is not None:
            self.current.edge.set_hooks(on_impose, on_emit, dport)

    def add_listener(self, listener: Callable[[UdpDatagram], bool]) -> None:
        """``listener`` sees each decoded IPv4/UDP delivery in registration order until one claims it."""
        self._listeners.append(listener)

    def _deliver(self, datagram: UdpDatagram) -> bool:
        return any(listener(datagram) for listener in self._listeners)

    def add_forward_listener(self, listener: ForwardFn) -> None:
        """``listener`` sees every IPv4-payload packet the Python dataplane forwards or delivers
        (``BierDataplane.on_forward``); packets the eBPF fast path forwards never reach it."""
        self._forward_listeners.append(listener)

    def _forwarded(self, src: str, inner: bytes, downstream: int) -> None:
        for listener in self._forward_listeners:
            listener(src, inner, downstream)

    def add_report_listener(self, port: int, listener: Callable[[Reported], None]) -> None:
        """``listener`` sees what the eBPF fast path forwards (and imposes) to UDP ``port`` in its payload,
        without the packet (:meth:`EbpfBier.report`): the forward listeners' view of what never reaches
        the Python dataplane. One port for every listener."""
        if self._report_port and port != self._report_port:
            raise ValueError(f"eBPF reports are for UDP port {self._report_port}, not also {port}")
        self._report_port = port
        self._report_listeners.append(listener)
        if self.current is not None:
            self._start_reports(self.current)

    def _reported(self, report: Reported) -> None:
        for listener in self._report_listeners:
            listener(report)

    def _start_reports(self, service: BierService) -> None:
        if service.ebpf is None or not self._report_listeners:
            return
        try:
            service.ebpf.report(self._report_port, self._reported)
        except (EbpfUnavailable, OSError) as exc:
            # Said by reliable_reset as this node's aggregation (the reliable modes refuse to start).
            service.report_error = f"eBPF reports not started: {exc}"
            log.error("%s", service.report_error)

    async def reload(self, config: NodeConfig | None) -> None:
        new = config.bier if config else None
        # A new time scale or queue changes the send buffer (the lossless wait), not the BIER section.
        sndbuf = bfr_sndbuf(config) if config else None
        if self.current is not None and self.current.bier == new and self.current.sndbuf == sndbuf:
            return
        loop = asyncio.get_running_loop()
        if self.current is not None:
            self.current.close(loop)
            self.current = None
        if new is None or config is None:
            return
        service = BierService(
            new,
            host=self.role == Role.GPU_HOST,
            loopback=str(config.loopback.ip),
            sndbuf=sndbuf,
        )
        service.on_udp = self._deliver
        if self._forward_listeners:
            service.dataplane.on_forward = self._forwarded
        if self._edge_hooks is not None and service.edge is not None:
            service.edge.set_hooks(*self._edge_hooks)
        self._start_reports(service)
        service.attach(loop)
        service.links_down(self._down)
        self.current = service

    def links_down(self, down: frozenset[str]) -> None:
        self._down = down
        if self.current is not None and self.current.links_down(down):
            log.info("static BIFTs rebuilt around %s", ", ".join(sorted(down)) or "no link down")

    async def stop(self) -> None:
        if self.current is not None:
            self.current.close(asyncio.get_running_loop())
            self.current = None

    def apply_bgp(self, selected: Mapping[str, Any]) -> None:
        """BGP's best paths changed (``BgpPart`` calls this): rebuild the BIFT from them."""
        if self.current is not None:
            from aidcnet.bgp.rib import bier_view

            self.current.apply_bgp(bier_view(selected))

    def _service(self) -> BierService:
        if self.current is None:
            raise ValueError("this node has no BIER configured (no bier section applied)")
        return self.current

    def counters(self) -> dict[str, int]:
        if self.current is None:
            return {}
        out = {f"bier.{k}": v for k, v in self.current.counters().items()}
        out["bier.app-dropped"] = self.current.app_dropped
        out["bier.rerouted"] = self.current.rerouted
        out["bier.bypass.switches"] = self.current.bypass_switches
        if self.current.edge is not None:
            edge = self.current.net_ebpf or self.current.edge
            out.update({f"net-bier.{k}": v for k, v in edge.counters().items()})
        return out

    async def show_bift(self, _request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, **self._service().bift_rows()}

    async def bier_send(self, request: dict[str, Any]) -> dict[str, Any]:
        """Host-BIER: send ``count`` payloads of ``size`` bytes (or the given hex payloads) to BFR-ids.
        Generated payloads start with ``<own BFR-id>:<tag>:<seq>:`` so receivers can check exactly."""
        service = self._service()
        receivers = [int(r) for r in request["receivers"]]
        if "payloads" in request:
            payloads = [bytes.fromhex(p) for p in request["payloads"]]
        else:
            size, tag = int(request.get("size", 64)), str(request.get("tag", "t"))
            payloads = []
            for seq in range(int(request.get("count", 1))):
                head = f"{service.bier.bfr_id}:{tag}:{seq}:".encode()
                payloads.append(head + b"x" * max(0, size - len(head)))
        packets = service.send(payloads, receivers, entropy=int(request.get("entropy", 0)))
        return {"ok": True, "messages": len(payloads), "packets": packets}

    async def bier_received(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "received": self._service().take_received(bool(request.get("clear")))}

    def handlers(self) -> dict[Op, Handler]:
        return {Op.BIFT: self.show_bift, Op.BIER_SEND: self.bier_send, Op.BIER_RECEIVED: self.bier_received}
