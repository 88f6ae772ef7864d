"""RFC 3376 §6 router state: the §6.4 table rows as vectors, §6.5 expiry, §6.6 queries and election,
§7.3.2 older hosts, §8 timer values and the lab time scale."""

from __future__ import annotations

import math
from ipaddress import IPv4Address

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from aidcnet.igmp.codec import GroupRecord, Leave, LegacyReport, Query, RecordType, Report, decode, encode
from aidcnet.igmp.router import FilterMode, IgmpTimers, Interface, MembershipTable

G = IPv4Address("232.1.1.1")
S = {n: IPv4Address(f"10.0.0.{n}") for n in range(1, 7)}
T = RecordType
INC, EXC = FilterMode.INCLUDE, FilterMode.EXCLUDE
GMI, LMQT = 260.0, 2.0  # §8 defaults: 2 * 125 + 10, and 2 * 1


def srcs(*ns: int) -> frozenset[IPv4Address]:
    return frozenset(S[n] for n in ns)


def rec(kind: RecordType, *ns: int) -> Report:
    return Report((GroupRecord(kind, G, tuple(S[n] for n in ns)),))


def include_a() -> MembershipTable:
    """INCLUDE (A = {1,2}), timers set at t=0."""
    t = MembershipTable(IgmpTimers())
    t.receive_report(rec(T.MODE_IS_INCLUDE, 1, 2), 0.0)
    return t


def exclude_xy() -> MembershipTable:
    """EXCLUDE (X = {1,2}, Y = {3,4}), group timer and X timers set at t=0."""
    t = MembershipTable(IgmpTimers())
    t.receive_report(rec(T.MODE_IS_EXCLUDE, 1, 2, 3, 4), 0.0)
    t.receive_report(rec(T.ALLOW_NEW_SOURCES, 1, 2), 0.0)
    return t


# The RFC's own names for the record types, so the rows read like the §6.4 tables.
IS_IN, IS_EX, ALLOW, BLOCK = T.MODE_IS_INCLUDE, T.MODE_IS_EXCLUDE, T.ALLOW_NEW_SOURCES, T.BLOCK_OLD_SOURCES
TO_IN, TO_EX = T.CHANGE_TO_INCLUDE_MODE, T.CHANGE_TO_EXCLUDE_MODE

# (start, record, its sources, mode, X or include list, Y, group timer left, source timers left,
#  queries sent as (S flag, sources)).  Records arrive at t=10, so a timer set at t=0 has 250 s left.
# fmt: off
ROWS = [
    # §6.4.1 / §6.4.2, router state INCLUDE (A = {1,2}), B = {2,3}
    ("in", IS_IN, (2, 3), INC, (1, 2, 3), (), None, {1: 250, 2: GMI, 3: GMI}, []),
    ("in", ALLOW, (2, 3), INC, (1, 2, 3), (), None, {1: 250, 2: GMI, 3: GMI}, []),
    ("in", BLOCK, (2, 3), INC, (1, 2), (), None, {1: 250, 2: LMQT}, [(False, (2,))]),
    ("in", TO_IN, (2, 3), INC, (1, 2, 3), (), None, {1: LMQT, 2: GMI, 3: GMI}, [(False, (1,))]),
    ("in", IS_EX, (2, 3), EXC, (2,), (3,), GMI, {2: 250, 3: 0}, []),
    ("in", TO_EX, (2, 3), EXC, (2,), (3,), GMI, {2: LMQT, 3: 0}, [(False, (2,))]),
    # router state EXCLUDE (X = {1,2}, Y = {3,4}), A = {2,3,5}
    ("ex", IS_IN, (2, 3, 5), EXC, (1, 2, 3, 5), (4,), 250, {1: 250, 2: GMI, 3: GMI, 4: 0, 5: GMI}, []),
    ("ex", ALLOW, (2, 3, 5), EXC, (1, 2, 3, 5), (4,), 250, {1: 250, 2: GMI, 3: GMI, 4: 0, 5: GMI}, []),
    ("ex", BLOCK, (2, 3, 5), EXC, (1, 2, 5), (3, 4), 250, {1: 250, 2: LMQT, 3: 0, 4: 0, 5: LMQT},
     [(False, (2, 5))]),
    ("ex", TO_IN, (2, 3, 5), EXC, (1, 2, 3, 5), (4,), LMQT, {1: LMQT, 2: GMI, 3: GMI, 4: 0, 5: GMI},
     [(False, ()), (False, (1,))]),
    ("ex", IS_EX, (2, 3, 5), EXC, (2, 5), (3,), GMI, {2: 250, 3: 0, 5: GMI}, []),
    ("ex", TO_EX, (2, 3, 5), EXC, (2, 5), (3,), GMI, {2: LMQT, 3: 0, 5: LMQT}, [(False, (2, 5))]),
]
# fmt: on


