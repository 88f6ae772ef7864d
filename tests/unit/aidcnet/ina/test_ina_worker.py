"""The worker side of AllReduce (aidcnet.ina.worker) driven through real aggregators on Figure 1's VAT:
send window, retransmit on timeout, result assembly, and the ring baseline, under reordering,
duplication and loss. The property: every worker ends with numpy's reduction of all arrays, bit-exact
for int32 (wrapping), within fixedpoint.error_bound for fixed32 float sums."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aidcnet.bier.bitstring import ids_from_bitstring
from aidcnet.ina.aggregator import Aggregator, JobConfig
from aidcnet.ina.fixedpoint import choose_fixed_point_scale, error_bound
from aidcnet.ina.header import DType, InaHeader, Op
from aidcnet.ina.vat import Action, from_draft_notation
from aidcnet.ina.worker import (
    AllreduceJob,
    ReliableSender,
    RingAllreduce,
    SendWindow,
    ack_for,
    digest,
    exact_result,
    float_tolerance,
    job_fixed_point_scale,
    out_of_tolerance,
    reference,
    worker_array,
)
from tests.unit.aidcnet.ina.legacy_timer import FixedTimerWindow

# Figure 1 of the draft: s1 [11000000], s7 [00110000], s6 root [11110000]; w_i is BFR-id i.
FIG1 = {"s1": "11000000", "s7": "00110000", "s6": "11110000"}


def test_figure1_bitmaps_are_the_vat_of_the_plan() -> None:
    assert {s: from_draft_notation(t) for s, t in FIG1.items()} == {"s1": 0b11, "s7": 0b1100, "s6": 0b1111}
    assert ids_from_bitstring(0, from_draft_notation(FIG1["s6"]), 256) == [1, 2, 3, 4]


def fig1(op: Op, dtype: DType, budget: int) -> dict[str, Aggregator]:
    common = {"job_id": 1, "bsl": 256, "op": op, "dtype": dtype, "slot_budget": budget}
    return {
        "s1": Aggregator([JobConfig(abm=(1, 2), parent="s6", **common)]),  # type: ignore[arg-type]
        "s7": Aggregator([JobConfig(abm=(3, 4), parent="s6", **common)]),  # type: ignore[arg-type]
        "s6": Aggregator([JobConfig(abm=(1, 2, 3, 4), root=True, **common)]),  # type: ignore[arg-type]
    }


# The physical paths toward the root s6 (transit switches s2, s5 pass packets on unchanged).
FIRST_HOP = {1: "s1", 2: "s1", 3: "s7", 4: "s7"}
NEXT_HOP = {"s1": "s7", "s7": "s6"}


def run_fig1(
    arrays: dict[int, np.ndarray],
    op: Op,
    dtype: DType,
    rng: random.Random,
    loss: float,
    dup: float,
    window: int,
    per_chunk: int,
    scale: int = 0,
) -> tuple[dict[int, AllreduceJob], dict[str, int]]:
    switches = fig1(op, dtype, budget=2 * window)
    workers = {
        w: AllreduceJob(a, job_id=1, bfr_id=w, bsl=256, op=op, dtype=dtype, per_chunk=per_chunk,
                        window=window, timeout=1.0, scale=scale)
        for w, a in arrays.items()
    }  # fmt: skip
    now = 0.0
    net: list[tuple[str | int, bytes]] = [(FIRST_HOP[w], p) for w, j in workers.items() for p in j.due(now)]
    faults = {"lost": 0, "duplicated": 0, "timeouts": 0}
    while not all(j.complete for j in workers.values()):
        if not net:
            # Quiet network: time passes until the first worker's retransmit timer fires.
            now = min(d for j in workers.values() if (d := j.window.next_deadline()) is not None)
            faults["timeouts"] += 1
            assert faults["timeouts"] < 500, "never converged"
            net += [(FIRST_HOP[w], p) for w, j in workers.items() for p in j.due(now)]
            continue
        dest, wire = net.pop(rng.randrange(len(net)))
        if faults["lost"] < 200 and rng.random() < loss:
            faults["lost"] += 1
            continue
        if faults["duplicated"] < 200 and rng.random() < dup:
            faults["duplicated"] += 1
            net.append((dest, wire))
        hdr = InaHeader.decode(wire)
        if isinstance(dest, int):
            job = workers[dest]
            if job.on_result(hdr, now):
                net += [(FIRST_HOP[dest], p) for p in job.due(now)]
            continue
        d = switches[dest].handle(hdr)
        if d.action is Action.FORWARD:
            net.append((NEXT_HOP[dest], wire))
        elif d.action is Action.TO_PARENT:
            assert d.packet is not None
            net.append((NEXT_HOP[dest], d.packet.encode()))
        elif d.action is Action.DISSEMINATE:
            assert d.packet is not None
            net += [(w, d.packet.encode()) for w in ids_from_bitstring(d.si, d.bitstring, d.bsl)]
        else:
            # A network duplicate may arrive after its chunk's slot was reused (stale-chunk): by the
            # window rule nobody needs that chunk any more, so the drop is right.
            assert d.action is Action.ABSORB or d.reason in ("duplicate", "stale-chunk"), d
    return workers, faults


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    st.integers(1, 300),
    st.sampled_from([Op.SUM, Op.MIN, Op.MAX, Op.PROD]),
    st.sampled_from([0.0, 0.05, 0.2]),
    st.sampled_from([0.0, 0.1]),
    st.integers(1, 4),
    st.integers(1, 64),
    st.randoms(use_true_random=False),
)
def test_int32_allreduce_is_bit_exact(n, op, loss, dup, window, per_chunk, rng) -> None:
    arrays = {w: worker_array(rng.randrange(1 << 30), w, n, DType.INT32) for w in range(1, 5)}
    workers, _ = run_fig1(arrays, op, DType.INT32, rng, loss, dup, window, per_chunk)
    expected = reference(list(arrays.values()), op)
    if op is Op.SUM:  # wraparound, checked without numpy's int32 arithmetic
        wide = np.stack(list(arrays.values())).astype(object).sum(axis=0)
        assert expected.tolist() == [(int(v) + 2**31) % 2**32 - 2**31 for v in wide]
    for job in workers.values():
        assert job.out.tolist() == expected.tolist()


@SETTINGS
@given(
    st.integers(1, 200),
    st.sampled_from([0.0, 0.2]),
    st.sampled_from([0.0, 0.1]),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
def test_fixed32_float_sum_within_the_stated_bound(n, loss, dup, window, rng) -> None:
    """Stated tolerance: |result - exact| <= 4 * 2**-(scale+1) + 2**-24 * |result| per element."""
    arrays = {w: worker_array(rng.randrange(1 << 30), w, n, DType.FLOAT32) for w in range(1, 5)}
    scale = choose_fixed_point_scale(1.0, 4)
    workers, _ = run_fig1(arrays, Op.SUM, DType.FIXED32, rng, loss, dup, window, 16, scale=scale)
    exact = np.stack(list(arrays.values())).astype(np.float64).sum(axis=0)
    for job in workers.values():
        got = job.out.astype(np.float64)
        assert np.all(np.abs(got - exact) <= error_bound(4, scale, got))


def test_loss_really_causes_retransmits_and_late_results() -> None:
    rng = random.Random(3)
    arrays = {w: worker_array(7, w, 500, DType.INT32) for w in range(1, 5)}
    workers, faults = run_fig1(arrays, Op.SUM, DType.INT32, rng, 0.2, 0.1, 4, 32)
    assert faults["lost"] > 0 and faults["timeouts"] > 0
    assert sum(j.window.retransmits for j in workers.values()) > 0
    assert all(digest(j.out) == digest(reference(list(arrays.values()), Op.SUM)) for j in workers.values())


def test_send_window_keeps_at_most_window_chunks_past_the_lowest_missing_result() -> None:
    w = SendWindow(chunks=10, window=3, timeout=1.0)
    assert w.due(0.0) == [(0, False), (1, False), (2, False)]
    assert w.due(0.5) == []
    assert w.done(1, 0.5) and not w.done(1, 0.5)  # a duplicate result
    assert w.due(0.6) == []  # chunk 0 still open: the window does not slide past it
    assert w.done(0, 0.7)
    assert w.due(0.7) == [(3, False), (4, False)]
    # Samples 0.5 and 0.7 s: SRTT 0.525, RTTVAR 0.2375, RTO 1.475 (RFC 6298 §2.3); the timer restarted
    # with the result at 0.7 (§5.3), so chunk 2 (sent at 0.0) is overdue at 0.7 + 1.475.
    assert w.rto.rto == pytest.approx(1.475)
    assert w.due(2.17) == []
    assert w.due(2.18) == [(2, True)]
    assert w.retransmits == 1 and not w.complete


def test_a_timeout_resends_only_the_oldest_chunk_and_backs_off() -> None:
    w = SendWindow(chunks=4, window=4, timeout=0.2, min_rto=0.05)
    assert len(w.due(0.0)) == 4
    # Every chunk is overdue at 0.25, but only the oldest goes again, the RTO doubles and the timer
    # restarts (RFC 6298 §5.4-5.6).
    assert w.due(0.25) == [(0, True)] and w.rto.rto == pytest.approx(0.4)
    assert w.due(0.6) == []  # chunk 1 (sent at 0) now times out at 0.25 + 0.4
    assert w.due(0.65) == [(1, True)] and w.rto.rto == pytest.approx(0.8)
    # Chunk 0's result: ambiguous (it was sent twice), so no sample and the backed-off RTO stays (Karn),
    # but it is news: the timer restarts.
    assert w.done(0, 0.7) and w.rto.samples == 0 and w.rto.rto == pytest.approx(0.8)
    assert w.next_deadline() == pytest.approx(0.7 + 0.8)
    # Chunk 2, sent once, gives a sample of 0.8 s: RTO = 0.8 + 4 * 0.4, the backoff collapses.
    assert w.done(2, 0.8) and w.rto.samples == 1 and w.rto.rto == pytest.approx(2.4)
    assert w.retransmits == 2


def test_results_that_keep_coming_hold_the_timer_off() -> None:
    """A round trip that jumps (a queue filled at once): while results arrive, chunks sent long ago are
    not resent even though each has waited longer than the RTO since its own send."""
    w = SendWindow(chunks=40, window=8, timeout=1.0, min_rto=0.01)
    w.due(0.0)
    assert w.done(0, 0.01)  # one fast sample: RTO = 0.03
    now = 0.01
    for chunk in range(1, 8):  # the rest come back one every 20 ms: each waited far past 0.03 s
        now += 0.02
        assert w.due(now - 0.001) == [] or all(not r for _c, r in w.due(now - 0.001))
        assert w.done(chunk, now)
    assert w.retransmits == 0


def simulate_shaped_link(
    sender: SendWindow, service_s: float, base_rtt: float, loss: float = 0.0, seed: int = 1
) -> tuple[float, int]:
    """One sender through a FIFO link that serves a chunk every ``service_s`` (a shaper), the result
    ``base_rtt`` after it leaves; duplicates take the link too; a fraction ``loss`` of the sends is lost.
    Returns the completion time and how many sends were lost."""
    import heapq

    rng = random.Random(seed)
    link_free = 0.0
    lost = 0
    events: list[tuple[float, int]] = []  # (when the result arrives, chunk)

    def send(now: float) -> None:
        nonlocal link_free, lost
        for chunk, _retransmit in sender.due(now):
            link_free = max(link_free, now) + service_s
            if rng.random() < loss:
                lost += 1
            else:
                heapq.heappush(events, (link_free + base_rtt, chunk))

    send(0.0)
    now = 0.0
    while not sender.complete:
        deadline = sender.next_deadline()
        if events and (deadline is None or events[0][0] <= deadline):
            now, chunk = heapq.heappop(events)
            sender.done(chunk, now)
        else:
            assert deadline is not None
            now = deadline
        send(now)
    return now, lost


def test_an_adaptive_rto_does_not_storm_where_a_fixed_timer_does() -> None:
    """A window of 32 chunks on a link that serves one every 33 ms: ~1 s of queue. The fixed 0.2 s timer
    of before resends every chunk, again and again; the RFC 6298 timer resends none."""
    fixed = FixedTimerWindow(100, 32)
    adaptive = SendWindow(100, 32, 0.2, granularity=0.01)
    t_fixed, _ = simulate_shaped_link(fixed, 0.033, 0.001)
    t_adaptive, _ = simulate_shaped_link(adaptive, 0.033, 0.001)
    print(f"fixed 0.2 s: {fixed.retransmits} retransmits, {t_fixed:.2f} s; "
          f"RFC 6298: {adaptive.retransmits} retransmits, {t_adaptive:.2f} s, SRTT {adaptive.rto.srtt:.3f} s")
    assert fixed.retransmits > 100
    assert adaptive.retransmits == 0
    assert t_adaptive == pytest.approx(100 * 0.033 + 0.001, rel=0.01)  # the link's bound: never idle
    assert t_fixed > t_adaptive * 2


def test_ring_sender_resends_only_the_oldest_and_learns_the_round_trip() -> None:
    s = ReliableSender(window=2, timeout=0.2, min_rto=0.05)
    for k, data in enumerate((b"a", b"b", b"c")):
        s.push((k, False), data)
    assert s.due(0.0) == [b"a", b"b"]
    assert s.due(0.25) == [b"a"] and s.rto.rto == pytest.approx(0.4)  # b is overdue too, but waits
    s.ack((1, False), 0.3)  # sent once: a sample of 0.3 s, RTO = 0.3 + 4 * 0.15
    assert s.rto.samples == 1 and s.rto.rto == pytest.approx(0.9)
    assert s.due(0.3) == [b"c"]
    s.ack((0, False), 0.35)  # a was sent twice: no sample (Karn)
    s.ack((0, False), 0.36)  # a duplicate ACK of the second copy: nothing
    assert s.rto.ignored == 1 and s.rto.samples == 1 and s.retransmits == 1
    s.ack((2, False), 0.4)
    assert s.idle


@pytest.mark.parametrize("loss", [0.01, 0.05, 0.2])
def test_losses_in_a_window_are_found_by_send_order_and_resent_together(loss: float) -> None:
    """Random loss on the shaped link: every lost send is resent about once, mostly found by send order
    (RACK), seldom by the timer, so the transfer takes about as long as the link needs for the extra
    sends plus a few timeouts, not one backed-off timeout per loss."""
    clean, _ = simulate_shaped_link(SendWindow(300, 32, 1.0, granularity=0.1), 0.033, 0.001)
    w = SendWindow(300, 32, 1.0, granularity=0.1)
    took, lost = simulate_shaped_link(w, 0.033, 0.001, loss=loss)
    print(f"loss {loss}: {took:.2f} s (lossless {clean:.2f} s), {lost} sends lost, {w.retransmits} resent "
          f"({w.flight.lost} by send order, {w.flight.timeouts} timeouts)")
    assert lost > 0 and w.retransmits >= lost
    assert w.retransmits <= lost + 2 and w.flight.timeouts <= 3
    assert took < clean * 2.5


def run_ring(
    n_workers: int, dtype: DType, scale: int = 0
) -> tuple[dict[int, np.ndarray], list[RingAllreduce]]:
    rng = random.Random(n_workers)
    n = 1000
    ranks = list(range(1, n_workers + 1))
    arrays = {r: worker_array(11, r, n, dtype) for r in ranks}
    rings = [RingAllreduce(arrays[r], rank=i, ranks=ranks, job_id=3, bsl=64, op=Op.SUM, per_chunk=64,
                           dtype=dtype, scale=scale)
             for i, r in enumerate(ranks)]  # fmt: skip
    senders = [ReliableSender(window=4, timeout=1.0) for _ in ranks]
    net: list[tuple[int, bytes]] = []  # (destination rank index, datagram)
    now = 0.0

    def flush(i: int) -> None:
        net.extend(((i + 1) % n_workers, p) for p in senders[i].due(now))

    for i, ring in enumerate(rings):
        for msg in ring.originate():
            senders[i].push((msg.chunk, msg.result), msg.encode())
        flush(i)
    quiet = 0
    while not all(r.complete for r in rings) or not all(s.idle for s in senders):
        if not net:
            now = min(d for s in senders if (d := s.next_deadline()) is not None)
            quiet += 1
            assert quiet < 2000
            for i in range(n_workers):
                flush(i)
            continue
        dest, wire = net.pop(rng.randrange(len(net)))
        if rng.random() < 0.1:
            continue
        hdr = InaHeader.decode(wire)
        if hdr.element_count == 0:  # an ACK, addressed to the rank that sent the message
            senders[dest].ack((hdr.chunk, hdr.result), now)
            flush(dest)
            continue
        net.append(((dest - 1) % n_workers, ack_for(hdr)))
        step = rings[dest].on_message(hdr)
        if step is not None and step.send is not None:
            senders[dest].push((step.send.chunk, step.send.result), step.send.encode())
        flush(dest)
    return arrays, rings


@pytest.mark.parametrize("n_workers", [1, 2, 4, 5])
def test_ring_allreduce_under_loss_is_exact(n_workers: int) -> None:
    arrays, rings = run_ring(n_workers, DType.INT32)
    expected = reference(list(arrays.values()), Op.SUM)
    for ring in rings:
        assert ring.out.tolist() == expected.tolist() and ring.result is ring.out


@pytest.mark.parametrize("n_workers", [2, 5])
@pytest.mark.parametrize("dtype", [DType.FIXED32, DType.FLOAT32])
def test_float_ring_allreduce_is_identical_on_every_rank_and_within_tolerance(n_workers, dtype) -> None:
    scale = job_fixed_point_scale(n_workers) if dtype is DType.FIXED32 else 0
    arrays, rings = run_ring(n_workers, dtype, scale)
    first = rings[0].result
    assert first.dtype == np.float32
    assert all(digest(r.result) == digest(first) for r in rings)  # the all-gather passes one result on
    exact = exact_result(list(arrays.values()), Op.SUM, dtype, scale)
    if dtype is DType.FIXED32:
        assert exact is not None and digest(first) == digest(exact)
    else:
        assert exact is None
    assert len(out_of_tolerance(list(arrays.values()), first, Op.SUM, dtype, scale)[0]) == 0


def test_a_ring_ignores_messages_of_another_dtype_or_scale() -> None:
    a = worker_array(1, 1, 10, DType.FLOAT32)
    ring = RingAllreduce(a, rank=1, ranks=[1, 2], job_id=3, bsl=64, op=Op.SUM, dtype=DType.FIXED32, scale=20)
    other = RingAllreduce(a, rank=0, ranks=[1, 2], job_id=3, bsl=64, op=Op.SUM, dtype=DType.FIXED32, scale=19)
    (msg,) = other.originate()
    assert ring.on_message(InaHeader.decode(msg.encode())) is None
    same = RingAllreduce(a, rank=0, ranks=[1, 2], job_id=3, bsl=64, op=Op.SUM, dtype=DType.FIXED32, scale=20)
    (msg,) = same.originate()
    step = ring.on_message(InaHeader.decode(msg.encode()))
    assert step is not None and step.result is not None


# --- float jobs through Figure 1: what the driver (orchestrator/experiment/collective.py) checks on a lab


@SETTINGS
@given(
    st.integers(1, 200),
    st.sampled_from([0.0, 0.2]),
    st.sampled_from([0.0, 0.1]),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
def test_native_float32_sum_is_identical_everywhere_and_within_the_order_bound(n, loss, dup, window, rng):
    """float32 summed on the switches in arrival order: no exact answer, but one result for all (the
    root multicasts one packet) within gamma_3 * sum|x_i| (+ numpy's float64 error) of numpy's sum."""
    arrays = {w: worker_array(rng.randrange(1 << 30), w, n, DType.FLOAT32) for w in range(1, 5)}
    workers, _ = run_fig1(arrays, Op.SUM, DType.FLOAT32, rng, loss, dup, window, 16)
    results = [j.out for j in workers.values()]
    assert len({digest(r) for r in results}) == 1
    assert exact_result(list(arrays.values()), Op.SUM, DType.FLOAT32) is None
    bad, err = out_of_tolerance(list(arrays.values()), results[0], Op.SUM, DType.FLOAT32)
    assert len(bad) == 0, (bad, err)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 100), st.randoms(use_true_random=False))
def test_fixed32_through_figure1_is_bit_exact_and_within_tolerance(n, rng) -> None:
    arrays = {w: worker_array(rng.randrange(1 << 30), w, n, DType.FLOAT32) for w in range(1, 5)}
    scale = job_fixed_point_scale(4)
    workers, _ = run_fig1(arrays, Op.SUM, DType.FIXED32, rng, 0.1, 0.1, 2, 16, scale=scale)
    exact = exact_result(list(arrays.values()), Op.SUM, DType.FIXED32, scale)
    assert exact is not None and exact.dtype == np.float32
    for job in workers.values():
        assert digest(job.out) == digest(exact)
    assert len(out_of_tolerance(list(arrays.values()), exact, Op.SUM, DType.FIXED32, scale)[0]) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-(2.0**100), 2.0**100, width=32, allow_subnormal=True), min_size=1, max_size=1),
        min_size=1, max_size=9,
    ),
    st.randoms(use_true_random=False),
)
def test_float32_bound_holds_for_any_summation_tree(values, rng) -> None:
    """The float32 bound is sound whatever the order: values of any magnitude and sign (cancellation
    included), added pairwise in float32 in a random tree, as switches and PS may."""
    arrays = [np.array(v, dtype=np.float32) for v in values]
    pool = [a.copy() for a in arrays]
    while len(pool) > 1:
        a = pool.pop(rng.randrange(len(pool)))
        b = pool.pop(rng.randrange(len(pool)))
        pool.append((a + b).astype(np.float32))
    assert len(out_of_tolerance(arrays, pool[0], Op.SUM, DType.FLOAT32)[0]) == 0


def test_the_tolerance_can_fail() -> None:
    arrays = [worker_array(3, w, 50, DType.FLOAT32) for w in range(1, 5)]
    good = np.sum(np.stack(arrays).astype(np.float64), axis=0).astype(np.float32)
    tol = float_tolerance(arrays, good, Op.SUM, DType.FLOAT32)
    assert np.all(tol > 0) and np.all(tol <= 3.01 * 2.0**-24 * np.abs(np.stack(arrays)).sum(axis=0) + 1e-15)
    bad = good.copy()
    bad[7] += np.float32(1e-3)
    assert out_of_tolerance(arrays, bad, Op.SUM, DType.FLOAT32)[0].tolist() == [7]
    nan = good.copy()
    nan[2] = np.nan
    assert out_of_tolerance(arrays, nan, Op.SUM, DType.FLOAT32)[0].tolist() == [2]
    assert len(out_of_tolerance(arrays, good[:-1], Op.SUM, DType.FLOAT32)[0]) == 50
    # fixed32: the stated 4 * 2^-(s+1) + 2^-24 |r| (+ numpy's float64 error), no more
    s = job_fixed_point_scale(4)
    fixed_tol = float_tolerance(arrays, good, Op.SUM, DType.FIXED32, s)
    assert np.all(fixed_tol >= 4 * 2.0 ** -(s + 1)) and np.all(fixed_tol < 4 * 2.0 ** -(s + 1) + 2.0**-22)
    # min and max round nothing in float32: zero tolerance; float32 prod has none at all
    assert not float_tolerance(arrays, good, Op.MAX, DType.FLOAT32).any()
    with pytest.raises(ValueError, match="prod"):
        float_tolerance(arrays, good, Op.PROD, DType.FLOAT32)
