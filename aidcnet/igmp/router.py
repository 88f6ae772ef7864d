"""The IGMPv3 router side, RFC 3376 §6: per-group filter mode, source timers, group timer, the §6.4
state tables, group- and group-and-source-specific queries (§6.6.3), querier election (§6.6.2), the
timer values of §8 and the compatibility with IGMPv1/v2 hosts of §7.3.2.

Time is always a parameter (``now``, seconds on any monotonic clock the caller keeps); nothing here reads a
clock or sends a packet.  A timer is held as the moment it runs out, so "the timer is 0" is "its moment is
not after now" and the forwarding state at any ``now`` follows from the moments alone; :meth:`tick` only
has to send what is due.

Timers in :class:`IgmpTimers` are fabric seconds.  With a lab time scale the emulation runs ``scale``
times slower (docs/time-and-fidelity.md), so every timer runs ``scale`` times longer on the wall clock,
and the Max Resp Time / QQIC sent on the wire are the scaled ones: the kernel receivers that answer our
queries count them on the wall clock too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from ipaddress import IPv4Address, IPv4Network
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aidcnet.igmp.codec import (
    MAX_CODE_VALUE,
    MAX_QRV,
    GroupRecord,
    Leave,
    LegacyReport,
    Message,
    Query,
    RecordType,
    Report,
)
from aidcnet.timescale import TimeScale

_NEVER: Final = float("-inf")
# 224.0.0.0/24 never leaves its link (RFC 5771 §4): a router keeps no forwarding state for it, though
# hosts report such groups (Linux does for all but 224.0.0.1; FRR's pimd joins 224.0.0.13 and 224.0.0.22).
LINK_LOCAL: Final = IPv4Network("224.0.0.0/24")
# Records whose sources are added with (B)=GMI in both modes (§6.4.1, §6.4.2).
_ADDS: Final = frozenset(
    {RecordType.MODE_IS_INCLUDE, RecordType.ALLOW_NEW_SOURCES, RecordType.CHANGE_TO_INCLUDE_MODE}
)
Sources = frozenset[IPv4Address]


# The timers the 8-bit codes of a query carry (RFC 3376 §4.1.1 Max Resp Code in tenths of a second,
# §4.1.7 QQIC in seconds): the field and the code's units per second.
WIRE_TIMERS: Final = (
    ("query_response_interval", 10),
    ("last_member_query_interval", 10),
    ("query_interval", 1),
)


def wire_scale_range(fabric_s: Mapping[str, float]) -> tuple[float, float]:
    """The time scales at which every :data:`WIRE_TIMERS` timer, given in fabric seconds, fits its code on
    the wall clock: (lowest, highest); none does when lowest > highest."""
    lowest = max(1 / (unit * fabric_s[name]) for name, unit in WIRE_TIMERS)
    highest = min(MAX_CODE_VALUE / (unit * fabric_s[name]) for name, unit in WIRE_TIMERS)
    return lowest, highest


class IgmpTimers(BaseModel):
    """RFC 3376 §8 values, in fabric seconds, with the RFC's defaults; derived ones follow §8."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    robustness: int = Field(2, ge=1, le=MAX_QRV, description="§8.1; 1 tolerates no loss")
    query_interval: float = Field(125.0, gt=0, description="§8.2, seconds between General Queries")
    query_response_interval: float = Field(10.0, gt=0, description="§8.3, General Query Max Resp")
    last_member_query_interval: float = Field(1.0, gt=0, description="§8.8, specific query Max Resp")
    last_member_query_count: int | None = Field(None, ge=1, description="§8.9, default: robustness")
    startup_query_interval: float | None = Field(None, gt=0, description="§8.6, default: query_interval / 4")
    startup_query_count: int | None = Field(None, ge=1, description="§8.7, default: robustness")
    time_scale: int | None = Field(None, ge=1, description="the lab's time.scale; None: unscaled")

    @model_validator(mode="after")
    def _fits_the_wire(self) -> IgmpTimers:
        if self.query_response_interval >= self.query_interval:
            raise ValueError(
                f"query_response_interval {self.query_response_interval} s must be below query_interval "
                f"{self.query_interval} s (RFC 3376 §8.3)"
            )
        for name, unit in WIRE_TIMERS:
            seconds = self.clock.wall_s(getattr(self, name))
            wire = seconds * unit
            if not 1 <= wire <= MAX_CODE_VALUE:
                raise ValueError(
                    f"{name} is {seconds:g} s on the wall clock (time_scale {self.clock.factor}): the 8-bit "
                    f"code carries {1 / unit:g}..{MAX_CODE_VALUE / unit:g} s; change {name} or time_scale"
                )
        return self

    @property
    def clock(self) -> TimeScale:
        return TimeScale.of(self.time_scale)

    # Wall-clock values, the only ones the state machine uses.
    @property
    def qi(self) -> float:
        return self.clock.wall_s(self.query_interval)

    @property
    def qri(self) -> float:
        return self.clock.wall_s(self.query_response_interval)

    @property
    def lmqi(self) -> float:
        return self.clock.wall_s(self.last_member_query_interval)

    @property
    def sqi(self) -> float:
        return self.clock.wall_s(self.startup_query_interval or self.query_interval / 4)


