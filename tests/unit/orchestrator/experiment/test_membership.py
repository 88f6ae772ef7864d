"""Schedules, windows, control overhead and the change-rate search of the igmp/proxy replay modes
(orchestrator/experiment/membership.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.agent.replay.protocol import Join, Report
from aidcnet.modes import Mode
from aidcnet.timescale import TimeScale
from orchestrator.experiment.igmp_plan import Delivery
from orchestrator.experiment.membership import (
    RATE_PRECISION,
    Carriage,
    ControlModel,
    LeafHistory,
    RateTrial,
    carried_ns,
    control_overhead,
    default_lead_s,
    deliveries_from,
    fastest,
    first_holding,
    host_joins,
    host_reports,
    igmp_windows,
    judge,
    lead_needed_ns,
    membership_changes,
    modelled_join_path_s,
    next_stretch,
    proxy_windows,
    stretch_ops,
    suggested_lead_ms,
)
from orchestrator.experiment.replay_groups import derive_groups
from orchestrator.workloads.trace import TraceOp

HOSTS = [f"h{i}" for i in range(1, 7)]
LOOP = {h: f"10.0.0.{i}" for i, h in enumerate(HOSTS, 1)}
MS = 1_000_000

WALL = TimeScale.unshaped()


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
        "h2": [
            Join(0, 0.0, og[0], "10.0.0.1"),
            Join(1, 1.0, og[1], "10.0.0.1"),
            Join(2, 2.0, og[2], "10.0.0.4"),
        ],
        "h3": [Join(0, 0.0, og[0], "10.0.0.1")],
    }
    assert membership_changes(Mode.IGMP, ops, og) == 4


def test_proxy_schedule_reports_a_group_once_and_withdraws_it_after_its_last_op() -> None:
    ops = [op(0, "h1", ["h2", "h3"]), op(1, "h1", ["h3", "h2"]), op(2, "h1", ["h2"])]
    _, og = derive_groups(ops)
    assert og[0] == og[1] != og[2]
    assert host_reports(ops, og, LOOP) == {
        "h1": [
            Report(0, True, og[0], ("10.0.0.2", "10.0.0.3")),
            Report(1, False, og[0], ()),
            Report(2, True, og[2], ("10.0.0.2",)),
            Report(2, False, og[2], ()),
        ]
    }
    assert membership_changes(Mode.PROXY, ops, og) == 2


@given(ops_strategy)
def test_every_receiver_of_every_op_gets_exactly_one_join(ops: list[TraceOp]) -> None:
    _, og = derive_groups(ops)
    joins = host_joins(ops, og, LOOP)
    got = sorted((j.op, h) for h, js in joins.items() for j in js)
    assert got == sorted((o.id, d) for o in ops for d in o.dst)
    assert membership_changes(Mode.IGMP, ops, og) == len(got)


@given(ops_strategy)
def test_every_group_is_reported_before_its_first_op_and_withdrawn_after_its_last(ops: list[TraceOp]) -> None:
    _, og = derive_groups(ops)
    steps = host_reports(ops, og, LOOP)
    by_group: dict[str, list[Report]] = {}
    for items in steps.values():
        for item in items:
            by_group.setdefault(item.group, []).append(item)
    assert set(by_group) == set(og.values())
    for group, items in by_group.items():
        mine = [o for o in ops if og[o.id] == group]
        (install,) = [i for i in items if i.before]
        (withdraw,) = [i for i in items if not i.before]
        assert install.op == mine[0].id and withdraw.op == mine[-1].id and withdraw.receivers == ()
        assert sorted(install.receivers) == sorted(LOOP[d] for d in mine[0].dst)


def _history(flows=None, ports=None) -> LeafHistory:
    return LeafHistory(flows or {}, ports or {})


def _carriage(op_id: int, host: str, start_ns: int, **kw) -> Carriage:
    where = dict(bfir="leaf1", source="10.0.0.1", group="239.101.0.1", bfer=2, leaf="leaf2", port="eth3")
    return Carriage(op_id, host, start_ns, **{**where, **kw})


def test_membership_latency_runs_from_the_join_to_the_receiver_carried_never_the_lead() -> None:
    """h2 joins 0.5 ms after t; its leaf makes eth3 a member port 0.2 ms later, the source's leaf (the
    BFIR) puts BFER 2 in the (S,G) flow 1 ms after the join: 1 ms, whenever the data left (the lead) or
    its first packet came (before, the latency was first packet minus t: the lead was most of it)."""
    start = 1_000 * MS
    joins = {"h2": [[0, start + 1_500_000, start + 9000 * MS]], "h3": [[0, start + 1 * MS, None]]}
    histories = {
        "leaf1": _history(
            flows={("10.0.0.1", "239.101.0.1"): [(start + 2_500_000, (2,)), (start + 8 * MS, ())]}
        ),
        "leaf2": _history(ports={"239.101.0.1": [(start + 1_700_000, ("eth3",))]}),
    }
    carriages = [
        _carriage(0, "h2", start + 1_500_000),
        _carriage(0, "h3", start + 1 * MS, bfer=3, port="eth4"),
    ]
    for first_packet_ms in (5, 3000):  # a lead of milliseconds or seconds: the same latency
        records = {"h2": {0: {"first_ns": start + first_packet_ms * MS}}, "h3": {}}
        for scale, t, want in ((TimeScale.unshaped(), 0.001, 0.001), (TimeScale(1000), 1e-6, 1e-6)):
            windows = igmp_windows(joins, {0: t}, start, scale)
            r = judge(windows, deliveries_from(records, start, scale), 2, scale, carriages, histories)
            assert r.latencies == pytest.approx((want,))
            assert r.never_carried == 1  # h3: its BFER never got into the flow
            assert (r.wrong, r.missed) == (0, 1)  # h3 joined and never got its packet
            d = r.to_dict()
            assert d["time"] == ("fabric" if scale.shaped else "wall")
            assert d["latency_p50_s"] == d["latency_p99_s"] == d["latency_max_s"] == pytest.approx(want)


def test_carried_means_the_sg_flow_holds_the_bfer_and_the_bfers_port_holds_the_receiver() -> None:
    sg = [(20, (3,)), (40, (2, 3)), (60, ())]
    assert first_holding(sg, lambda v: 2 in v, 45) == 45  # already carried then
    assert first_holding(sg, lambda v: 2 in v, 25) == 40
    assert first_holding(sg, lambda v: 2 in v, 60) is None  # gone, and never again
    assert first_holding(sg, lambda v: 4 in v, 0) is None
    assert first_holding([], lambda v: 2 in v, 0) is None
    # A (*,G) flow (a proxy receiver's standing join) carries data but is not the signalling's doing.
    flows = {("10.0.0.1", "239.101.0.1"): sg, (None, "239.101.0.1"): [(0, (2, 3))]}
    histories = {"leaf1": _history(flows=flows), "leaf2": _history(ports={"239.101.0.1": [(30, ("eth3",))]})}
    assert carried_ns(_carriage(0, "h2", 25), histories) == 40  # the later of the flow and the port
    assert carried_ns(_carriage(0, "h2", 12, bfer=3), histories) == 30
    assert carried_ns(_carriage(0, "h2", 12, leaf="leaf9"), histories) is None  # a leaf that did not answer


def test_the_lead_a_run_needed_is_when_its_last_receiver_was_carried() -> None:
    carried = {(0, "h2"): 7 * MS, (0, "h3"): 9 * MS, (1, "h2"): 30 * MS, (1, "h3"): None}
    assert lead_needed_ns(carried, {0: 1 * MS, 1: 25 * MS}) == 8 * MS
    assert lead_needed_ns({(0, "h2"): None}, {0: 0}) is None
    assert suggested_lead_ms(8 * MS) == 100 and suggested_lead_ms(812 * MS) == 1300


def test_default_leads_come_from_the_modelled_control_plane_and_the_scale() -> None:
    ops = [op(0, "h1", ["h2", "h3"], t=0.0), op(1, "h4", ["h2", "h3"], t=0.0), op(2, "h1", ["h3"], t=1.0)]
    _, og = derive_groups(ops)
    leaf = {"h1": "l1", "h2": "l1", "h3": "l2", "h4": "l2"}
    off = ControlModel()
    assert modelled_join_path_s(Mode.IGMP, ops, og, leaf, off) == 0.0
    assert default_lead_s(Mode.IGMP, 0.0, TimeScale(20000)) == 1.0  # unmodelled: our agents' second
    assert default_lead_s(Mode.PROXY, 0.0, TimeScale(20000)) == 0.0
    model = ControlModel(cost_s=5e-6, cost_record_s=1e-6, robustness=2)
    # t=0: h2 and h3 join 2 groups each, one report sent twice: at l1 (h2) 2 x 5 + 4 x 1 µs, at l2 the
    # same; the BFIR then serves one change report per receiver (2 x 5 µs, 4 records): 14 + 14 µs.
    assert modelled_join_path_s(Mode.IGMP, ops, og, leaf, model) == pytest.approx(28e-6)
    # proxy: the reports of one t at one first-hop router: l1 and l2 get one each at t=0 (6 µs)
    assert modelled_join_path_s(Mode.PROXY, ops, og, leaf, model) == pytest.approx(6e-6)
    lead = default_lead_s(Mode.IGMP, 28e-6, TimeScale(20000))
    assert lead == pytest.approx(1.0 + 2 * 28e-6 * 20000)  # the margin, on the wall clock at 1:20000
    assert default_lead_s(Mode.IGMP, 28e-6, TimeScale(60000)) > lead


def test_a_packet_after_the_leave_or_for_an_op_never_joined_is_wrong() -> None:
    joins = {"h2": [[0, 1 * MS, 3 * MS]]}  # op 1: h2 never joined
    records = {"h2": {0: {"first_ns": 4 * MS}, 1: {"first_ns": 2 * MS}}}
    r = judge(igmp_windows(joins, {0: 0.001, 1: 0.001}, 0, WALL), deliveries_from(records, 0, WALL), 1, WALL)
    assert (r.wrong, r.missed, r.latencies) == (2, 1, ())


def test_proxy_windows_and_the_first_ops_receivers_carried_from_the_report() -> None:
    ops = [op(0, "h1", ["h2"], t=0.001), op(1, "h1", ["h2"], t=0.01)]
    _, og = derive_groups(ops)
    # The report went out 0.2 ms after t (the source's own delay), withdrawn at 20 ms.
    reports = {"h1": [[0, True, 1_200_000], [1, False, 20 * MS]]}
    windows, keys = proxy_windows(ops, og, reports, 0, WALL)
    assert keys == {(0, "h2")}
    assert [(w.op, w.known, w.left) for w in windows] == [(0, 0.001, 0.02), (1, 0.001, 0.02)]
    records = {"h2": {0: {"first_ns": 2 * MS}, 1: {"first_ns": 12 * MS}}}
    flows = {("10.0.0.1", og[0]): [(1_300_000, (2,))]}
    histories = {"leaf1": _history(flows=flows), "leaf2": _history(ports={og[0]: [(0, ("eth3",))]})}
    carriages = [_carriage(0, "h2", 1_200_000, group=og[0])]
    r = judge(
        windows, deliveries_from(records, 0, WALL), 1, WALL, carriages, histories, {0: 1 * MS, 1: 10 * MS}
    )
    assert r.latencies == pytest.approx((0.0001,)) and (r.wrong, r.missed) == (0, 0)
    assert r.lead_needed_s == pytest.approx(0.0003)  # carried 0.3 ms after op 0's t
    # A packet after the withdrawal is wrong.
    late = judge(windows, deliveries_from({"h2": {1: {"first_ns": 21 * MS}}}, 0, WALL), 1, WALL)
    assert (late.wrong, late.missed) == (1, 2)  # and neither op arrived in its window


def test_a_group_never_reported_has_no_window_so_its_packets_are_wrong() -> None:
    ops = [op(0, "h1", ["h2"])]
    _, og = derive_groups(ops)
    windows, keys = proxy_windows(ops, og, {}, 0, WALL)
    assert windows == [] and keys == set()
    r = judge(windows, [Delivery(0, "h2", 0.5)], 0, WALL)
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
        "served": 5,
        "late": 1,
        "wait_ns": 10,
        "service_ns": 0,
        "lateness_ns": 7,
        "busy_ns": 0,
        "unstamped": 0,
    }
    assert "not modelled" in (latency_verdict(0.0, cp, True) or "")
    assert latency_verdict(1e-6, cp, False) == "the run was not faithful"
    assert "1 control messages applied late" in (latency_verdict(1e-6, cp, True) or "")
    assert latency_verdict(1e-6, {**cp, "late": 0}, True) is None
