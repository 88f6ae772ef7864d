"""One leaf's whole IGMP logic (docs/igmp.md), pure: the agent's IGMP service only moves bytes and
reads the clock.  Every call takes ``now`` and returns what to send, and what changed in the flows and
member ports (the shell writes only that).

A leaf is at once
* the router of its host ports (one :class:`~aidcnet.igmp.router.Interface` each),
* a BFER telling its BFIRs its aggregated memberships over BIER (:mod:`aidcnet.igmp.leaf`),
* a BFIR keeping every BFER's state (:class:`~aidcnet.igmp.bfir.BferMemberships`),
* a first-hop router taking Receiver Proxy Reports (:class:`~aidcnet.igmp.bfir.ProxyReceivers`).

Incremental: a message re-derives only the groups it touched (the tables say which changed), and a timer
only its group when it runs out (a timeline of each group's next change), so a report costs its records,
not the leaf's whole state. What follows from all groups at once (:func:`~aidcnet.igmp.leaf.aggregate`,
:func:`~aidcnet.igmp.leaf.compose_flows`, :func:`~aidcnet.igmp.leaf.member_ports` over full snapshots) is
the reference the incremental state must always equal (tests/unit/aidcnet/igmp/test_igmp_incremental.py).
"""

from __future__ import annotations

import heapq
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import Any, Final

from aidcnet.bier.edge import Ipv4Error, parse_ipv4
from aidcnet.igmp.bfir import BferMemberships, Channel, ProxyReceivers, ProxyRefused
from aidcnet.igmp.codec import IgmpDecodeError, Leave, LegacyReport, Query, Report, decode, encode
from aidcnet.igmp.extensions import interpret, proxy_report
from aidcnet.igmp.leaf import (
    Flow,
    LeafState,
    aggregate,
    bfr_ids,
    change_report,
    compose_channels,
    flows_of,
    member_ports,
    split_report,
    state_report,
    static_channels,
)
from aidcnet.igmp.router import FilterMode, IgmpTimers, Interface, stretcher
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


# The two sides a group's state is derived on: its host ports (the leaf's own state and member ports) and
# the BFERs' tables with the proxy channels (the flows).
PORTS: Final = 0
FLOWS: Final = 1