@pytest.mark.parametrize(("start", "kind", "b", "mode", "x", "y", "gt", "timers", "queries"), ROWS)
def test_state_table_row(start, kind, b, mode, x, y, gt, timers, queries) -> None:
    table = include_a() if start == "in" else exclude_xy()
    sent = table.receive_report(rec(kind, *b), 10.0)
    snap = table.snapshot(10.0)[G]
    assert (snap.mode, snap.requested, snap.excluded) == (mode, srcs(*x), srcs(*y))
    assert snap.group_timer == gt
    assert snap.source_timers == {S[n]: left for n, left in timers.items()}
    assert [(q.suppress, q.sources) for q in sent] == [(s, tuple(S[n] for n in ns)) for s, ns in queries]
    assert all(q.group == G and q.max_resp_time == 10 for q in sent)


def test_a_non_querier_sends_nothing_and_keeps_its_timers() -> None:
    table = include_a()
    table.querier = False
    assert table.receive_report(rec(T.BLOCK_OLD_SOURCES, 2), 10.0) == []
    assert table.snapshot(10.0)[G].source_timers[S[2]] == 250
    # §6.6.1: it lowers them when it hears the querier's query with S clear, not with S set.
    table.hear_query(Query(group=G, sources=(S[2],), suppress=True), 10.0)
    assert table.snapshot(10.0)[G].source_timers[S[2]] == 250
    table.hear_query(Query(group=G, sources=(S[2],)), 10.0)
    assert table.snapshot(10.0)[G].source_timers[S[2]] == LMQT


def test_include_sources_and_group_age_out() -> None:
    table = include_a()
    assert table.forwards(G, S[1], GMI - 0.001)
    assert not table.forwards(G, S[1], GMI)
    assert table.groups == {}


def test_group_timer_expiry_switches_to_include_with_running_sources() -> None:
    """§6.5: EXCLUDE with the group timer run out becomes INCLUDE of the sources still running."""
    table = MembershipTable(IgmpTimers())
    table.receive_report(rec(T.MODE_IS_EXCLUDE, 2), 0.0)
    table.receive_report(rec(T.ALLOW_NEW_SOURCES, 1), 100.0)
    assert table.forwards(G, S[3], GMI - 1) and not table.forwards(G, S[2], GMI - 1)
    snap = table.snapshot(GMI)[G]
    assert (snap.mode, snap.requested) == (INC, srcs(1))
    assert not table.forwards(G, S[3], GMI)
    assert not table.forwards(G, S[1], 100 + GMI)


def test_v2_leave_runs_last_member_queries() -> None:
    """A v2 join is IS_EX({}), its leave TO_IN({}): Q(G) now and LMQC-1 = 1 more LMQI later (§6.6.3.1),
    and the group is gone LMQT after the leave."""
    table = MembershipTable(IgmpTimers())
    table.receive_report(LegacyReport(G), 0.0)
    sent = table.receive_report(Leave(G), 10.0)
    assert [(q.group, q.sources, q.suppress) for q in sent] == [(G, (), False)]
    assert table.due_queries(10.5) == []
    assert table.next_deadline() == 11.0
    assert len(table.due_queries(11.0)) == 1 and table.next_deadline() is None
    assert table.forwards(G, S[1], 11.999)
    assert not table.forwards(G, S[1], 12.0)


def test_a_report_during_last_member_queries_sets_the_s_flag() -> None:
    table = MembershipTable(IgmpTimers())
    table.receive_report(rec(T.MODE_IS_EXCLUDE), 0.0)
    table.receive_report(Leave(G), 10.0)
    table.receive_report(rec(T.MODE_IS_EXCLUDE), 10.5)  # another member answers
    [q] = table.due_queries(11.0)
    assert q.suppress  # §6.6.3.1: the group timer is above LMQT again
    assert table.forwards(G, S[1], 10.5 + GMI - 1)


def test_source_query_retransmissions_split_by_s_flag() -> None:
    """§6.6.3.2: sources refreshed since are sent in a query with S set, the others with S clear."""
    table = include_a()
    table.receive_report(rec(T.BLOCK_OLD_SOURCES, 1, 2), 10.0)
    table.receive_report(rec(T.MODE_IS_INCLUDE, 2), 10.5)
    sent = table.due_queries(11.0)
    assert [(q.suppress, q.sources) for q in sent] == [(True, (S[2],)), (False, (S[1],))]
    assert not table.forwards(G, S[1], 12.0) and table.forwards(G, S[2], 12.0)


def test_older_hosts_ignore_block_and_widen_to_ex() -> None:
    """§7.3.2: with a v2 host present BLOCK is ignored and TO_EX(A) is TO_EX({})."""
    table = MembershipTable(IgmpTimers())
    table.receive_report(LegacyReport(G), 0.0)
    assert table.receive_report(rec(T.BLOCK_OLD_SOURCES, 1), 1.0) == []
    assert table.counters["block-ignored-older-host"] == 1
    table.receive_report(rec(T.CHANGE_TO_EXCLUDE_MODE, 1), 2.0)
    assert table.forwards(G, S[1], 3.0)
    table.receive_report(LegacyReport(G, version=1), 4.0)
    table.receive_report(Leave(G), 5.0)
    assert table.counters["leave-ignored-v1-host"] == 1 and table.forwards(G, S[1], 100.0)