class FilterMode(Enum):
    INCLUDE = "include"
    EXCLUDE = "exclude"


@dataclass
class _Group:
    mode: FilterMode = FilterMode.INCLUDE
    group_timer: float = _NEVER  # runs in EXCLUDE only (§6.2.2)
    sources: dict[IPv4Address, float] = field(default_factory=dict)  # source -> moment its timer runs out
    v1_host_until: float = _NEVER  # Older Host Present timers (§7.3.2)
    v2_host_until: float = _NEVER
    group_queries_left: int = 0  # retransmission state (§6.6.3)
    source_queries_left: dict[IPv4Address, int] = field(default_factory=dict)
    next_query_at: float = _NEVER

    def requested(self, now: float) -> Sources:
        """INCLUDE: the include list; EXCLUDE: X, the sources still asked for (timer > 0)."""
        return frozenset(s for s, t in self.sources.items() if t > now)

    def excluded(self, now: float) -> Sources:
        """EXCLUDE: Y, the sources no one asks for (timer 0)."""
        if self.mode is FilterMode.INCLUDE:
            return frozenset()
        return frozenset(s for s, t in self.sources.items() if t <= now)

    def pending(self) -> bool:
        return self.group_queries_left > 0 or any(self.source_queries_left.values())

    def rescale(self, stretch: Callable[[float], float]) -> None:
        """Every moment of this group through ``stretch`` (see :meth:`MembershipTable.rescale`)."""
        self.group_timer = stretch(self.group_timer)
        self.sources = {s: stretch(t) for s, t in self.sources.items()}
        self.v1_host_until = stretch(self.v1_host_until)
        self.v2_host_until = stretch(self.v2_host_until)
        self.next_query_at = stretch(self.next_query_at)


def stretcher(ratio: float, now: float) -> Callable[[float], float]:
    """What is left of a timer at ``now``, ``ratio`` times as long: the lab's time scale changed, so each
    timer runs out at the same fabric moment. A moment already past stays where it is."""
    return lambda moment: moment if moment <= now else now + (moment - now) * ratio


@dataclass(frozen=True)
class GroupSnapshot:
    """One group's router state at a moment: ``requested`` is the INCLUDE list or X, ``excluded`` is Y;
    timers are what is left of them (0 for a source in Y)."""

    mode: FilterMode
    requested: Sources
    excluded: Sources
    group_timer: float | None
    source_timers: dict[IPv4Address, float]

    def forwards(self, source: IPv4Address) -> bool:
        if self.mode is FilterMode.INCLUDE:
            return source in self.requested
        return source not in self.excluded


