"""Schedules, windows, control overhead and the change-rate search of the igmp/proxy replay modes
(orchestrator/experiment/membership.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.modes import Mode
from orchestrator.experiment.groups import derive_groups
from orchestrator.experiment.igmp_plan import Delivery
from orchestrator.experiment.membership import (
    RATE_PRECISION,
    RateTrial,
    control_overhead,
    deliveries_from,
    fastest,
    host_joins,
    host_reports,
    igmp_windows,
    judge,
    membership_changes,
    next_stretch,
    proxy_windows,
    stretch_ops,
)
from orchestrator.workloads.trace import TraceOp

HOSTS = [f"h{i}" for i in range(1, 7)]
LOOP = {h: f"10.0.0.{i}" for i, h in enumerate(HOSTS, 1)}
MS = 1_000_000


def op(i: int, src: str, dst: list[str], t: float | None = None) -> TraceOp:
    return TraceOp(t=float(i) if t is None else t, op="multicast", src=src, dst=dst, bytes=1000, id=i)


ops_strategy = st.lists(
    st.tuples(st.sampled_from(HOSTS), st.sets(st.sampled_from(HOSTS), min_size=1, max_size=4)),
    min_size=1,
    max_size=12,
).map(
    lambda xs: [op(i, s, sorted(d - {s})) for i, (s, d) in enumerate(xs) if d - {s}] or [op(0, "h1", ["h2"])]
)


def test_igmp_schedule_joins_each_receiver_at_its_op_with_the_source_loopback() -> None:
    ops = [op(0, "h1", ["h2", "h3"]), op(1, "h1", ["h2"]), op(2, "h4", ["h2"])]
    _, og = derive_groups(ops)
    joins = host_joins(ops, og, LOOP)
    assert joins == {
        "h2": [[0, 0.0, og[0], "10.0.0.1"], [1, 1.0, og[1], "10.0.0.1"], [2, 2.0, og[2], "10.0.0.4"]],
        "h3": [[0, 0.0, og[0], "10.0.0.1"]],
    }
    assert membership_changes(Mode.IGMP, ops, og) == 4


def test_proxy_schedule_reports_a_group_once_and_withdraws_it_after_its_last_op() -> None:
    ops = [op(0, "h1", ["h2", "h3"]), op(1, "h1", ["h3", "h2"]), op(2, "h1", ["h2"])]
    _, og = derive_groups(ops)
    assert og[0] == og[1] != og[2]
    assert host_reports(ops, og, LOOP) == {
        "h1": [
            [0, True, og[0], ["10.0.0.2", "10.0.0.3"]],
            [1, False, og[0], []],
            [2, True, og[2], ["10.0.0.2"]],
            [2, False, og[2], []],
        ]
    }
    assert membership_changes(Mode.PROXY, ops, og) == 2


@given(ops_strategy)
def test_every_receiver_of_every_op_gets_exactly_one_join(ops: list[TraceOp]) -> None:
    _, og = derive_groups(ops)
    joins = host_joins(ops, og, LOOP)
    got = sorted((j[0], h) for h, js in joins.items() for j in js)
    assert got == sorted((o.id, d) for o in ops for d in o.dst)
    assert membership_changes(Mode.IGMP, ops, og) == len(got)


@given(ops_strategy)
def test_every_group_is_reported_before_its_first_op_and_withdrawn_after_its_last(ops: list[TraceOp]) -> None:
    _, og = derive_groups(ops)
    steps = host_reports(ops, og, LOOP)
    by_group: dict[str, list[list]] = {}
    for src, items in steps.items():
        for item in items:
            by_group.setdefault(item[2], []).append([src, *item])
    assert set(by_group) == set(og.values())
    for group, items in by_group.items():
        mine = [o for o in ops if og[o.id] == group]
        (install,) = [i for i in items if i[2]]
        (withdraw,) = [i for i in items if not i[2]]
        assert install[1] == mine[0].id and withdraw[1] == mine[-1].id and withdraw[4] == []
        assert sorted(install[4]) == sorted(LOOP[d] for d in mine[0].dst)


def test_igmp_windows_and_latency_in_fabric_time() -> None:
    start = 1_000 * MS
    # Op 0's receivers are known at t = 1 ms (h2's join went out 0.5 ms later: a cost of the receiver
    # side, inside the latency); h2 left at 9 ms, its first packet came at 5 ms: 4 ms wall, 4 µs fabric.
    joins = {"h2": [[0, start + 1_500_000, start + 9 * MS]], "h3": [[0, start + 1 * MS, None]]}
    records = {"h2": {0: {"first_ns": start + 5 * MS}}, "h3": {}}
    for scale, want in ((None, 0.004), (1000, 4e-6)):
        windows = igmp_windows(joins, {0: 0.001}, start, scale)
        r = judge(windows, deliveries_from(records, start, scale), 2, scale)
        assert r.latencies == pytest.approx((want,))
        assert (r.wrong, r.missed) == (0, 1)  # h3 joined and never got its packet
        d = r.to_dict()
        assert d["time"] == ("wall" if scale is None else "fabric")
        assert d["latency_p50_s"] == d["latency_p99_s"] == d["latency_max_s"] == pytest.approx(want)


def test_a_packet_after_the_leave_or_for_an_op_never_joined_is_wrong() -> None:
    joins = {"h2": [[0, 1 * MS, 3 * MS]]}  # op 1: h2 never joined
    records = {"h2": {0: {"first_ns": 4 * MS}, 1: {"first_ns": 2 * MS}}}
    r = judge(igmp_windows(joins, {0: 0.001, 1: 0.001}, 0, None), deliveries_from(records, 0, None), 1, None)
    assert (r.wrong, r.missed, r.latencies) == (2, 1, ())


def test_proxy_latency_counts_only_the_groups_first_op() -> None:
    ops = [op(0, "h1", ["h2"], t=0.001), op(1, "h1", ["h2"], t=0.01)]
    _, og = derive_groups(ops)
    # The report went out 0.2 ms after t (the source's own delay: inside the latency), withdrawn at 20 ms.
    reports = {"h1": [[0, True, 1_200_000], [1, False, 20 * MS]]}
    windows, keys = proxy_windows(ops, og, reports, 0, None)
    assert keys == {(0, "h2")}
    assert [(w.op, w.known, w.left) for w in windows] == [(0, 0.001, 0.02), (1, 0.001, 0.02)]
    records = {"h2": {0: {"first_ns": 2 * MS}, 1: {"first_ns": 12 * MS}}}
    r = judge(windows, deliveries_from(records, 0, None), 1, None, keys)
    assert r.latencies == pytest.approx((0.001,)) and (r.wrong, r.missed) == (0, 0)
    # A packet after the withdrawal is wrong.
    late = judge(windows, deliveries_from({"h2": {1: {"first_ns": 21 * MS}}}, 0, None), 1, None, keys)
    assert (late.wrong, late.missed) == (1, 2)  # and neither op arrived in its window


def test_a_group_never_reported_has_no_window_so_its_packets_are_wrong() -> None:
    ops = [op(0, "h1", ["h2"])]
    _, og = derive_groups(ops)
    windows, keys = proxy_windows(ops, og, {}, 0, None)
    assert windows == [] and keys == set()
    r = judge(windows, [Delivery(0, "h2", 0.5)], 0, None, keys)
    assert (r.wrong, r.missed) == (1, 0)


def test_control_overhead_sums_counted_packets_and_bytes_over_nodes() -> None:
    agents = {
        "leaf1": {
            "igmp.rx": 4,
            "igmp.rx-bytes": 200,
            "igmp.bier-reports-out": 2,
            "igmp.bier-report-bytes-out": 96,
        },
        "leaf2": {
            "igmp.rx": 1,
            "igmp.rx-bytes": 60,
            "igmp.shell.queries-sent": 1,
            "igmp.shell.query-bytes-sent": 36,
        },
        "h1": {"replay.proxy-reports-sent": 1, "replay.proxy-report-bytes-sent": 60, "bier.rx": 99},
    }
    out = control_overhead(agents)
    assert out["igmp from hosts"] == {"packets": 5, "bytes": 260}
    assert out["overlay reports"] == {"packets": 2, "bytes": 96}
    assert out["proxy reports sent"] == {"packets": 1, "bytes": 60}
    # the proxy report is in the leaves' IGMP from hosts already: not counted twice
    assert out["total"] == {"packets": 8, "bytes": 392}
    assert control_overhead({}) == {"total": {"packets": 0, "bytes": 0}}


def test_stretch_multiplies_op_times_only() -> None:
    ops = [op(0, "h1", ["h2"], t=0.5), op(1, "h1", ["h3"], t=1.0)]
    out = stretch_ops(ops, 0.1)
    assert [o.t for o in out] == pytest.approx([0.05, 0.1])
    assert [(o.id, o.src, o.dst) for o in out] == [(o.id, o.src, o.dst) for o in ops]


def _search(threshold: float, start: float = 1.0) -> list[RateTrial]:
    trials = [RateTrial(start, start >= threshold, 10, start)]
    while (nxt := next_stretch(trials)) is not None:
        trials.append(RateTrial(nxt, nxt >= threshold, 10, nxt))
        assert len(trials) < 40
    return trials


@given(st.floats(min_value=0.002, max_value=500.0))
def test_search_brackets_the_smallest_exact_stretch(threshold: float) -> None:
    trials = _search(threshold)
    best = fastest(trials)
    assert best is not None and best.stretch >= threshold
    below = [t.stretch for t in trials if not t.exact and t.stretch < best.stretch]
    assert below and best.stretch / max(below) <= RATE_PRECISION
    assert best.rate == pytest.approx(10 / best.stretch)


def test_search_gives_up_at_the_ceiling_and_stops_at_the_floor() -> None:
    never = [RateTrial(1.0, False, 10, 1.0)]
    while (nxt := next_stretch(never, ceiling=16)) is not None:
        never.append(RateTrial(nxt, False, 10, nxt))
    assert [t.stretch for t in never] == [1, 2, 4, 8, 16] and fastest(never) is None
    always = [RateTrial(1.0, True, 10, 1.0)]
    while (nxt := next_stretch(always, floor=0.1)) is not None:
        always.append(RateTrial(nxt, True, 10, nxt))
    assert min(t.stretch for t in always) >= 0.1 and fastest(always).stretch == min(t.stretch for t in always)
    with pytest.raises(ValueError, match="first trial"):
        next_stretch([])


def test_control_plane_sums_the_leaves_and_the_verdict_names_the_first_reason() -> None:
    from orchestrator.experiment.membership import control_plane, latency_verdict

    agents = {
        "leaf1": {"igmp.control.served": 3, "igmp.control.late": 1, "igmp.control.wait-ns": 10},
        "leaf2": {"igmp.control.served": 2, "igmp.control.lateness-ns": 7, "igmp.rx": 9},
        "h1": {"replay.proxy-reports-sent": 2},
    }
    cp = control_plane(agents)
    assert cp == {
        "served": 5, "late": 1, "wait_ns": 10, "service_ns": 0, "lateness_ns": 7, "busy_ns": 0, "unstamped": 0
    }
    assert "not modelled" in (latency_verdict(0.0, cp, True) or "")
    assert latency_verdict(1e-6, cp, False) == "the run was not faithful"
    assert "1 control messages applied late" in (latency_verdict(1e-6, cp, True) or "")
    assert latency_verdict(1e-6, {**cp, "late": 0}, True) is None
