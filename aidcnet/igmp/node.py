"""One leaf's whole IGMP logic (docs/igmp.md), pure: the agent's IGMP service only moves bytes and
reads the clock.  Every call takes ``now`` and returns what to send.

A leaf is at once
* the router of its host ports (one :class:`~aidcnet.igmp.membership.Interface` each),
* a BFER telling its BFIRs its aggregated memberships over BIER (:mod:`aidcnet.igmp.leaf`),
* a BFIR keeping every BFER's state (:class:`~aidcnet.igmp.bfir.BferMemberships`),
* a first-hop router taking Receiver Proxy Reports (:class:`~aidcnet.igmp.bfir.ProxyReceivers`).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import Any, Final

from aidcnet.bier.edge import Ipv4Error, parse_ipv4
from aidcnet.igmp.bfir import BferMemberships, ProxyReceivers, ProxyRefused
from aidcnet.igmp.codec import IgmpDecodeError, Leave, LegacyReport, Query, Report, decode, encode
from aidcnet.igmp.extensions import interpret, proxy_report
from aidcnet.igmp.leaf import (
    Flow,
    LeafState,
    aggregate,
    bfr_ids,
    change_report,
    compose_flows,
    member_ports,
    split_report,
    state_report,
)
from aidcnet.igmp.membership import IgmpTimers, Interface
from aidcnet.ipv4 import checksum16

IPPROTO_IGMP: Final = 2
ALL_V3_ROUTERS: Final = IPv4Address("224.0.0.22")
ALL_SYSTEMS: Final = IPv4Address("224.0.0.1")
ROUTER_ALERT: Final = b"\x94\x04\x00\x00"  # RFC 2113, as RFC 3376 §4 asks
# Records per report over BIER: 8-octet header + records of 8 + 4 x sources; 64 empty-source records
# is 520 octets, far below any fabric MTU with BIER's 40-octet overhead.
MAX_RECORDS: Final = 64


def ipv4_igmp(src: IPv4Address, dst: IPv4Address, igmp: bytes) -> bytes:
    """An IPv4 packet carrying ``igmp``: TTL 1, Router Alert (RFC 3376 §4)."""
    ihl = 24
    header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s", 0x46, 0xC0, ihl + len(igmp), 0, 0, 1, IPPROTO_IGMP, 0, src.packed, dst.packed
        )
    )
    header += ROUTER_ALERT
    struct.pack_into("!H", header, 10, checksum16(bytes(header)))
    return bytes(header) + igmp


@dataclass
class PortConfig:
    name: str
    address: IPv4Address
    querier: bool = True
    proxy: bool = False


@dataclass
class Sends:
    """What one call asks the shell to send."""

    queries: list[tuple[str, Query]] = field(default_factory=list)  # (port, query) to 224.0.0.1 / G
    over_bier: list[bytes] = field(default_factory=list)  # IPv4 packets to impose for the BFIRs
    flows_changed: bool = False


class IgmpLeaf:
    def __init__(
        self,
        ports: Iterable[PortConfig],
        timers: IgmpTimers,
        bfr_id: int,
        bsl: int,
        loopback: IPv4Address,
        bfirs: Iterable[int],
        receivers: Mapping[IPv4Address, int],
        modes: Iterable[str],
        static_flows: Iterable[object],
        now: float,
        max_channels: int = 4096,
        max_groups: int = 4096,
    ) -> None:
        self.ports = {p.name: p for p in ports}
        self.timers = timers
        self.bfr_id = bfr_id
        self.bsl = bsl
        self.loopback = loopback
        self.bfirs = tuple(sorted(set(bfirs)))
        self.modes = tuple(modes)
        self.static_flows = list(static_flows)
        self.max_groups = max_groups
        self.links = {name: Interface(p.address, timers, now) for name, p in self.ports.items()}
        for name, p in self.ports.items():
            if not p.querier:
                # Listen only: never query, never take over (RFC 3376 leaves a router free not to query).
                self.links[name].table.querier = False
                self.links[name].other_querier_until = float("inf")
        self.bfers = BferMemberships(timers, bsl, prune=True)
        proxy_ports = [n for n, p in self.ports.items() if p.proxy]
        self.proxy = ProxyReceivers(receivers, proxy_ports, bsl, max_channels)
        self.counters: Counter[str] = Counter()
        self.state: LeafState = {}
        self._next_refresh = now + timers.qi
        self._flows: list[Flow] = self._compose(now)

    # -- inputs -----------------------------------------------------------------------------------
    def receive(self, port: str, packet: bytes, now: float) -> Sends:
        """One IPv4 packet carrying IGMP heard on a host port (what a raw IGMP socket returns)."""
        out = Sends()
        self.counters["rx"] += 1
        # Control overhead is counted, never estimated (the replay's membership modes report it).
        self.counters["rx-bytes"] += len(packet)
        try:
            info = parse_ipv4(packet)
        except Ipv4Error as exc:
            self._drop(port, f"ip-{exc.reason}")
            return out
        if info.proto != IPPROTO_IGMP:
            self._drop(port, "not-igmp")
            return out
        src = IPv4Address(info.src)
        try:
            msg = decode(packet[info.ihl : info.total_length])
            proxy = proxy_report(msg) if isinstance(msg, Report) else None
        except IgmpDecodeError as exc:
            self._drop(port, exc.reason)
            return out
        if isinstance(msg, Report):
            for kind in interpret(msg.extensions).unknown:
                self._count(port, f"unknown-extension-{kind}")
        if proxy is not None:
            self._count(port, "proxy-reports")
            try:
                change = self.proxy.receive(port, proxy)
            except ProxyRefused as exc:
                self._drop(port, f"proxy-{exc.reason}")
                return out
            out.flows_changed = change.bfr_ids != change.previous
            if out.flows_changed:
                self._flows = self._compose(now)
            return out
        if src == self.ports[port].address:
            return out  # our own query looped back
        link = self.links[port]
        if isinstance(msg, Report | LegacyReport | Leave):
            self._count(
                port,
                "reports"
                if isinstance(msg, Report)
                else f"v{getattr(msg, 'version', 2)}-{type(msg).__name__.lower()}",
            )
            new_groups = {r.group for r in msg.records} if isinstance(msg, Report) else {msg.group}
            if len(new_groups | link.table.groups.keys()) > self.max_groups:
                self._drop(port, "too-many-groups")
                return out
        else:
            self._count(port, "queries-heard")
        before = link.is_querier
        out.queries += [(port, q) for q in link.receive(msg, src, now)]
        if not self.ports[port].querier:  # listen only: hearing a querier must not make us one later
            link.other_querier_until = float("inf")
        if before and not link.is_querier:
            self._count(port, "querier-lost")
        self._after(now, out)
        return out

    def receive_over_bier(self, packet: bytes, now: float) -> Sends:
        """A BFER's report delivered to us over BIER (the IPv4 packet inside, Proto 4)."""
        out = Sends()
        try:
            info = parse_ipv4(packet)
            msg = decode(packet[info.ihl : info.total_length])
            if not isinstance(msg, Report):
                raise IgmpDecodeError("unknown-type", f"{type(msg).__name__} over BIER; only reports travel")
            bfr = self.bfers.receive(msg, now)
        except Ipv4Error as exc:
            self.counters[f"bier-drop.ip-{exc.reason}"] += 1
            return out
        except IgmpDecodeError as exc:
            self.counters[f"bier-drop.{exc.reason}"] += 1
            return out
        self.counters["bier-reports-in"] += 1
        self.counters[f"bier-reports-in.bfer-{bfr}"] += 1
        self._after(now, out)
        return out

    def tick(self, now: float) -> Sends:
        out = Sends()
        for name, link in self.links.items():
            out.queries += [(name, q) for q in link.tick(now)]
        if now >= self._next_refresh:
            self._next_refresh = now + self.timers.qi
            report = state_report(self.state, self.bfr_id)
            if report is not None:
                out.over_bier += self._packets(report)
                self.counters["bier-refreshes"] += 1
        self._after(now, out)
        return out

    def next_deadline(self, now: float) -> float:
        """When :meth:`tick` has work: queries, the refresh, or the next timer that changes state."""
        moments = [link.next_deadline() for link in self.links.values()]
        moments.append(self._next_refresh)
        moments.append(self._next_expiry(now))
        return min(moments)

    # -- state ------------------------------------------------------------------------------------
    def _next_expiry(self, now: float) -> float:
        """The soonest timer (port or BFER tables) still running: when the flows or the state may
        change without any packet."""
        soonest = float("inf")
        tables = [link.table for link in self.links.values()] + list(self.bfers.tables.values())
        for table in tables:
            for snap in table.snapshot(now).values():
                timers = [*snap.source_timers.values(), snap.group_timer or 0.0]
                for t in timers:
                    if t > 0:
                        soonest = min(soonest, now + t)
        return soonest

    def _after(self, now: float, out: Sends) -> None:
        """Re-derive the leaf's state and flows; report a change to the BFIRs."""
        state = aggregate(link.table.snapshot(now) for link in self.links.values())
        if state != self.state:
            report = change_report(self.state, state, self.bfr_id)
            self.state = state
            if report is not None:
                out.over_bier += self._packets(report)
                self.counters["bier-changes"] += 1
        flows = self._compose(now)
        if flows != self._flows:
            self._flows = flows
            out.flows_changed = True

    def _packets(self, report: Report) -> list[bytes]:
        if not self.bfirs or "igmp" not in self.modes:
            return []  # no BFIR listens: the overlay's control bytes would be waste
        packets = [
            ipv4_igmp(self.loopback, ALL_V3_ROUTERS, encode(r)) for r in split_report(report, MAX_RECORDS)
        ]
        self.counters["bier-reports-out"] += len(packets)
        self.counters["bier-report-bytes-out"] += sum(len(p) for p in packets)
        return packets

    def _compose(self, now: float) -> list[Flow]:
        igmp = {ch: bfr_ids(bits, self.bsl) for ch, bits in self.bfers.entries(now).items()}
        proxy = {ch: sorted(ids) for ch, ids in self.proxy.channels.items()}
        return compose_flows(self.modes, self.static_flows, igmp, proxy)

    def flows(self) -> list[Flow]:
        return list(self._flows)

    def members(self, now: float) -> dict[IPv4Address, list[str]]:
        return member_ports({name: link.table.snapshot(now) for name, link in self.links.items()})

    def _count(self, port: str, name: str) -> None:
        self.counters[name] += 1
        self.counters[f"port.{port}.{name}"] += 1

    def _drop(self, port: str, reason: str) -> None:
        self._count(port, "dropped")
        self._count(port, f"dropped.{reason}")

    # -- status -----------------------------------------------------------------------------------
    def status(self, now: float) -> dict[str, Any]:
        ports = {}
        for name, link in self.links.items():
            ports[name] = {
                "address": str(self.ports[name].address),
                "querier_configured": self.ports[name].querier,
                "proxy_allowed": self.ports[name].proxy,
                "querier": link.is_querier,
                "other_querier": str(link.other_querier) if link.other_querier else None,
                "groups": _groups_json(link.table.snapshot(now)),
            }
        return {
            "bfr_id": self.bfr_id,
            "bfirs": list(self.bfirs),
            "groups_from": list(self.modes),
            "timers": self.timers.model_dump(),
            "ports": ports,
            "leaf_state": {
                str(g): {"mode": m.value, "sources": sorted(map(str, s))}
                for g, (m, s) in sorted(self.state.items())
            },
            "bfers": {str(b): _groups_json(t.snapshot(now)) for b, t in sorted(self.bfers.tables.items())},
            "proxy": [
                {"source": str(s) if s else None, "group": str(g), "bfers": sorted(ids)}
                for (s, g), ids in sorted(
                    self.proxy.channels.items(), key=lambda kv: (kv[0][1], kv[0][0] or IPv4Address(0))
                )
            ],
            "flows": [
                {"source": str(f.source) if f.source else None, "group": str(f.group), "bfers": list(f.bfers)}
                for f in self._flows
            ],
            "counters": self.all_counters(),
        }

    def all_counters(self) -> dict[str, int]:
        out = dict(self.counters)
        for name, link in self.links.items():
            for k, v in link.table.counters.items():
                out[f"port.{name}.{k}"] = v
        for k, v in self.bfers.counters.items():
            out[f"bfir.{k}"] = v
        for k, v in self.proxy.counters.items():
            out[f"proxy.{k}"] = v
        return out


def _groups_json(snaps: Mapping[IPv4Address, Any]) -> dict[str, Any]:
    return {
        str(g): {
            "mode": s.mode.value,
            "requested": sorted(map(str, s.requested)),
            "excluded": sorted(map(str, s.excluded)),
            "group_timer": None if s.group_timer is None else round(s.group_timer, 3),
        }
        for g, s in sorted(snaps.items())
    }
