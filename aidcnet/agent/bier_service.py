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
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aidcnet.agent.bier_dataplane import BierDataplane
from aidcnet.agent.bier_ebpf import start_fast_path
from aidcnet.agent.bier_host import BierHost
from aidcnet.agent.net_bier import NetBierEdge
from aidcnet.bgp.bier_attribute import BierAttribute
from aidcnet.bgp.bier_routes import BgpBirt, BgpPath, bgp_paths, birt_from_bgp, loopback_attribute
from aidcnet.bier.bift import SELF, Bift, LabelKey, build_bifts
from aidcnet.bier.bitstring import bfr_id_to_si_bit
from aidcnet.bier.header import BierProto
from aidcnet.config import Bier
from aidcnet.ipv4 import ROCEV2_PORT, Ipv4DecodeError, UdpDatagram, build_udp, parse_udp

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


# Host-BIER wraps application data as IPv4/UDP from the host's loopback to this SSM group and RoCEv2's
# port, so captures decode as MPLS-in-UDP / BIER / IPv4 / UDP; the UDP source port is the QP.
HOST_BIER_GROUP = "232.1.0.1"
QP_PORT_BASE = 49152


class BierService:
    def __init__(self, bier: Bier, host: bool, loopback: str = "0.0.0.0"):
        self.bier = bier
        self.loopback = loopback
        # bift: bgp starts with only the own row; apply_bgp() fills the BIRT as best paths arrive.
        self.bgp_birt: BgpBirt | None = BgpBirt() if bier.bift == "bgp" else None
        bifts, neighbors, local_labels = build_tables(bier, {} if self.bgp_birt is not None else None)
        self.bifts = bifts
        self.dataplane = BierDataplane(bier.bfr_id, bier.bsl, bier.sub_domain, bifts, neighbors, local_labels)
        # bier.dataplane: ebpf puts the tc fast path in front; None (and ebpf_error) when the kernel refuses.
        self.ebpf, self.ebpf_error = (None, None)
        if bier.dataplane == "ebpf":
            self.ebpf, self.ebpf_error = start_fast_path(self.dataplane)
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
            NetBierEdge(self.dataplane, bier.host_ports, bier.flows, bier.members)
            if bier.host_ports
            else None
        )

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
        self.dataplane.attach(loop)
        if self.ebpf is not None:
            self.ebpf.attach_loop(loop)
        if self.edge is not None:
            self.edge.attach(loop)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
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
        sent = 0
        for i, data in enumerate(payloads):
            flow = (entropy + i) & 0xFFFFF
            datagram = build_udp(
                self.loopback, group, QP_PORT_BASE + (flow & 0x3FFF), ROCEV2_PORT, data, ident=i
            )
            sent += self.host.send(datagram, receivers, entropy=flow)
        return sent

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
        if new.birt == self.bgp_birt.birt:
            self.bgp_birt = new
            return False
        try:
            bifts, _neighbors, local_labels = build_tables(self.bier, new.birt)
            self.dataplane.set_bifts(bifts, local_labels)
            if self.ebpf is not None:
                self.ebpf.write_tables()
        except ValueError as exc:
            # Called from the BGP service: a table we cannot build must not stop BGP; forwarding keeps the
            # previous BIFTs and the problem shows in `aidcnet ctl show bift`.
            log.error("BIER over BGP: BIFTs not rebuilt, keeping the previous ones: %s", exc)
            self.bgp_birt.problems = [*new.problems, f"BIFTs not rebuilt: {exc}"]
            return False
        self.bifts = bifts
        self.bgp_birt = new
        return True

    def counters(self) -> dict[str, int]:
        """The dataplane counters, whichever dataplane forwarded (names as bier_dataplane documents)."""
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
            **(self.ebpf.describe() if self.ebpf is not None else {}),
            "bgp_prefixes": (
                {str(i): p for i, p in sorted(self.bgp_birt.prefixes.items())} if self.bgp_birt else None
            ),
            "bgp_problems": self.bgp_birt.problems if self.bgp_birt else None,
            "sub_domain": self.bier.sub_domain,
            "bsl": self.bier.bsl,
            "label_base": self.bier.label_base,
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
