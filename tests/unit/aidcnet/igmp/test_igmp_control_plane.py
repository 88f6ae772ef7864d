"""The modelled control plane: a FIFO server of fixed cost per message (aidcnet/igmp/control_plane.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.igmp.control_plane import ControlPlane, group_records, modelled_moments

COST = 1000


def test_idle_server_takes_one_cost() -> None:
    cp: ControlPlane[str] = ControlPlane(COST)
    cp.admit(5000, "a")
    assert cp.next_due() == 6000
    assert cp.pop_due(5999) == []
    assert cp.pop_due(6000) == [(6000, "a")]
    assert cp.next_due() is None
    assert cp.counters["served"] == 1 and cp.counters["late"] == 0 and cp.counters["wait-ns"] == 0


def test_a_burst_queues_behind_the_first() -> None:
    cp: ControlPlane[int] = ControlPlane(COST)
    for i in range(3):
        cp.admit(100 + i, i)
    assert cp.pop_due(2099) == [(1100, 0)]
    assert cp.pop_due(3100) == [(2100, 1), (3100, 2)]
    # waiting behind the others: 0, 1100 - 101, 2100 - 102
    assert cp.counters["wait-ns"] == 999 + 1998
    assert cp.counters["queue-max"] == 3


def test_pop_due_takes_at_most_limit() -> None:
    cp: ControlPlane[int] = ControlPlane(COST)
    for i in range(3):
        cp.admit(0, i)
    assert cp.pop_due(10_000, limit=1) == [(1000, 0)]
    assert cp.pop_due(10_000, limit=5) == [(2000, 1), (3000, 2)]


def test_an_earlier_arrival_read_later_is_served_first_while_it_can() -> None:
    cp: ControlPlane[str] = ControlPlane(COST)
    cp.admit(500, "later")
    cp.admit(100, "earlier")  # read from another socket after the first
    assert cp.pop_due(10_000) == [(1100, "earlier"), (2100, "later")]


def test_the_past_is_not_reordered() -> None:
    cp: ControlPlane[str] = ControlPlane(COST)
    cp.admit(500, "first")
    assert cp.pop_due(1500) == [(1500, "first")]
    cp.admit(100, "read late")  # arrived before, but the server already served "first"
    assert cp.pop_due(10_000) == [(2500, "read late")]


def test_lateness_beyond_one_cost_is_late() -> None:
    cp: ControlPlane[str] = ControlPlane(COST)
    cp.admit(0, "on time")
    cp.pop_due(COST + COST)  # exactly one cost after its moment: within the bar
    cp.admit(10_000, "late")
    cp.pop_due(11_000 + COST + 1)
    assert cp.counters["late"] == 1
    assert cp.counters["lateness-ns"] == COST + COST + 1


def test_zero_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="0: do not model"):
        ControlPlane(0)


@given(
    st.lists(st.tuples(st.integers(0, 50_000), st.integers(0, 40)), min_size=1, max_size=40),
    st.integers(1, 5000),
    st.integers(0, 300),
    st.lists(st.integers(0, 3000), min_size=1, max_size=40),
)
def test_served_on_time_it_is_lindleys_fifo(
    jobs: list[tuple[int, int]], cost: int, per_record: int, gaps: list[int]
) -> None:
    """Admitted before their moments and polled at arbitrary later times, the messages take effect
    exactly when a FIFO single server would finish them (base cost + records x cost per record), in
    arrival order (ties in admission order)."""
    cp: ControlPlane[int] = ControlPlane(cost, per_record)
    for i, (arrival, records) in enumerate(jobs):
        cp.admit(arrival, i, records)
    now, got = 0, []
    step = itertools.cycle(gaps)
    while len(cp):
        now += next(step) * cost // 100 + 1
        for moment, i in cp.pop_due(now):
            assert moment <= now
            got.append((moment, jobs[i][0]))
    services = [(a, cost + r * per_record) for a, r in jobs]
    assert [m for m, _ in got] == modelled_moments(services)
    assert [a for _, a in got] == sorted(a for a, _ in jobs)
    assert cp.counters["served"] == len(jobs)
    assert cp.counters["service-ns"] == sum(s for _, s in services)


def test_group_records_reads_the_header_only() -> None:
    from ipaddress import IPv4Address

    from aidcnet.igmp.codec import GroupRecord, Leave, LegacyReport, Query, RecordType, Report, encode
    from aidcnet.igmp.node import ALL_V3_ROUTERS, ipv4_igmp

    def packet(msg: object) -> bytes:
        return ipv4_igmp(IPv4Address("10.0.0.2"), ALL_V3_ROUTERS, encode(msg))  # type: ignore[arg-type]

    g = [IPv4Address(f"232.1.1.{i}") for i in range(1, 4)]
    report = Report(tuple(GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, x, ()) for x in g))
    assert group_records(packet(report)) == 3
    assert group_records(packet(LegacyReport(g[0], version=2))) == 1
    assert group_records(packet(Leave(g[0]))) == 1
    assert group_records(packet(Query(group=IPv4Address("0.0.0.0")))) == 0
    assert group_records(b"\x45" + b"\x00" * 10) == 0


def test_rescale_serves_what_is_queued_at_the_new_costs() -> None:
    """The lab's time scale changed with messages queued: each is served from its arrival at the new
    cost and cost per record (they were admitted with their records, not with a service time)."""
    cp: ControlPlane[str] = ControlPlane(COST, 10)
    cp.admit(0, "a", records=2)
    cp.admit(0, "b", records=5)
    cp.rescale(3 * COST, 30)
    assert cp.pop_due(10**6) == [(3060, "a"), (3060 + 3150, "b")]
    assert cp.counters["service-ns"] == 3060 + 3150
    with pytest.raises(ValueError, match="above zero"):
        cp.rescale(0, 0)