class MembershipTable:
    """The §6 state of one link's groups, without the querier's own schedule (see :class:`Interface`).

    ``querier`` says whether table actions "Send Q(...)" are carried out; a non-querier lowers its timers
    only when it hears the querier's queries (§6.6.1)."""

    def __init__(self, timers: IgmpTimers, querier: bool = True) -> None:
        self.timers = timers
        self.querier = querier
        # §4.1.6/§4.1.7: a non-querier adopts the querier's QRV and QQI, so these two may change.
        self.robustness = timers.robustness
        self.query_interval = timers.qi
        self.groups: dict[IPv4Address, _Group] = {}
        self.counters: Counter[str] = Counter()
        # Groups whose state or timers changed since the owner last looked (it takes and clears them):
        # what a leaf re-derives, instead of the whole table after every message.
        self.changed: set[IPv4Address] = set()
        # Groups that may have specific queries to send (a superset: checked when due).
        self._pending: set[IPv4Address] = set()

    # -- §8 derived values, wall seconds ---------------------------------------------------------
    @property
    def gmi(self) -> float:
        """§8.4 Group Membership Interval."""
        return self.robustness * self.query_interval + self.timers.qri

    @property
    def oqpi(self) -> float:
        """§8.5 Other Querier Present Interval."""
        return self.robustness * self.query_interval + self.timers.qri / 2

    @property
    def lmqc(self) -> int:
        return self.timers.last_member_query_count or self.robustness

    @property
    def lmqt(self) -> float:
        """§8.10 Last Member Query Time."""
        return self.lmqc * self.timers.lmqi

    @property
    def ohpi(self) -> float:
        """§8.13 Older Host Present Interval."""
        return self.robustness * self.query_interval + self.timers.qri

    # -- state -----------------------------------------------------------------------------------
    def expire(self, now: float) -> None:
        """§6.5 for every group (:meth:`expire_group`)."""
        for group in list(self.groups):
            self.expire_group(group, now)

    def expire_group(self, group: IPv4Address, now: float) -> None:
        """§6.5: a group timer that ran out in EXCLUDE turns the group to INCLUDE with the sources whose
        timers still ran at that moment; INCLUDE sources whose timers ran out go; an empty group goes."""
        st = self.groups.get(group)
        if st is None:
            return
        if st.mode is FilterMode.EXCLUDE and st.group_timer <= now:
            st.sources = {s: t for s, t in st.sources.items() if t > st.group_timer}
            st.mode = FilterMode.INCLUDE
            self.changed.add(group)
        if st.mode is FilterMode.INCLUDE:
            if any(t <= now for t in st.sources.values()):
                st.sources = {s: t for s, t in st.sources.items() if t > now}
                self.changed.add(group)
            st.source_queries_left = {s: n for s, n in st.source_queries_left.items() if s in st.sources}
            if not st.sources and not st.pending():
                del self.groups[group]
                self._pending.discard(group)
                self.changed.add(group)

    def snapshot(self, now: float) -> dict[IPv4Address, GroupSnapshot]:
        self.expire(now)
        return {g: snap for g, st in self.groups.items() if (snap := self._snapshot(st, now)) is not None}

    def group_snapshot(self, group: IPv4Address, now: float) -> GroupSnapshot | None:
        """One group's entry of :meth:`snapshot` (None: no membership), at the cost of that group alone."""
        self.expire_group(group, now)
        st = self.groups.get(group)
        return None if st is None else self._snapshot(st, now)

    @staticmethod
    def _snapshot(st: _Group, now: float) -> GroupSnapshot | None:
        if st.mode is FilterMode.INCLUDE and not st.sources:
            return None  # only retransmissions left: no membership
        return GroupSnapshot(
            st.mode,
            st.requested(now),
            st.excluded(now),
            max(0.0, st.group_timer - now) if st.mode is FilterMode.EXCLUDE else None,
            {s: max(0.0, t - now) for s, t in st.sources.items()},
        )

    def next_change(self, group: IPv4Address, now: float) -> float | None:
        """The next moment after ``now`` at which ``group``'s forwarding state may change with no message
        (a source or group timer running out), if any."""
        st = self.groups.get(group)
        if st is None:
            return None
        moments = [t for t in st.sources.values() if t > now]
        if st.mode is FilterMode.EXCLUDE and st.group_timer > now:
            moments.append(st.group_timer)
        return min(moments, default=None)

    def forwards(self, group: IPv4Address, source: IPv4Address, now: float) -> bool:
        snap = self.snapshot(now).get(group)
        return snap is not None and snap.forwards(source)

    # -- reports ---------------------------------------------------------------------------------
    def receive_report(self, msg: Report | LegacyReport | Leave, now: float) -> list[Query]:
        """Apply a report (§6.4, §7.3.2); returns the specific queries to send now (querier only).
        Only the groups it names are looked at (each expired first): the cost is the report's, not the
        table's."""
        touched: set[IPv4Address] = set()
        if isinstance(msg, Report):
            for record in msg.records:
                if not record.known:
                    self.counters["unknown-record-type"] += 1  # §4.2.12: silently ignored
                    continue
                if record.group in LINK_LOCAL:
                    self.counters["link-local-group"] += 1
                    continue
                touched.add(record.group)
                self._apply(record, now)
        elif msg.group in LINK_LOCAL:
            self.counters["link-local-group"] += 1
        else:
            touched.add(msg.group)
            self._apply_legacy(msg, now)
        return [q for g in sorted(touched) for q in self._send_due(g, now)]

    def _apply_legacy(self, msg: LegacyReport | Leave, now: float) -> None:
        """§7.3.2: a v1/v2 report is IS_EX({}) and starts that version's Older Host Present timer; a v2
        Leave is TO_IN({}), ignored while v1 hosts are present."""
        self.expire_group(msg.group, now)
        st = self.groups.get(msg.group)
        if isinstance(msg, Leave):
            if st is not None and st.v1_host_until > now:
                self.counters["leave-ignored-v1-host"] += 1
                return
            self._apply(GroupRecord(RecordType.CHANGE_TO_INCLUDE_MODE, msg.group), now)
            return
        self._apply(GroupRecord(RecordType.MODE_IS_EXCLUDE, msg.group), now)
        st = self.groups[msg.group]
        if msg.version == 1:
            st.v1_host_until = now + self.ohpi
        else:
            st.v2_host_until = now + self.ohpi

    def _apply(self, record: GroupRecord, now: float) -> None:
        self.expire_group(record.group, now)
        self.changed.add(record.group)
        self._pending.add(record.group)  # it may ask specific queries now: due_queries looks
        kind = RecordType(record.record_type)
        st = self.groups.setdefault(record.group, _Group())
        sources = frozenset(record.sources)
        if st.v1_host_until > now or st.v2_host_until > now:
            # §7.3.2: with older hosts present BLOCK is ignored and TO_EX(A) is TO_EX({}).
            if kind is RecordType.BLOCK_OLD_SOURCES:
                self.counters["block-ignored-older-host"] += 1
                return
            if kind is RecordType.CHANGE_TO_EXCLUDE_MODE:
                sources = frozenset()
        if st.mode is FilterMode.INCLUDE:
            self._in_include(st, kind, sources, now)
        else:
            self._in_exclude(st, kind, sources, now)

    def _in_include(self, st: _Group, kind: RecordType, b: Sources, now: float) -> None:
        """§6.4.1/§6.4.2, router state INCLUDE (A)."""
        a = st.requested(now)
        gmi = now + self.gmi
        if kind in _ADDS:
            for s in b:  # INCLUDE (A+B), (B)=GMI
                st.sources[s] = gmi
            if kind is RecordType.CHANGE_TO_INCLUDE_MODE:
                self._query_sources(st, a - b, now)
        elif kind is RecordType.BLOCK_OLD_SOURCES:
            self._query_sources(st, a & b, now)  # INCLUDE (A), Send Q(G,A*B)
        else:  # IS_EX / TO_EX: EXCLUDE (A*B, B-A), (B-A)=0, Delete (A-B), Group Timer=GMI
            st.sources = {s: (st.sources[s] if s in a else now) for s in b}
            st.source_queries_left = {s: n for s, n in st.source_queries_left.items() if s in b}
            st.mode = FilterMode.EXCLUDE
            st.group_timer = gmi
            if kind is RecordType.CHANGE_TO_EXCLUDE_MODE:
                self._query_sources(st, a & b, now)

    def _in_exclude(self, st: _Group, kind: RecordType, a: Sources, now: float) -> None:
        """§6.4.1/§6.4.2, router state EXCLUDE (X,Y)."""
        x, y = st.requested(now), st.excluded(now)
        gmi = now + self.gmi
        if kind in _ADDS:
            for s in a:  # EXCLUDE (X+A, Y-A), (A)=GMI
                st.sources[s] = gmi
            if kind is RecordType.CHANGE_TO_INCLUDE_MODE:
                self._query_sources(st, x - a, now)
                self._query_group(st, now)
        elif kind is RecordType.BLOCK_OLD_SOURCES:
            for s in a - x - y:  # EXCLUDE (X+(A-Y), Y), (A-X-Y)=Group Timer
                st.sources[s] = st.group_timer
            self._query_sources(st, a - y, now)
        else:  # IS_EX / TO_EX: EXCLUDE (A-Y, Y*A), Delete (X-A), Delete (Y-A), Group Timer=GMI
            new = gmi if kind is RecordType.MODE_IS_EXCLUDE else st.group_timer
            st.sources = {s: st.sources.get(s, new) for s in a}
            st.source_queries_left = {s: n for s, n in st.source_queries_left.items() if s in a}
            if kind is RecordType.CHANGE_TO_EXCLUDE_MODE:
                self._query_sources(st, a - y, now)
            st.group_timer = gmi

    # -- specific queries (§6.6.3) ------------------------------------------------------------------
    def _query_group(self, st: _Group, now: float) -> None:
        if not self.querier:
            return
        st.group_timer = min(st.group_timer, now + self.lmqt)
        st.group_queries_left = self.lmqc
        st.next_query_at = now

    def _query_sources(self, st: _Group, sources: Sources, now: float) -> None:
        if not self.querier or not sources:
            return
        for s in sources:
            st.sources[s] = min(st.sources[s], now + self.lmqt)
            st.source_queries_left[s] = self.lmqc
        st.next_query_at = now

    def _send_due(self, group: IPv4Address, now: float) -> list[Query]:
        """The specific queries due for ``group``: one Q(G) and up to two Q(G,A), S set and clear."""
        st = self.groups.get(group)
        if not self.querier or st is None or not st.pending():
            self._pending.discard(group)
            return []
        if st.next_query_at > now:
            return []
        self.changed.add(group)  # sending lowers its timers
        lmqt = now + self.lmqt
        out = []
        if st.group_queries_left > 0:
            st.group_queries_left -= 1
            suppress = st.group_timer > lmqt
            if not suppress:
                st.group_timer = min(st.group_timer, lmqt)  # §6.6.1 on sending
            out.append(self._specific(group, (), suppress))
        asked = sorted(s for s, n in st.source_queries_left.items() if n > 0)
        for suppress in (True, False):
            chosen = tuple(s for s in asked if (st.sources.get(s, _NEVER) > lmqt) == suppress)
            if chosen:
                out.append(self._specific(group, chosen, suppress))
            if not suppress:
                for s in chosen:
                    st.sources[s] = min(st.sources[s], lmqt)
        for s in asked:
            st.source_queries_left[s] -= 1
        st.source_queries_left = {s: n for s, n in st.source_queries_left.items() if n > 0}
        st.next_query_at = now + self.timers.lmqi
        return out

    def _specific(self, group: IPv4Address, sources: tuple[IPv4Address, ...], suppress: bool) -> Query:
        return Query(
            group=group,
            max_resp_time=int(self.timers.lmqi * 10),
            suppress=suppress,
            qrv=self.robustness,
            qqi=int(self.query_interval),
            sources=sources,
        )

    def due_queries(self, now: float) -> list[Query]:
        """Specific-query retransmissions due by ``now`` (only groups that may have some are looked at)."""
        for g in list(self._pending):
            self.expire_group(g, now)
        return [q for g in sorted(self._pending) for q in self._send_due(g, now)]

    def next_deadline(self) -> float | None:
        """The next moment :meth:`due_queries` has something to send, if any."""
        moments = [
            st.next_query_at for g in self._pending if (st := self.groups.get(g)) is not None and st.pending()
        ]
        return min(moments) if moments else None

    def rescale(self, timers: IgmpTimers, stretch: Callable[[float], float]) -> None:
        """The lab runs at another time scale: the new wall-clock timers, and every running timer's rest
        stretched (:func:`stretcher`). A query interval adopted from another querier (on the wire, in
        wall seconds) is that querier's and stays."""
        if self.query_interval == self.timers.qi:
            self.query_interval = timers.qi
        self.timers = timers
        for st in self.groups.values():
            st.rescale(stretch)
        self.changed |= self.groups.keys()

    def stop_querying(self) -> None:
        """Another querier won the election: "ceases to send queries" (§6.6.2)."""
        for st in self.groups.values():
            st.group_queries_left = 0
            st.source_queries_left = {}
        self._pending.clear()

    # -- queries heard from the querier (§6.6.1) ------------------------------------------------------
    def hear_query(self, q: Query, now: float) -> None:
        if q.suppress or q.is_general:
            return
        self.expire_group(q.group, now)
        st = self.groups.get(q.group)
        if st is None:
            return
        self.changed.add(q.group)  # its timers come down
        lmqt = now + self.lmqt
        if not q.sources:
            if st.mode is FilterMode.EXCLUDE:
                st.group_timer = min(st.group_timer, lmqt)
            return
        for s in q.sources:
            if s in st.sources:
                st.sources[s] = min(st.sources[s], lmqt)


