"""Join-path stamps (docs/igmp.md, "Join-path stamps"), pure: the shell passes the wall nanoseconds.

Where a receiver-driven join spends its time, as the agents saw it:

* a BFER leaf: when it **heard** a host's join or leave of (S,G) on a host port, and when it **sent** the
  overlay report that carried the change to its BFIRs (:class:`LeafStamps`);
* a BFIR: when it **received** a BFER's state-change report for G, and when the BitString of (S,G) with
  that BFER **installed** (added) or left it (removed) (:class:`BfirStamps`).

The replay (orchestrator/experiment/join_path.py) joins them with the hosts' own join times and first
packets into fabric transit and node processing. Clocks are CLOCK_REALTIME: the containers share the
host's. Each recorder keeps at most ``limit`` rows and counts the rest, so a long run cannot grow an
agent without bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any, Final

from aidcnet.igmp.codec import GroupRecord, RecordType

DEFAULT_LIMIT: Final = 200_000
# Current-state records are refreshes and answers to queries, not a change of membership.
_CURRENT_STATE: Final = frozenset({RecordType.MODE_IS_INCLUDE, RecordType.MODE_IS_EXCLUDE})
_JOINS: Final = frozenset({RecordType.ALLOW_NEW_SOURCES, RecordType.CHANGE_TO_INCLUDE_MODE})


def changes(record: GroupRecord) -> list[tuple[IPv4Address | None, bool]]:
    """The (source, join?) a host's state-change record stands for; source None is any source (*,G).
    ALLOW(A) and TO_IN(A) join A, TO_IN({}) leaves G, BLOCK(A) leaves A, TO_EX(X) joins (*,G);
    current-state records (IS_IN, IS_EX) and unknown types stand for no change."""
    kind = record.record_type
    if kind in _CURRENT_STATE or not record.known:
        return []
    if kind == RecordType.CHANGE_TO_EXCLUDE_MODE:
        return [(None, True)]
    if kind == RecordType.CHANGE_TO_INCLUDE_MODE and not record.sources:
        return [(None, False)]
    join = kind in _JOINS
    return [(s, join) for s in record.sources]


@dataclass
class LeafStamp:
    group: IPv4Address
    source: IPv4Address | None
    join: bool
    heard_ns: int
    sent_ns: int | None = None  # None: no overlay report followed (the leaf's state did not change)

    def row(self) -> list[Any]:
        return [_str(self.source), str(self.group), self.join, self.heard_ns, self.sent_ns]


class LeafStamps:
    """A BFER leaf's heard -> sent stamps. The leaf settles after each packet or burst: the change report
    of that settle names groups (its records carry each group's whole new state) and completes the stamps
    of those groups heard since the last settle; the others changed nothing the BFIRs did not know (another
    port or host had the channel already) and keep sent None."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.rows: list[LeafStamp] = []
        self.dropped = 0
        self._pending: dict[IPv4Address, list[LeafStamp]] = {}

    def heard(self, records: Iterable[GroupRecord], ns: int) -> None:
        for record in records:
            for source, join in changes(record):
                if len(self.rows) >= self.limit:
                    self.dropped += 1
                    continue
                stamp = LeafStamp(record.group, source, join, ns)
                self.rows.append(stamp)
                self._pending.setdefault(record.group, []).append(stamp)

    def settled(self, reported: Iterable[GroupRecord], ns: int) -> None:
        """The leaf settled and sent ``reported`` (state-change records, maybe none) at ``ns``."""
        for record in reported:
            for stamp in self._pending.pop(record.group, []):
                stamp.sent_ns = ns
        self._pending.clear()

    def since(self, ns: int) -> list[list[Any]]:
        """``[source or None, group, join, heard ns, sent ns or None]`` heard at or after ``ns``."""
        return [s.row() for s in self.rows if s.heard_ns >= ns]


@dataclass
class BfirStamp:
    bfer: int
    group: IPv4Address
    source: IPv4Address | None
    join: bool  # True: the BFER entered the BitString of (source, group); False: it left it
    received_ns: int
    installed_ns: int

    def row(self) -> list[Any]:
        return [self.bfer, _str(self.source), str(self.group), self.join, self.received_ns, self.installed_ns]


Flows = Mapping[tuple[IPv4Address | None, IPv4Address], Iterable[int]]


def flow_changes(old: Flows, new: Flows) -> list[tuple[IPv4Address | None, IPv4Address, int, bool]]:
    """(source, group, BFR-id, added?) for every BFER that entered or left a channel's BitString."""
    out = []
    for channel in sorted(old.keys() | new.keys(), key=lambda c: (c[1], c[0] or IPv4Address(0))):
        before, after = set(old.get(channel, ())), set(new.get(channel, ()))
        source, group = channel
        out += [(source, group, b, True) for b in sorted(after - before)]
        out += [(source, group, b, False) for b in sorted(before - after)]
    return out


class BfirStamps:
    """A BFIR's received -> installed stamps. A change of (S,G)'s BitString in BFER b completes the
    reports b sent for G since the last such change (the earliest one is the stamp's received). A first-hop
    router stamps a Receiver Proxy Report the same way, one record per BFER it names or unnames
    (:func:`proxy_records`)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.rows: list[BfirStamp] = []
        self.dropped = 0
        self._pending: dict[tuple[int, IPv4Address], int] = {}

    def received(self, reports: Iterable[tuple[int, GroupRecord]], ns: int) -> None:
        for bfer, record in reports:
            if record.record_type in _CURRENT_STATE or not record.known:
                continue
            self._pending.setdefault((bfer, record.group), ns)

    def installed(self, old: Flows, new: Flows, ns: int) -> None:
        done: set[tuple[int, IPv4Address]] = set()
        for source, group, bfer, added in flow_changes(old, new):
            received = self._pending.get((bfer, group))
            if received is None:
                continue  # not from a report we saw (static flows, a proxy report, a timer of its own)
            done.add((bfer, group))
            if len(self.rows) >= self.limit:
                self.dropped += 1
                continue
            self.rows.append(BfirStamp(bfer, group, source, added, received, ns))
        for key in done:
            del self._pending[key]

    def since(self, ns: int) -> list[list[Any]]:
        """``[BFR-id, source or None, group, join, received ns, installed ns]`` received from ``ns`` on."""
        return [s.row() for s in self.rows if s.received_ns >= ns]


def proxy_records(
    group: IPv4Address, source: IPv4Address | None, bfers: Iterable[int]
) -> list[tuple[int, GroupRecord]]:
    """A Receiver Proxy Report as :meth:`BfirStamps.received` takes it: a state change of (S,G) from
    every BFER whose membership it changed."""
    record = GroupRecord(RecordType.CHANGE_TO_INCLUDE_MODE, group, () if source is None else (source,))
    return [(b, record) for b in sorted(set(bfers))]


def _str(address: IPv4Address | None) -> str | None:
    return None if address is None else str(address)
