"""orchestrator.experiment.metrics on hand-made counters: deltas, fabric bytes, source egress, latency,
comparison."""

from __future__ import annotations

import random

import numpy as np
import pytest

from orchestrator.experiment.metrics import (
    CounterError,
    agent_deltas,
    compare_runs,
    completion,
    compute_metrics,
    delivery_stats,
    latency_stats,
    link_deltas,
    link_pairs,
    message_fanout,
    message_latencies,
    most_loaded_link,
    percentile,
    receiver_latencies,
    source_egress,
    theoretical_fanout,
    time_comparable,
    total_fabric,
    trace_fanout,
)
from orchestrator.experiment.records import LinkCounters, MessageResult, RunResult, link_id
from orchestrator.workloads.trace import TraceOp
from tests.unit.orchestrator.experiment import results_fixtures as fx


def lc(link: str, ab: int, ba: int = 0) -> LinkCounters:
    return LinkCounters(
        link=link, a_to_b_bytes=ab, a_to_b_packets=ab // 100, b_to_a_bytes=ba, b_to_a_packets=ba // 100
    )


def msg(
    i: int, expected: list[str], delivered: list[str], lat: dict[str, float], **kw: object
) -> MessageResult:
    return MessageResult.model_validate(
        {
            "id": i,
            "src": "h1",
            "expected": expected,
            "delivered": delivered,
            "bytes": 100,
            "sent_at": 0.0,
            "latency": lat,
            **kw,
        }
    )


# ---------------------------------------------------------------------------------------------- the story


def test_leaf_spine_unicast_source_egress_is_fanout_times_bier() -> None:
    topo = fx.topology()
    uni = compute_metrics(fx.run("unicast", topo))
    bier = compute_metrics(fx.run("net-bier", topo))
    assert bier.source_egress_bytes == fx.OPS * fx.PAYLOAD
    assert uni.source_egress_bytes == 3 * bier.source_egress_bytes
    assert uni.source_egress_packets == 3 * bier.source_egress_packets == 3 * fx.OPS
    assert uni.theoretical_fanout == bier.theoretical_fanout == 3.0
    assert uni.source_egress_bytes / bier.source_egress_bytes == pytest.approx(uni.theoretical_fanout)
    # 12 copies per message cross the fabric in unicast, 8 with BIER; 1e9 bytes on every eth0 never count.
    assert uni.total_fabric_bytes == 12 * fx.OPS * fx.PAYLOAD
    assert bier.total_fabric_bytes == 8 * fx.OPS * fx.PAYLOAD
    assert uni.sources == ["h1"]
    assert uni.max_link == "h1:eth1<->leaf1:eth3" and uni.max_link_from == "h1:eth1"
    assert uni.max_link_share == pytest.approx(3 / 12)
    assert bier.max_link_bytes == fx.OPS * fx.PAYLOAD


def test_compare_leaf_spine_ratios() -> None:
    (c,) = compare_runs(fx.leaf_spine_runs(fx.faithful()))
    assert c.labels == ["unicast", "net-bier"]
    assert c.baseline == "unicast"
    assert c.fanout == 3.0
    (r,) = c.ratios
    assert r.label == "net-bier"
    assert r.source_egress == pytest.approx(3.0)
    assert r.egress_vs_fanout == pytest.approx(1.0)
    assert r.fabric_bytes == pytest.approx(12 / 8)
    assert r.bandwidth_saved == pytest.approx(1 - 8 / 12)
    assert r.max_link == pytest.approx(3.0)
    # Unicast latencies are twice BIER's in the fixture, so it finishes later.
    uni, bier = (col.metrics for col in c.columns)
    assert r.completion_speedup == pytest.approx(uni.completion_time / bier.completion_time)
    assert r.completion_speedup > 1 and r.time_note is None


