"""The router state against a reference set model: hosts that keep a filter (mode, sources) per group and
speak RFC 3376 §5 (state-change records on every change, current-state records to every query).

Whatever the hosts do, in any order and with any pauses: (1) the router never stops forwarding a
(S,G) some host wants (no missed delivery at any moment) and (2) once the hosts are quiet for a Group
Membership Interval, the router forwards exactly the union of what the hosts want."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.igmp.codec import GroupRecord, Query, RecordType, Report, decode, encode
from aidcnet.igmp.router import FilterMode, IgmpTimers, Interface

T = RecordType
GROUPS = (IPv4Address("232.0.0.1"), IPv4Address("232.0.0.2"))
SOURCES = tuple(IPv4Address(f"10.0.0.{n}") for n in range(1, 5))
UNLISTED = IPv4Address("10.0.0.99")  # never named by a host: stands for "any other source"
ROUTER = IPv4Address("10.1.0.1")
Filter = tuple[bool, frozenset[IPv4Address]]  # (exclude?, sources); no interest is (False, {})
NONE: Filter = (False, frozenset())


def wants(f: Filter, source: IPv4Address) -> bool:
    exclude, sources = f
    return (source not in sources) if exclude else (source in sources)


def change_records(group: IPv4Address, old: Filter, new: Filter) -> list[GroupRecord]:
    """RFC 3376 §5.1: the State-Change Record for a filter change."""
    (old_ex, a), (new_ex, b) = old, new
    out = []
    if old_ex != new_ex:
        out.append(
            GroupRecord(T.CHANGE_TO_EXCLUDE_MODE if new_ex else T.CHANGE_TO_INCLUDE_MODE, group, tuple(b))
        )
    else:
        allow, block = (a - b, b - a) if new_ex else (b - a, a - b)
        if allow:
            out.append(GroupRecord(T.ALLOW_NEW_SOURCES, group, tuple(sorted(allow))))
        if block:
            out.append(GroupRecord(T.BLOCK_OLD_SOURCES, group, tuple(sorted(block))))
    return out


def current_records(q: Query, filters: dict[IPv4Address, Filter]) -> list[GroupRecord]:
    """RFC 3376 §5.2: what a host answers to a query."""
    out = []
    for group, (exclude, a) in sorted(filters.items()):
        if (not q.is_general and group != q.group) or (not exclude and not a):
            continue
        if q.sources:
            asked = frozenset(q.sources)
            answer = asked - a if exclude else asked & a
            if answer:
                out.append(GroupRecord(T.MODE_IS_INCLUDE, group, tuple(sorted(answer))))
        else:
            out.append(
                GroupRecord(T.MODE_IS_EXCLUDE if exclude else T.MODE_IS_INCLUDE, group, tuple(sorted(a)))
            )
    return out


class Link:
    def __init__(self, hosts: int) -> None:
        self.now = 0.0
        self.router = Interface(ROUTER, IgmpTimers(), 0.0)
        self.hosts: list[dict[IPv4Address, Filter]] = [{} for _ in range(hosts)]
        self.deliver(self.router.tick(0.0))

    def deliver(self, queries: list[Query]) -> None:
        """Queries reach every host, which answers at once (the worst case for the router: no delay)."""
        while queries:
            q = decode(encode(queries.pop(0)))  # through the wire format, both ways
            for i, filters in enumerate(self.hosts):
                records = current_records(q, filters)
                if records:
                    queries += self.router.receive(
                        Report(tuple(records)), IPv4Address(f"10.2.0.{i + 1}"), self.now
                    )

    def change(self, host: int, group: IPv4Address, new: Filter) -> None:
        old = self.hosts[host].get(group, NONE)
        self.hosts[host][group] = new
        records = change_records(group, old, new)
        if records:
            src = IPv4Address(f"10.2.0.{host + 1}")
            queries = self.router.receive(decode(encode(Report(tuple(records)))), src, self.now)
            self.check_nothing_missed()  # before anyone answers the queries the change caused
            self.deliver(queries)

    def advance(self, until: float) -> None:
        while self.router.next_deadline() <= until:
            self.now = self.router.next_deadline()
            self.deliver(self.router.tick(self.now))
            self.check_nothing_missed()
        self.now = until

    def wanted(self, group: IPv4Address, source: IPv4Address) -> bool:
        return any(wants(h.get(group, NONE), source) for h in self.hosts)

    def forwarded(self, group: IPv4Address, source: IPv4Address) -> bool:
        return self.router.table.forwards(group, source, self.now)

    def check_nothing_missed(self) -> None:
        for g in GROUPS:
            for s in (*SOURCES, UNLISTED):
                assert not self.wanted(g, s) or self.forwarded(g, s), f"missed ({s},{g}) at {self.now}"


filters = st.tuples(st.booleans(), st.frozensets(st.sampled_from(SOURCES), max_size=3))
steps = st.lists(
    st.tuples(
        st.integers(0, 2), st.sampled_from(GROUPS), filters, st.sampled_from([0.0, 0.0, 0.5, 1.5, 3.0, 130.0])
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_router_state_follows_the_hosts(script: list[tuple[int, IPv4Address, Filter, float]]) -> None:
    link = Link(hosts=3)
    for host, group, new, pause in script:
        link.change(host, group, new)
        link.check_nothing_missed()
        link.advance(link.now + pause)
    # Not after the Last Member Query Time already: an EXCLUDE host answering Q(G) with IS_EX(A) puts
    # the sources of A it never named before in X for a whole GMI (§6.4.1, (A-X-Y)=GMI), on purpose.
    for quiet in (2 * link.router.table.gmi,):
        link.advance(link.now + quiet)
        for g in GROUPS:
            for s in (*SOURCES, UNLISTED):
                assert link.forwarded(g, s) == link.wanted(g, s), (
                    f"({s},{g}) {quiet} s after the hosts went quiet"
                )


def reference_table(state: tuple[bool, frozenset, frozenset], kind: int, a: frozenset) -> tuple:
    """RFC 3376 §6.4.1/§6.4.2 as plain sets, no timers: (exclude?, X or the include list, Y)."""
    exclude, x, y = state
    if not exclude:
        if kind in (T.MODE_IS_INCLUDE, T.ALLOW_NEW_SOURCES, T.CHANGE_TO_INCLUDE_MODE):
            return False, x | a, y
        if kind == T.BLOCK_OLD_SOURCES:
            return state
        return True, x & a, a - x  # IS_EX / TO_EX: EXCLUDE (A*B, B-A)
    if kind in (T.MODE_IS_INCLUDE, T.ALLOW_NEW_SOURCES, T.CHANGE_TO_INCLUDE_MODE):
        return True, x | a, y - a
    if kind == T.BLOCK_OLD_SOURCES:
        return True, x | (a - y), y
    return True, a - y, y & a  # IS_EX / TO_EX: EXCLUDE (A-Y, Y*A)


records = st.lists(
    st.tuples(st.sampled_from(list(T)), st.frozensets(st.sampled_from(SOURCES), max_size=4)), max_size=30
)


@settings(max_examples=300, deadline=None)
@given(records, st.booleans())
def test_records_in_any_order_match_the_set_tables(script: list[tuple[T, frozenset]], querier: bool) -> None:
    """Any sequence of the six record types at one moment: the timer-based table holds the same
    (mode, X, Y) as the §6.4 set formulas (timers set to 0 are Y, all others X)."""
    link = Link(hosts=0)
    link.router.table.querier = querier
    group = GROUPS[0]
    ref: tuple = (False, frozenset(), frozenset())
    for kind, sources in script:
        link.router.receive(
            Report((GroupRecord(kind, group, tuple(sorted(sources))),)), IPv4Address("10.2.0.1"), 0.0
        )
        ref = reference_table(ref, kind, sources)
        snap = link.router.table.snapshot(0.0).get(group)
        got = (
            (False, frozenset(), frozenset())
            if snap is None
            else (snap.mode is FilterMode.EXCLUDE, snap.requested, snap.excluded)
        )
        assert got == ref, (kind, sources)
        for s in (*SOURCES, UNLISTED):
            assert link.forwarded(group, s) == (s not in ref[2] if ref[0] else s in ref[1])
