"""A burst settled once (IgmpLeaf.receive(settle=False) + settle) ends where the per-report path ends,
with one overlay report and one flow derivation (aidcnet/igmp/node.py)."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.igmp.codec import GroupRecord, RecordType, Report
from tests.unit.aidcnet.igmp.test_igmp_leaf import HOST1, HOST2, from_host, leaf

T = RecordType
GROUPS = [IPv4Address(f"239.101.0.{n}") for n in range(1, 6)]
SOURCES = [IPv4Address(f"10.0.0.{n}") for n in range(1, 4)]

record = st.builds(
    GroupRecord,
    st.sampled_from(
        [T.ALLOW_NEW_SOURCES, T.BLOCK_OLD_SOURCES, T.CHANGE_TO_INCLUDE_MODE, T.CHANGE_TO_EXCLUDE_MODE]
    ),
    st.sampled_from(GROUPS),
    st.lists(st.sampled_from(SOURCES), unique=True, max_size=2).map(tuple),
)
burst = st.lists(st.tuples(st.sampled_from(["h1", "h2"]), record), min_size=1, max_size=30)


def _packets(events):
    return [(port, from_host(HOST1 if port == "h1" else HOST2, Report((r,)))) for port, r in events]


@settings(max_examples=80, deadline=None)
@given(burst)
def test_a_settled_burst_reaches_the_per_report_state(events) -> None:
    one, batched = leaf(3), leaf(3)
    bfir_one, bfir_batched = leaf(1), leaf(1)
    for i, (port, packet) in enumerate(_packets(events)):
        now = 1.0 + i * 1e-4
        for packet_out in one.receive(port, packet, now).over_bier:
            bfir_one.receive_over_bier(packet_out, now)
        out = batched.receive(port, packet, now, settle=False)
        assert out.over_bier == [] and not out.flows_changed  # nothing leaves before the settle
    end = 1.0 + len(events) * 1e-4
    settled = batched.settle(end)
    assert len(settled.over_bier) <= 1  # one overlay report for the whole burst (under 64 groups)
    assert batched.state == one.state
    assert batched.members(end) == one.members(end)
    for packet_out in settled.over_bier:
        bfir_batched.receive_over_bier(packet_out, end, settle=False)
    bfir_batched.settle(end)
    assert bfir_batched.flows() == bfir_one.flows()
    # from an empty state, the one report names exactly the groups the burst left with a membership
    assert {r.group for r in settled.reported} == set(batched.state)


def test_records_heard_and_reported_are_handed_to_the_shell() -> None:
    bfer = leaf(3)
    join = GroupRecord(T.ALLOW_NEW_SOURCES, GROUPS[0], (SOURCES[0],))
    out = bfer.receive("h1", from_host(HOST1, Report((join,))), 1.0, settle=False)
    assert out.heard == [join] and out.reported == []
    settled = bfer.settle(1.0)
    assert [r.group for r in settled.reported] == [GROUPS[0]]
    got = leaf(1).receive_over_bier(settled.over_bier[0], 1.1)
    assert [(b, r.group) for b, r in got.bier_heard] == [(3, GROUPS[0])]


# -- the table skips expiry and retransmission passes until a timer can run out --------------------------
step = st.tuples(
    st.floats(0.0, 3.0),  # seconds since the previous step
    st.one_of(
        st.tuples(st.just("report"), record),
        st.tuples(st.just("tick"), st.none()),
        st.tuples(st.just("query"), st.sampled_from(GROUPS)),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=40))
def test_skipping_passes_changes_nothing(steps) -> None:
    """Against the same table made to scan every group on every call (as before the skips)."""
    from aidcnet.igmp.codec import Query
    from aidcnet.igmp.membership import IgmpTimers, Interface, MembershipTable

    timers = IgmpTimers(query_interval=4.0, query_response_interval=1.0, last_member_query_interval=0.5)
    fast, full = Interface(HOST1, timers, 0.0), Interface(HOST1, timers, 0.0)
    querier = IPv4Address("10.1.0.1")  # lower than HOST1: it wins the election when it queries
    now = 0.0

    def scan_all(table: MembershipTable) -> None:
        table._rescan()
        table._queries_from = float("-inf")

    for dt, (kind, arg) in steps:
        now += dt
        scan_all(full.table)
        if kind == "report":
            got = (fast.receive(Report((arg,)), HOST2, now), full.receive(Report((arg,)), HOST2, now))
        elif kind == "tick":
            got = (fast.tick(now), full.tick(now))
        else:
            q = Query(group=arg, max_resp_time=5)
            got = (fast.receive(q, querier, now), full.receive(q, querier, now))
        assert got[0] == got[1]
        scan_all(full.table)
        assert fast.table.snapshot(now) == full.table.snapshot(now)