@pytest.mark.parametrize(
    ("timing", "why"),
    [
        (None, "ran on unshaped links"),
        (fx.faithful().model_copy(update={"scale": None, "faithful": None}), "ran on unshaped links"),
        (
            fx.faithful().model_copy(update={"faithful": False, "reasons": ["node leaf1: CPU saturated"]}),
            "was not faithful (node leaf1: CPU saturated)",
        ),
    ],
)
def test_times_are_compared_only_between_faithful_runs(timing, why) -> None:
    (c,) = compare_runs(fx.leaf_spine_runs(timing))
    (r,) = c.ratios
    assert r.completion_speedup is None and why in (r.time_note or "")
    assert r.source_egress == pytest.approx(3.0)  # bytes are counted whatever the timing


def test_faithful_runs_at_different_scales_are_compared() -> None:
    topo = fx.topology()
    net, uni = fx.run("net-bier", topo, fx.faithful(10000)), fx.run("unicast", topo, fx.faithful())
    # A faithful fabric time is the same at any scale (time.scale: auto runs each mode at its own): one
    # group, and the times compare.
    (both,) = compare_runs([net, uni])
    assert both.labels == ["unicast", "net-bier"] and time_comparable(net, uni) is None
    # ... in fabric time: at 1:10000 a run's wall time is half what it would be at 1:20000.
    uni_m, net_m = compute_metrics(uni), compute_metrics(net)
    assert uni_m.completion_fabric_time is not None and net_m.completion_fabric_time is not None
    fabric = uni_m.completion_fabric_time / net_m.completion_fabric_time
    assert both.ratios[0].completion_speedup == pytest.approx(fabric)
    assert fabric != pytest.approx(uni_m.completion_time / net_m.completion_time)
    # Shaped against unshaped stays apart: an unshaped run's times are the emulator's.
    unshaped = fx.run("unicast", topo, None)
    assert len(compare_runs([net, unshaped])) == 2


def test_fare_and_ecmp_runs_of_one_mode_are_labelled_and_ecmp_is_the_baseline() -> None:
    topo = fx.topology()
    runs = [
        fx.run("unicast", topo, fx.faithful(), settings={"bgp_weights": w}, run_id=f"2026-{w}")
        for w in ("fare", "ecmp")
    ]
    (c,) = compare_runs(runs)
    assert c.labels == ["unicast ecmp", "unicast fare"] and c.baseline == "unicast ecmp"


# ---------------------------------------------------------------------------------------------- counters


def test_link_deltas_subtract_before_and_use_the_sender_tx() -> None:
    before = {
        "a:e1": {"rx_bytes": 10, "rx_packets": 1, "tx_bytes": 100, "tx_packets": 2},
        "b:e1": {"rx_bytes": 50, "rx_packets": 5, "tx_bytes": 7, "tx_packets": 1},
    }
    after = {
        "a:e1": {"rx_bytes": 40, "rx_packets": 4, "tx_bytes": 1100, "tx_packets": 12},
        # b received a little less than a sent: a drop inside the link must not change a->b.
        "b:e1": {"rx_bytes": 1040, "rx_packets": 14, "tx_bytes": 37, "tx_packets": 4},
    }
    (got,) = link_deltas(before, after, [("a:e1", "b:e1")])
    assert got.link == "a:e1<->b:e1"
    assert (got.a_to_b_bytes, got.a_to_b_packets) == (1000, 10)
    assert (got.b_to_a_bytes, got.b_to_a_packets) == (30, 3)


def test_link_deltas_fall_back_to_peer_rx() -> None:
    before = {"b:e1": {"rx_bytes": 0, "rx_packets": 0, "tx_bytes": 0, "tx_packets": 0}}
    after = {"b:e1": {"rx_bytes": 900, "rx_packets": 9, "tx_bytes": 300, "tx_packets": 3}}
    (got,) = link_deltas(before, after, [("a:e1", "b:e1")])
    assert (got.a_to_b_bytes, got.a_to_b_packets, got.b_to_a_bytes) == (900, 9, 300)


