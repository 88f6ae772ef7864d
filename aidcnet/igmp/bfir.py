"""The BFIR's two sources of receiver sets (docs/igmp.md), each giving a BitString per (S,G) / (*,G).

* :class:`BferMemberships`, receiver-driven: every BFER leaf reports its aggregated memberships to the
  BFIRs over BIER as IGMPv3 reports carrying its BFR-id (the ingress flow overlay of draft-ietf-bier-mld).
  The BFIR keeps one RFC 3376 §6 table per BFER, as a router keeps one per link, so BFER state ages out
  on the same timers as a host's; the BitString for a packet from S to G holds the BFERs that forward it.
* :class:`ProxyReceivers`, source-driven: a source host's Receiver Proxy Report names the whole receiver
  set of its (S,G); each receiver maps to its BFER's BFR-id through the plan's address table, and the
  set replaces what was there (an empty set removes it).  Only host ports the plan allows may send one.

A BitString is ``{SI: bits}`` as :func:`aidcnet.bier.bitstring.bitstrings_from_ids` makes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Final

from aidcnet.bier.bitstring import bitstrings_from_ids
from aidcnet.igmp.codec import IgmpDecodeError, Report
from aidcnet.igmp.extensions import ProxyReport, interpret
from aidcnet.igmp.router import FilterMode, GroupSnapshot, IgmpTimers, MembershipTable

# A lookup key: (S, G) for one source, (None, G) for any source.
Channel = tuple[IPv4Address | None, IPv4Address]


class BferMemberships:
    """Per-BFER IGMPv3 state at a BFIR, fed by the reports BFERs send over BIER."""

    def __init__(self, timers: IgmpTimers, bsl: int, prune: bool = False) -> None:
        """``prune``: a BFER's state-change record (TO_IN/TO_EX/BLOCK) lowers the timers of the sources it
        drops to LMQT, as the querier's specific query would; no query goes over BIER and the BFER, whose
        report is its whole state, would not answer for them.  Off: they run until GMI."""
        self.timers = timers
        self.bsl = bsl
        self.prune = prune
        self.tables: dict[int, MembershipTable] = {}
        self.counters: Counter[str] = Counter()

    def receive(self, report: Report, now: float) -> int:
        """Apply one BFER's report; returns its BFR-id.  A report without a BFR-id cannot be placed."""
        ext = interpret(report.extensions)
        for kind in ext.unknown:
            self.counters[f"unknown-extension-{kind}"] += 1
        if ext.bfr_id is None:
            raise IgmpDecodeError("bad-bfr-id", "a report over BIER carries the sending BFER's BFR-id TLV")
        # No specific queries over BIER yet: the BFERs' own reports and the timers decide.
        table = self.tables.setdefault(ext.bfr_id, MembershipTable(self.timers, querier=self.prune))
        table.receive_report(report, now)  # with prune, the specific queries it returns go nowhere
        self.counters["reports"] += 1
        return ext.bfr_id

    def _snapshots(self, now: float) -> dict[int, dict[IPv4Address, GroupSnapshot]]:
        return {bfr_id: table.snapshot(now) for bfr_id, table in self.tables.items()}

    def bitstring(self, source: IPv4Address, group: IPv4Address, now: float) -> dict[int, int]:
        """The BFERs that want the packet ``source`` sends to ``group`` now."""
        snaps = self._snapshots(now)
        ids = [b for b, s in snaps.items() if group in s and s[group].forwards(source)]
        return bitstrings_from_ids(ids, self.bsl)

    def entries(self, now: float) -> dict[Channel, dict[int, int]]:
        """Every (S,G) some BFER names and every (*,G) some BFER is in EXCLUDE mode for: enough for a
        lookup that tries (S,G) first and falls back to (*,G)."""
        snaps = self._snapshots(now)
        groups = {group for per_group in snaps.values() for group in per_group}
        out: dict[Channel, dict[int, int]] = {}
        for group in groups:
            out.update(self._entries_of(group, {b: s[group] for b, s in snaps.items() if group in s}))
        return out

    def group_entries(self, group: IPv4Address, now: float) -> dict[Channel, dict[int, int]]:
        """:meth:`entries` of one group, at the cost of that group alone (what a change to it needs)."""
        holders = {}
        for bfr_id, table in self.tables.items():
            snap = table.group_snapshot(group, now)
            if snap is not None:
                holders[bfr_id] = snap
        return self._entries_of(group, holders)

    def _entries_of(
        self, group: IPv4Address, holders: Mapping[int, GroupSnapshot]
    ) -> dict[Channel, dict[int, int]]:
        """The entries of ``group`` from the BFERs that hold state for it (BFR-id -> its snapshot)."""
        named: set[IPv4Address] = set()
        for snap in holders.values():
            named |= snap.requested | snap.excluded
        out: dict[Channel, dict[int, int]] = {}
        for source in named:
            ids = [b for b, snap in holders.items() if snap.forwards(source)]
            if ids:
                out[(source, group)] = bitstrings_from_ids(ids, self.bsl)
        any_source = [b for b, snap in holders.items() if snap.mode is FilterMode.EXCLUDE]
        if any_source:
            out[(None, group)] = bitstrings_from_ids(any_source, self.bsl)
        return out

    def changed_groups(self) -> set[IPv4Address]:
        """The groups any BFER's table changed since they were last :meth:`settled`."""
        out: set[IPv4Address] = set()
        for table in self.tables.values():
            out |= table.changed
        return out

    def rescale(self, timers: IgmpTimers, stretch: Callable[[float], float]) -> None:
        """Another time scale (:meth:`~aidcnet.igmp.router.MembershipTable.rescale`), for every BFER."""
        self.timers = timers
        for table in self.tables.values():
            table.rescale(timers, stretch)

    def settled(self, groups: set[IPv4Address]) -> None:
        """``groups`` were re-derived as the tables are now: no longer changed."""
        for table in self.tables.values():
            table.changed -= groups

    def next_change(self, group: IPv4Address, now: float) -> float | None:
        """The next moment a BFER's timers may change ``group``'s entries with no report."""
        moments = [m for t in self.tables.values() if (m := t.next_change(group, now)) is not None]
        return min(moments, default=None)