def test_unknown_record_types_are_counted_and_skipped() -> None:
    table = MembershipTable(IgmpTimers())
    table.receive_report(Report((GroupRecord(9, G, (S[1],)),)), 0.0)
    assert table.counters["unknown-record-type"] == 1 and table.groups == {}


def test_link_local_groups_keep_no_state() -> None:
    """224.0.0.0/24 never leaves the link (RFC 5771): FRR's pimd reports 224.0.0.13 and 224.0.0.22."""
    table = MembershipTable(IgmpTimers())
    local = [IPv4Address("224.0.0.13"), IPv4Address("224.0.0.22"), IPv4Address("224.0.0.255")]
    records = tuple(GroupRecord(T.MODE_IS_EXCLUDE, g) for g in [*local, G])
    table.receive_report(Report(records), 0.0)
    table.receive_report(LegacyReport(local[0]), 0.0)
    assert set(table.groups) == {G} and table.counters["link-local-group"] == 4
    # 224.0.1.0 is the first routable group: kept.
    table.receive_report(Report((GroupRecord(T.MODE_IS_EXCLUDE, IPv4Address("224.0.1.0")),)), 0.0)
    assert set(table.groups) == {G, IPv4Address("224.0.1.0")}


def test_section_8_values_and_time_scale() -> None:
    t = MembershipTable(IgmpTimers())
    assert (t.gmi, t.oqpi, t.lmqt, t.ohpi, t.timers.sqi) == (260, 255, 2, 260, 31.25)
    scaled = MembershipTable(IgmpTimers(query_interval=20, query_response_interval=2, time_scale=10))
    assert (scaled.gmi, scaled.lmqt) == (2 * 200 + 20, 20)
    q = scaled._specific(G, (), False)
    assert decode(encode(q)).max_resp_time == 100  # LMQI 1 s x 10 on the wire, in 1/10 s


def test_timer_config_errors_say_what_to_change() -> None:
    with pytest.raises(ValidationError, match="below query_interval"):
        IgmpTimers(query_interval=10, query_response_interval=10)
    with pytest.raises(ValidationError, match=r"query_response_interval .*time_scale"):
        IgmpTimers(time_scale=1000)
    with pytest.raises(ValidationError, match="extra"):
        IgmpTimers(robustnes=2)  # type: ignore[call-arg]


A, B, C = IPv4Address("10.9.0.1"), IPv4Address("10.9.0.2"), IPv4Address("10.9.0.3")


def test_startup_and_general_queries() -> None:
    iface = Interface(B, IgmpTimers(), 0.0)
    [q] = iface.tick(0.0)
    assert q.is_general and (q.max_resp_time, q.qrv, q.qqi) == (100, 2, 125)
    assert iface.tick(31.0) == [] and len(iface.tick(31.25)) == 1  # §8.6/8.7: 2 at QI/4
    assert iface.next_deadline() == 31.25 + 125


def test_querier_election() -> None:
    """§6.6.2: the lowest address queries; the other waits the Other Querier Present Interval and
    adopts the querier's QRV and QQI (§4.1.6, §4.1.7)."""
    iface = Interface(B, IgmpTimers(), 0.0)
    iface.tick(0.0)
    iface.receive(Query(qrv=3, qqi=60), C, 1.0)
    assert iface.is_querier
    iface.receive(Query(qrv=3, qqi=60), A, 2.0)
    assert not iface.is_querier and iface.other_querier == A
    assert iface.table.gmi == 3 * 60 + 10
    oqpi = 3 * 60 + 5
    assert iface.tick(100.0) == [] and iface.next_deadline() == 2.0 + oqpi
    assert iface.receive(rec(T.BLOCK_OLD_SOURCES, 1), A, 3.0) == []
    [q] = iface.tick(2.0 + oqpi)
    assert iface.is_querier and q.is_general


@given(
    st.floats(1e-7, 1e-3),
    st.floats(1e-7, 1e-3),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
)
def test_wire_scale_range_is_where_the_timers_fit(qri: float, lmqi: float, extra: float, at: float) -> None:
    """Every whole scale inside wire_scale_range makes valid timers; one step outside, a timer overflows
    its code (a time scale is a whole number)."""
    from aidcnet.igmp.router import wire_scale_range

    qi = qri * (1.5 + extra * 10)  # the query interval is above the response interval (§8.3)
    fabric = {"query_interval": qi, "query_response_interval": qri, "last_member_query_interval": lmqi}
    low, high = wire_scale_range(fabric)
    lowest, highest = math.ceil(low * (1 + 1e-12)), math.floor(high * (1 - 1e-12))
    if lowest > highest:
        return
    timers = {**fabric, "robustness": 2}
    IgmpTimers(**timers, time_scale=round(lowest + (highest - lowest) * at))
    for outside in (math.floor(low * (1 - 1e-12)), math.ceil(high * (1 + 1e-12))):
        if outside >= 1 and not low <= outside <= high:
            with pytest.raises(ValidationError):
                IgmpTimers(**timers, time_scale=outside)