def test_link_deltas_errors_name_the_interface() -> None:
    zero = {"rx_bytes": 0, "rx_packets": 0, "tx_bytes": 0, "tx_packets": 0}
    with pytest.raises(CounterError, match=r"a:e1<->b:e1: missing a:e1 \(before/after\) and b:e1 \(after\)"):
        link_deltas({"b:e1": zero}, {}, [("a:e1", "b:e1")])
    with pytest.raises(CounterError, match=r"a:e1 tx_bytes went backwards.*rerun"):
        link_deltas(
            {"a:e1": {**zero, "tx_bytes": 10}, "b:e1": zero},
            {"a:e1": zero, "b:e1": zero},
            [("a:e1", "b:e1")],
        )
    with pytest.raises(CounterError, match="after snapshot: a:e1 has no 'tx_packets'"):
        link_deltas({"a:e1": zero, "b:e1": zero}, {"a:e1": {"tx_bytes": 1}, "b:e1": zero}, [("a:e1", "b:e1")])


def test_link_deltas_skip_management() -> None:
    zero = {"rx_bytes": 0, "rx_packets": 0, "tx_bytes": 0, "tx_packets": 0}
    snap = {"a:eth0": zero, "b:eth0": zero, "a:e1": zero, "b:e1": zero}
    got = link_deltas(snap, snap, [("a:eth0", "b:eth0"), ("a:e1", "b:e1")])
    assert [x.link for x in got] == ["a:e1<->b:e1"]


def test_total_fabric_ignores_management_links_given_directly() -> None:
    links = [lc("a:eth0<->b:eth0", 10**9, 10**9), lc("a:e1<->b:e1", 300, 200)]
    assert total_fabric(links) == (500, 5)
    assert most_loaded_link(links).link == "a:e1<->b:e1"


def test_link_pairs_follow_topology_order() -> None:
    pairs = link_pairs(fx.topology())
    assert pairs[0] == ("leaf1:eth1", "spine1:eth1")
    assert pairs[-1] == ("h8:eth1", "leaf4:eth4")
    assert len(pairs) == 16


def test_agent_deltas() -> None:
    got = agent_deltas({"s1": {"rx": 5}}, {"s1": {"rx": 9, "new": 2}, "s2": {"rx": 1}})
    assert got == {"s1": {"new": 2, "rx": 4}, "s2": {"rx": 1}}
    with pytest.raises(CounterError, match=r"node s1: agent counter 'rx' went backwards.*restarted"):
        agent_deltas({"s1": {"rx": 5}}, {"s1": {"rx": 1}})


# ---------------------------------------------------------------------------------------------- bytes


def test_source_egress_counts_both_ends_and_every_port() -> None:
    links = [
        lc("G1:eth1<->L1:eth1", 100, 5),
        lc("G1:eth2<->L2:eth1", 200, 5),
        lc("L3:eth1<->G1:eth3", 7, 400),  # G1 is the b side here
        lc("G2:eth1<->L1:eth2", 1000, 5),
        lc("G1:eth0<->mgmt:eth9", 10**6, 0),
    ]
    assert source_egress(links, ["G1"]) == (700, 7)
    assert source_egress(links, ["G1", "G2"]) == (1700, 17)
    assert source_egress(links, []) == (0, 0)


def test_most_loaded_link_direction_share_and_ties() -> None:
    links = [lc("a:e1<->b:e1", 10, 60), lc("c:e1<->d:e1", 60, 0), lc("e:e1<->f:e1", 0, 0)]
    got = most_loaded_link(links)
    assert (got.link, got.sender, got.bytes) == ("a:e1<->b:e1", "b:e1", 60)
    assert got.share == pytest.approx(60 / 130)
    empty = most_loaded_link([lc("a:e1<->b:e1", 0, 0)])
    assert (empty.link, empty.sender, empty.bytes, empty.share) == (None, None, 0, 0.0)