class Interface:
    """One host-facing link of a router: its :class:`MembershipTable`, querier election (§6.6.2) and the
    General Query schedule (§8.6, §8.7).  Every method returns the queries to send now."""

    def __init__(self, address: IPv4Address, timers: IgmpTimers, now: float) -> None:
        self.address = address
        self.table = MembershipTable(timers, querier=True)
        self.other_querier: IPv4Address | None = None
        self.other_querier_until = _NEVER
        self._startup_left = timers.startup_query_count or timers.robustness
        self._next_general = now

    @property
    def is_querier(self) -> bool:
        return self.table.querier

    def rescale(self, timers: IgmpTimers, stretch: Callable[[float], float]) -> None:
        """:meth:`MembershipTable.rescale`, and the querier's own schedule with it."""
        self.table.rescale(timers, stretch)
        self.other_querier_until = stretch(self.other_querier_until)
        self._next_general = stretch(self._next_general)

    def receive(self, msg: Message, src: IPv4Address, now: float) -> list[Query]:
        """A message heard on the link from ``src`` (the IPv4 source address)."""
        out = self.tick(now)
        if isinstance(msg, Query):
            self._hear_query(msg, src, now)
            return out
        return out + self.table.receive_report(msg, now)

    def _hear_query(self, q: Query, src: IPv4Address, now: float) -> None:
        if src == self.address:
            return  # our own, looped back
        if src < self.address:  # §6.6.2: the lowest address is the querier
            if self.table.querier:
                self.table.counters["lost-election"] += 1
                self.table.stop_querying()
            self.table.querier = False
            self.other_querier = src
            # §4.1.6/§4.1.7: adopt the querier's robustness and interval unless it sent 0; the Other
            # Querier Present Interval is then the querier's own idea of it.
            if q.version == 3 and q.qrv:
                self.table.robustness = q.qrv
            if q.version == 3 and q.qqi:
                self.table.query_interval = float(q.qqi)
            self.other_querier_until = now + self.table.oqpi
        self.table.hear_query(q, now)

    def tick(self, now: float) -> list[Query]:
        """Due General Queries and retransmissions; takes back the querier role when the Other Querier
        Present timer has run out."""
        t = self.table
        if not t.querier and self.other_querier_until <= now:
            t.querier = True
            self.other_querier = None
            self._next_general = now
        out: list[Query] = []
        if t.querier and self._next_general <= now:
            out.append(
                Query(max_resp_time=int(t.timers.qri * 10), qrv=t.robustness, qqi=int(t.query_interval))
            )
            if self._startup_left > 1:
                self._startup_left -= 1
                self._next_general = now + t.timers.sqi
            else:
                self._startup_left = 0
                self._next_general = now + t.query_interval
        return out + t.due_queries(now)

    def next_deadline(self) -> float:
        """When to call :meth:`tick` next (timers that only expire need no call: state follows ``now``)."""
        moments = [self.table.next_deadline() or float("inf")]
        moments.append(self._next_general if self.table.querier else self.other_querier_until)
        return min(moments)
