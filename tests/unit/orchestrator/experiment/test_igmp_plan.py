"""Membership planning and delivery metrics of the igmp/proxy replay modes (experiment/igmp_plan.py)."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.igmp.codec import decode, encode
from aidcnet.igmp.extensions import ProxyReport, proxy_report
from orchestrator.experiment.igmp_plan import (
    IPV4_RA_HEADER,
    Delivery,
    ReportStep,
    Window,
    delivery_metrics,
    plan_joins,
    plan_reports,
    report_bytes,
)
from orchestrator.experiment.replay_groups import derive_groups
from orchestrator.workloads.trace import TraceOp

HOSTS = [f"G{i}" for i in range(1, 7)]


def op(i: int, src: str, dst: list[str]) -> TraceOp:
    return TraceOp(t=float(i), op="multicast", src=src, dst=dst, bytes=1000, id=i)


ops_strategy = st.lists(
    st.tuples(st.sampled_from(HOSTS), st.sets(st.sampled_from(HOSTS[1:]), min_size=1, max_size=4)),
    max_size=12,
).map(lambda xs: [op(i, s, sorted(d - {s} or {"G7" if s != "G7" else "G2"})) for i, (s, d) in enumerate(xs)])


def test_joins_precede_and_leaves_follow_each_op() -> None:
    ops = [op(0, "G1", ["G2", "G3"]), op(1, "G1", ["G2"])]
    _, op_group = derive_groups(ops)
    steps = plan_joins(ops, op_group)
    assert [(s.op, s.host, s.join) for s in steps] == [
        (0, "G2", True),
        (0, "G3", True),
        (0, "G2", False),
        (0, "G3", False),
        (1, "G2", True),
        (1, "G2", False),
    ]
    assert steps[0].group != steps[4].group


@given(ops_strategy)
def test_every_join_has_one_leave_for_the_same_op(ops: list[TraceOp]) -> None:
    _, op_group = derive_groups(ops)
    steps = plan_joins(ops, op_group)
    joins = [(s.op, s.host, s.group) for s in steps if s.join]
    leaves = [(s.op, s.host, s.group) for s in steps if not s.join]
    assert joins == leaves
    assert len(joins) == sum(len(o.dst) for o in ops)


def test_reports_install_once_and_withdraw_after_last_use() -> None:
    ops = [op(0, "G1", ["G2"]), op(1, "G1", ["G3"]), op(2, "G1", ["G2"])]
    _, op_group = derive_groups(ops)
    steps = plan_reports(ops, op_group)
    assert [(s.op, s.receivers, s.before) for s in steps] == [
        (0, ("G2",), True),
        (1, ("G3",), True),
        (1, (), False),
        (2, (), False),
    ]


@given(ops_strategy)
def test_each_group_reported_once_and_withdrawn_once(ops: list[TraceOp]) -> None:
    _, op_group = derive_groups(ops)
    steps = plan_reports(ops, op_group)
    installs = [s.group for s in steps if s.receivers]
    withdraws = [s.group for s in steps if not s.receivers]
    assert sorted(installs) == sorted(withdraws) == sorted(set(op_group.values()))
    order = [s.group for s in steps]
    for g in installs:  # withdrawal comes after the install
        assert order.index(g) < len(order) - 1 - order[::-1].index(g)


def test_report_bytes_count_a_decodable_proxy_report() -> None:
    addresses = {"G2": IPv4Address("10.0.0.2"), "G3": IPv4Address("10.0.0.3")}
    step = ReportStep(0, "G1", "239.100.0.1", ("G2", "G3"), True)
    n = report_bytes(step, IPv4Address("10.0.0.1"), addresses)
    # IGMPv3 report: 8 header + record (8 + 4 source) + TLV area; RA IPv4 header on top
    wire = encode(
        ProxyReport(
            IPv4Address("239.100.0.1"), IPv4Address("10.0.0.1"), (addresses["G2"], addresses["G3"])
        ).to_report()
    )
    assert n == IPV4_RA_HEADER + len(wire)
    got = proxy_report(decode(wire))
    assert got is not None and got.receivers == (addresses["G2"], addresses["G3"])
    empty = report_bytes(ReportStep(0, "G1", "239.100.0.1", (), False), IPv4Address("10.0.0.1"), addresses)
    assert n - empty == 8


def test_metrics_count_wrong_missed_and_latency() -> None:
    windows = [Window(0, "G2", known=1.0, left=2.0), Window(0, "G3", known=1.0, left=2.0)]
    deliveries = [
        Delivery(0, "G2", 1.25),
        Delivery(0, "G2", 1.5),  # second copy in window is not wrong
        Delivery(0, "G3", 2.5),  # after its leave: wrong, and G3 missed
        Delivery(0, "G4", 1.5),  # never a member: wrong
    ]
    m = delivery_metrics(windows, deliveries)
    assert m.latencies == (0.25,)
    assert m.wrong == 2
    assert m.missed == 1


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(HOSTS), st.floats(0, 10)), max_size=30))
def test_exact_delivery_has_nothing_wrong_or_missed(points: list[tuple[int, str, float]]) -> None:
    windows = {(o, h): Window(o, h, known=t - 0.5, left=t + 0.5) for o, h, t in points}
    deliveries = [Delivery(o, h, windows[(o, h)].known + 0.5) for o, h in windows]
    m = delivery_metrics(windows.values(), deliveries)
    assert (m.wrong, m.missed) == (0, 0)
    assert m.latencies == tuple(0.5 for _ in windows)