PROXY_REFUSALS: Final = frozenset({"port-not-allowed", "unknown-receiver", "too-many-channels"})


class ProxyRefused(Exception):
    """A well-formed Receiver Proxy Report the FHR will not install; ``reason`` is a drop-counter key."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in PROXY_REFUSALS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ProxyChange:
    channel: Channel
    bfr_ids: frozenset[int]  # empty: the entry was removed
    previous: frozenset[int]


class ProxyReceivers:
    """The first-hop router's receiver sets from Receiver Proxy Reports."""

    def __init__(
        self,
        bfr_ids: Mapping[IPv4Address, int],
        allowed_ports: Collection[str],
        bsl: int,
        max_channels: int | None = None,
    ) -> None:
        self.bfr_ids = dict(bfr_ids)
        self.allowed_ports = frozenset(allowed_ports)
        self.bsl = bsl
        self.max_channels = max_channels
        self.channels: dict[Channel, frozenset[int]] = {}
        self._by_group: dict[IPv4Address, set[Channel]] = {}
        self.counters: Counter[str] = Counter()

    def receive(self, port: str, report: ProxyReport) -> ProxyChange:
        """Install, replace or (with no receivers) remove the receiver set of one channel.  A refusal is
        counted and raised, and leaves the installed sets as they were."""
        try:
            change = self._install(port, report)
        except ProxyRefused as exc:
            self.counters[f"refused-{exc.reason}"] += 1
            raise
        self.counters["removed" if not change.bfr_ids else "installed"] += 1
        return change

    def _install(self, port: str, report: ProxyReport) -> ProxyChange:
        if port not in self.allowed_ports:
            allowed = ", ".join(sorted(self.allowed_ports)) or "none"
            raise ProxyRefused(
                "port-not-allowed", f"port {port} may not send proxy reports (allowed: {allowed})"
            )
        unknown = [str(r) for r in report.receivers if r not in self.bfr_ids]
        if unknown:
            raise ProxyRefused(
                "unknown-receiver", f"no BFR-id for receiver(s) {', '.join(unknown)} in the address table"
            )
        channel: Channel = (report.source, report.group)
        ids = frozenset(self.bfr_ids[r] for r in report.receivers)
        previous = self.channels.get(channel, frozenset())
        if not ids:
            self.channels.pop(channel, None)
            same = self._by_group.get(report.group, set())
            same.discard(channel)
            if not same:
                self._by_group.pop(report.group, None)
        else:
            full = self.max_channels is not None and len(self.channels) >= self.max_channels
            if channel not in self.channels and full:
                raise ProxyRefused("too-many-channels", f"{self.max_channels} channels installed already")
            self.channels[channel] = ids
            self._by_group.setdefault(report.group, set()).add(channel)
        return ProxyChange(channel, ids, previous)

    def channels_of(self, group: IPv4Address) -> dict[Channel, frozenset[int]]:
        """The installed channels of one group."""
        return {ch: self.channels[ch] for ch in self._by_group.get(group, ())}

    def bitstring(self, source: IPv4Address, group: IPv4Address) -> dict[int, int]:
        """(S,G) if a report named it, else (*,G), else nothing."""
        ids: Iterable[int] = self.channels.get((source, group), self.channels.get((None, group), ()))
        return bitstrings_from_ids(ids, self.bsl)
