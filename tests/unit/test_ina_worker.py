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
from aidcnet.ina.fixedpoint import choose_scale, error_bound
from aidcnet.ina.header import DType, InaHeader, Op
from aidcnet.ina.vat import Action, from_draft_notation
from aidcnet.ina.worker import (
    AllreduceJob,
    ReliableSender,
    RingAllreduce,
    SendWindow,
    ack_for,
    digest,
    reference,
    worker_array,
)

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
            # Quiet network: time passes until the workers' retransmit timers fire.
            now += 1.0
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
            if job.on_result(hdr):
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
    scale = choose_scale(1.0, 4)
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
    assert w.done(1) and not w.done(1)  # a duplicate result
    assert w.due(0.6) == []  # chunk 0 still open: the window does not slide past it
    assert w.done(0)
    assert w.due(0.7) == [(3, False), (4, False)]
    assert w.due(1.0) == [(2, True)]  # chunk 2's timer (sent at 0.0) fired
    assert w.retransmits == 1 and not w.complete


@pytest.mark.parametrize("n_workers", [1, 2, 4, 5])
def test_ring_allreduce_under_loss_is_exact(n_workers: int) -> None:
    rng = random.Random(n_workers)
    n = 1000
    ranks = list(range(1, n_workers + 1))
    arrays = {r: worker_array(11, r, n, DType.INT32) for r in ranks}
    rings = [RingAllreduce(arrays[r], rank=i, ranks=ranks, job_id=3, bsl=64, op=Op.SUM, per_chunk=64)
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
            now += 1.0
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
            senders[dest].ack((hdr.chunk, hdr.result))
            flush(dest)
            continue
        net.append(((dest - 1) % n_workers, ack_for(hdr)))
        step = rings[dest].on_message(hdr)
        if step is not None and step.send is not None:
            senders[dest].push((step.send.chunk, step.send.result), step.send.encode())
        flush(dest)
    expected = reference(list(arrays.values()), Op.SUM)
    for ring in rings:
        assert ring.out.tolist() == expected.tolist()