# ---------------------------------------------------------------------------------------------- latency


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 99, 100, 101, 1000])
def test_percentile_matches_numpy_inverted_cdf(n: int) -> None:
    rng = random.Random(n)
    xs = sorted(rng.lognormvariate(0, 1) for _ in range(n))
    for p in (1, 10, 25, 50, 75, 90, 95, 99, 99.5, 100):
        assert percentile(xs, p) == float(np.percentile(xs, p, method="inverted_cdf")), (n, p)


def test_percentile_rank_is_exact_where_numpy_rounds() -> None:
    xs = [float(i) for i in range(1, 1001)]
    # 99.9% of 1000 is rank 999 exactly; numpy's float p/100*n lands a hair above 999 and takes rank 1000.
    assert percentile(xs, 99.9) == 999.0
    assert float(np.percentile(xs, 99.9, method="inverted_cdf")) == 1000.0


def test_percentile_nearest_rank_by_hand() -> None:
    xs = [float(i) for i in range(1, 11)]
    assert percentile(xs, 90) == 9.0  # rank 9 exactly: float rounding must not push it to 10
    assert percentile(xs, 91) == 10.0
    assert percentile(xs, 50) == 5.0
    assert percentile(xs, 99) == 10.0
    assert percentile([3.0], 1) == 3.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"\(0, 100\]"):
        percentile(xs, 0)


def test_latency_stats() -> None:
    s = latency_stats([0.004, 0.001, 0.002, 0.003])
    assert (s.count, s.p50, s.p90, s.p99, s.max) == (4, 0.002, 0.004, 0.004, 0.004)
    assert s.mean == pytest.approx(0.0025)
    empty = latency_stats([])
    assert (empty.count, empty.p50, empty.max, empty.mean) == (0, None, None, None)


def test_completion_and_per_message_latency() -> None:
    ms = [
        msg(0, ["h2", "h3"], ["h2", "h3"], {"h2": 0.5, "h3": 1.5}, sent_at=10.0),
        msg(1, ["h2"], ["h2"], {"h2": 0.25}, sent_at=11.0),
        msg(2, ["h2", "h3"], ["h2"], {"h2": 0.1}, sent_at=11.5),  # h3 missing: no message latency
        msg(3, ["h2"], ["h2", "h9"], {"h2": 0.1, "h9": 9.0}, sent_at=12.0),  # wrong receiver's latency
    ]
    first, last, ct = completion(ms)
    assert (first, last) == (10.0, 21.0)
    assert ct == pytest.approx(11.0)
    assert receiver_latencies(ms) == [0.5, 1.5, 0.25, 0.1, 0.1]
    assert message_latencies(ms) == [1.5, 0.25, 0.1]
    assert completion([]) == (None, None, None)
    assert completion([msg(0, ["h2"], [], {}, sent_at=3.0)]) == (3.0, None, None)


def test_delivery_stats() -> None:
    ms = [
        msg(0, ["h2", "h3"], ["h2", "h3"], {}, duplicates={"h2": 2}),
        msg(1, ["h2", "h3", "h4"], ["h3", "h7"], {}),
        msg(2, ["h5"], [], {}),
    ]
    d = delivery_stats(ms)
    assert (d.messages, d.complete_messages, d.expected, d.delivered) == (3, 1, 6, 3)
    assert (d.missing, d.duplicates, d.wrong_receivers) == (3, 2, 1)
    assert d.ratio == 0.5 and not d.ok
    ok = delivery_stats(ms[:1])
    assert ok.ok and ok.ratio == 1.0


def test_payload_delivered_bytes_counts_what_expected_receivers_got() -> None:
    """Not bytes x expected receivers: a missing receiver adds nothing, a wrong one neither."""
    run = fx.run("unicast")
    run = run.model_copy(
        update={
            "messages": [
                msg(0, ["h2", "h3"], ["h2", "h3"], {}),  # 2 x 100
                msg(1, ["h2", "h3", "h4"], ["h3", "h7"], {}),  # h3 only: 100; h7 was not expected
                msg(2, ["h5"], [], {}),  # nothing
            ]
        }
    )
    m = compute_metrics(run)
    assert (m.payload_bytes, m.payload_delivered_bytes) == (300, 300)