@dataclass
class Sends:
    """What one call asks the shell to send, and what it changed: per channel its new BFR-ids (None:
    gone), per group its new member ports (None: none)."""

    queries: list[tuple[str, Query]] = field(default_factory=list)  # (port, query) to 224.0.0.1 / G
    over_bier: list[bytes] = field(default_factory=list)  # IPv4 packets to impose for the BFIRs
    flow_changes: dict[Channel, tuple[int, ...] | None] = field(default_factory=dict)
    member_changes: dict[IPv4Address, tuple[str, ...] | None] = field(default_factory=dict)

    @property
    def flows_changed(self) -> bool:
        return bool(self.flow_changes)

    def add(self, later: Sends) -> None:
        """``later``'s sends after these; its changes over these."""
        self.queries += later.queries
        self.over_bier += later.over_bier
        self.flow_changes.update(later.flow_changes)
        self.member_changes.update(later.member_changes)


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
        self._static: dict[IPv4Address, dict[Channel, frozenset[int]]] = {}
        for ch, ids in static_channels(self.static_flows).items():
            self._static.setdefault(ch[1], {})[ch] = ids
        # The derived state: flows per channel (and the channels of each group), member ports per group.
        self._channels: dict[Channel, tuple[int, ...]] = {}
        self._group_channels: dict[IPv4Address, set[Channel]] = {}
        self._members: dict[IPv4Address, tuple[str, ...]] = {}
        self._flow_list: list[Flow] | None = None
        # Groups to re-derive (beyond what the tables say changed): proxy channels, static flows.
        self._dirty: tuple[set[IPv4Address], set[IPv4Address]] = (set(), set(self._static))
        # (moment, side, group): when a group's timers may change it with no message; _scheduled keeps
        # each (side, group)'s one live moment (older heap entries are stale).
        self._timeline: list[tuple[float, int, IPv4Address]] = []
        self._scheduled: dict[tuple[int, IPv4Address], float] = {}
        self._derive(now, Sends())

    # -- inputs -----------------------------------------------------------------------------------
    def receive(self, port: str, packet: bytes, now: float, derive: bool = True) -> Sends:
        """One IPv4 packet carrying IGMP heard on a host port (what a raw IGMP socket returns). With
        ``derive`` False only the tables change: a later :meth:`derive` says what follows from all the
        messages taken so (a burst read at once costs one derivation per group, not per message)."""
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
            if change.bfr_ids != change.previous:
                self._dirty[FLOWS].add(change.channel[1])
            if derive:
                self._derive(now, out)
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
        if derive:
            self._derive(now, out)
        return out

    def receive_over_bier(self, packet: bytes, now: float, derive: bool = True) -> Sends:
        """A BFER's report delivered to us over BIER (the IPv4 packet inside, Proto 4); ``derive`` as
        for :meth:`receive`."""
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
        if derive:
            self._derive(now, out)
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
        self._derive(now, out)
        return out

    def rescale(self, timers: IgmpTimers, now: float) -> Sends:
        """The lab's time scale changed: ``timers`` are the same fabric values on the new wall clock.
        Every membership, channel and querier role stays; what is left of each running timer is
        stretched, so it runs out at the same fabric moment (a router does not forget its state
        because the emulation slows down). The timeline is made again from the stretched timers."""
        stretch = stretcher(timers.clock.factor / self.timers.clock.factor, now)
        self.timers = timers
        for link in self.links.values():
            link.rescale(timers, stretch)
        self.bfers.rescale(timers, stretch)
        self._next_refresh = stretch(self._next_refresh)
        self._timeline, self._scheduled = [], {}
        # The tables say all their groups changed; static and proxy channels are derived with them.
        self._dirty = (set(), set(self._static) | {group for _source, group in self.proxy.channels})
        return self.derive(now)

    def derive(self, now: float) -> Sends:
        """What the messages taken with ``derive=False`` changed: the report to the BFIRs, the flows and
        the member ports."""
        out = Sends()
        self._derive(now, out)
        return out

    def next_deadline(self, now: float) -> float:
        """When :meth:`tick` has work: queries, the refresh, or the next timer that changes state."""
        moments = [link.next_deadline() for link in self.links.values()]
        moments.append(self._next_refresh)
        timeline = self._timeline
        while timeline and self._scheduled.get((timeline[0][1], timeline[0][2])) != timeline[0][0]:
            heapq.heappop(timeline)  # stale: the group was re-derived and rescheduled since
        if timeline:
            moments.append(timeline[0][0])
        return min(moments)

    # -- state ------------------------------------------------------------------------------------
    def _schedule(self, side: int, group: IPv4Address, moment: float | None) -> None:
        key = (side, group)
        if moment is None:
            self._scheduled.pop(key, None)
        elif self._scheduled.get(key) != moment:
            self._scheduled[key] = moment
            heapq.heappush(self._timeline, (moment, side, group))

    def _to_derive(self, now: float) -> tuple[set[IPv4Address], set[IPv4Address]]:
        """The groups to re-derive on each side: touched by a message, or with a timer run out by now."""
        ports, flows = self._dirty
        self._dirty = (set(), set())
        for link in self.links.values():
            ports |= link.table.changed
        flows |= self.bfers.changed_groups()
        timeline = self._timeline
        while timeline and timeline[0][0] <= now:
            moment, side, group = heapq.heappop(timeline)
            if self._scheduled.get((side, group)) == moment:
                del self._scheduled[(side, group)]
                (ports if side == PORTS else flows).add(group)
        return ports, flows

    def _derive(self, now: float, out: Sends) -> None:
        """Re-derive the groups that changed: the leaf's state (a change goes to the BFIRs), its member
        ports and its flows."""
        ports, flows = self._to_derive(now)
        old: LeafState = {}
        new: LeafState = {}
        for group in sorted(ports):
            self._derive_port_group(group, now, old, new, out)
        for link in self.links.values():
            link.table.changed -= ports
        report = change_report(old, new, self.bfr_id)
        if report is not None:
            out.over_bier += self._packets(report)
            self.counters["bier-changes"] += 1
        for group in sorted(flows):
            self._derive_flows(group, now, out)
        self.bfers.settled(flows)

    def _derive_port_group(
        self, group: IPv4Address, now: float, old: LeafState, new: LeafState, out: Sends
    ) -> None:
        """One group on the host ports: the leaf's merged state of it (RFC 3376 §3.2) and its member
        ports; a state that changed goes into ``old`` / ``new`` for the change report."""
        snaps = {}
        for name, link in self.links.items():
            snap = link.table.group_snapshot(group, now)
            if snap is not None:
                snaps[name] = snap
        merged = aggregate({group: snap} for snap in snaps.values()).get(group)
        before = self.state.get(group)
        if merged != before:
            if before is not None:
                old[group] = before
            if merged is None:
                del self.state[group]
            else:
                self.state[group] = new[group] = merged
        members = tuple(
            n for n, snap in sorted(snaps.items()) if snap.mode is FilterMode.EXCLUDE or snap.requested
        )
        if members != self._members.get(group, ()):
            if members:
                self._members[group] = members
            else:
                del self._members[group]
            out.member_changes[group] = members or None
        moments = [m for link in self.links.values() if (m := link.table.next_change(group, now)) is not None]
        self._schedule(PORTS, group, min(moments, default=None))

    def _derive_flows(self, group: IPv4Address, now: float, out: Sends) -> None:
        """One group's channels from the static flows, the BFERs' reports and the proxy reports."""
        igmp = {ch: bfr_ids(bits, self.bsl) for ch, bits in self.bfers.group_entries(group, now).items()}
        channels = compose_channels(
            self.modes, self._static.get(group, {}), igmp, self.proxy.channels_of(group)
        )
        for ch in self._group_channels.pop(group, set()) - channels.keys():
            del self._channels[ch]
            out.flow_changes[ch] = None
            self._flow_list = None
        for ch, ids in channels.items():
            if self._channels.get(ch) != ids:
                self._channels[ch] = out.flow_changes[ch] = ids
                self._flow_list = None
        if channels:
            self._group_channels[group] = set(channels)
        self._schedule(FLOWS, group, self.bfers.next_change(group, now))

    def _packets(self, report: Report) -> list[bytes]:
        if not self.bfirs or "igmp" not in self.modes:
            return []  # no BFIR listens: the overlay's control bytes would be waste
        packets = [
            ipv4_igmp(self.loopback, ALL_V3_ROUTERS, encode(r)) for r in split_report(report, MAX_RECORDS)
        ]
        self.counters["bier-reports-out"] += len(packets)
        self.counters["bier-report-bytes-out"] += sum(len(p) for p in packets)
        return packets

    def flows(self) -> list[Flow]:
        """The flows in force, as of the last call that derived them."""
        if self._flow_list is None:
            self._flow_list = flows_of(self._channels)
        return list(self._flow_list)

    def member_map(self) -> dict[IPv4Address, tuple[str, ...]]:
        """The member ports in force per group, as of the last call that derived them."""
        return dict(self._members)

    def members(self, now: float) -> dict[IPv4Address, list[str]]:
        """The member ports from the whole tables at ``now`` (the reference :meth:`member_map` follows)."""
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
                for f in self.flows()
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
