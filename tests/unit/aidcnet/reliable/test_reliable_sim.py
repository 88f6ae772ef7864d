"""Discrete-event simulation of one reliable flow over host-BIER on leaf-spine (aidcnet.reliable.sim).

Properties at 0, 1 and 5 % loss on every link, with and without in-network aggregation: every receiver
delivers every message exactly once and in order; ACKs at the BFIR per data packet stay within its
first-hop branch count with aggregation and reach N without; retransmissions happen only when
something was dropped.  The numbers are printed (run with -s) for docs/reliability.md.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.sender import SenderConfig
from aidcnet.reliable.sim import SimConfig, SimResult, simulate, summary

CFG = SimConfig()
EXPECTED = [i.to_bytes(4, "big") * (CFG.size // 4) for i in range(CFG.messages)]


def check_exactly_once_in_order(res: SimResult, cfg: SimConfig = CFG) -> None:
    assert res.failed == {}
    for bfr_id, got in res.delivered.items():
        assert [p for _, p in got] == EXPECTED, f"receiver {bfr_id}"
        seqs = [s for s, _ in got]
        assert (
            seqs[0] == cfg.isn and seqs[-1] == (cfg.isn + cfg.messages - 1) & 0xFFFFFFFF
        )  # crossed the wrap
    assert res.completed_at is not None


@pytest.mark.parametrize("loss", [0.0, 0.01, 0.05])
def test_exactly_once_and_ack_implosion_absorbed(loss: float) -> None:
    agg = simulate(dataclasses.replace(CFG, loss=loss, aggregate=True))
    e2e = simulate(dataclasses.replace(CFG, loss=loss, aggregate=False))
    print(f"\n{summary(f'aggregated loss {loss:.0%}', agg)}\n{summary(f'end-to-end loss {loss:.0%}', e2e)}")
    print(
        f"ACKs at source per packet, end-to-end / aggregated: {e2e.acks_per_packet / agg.acks_per_packet:.1f}"
    )
    for res in (agg, e2e):
        check_exactly_once_in_order(res)
        assert (res.retransmitted > 0) == (res.dropped_bytes > 0)
    assert agg.branches == 1
    assert agg.acks_per_packet <= agg.branches
    assert e2e.at_source["agg-ack"] == e2e.at_source["agg-ack-partial"] == 0
    assert agg.acks_per_packet < e2e.acks_per_packet <= e2e.receivers
    if loss == 0:
        assert e2e.acks_per_packet == e2e.receivers  # every receiver acknowledges every packet
        # one AGG-ACK per report_every windows: the BFRs delay each for the next, as receivers do ACKs
        every = CFG.aggregator.report_every
        assert agg.at_source["agg-ack"] == -(-agg.sent // every) and agg.duplicates == e2e.duplicates == 0


def test_wider_aggregation_window_sends_fewer_acks() -> None:
    res = simulate(
        dataclasses.replace(CFG, loss=0.01, aggregator=AggregatorConfig(window=8, partial_after=0.003))
    )
    print(f"\n{summary('aggregated window 8, loss 1%', res)}")
    check_exactly_once_in_order(res)
    assert res.acks_per_packet <= res.branches / 4


def test_over_budget_falls_back_to_end_to_end_without_losing_data() -> None:
    cfg = dataclasses.replace(CFG, loss=0.01, aggregator=AggregatorConfig(budget=8, partial_after=0.003))
    res = simulate(cfg)
    label = "aggregated budget 8 entries, loss 1%"
    print(f"\n{summary(label, res)}; over-budget {res.aggregators['over-budget']}")
    check_exactly_once_in_order(res)
    assert res.aggregators["over-budget"] > 0 and res.aggregators["passed-no-entry"] > 0
    assert res.at_source["ack"] > 0  # raw ACKs reached the source


def test_dead_receiver_is_declared_failed_and_the_others_complete() -> None:
    cfg = dataclasses.replace(CFG, loss=0.01, dead_hosts=("h3-2",), messages=100)
    res = simulate(cfg)
    print(f"\n{summary('aggregated, h3-2 dead, loss 1%', res)}")
    dead = 6  # h3-2: hosts are numbered leaf by leaf
    assert list(res.failed) == [dead]
    assert res.delivered[dead] == []
    for bfr_id, got in res.delivered.items():
        if bfr_id != dead:
            assert [p for _, p in got] == EXPECTED[:100]
    assert res.completed_at is not None and res.completed_at >= CFG.sender.fail_after
    # No part gave a deadline already past right after its poll (it would spin an agent's timer).
    assert res.stale_deadlines == {}


@settings(max_examples=12, deadline=None)
@example(seed=3289, loss=0.05, aggregate=True, window=1, isn=0)  # above one ACK per packet, still exact
@example(seed=26, loss=0.05, aggregate=True, window=4, isn=0)  # 1.2 per packet with windows of 4, still exact
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from([0.02, 0.05, 0.1]),
    aggregate=st.booleans(),
    window=st.sampled_from([1, 4]),
    isn=st.integers(0, 2**32 - 1),
)
def test_any_seed_delivers_exactly_once(
    seed: int, loss: float, aggregate: bool, window: int, isn: int
) -> None:
    # fail_after far above the longest backoff (6 ms × 2**6): at 10 % loss a live receiver can stay
    # unheard for seconds, and 2 s declared one failed (seed 0, end to end), which this test is not about.
    cfg = dataclasses.replace(
        CFG,
        seed=seed,
        loss=loss,
        aggregate=aggregate,
        isn=isn,
        messages=60,
        sender=SenderConfig(window=32, fail_after=60.0),
        aggregator=AggregatorConfig(window=window, partial_after=0.003),
    )
    res = simulate(cfg)
    assert res.failed == {}
    assert res.stale_deadlines == {}
    for got in res.delivered.values():
        assert [p for _, p in got] == EXPECTED[:60]
        assert [s for s, _ in got] == [(isn + k) & 0xFFFFFFFF for k in range(60)]
    if aggregate and loss <= 0.02 and window > 1:
        # Windows of four sequences leave room under one ACK per first-hop branch per packet at 2% (400
        # seeds: none above, at most 0.70). At 5% the repairs' AGG-ACKs and the partials take some seeds
        # above it (42 of 400, up to 1.33: seed 26 gives 1.2), and windows of one sequence at any loss, so
        # the bound is claimed at 2% only. Measured, reported in docs/reliability.md.
        assert res.acks_per_packet <= res.branches


SHAPED = dataclasses.replace(
    CFG, rate=20e6, queue_bytes=256_000, adaptive_rto=True, sender=SenderConfig(window=32, fail_after=60.0)
)


def test_adaptive_partial_timers_and_cwnd_cut_partials_for_queued_windows() -> None:
    # 20 Mbit/s from the source, 5 toward the hosts: windows queue below the BFRs for tens of ms, far above
    # their 3 ms floor. No drops (the queues hold it all), so every partial AGG-ACK was sent for data that
    # was only queued. The BFIR's RTO is long so that only the BFRs' timers and the window are on trial.
    def run(adaptive: bool, cwnd: int | None) -> SimResult:
        cfg = dataclasses.replace(
            SHAPED,
            host_rate=5e6,
            rto=0.5,
            adaptive_rto=False,
            sender=SenderConfig(window=32, fail_after=60.0, initial_cwnd=cwnd),
            aggregator=AggregatorConfig(partial_after=0.003, adaptive=adaptive),
        )
        res = simulate(cfg)
        print(f"\n{summary(f'shaped 20/5 Mbit/s no loss, adaptive {adaptive}, initial cwnd {cwnd}', res)}")
        check_exactly_once_in_order(res, cfg)
        assert res.dropped_bytes == 0
        return res

    fixed, adaptive, both = run(False, None), run(True, None), run(True, 4)
    assert fixed.acks_per_packet > 3 * fixed.branches  # the lab's failure, reproduced in-process
    assert adaptive.acks_per_packet < fixed.acks_per_packet
    # Measured 1.083: not yet the bound of 1 (docs/reliability.md, "Not yet built").
    assert both.acks_per_packet < 1.2 * both.branches
    assert both.retransmitted < adaptive.retransmitted < fixed.retransmitted


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from([0.0, 0.01, 0.05]),
    queue=st.sampled_from([8000, 32000]),
)
def test_shaped_tail_drop_links_deliver_exactly_once(seed: int, loss: float, queue: int) -> None:
    cfg = dataclasses.replace(
        SHAPED,
        seed=seed,
        loss=loss,
        queue_bytes=queue,
        messages=60,
        sender=SenderConfig(window=32, fail_after=60.0, initial_cwnd=4),
    )
    res = simulate(cfg)
    assert res.failed == {}
    assert res.stale_deadlines == {}
    for got in res.delivered.values():
        assert [p for _, p in got] == EXPECTED[:60]


SUPERPOD = dataclasses.replace(
    CFG,
    topology="superpod",
    gpus=12,
    planes=4,
    flows=2,
    messages=60,
    sender=SenderConfig(window=32, fail_after=60.0),
)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), loss=st.sampled_from([0.02, 0.05]))
@example(seed=1474644684, loss=0.02)  # 29 copies dropped, 30 AGG-NACKs: two repairs missed late askers
def test_the_superpods_source_hears_one_nack_per_dropped_packet_or_repair_round_again(
    seed: int, loss: float
) -> None:
    """Seed 000's NACK storm: end to end every receiver that lost a packet asks the source (one drop on the
    source's link makes all of them ask); with merging in the plane leaf, the source hears one AGG-NACK per
    flow, sequence and repair round: at most one per DATA copy the links dropped, plus one per round a
    repair left askers in (late, or held off at the source), which opens again at once. CI found a seed
    where the plain bound did not hold (30 AGG-NACKs for 29 drops), so the bound counts those rounds."""
    agg = simulate(dataclasses.replace(SUPERPOD, seed=seed, loss=loss))
    e2e = simulate(dataclasses.replace(SUPERPOD, seed=seed, loss=loss, aggregate=False))
    for res in (agg, e2e):
        assert res.failed == {} and res.completed_at is not None
        for (_rx, _flow), got in res.delivered_flows.items():
            assert [p for _, p in got] == EXPECTED[:60]
    assert agg.branches == 1 and agg.at_source["nack"] == 0, "a receiver's NACK passed unmerged"
    again = agg.aggregators["round-again"]
    assert agg.nacks <= agg.branches * agg.dropped_data + again, (agg.nacks, agg.dropped_data, again)
    assert agg.dropped_data == 0 or agg.at_source["agg-nack"] > 0


def test_on_the_superpod_at_five_percent_the_source_repairs_from_the_merged_nacks() -> None:
    """The numbers docs/reliability.md quotes for the superpod's shape (printed with -s): NACKs and ACKs at
    the source, repair path, completion against end to end."""
    for loss in (0.0, 0.05):
        agg = simulate(dataclasses.replace(SUPERPOD, loss=loss))
        e2e = simulate(dataclasses.replace(SUPERPOD, loss=loss, aggregate=False))
        print(f"\n{summary(f'superpod aggregated {loss:.0%}', agg)}")
        print(summary(f"superpod end to end {loss:.0%}", e2e))
        assert agg.completed_at is not None and e2e.completed_at is not None
        print(f"completion aggregated/end to end {agg.completed_at / e2e.completed_at:.2f}x")
        if loss:
            assert agg.repair_path == 2.0  # source, its plane leaf, the receiver: the only path there is
            assert agg.sender["agg-nack"] > 0 and agg.acks_per_packet < e2e.acks_per_packet
        else:
            assert agg.retransmitted == e2e.retransmitted == 0