# ---------------------------------------------------------------------------------------------- fan-out


def test_theoretical_fanout_is_byte_weighted() -> None:
    assert theoretical_fanout([(1000, 2), (3000, 4)]) == pytest.approx(3.5)
    assert theoretical_fanout([]) is None
    ops = [
        TraceOp(t=0, op="multicast", src="h1", dst=["h2", "h3"], bytes=1000, id=0),
        TraceOp(t=0, op="multicast", src="h1", dst=["h2", "h3", "h4", "h5"], bytes=3000, id=1),
        TraceOp(t=0, op="unicast", src="h1", dst=["h2"], bytes=10**6, id=2),
    ]
    # Unweighted the mean would be 3.0; unicast ops are not part of the multicast fan-out.
    assert trace_fanout(ops) == pytest.approx(3.5)
    assert trace_fanout(ops[2:]) is None
    ms = [msg(0, ["h2", "h3"], [], {}, bytes=1000), msg(1, ["h2", "h3", "h4", "h5"], [], {}, bytes=3000)]
    assert message_fanout(ms) == pytest.approx(3.5)


def test_compute_metrics_falls_back_to_trace_fanout_without_messages() -> None:
    run = fx.run("unicast").model_copy(update={"messages": []})
    run.meta.trace = fx.trace_info(fanout_weighted=2.5)
    m = compute_metrics(run)
    assert m.theoretical_fanout == 2.5
    assert m.sources == [] and m.source_egress_bytes == 0
    assert m.completion_time is None and m.latency.count == 0


# ---------------------------------------------------------------------------------------------- comparison


def test_compare_groups_by_lab_and_trace_and_orders_modes() -> None:
    topo = fx.topology()
    other_trace = fx.trace_info(sha256="cd" * 32, file="other.jsonl")
    runs = [
        fx.run("ina", topo, run_id="r5"),
        fx.run("net-bier", topo, run_id="r4"),
        fx.run("host-bier", topo, run_id="r3"),
        fx.run("unicast", topo, run_id="r2"),
        fx.run("unicast", topo, run_id="r1"),
        fx.run("net-bier", topo, run_id="r6", trace=other_trace),
        fx.run("zeta", topo, run_id="r7"),
    ]
    groups = compare_runs(runs)
    assert [(g.lab, g.trace) for g in groups] == [
        ("leaf-spine", "fanout3.jsonl"),
        ("leaf-spine", "other.jsonl"),
    ]
    main, other = groups
    assert main.labels == ["unicast #1", "unicast #2", "host-bier", "net-bier", "ina", "zeta"]
    assert [c.run.run_id for c in main.columns[:2]] == ["r1", "r2"]
    assert main.baseline == "unicast #1"
    assert [r.label for r in main.ratios] == ["unicast #2", "host-bier", "net-bier", "ina", "zeta"]
    assert main.ratios[0].source_egress == pytest.approx(1.0)
    assert other.labels == ["net-bier"]
    assert other.baseline is None and other.ratios == []


def test_ratios_none_when_a_side_is_zero() -> None:
    uni = fx.run("unicast")
    silent = fx.run("net-bier").model_copy(update={"links": [], "messages": []})
    (c,) = compare_runs([uni, silent])
    (r,) = c.ratios
    assert r.source_egress is None and r.egress_vs_fanout is None and r.completion_speedup is None
    assert r.bandwidth_saved == pytest.approx(1.0)


def test_links_with_no_traffic_give_zero_metrics() -> None:
    run = RunResult(meta=fx.meta("unicast"), links=[lc(link_id("a:e1", "b:e1"), 0)])
    m = compute_metrics(run)
    assert (m.total_fabric_bytes, m.max_link, m.max_link_share) == (0, None, 0.0)
