"""Sender: window, who owes what, subset retransmission, backoff, failed receivers, injected RTO."""

from __future__ import annotations

from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, AggAck
from aidcnet.reliable.sender import FixedRto, Sender, SenderConfig, id_mask, mask_ids

ISN = serial.MASK - 1
RX = (2, 3, 4)


class CountingRto(FixedRto):
    """Records samples, to check Karn's rule (only sequences sent once give a sample)."""

    def __init__(self, rto: float) -> None:
        super().__init__(rto)
        self.samples: list[float] = []

    def observe(self, rtt: float) -> None:
        self.samples.append(rtt)


def sender(n: int = 4, window: int = 8, **cfg: float) -> Sender:
    s = Sender(1, 7, RX, FixedRto(1.0), SenderConfig(window=window, **cfg), isn=ISN)
    for i in range(n):
        s.offer(bytes([i]) * 10, fin=i == n - 1)
    return s


def ack(reporter: int, cum_k: int, highest_k: int | None = None, ranges=(), nack=False) -> Ack:
    h = serial.add(ISN, cum_k if highest_k is None else highest_k)
    rs = tuple((serial.add(ISN, a), serial.add(ISN, b)) for a, b in ranges)
    return Ack(
        bfir_id=1, flow_id=7, cum=serial.add(ISN, cum_k), reporter=reporter, highest=h, ranges=rs, nack=nack
    )


def test_window_limits_what_is_in_flight() -> None:
    s = sender(n=5, window=2)
    out = s.poll(0.0)
    assert [t.data.seq for t in out] == [ISN, serial.add(ISN, 1)]
    assert all(t.bfers == id_mask(RX) for t in out)
    assert s.poll(0.1) == []
    for r in RX:
        s.on_feedback(ack(r, 1), 0.2)
    assert [t.data.seq for t in s.poll(0.2)] == [serial.add(ISN, 2)]  # across the wrap


def test_nack_retransmits_to_the_missing_subset_only_once() -> None:
    s = sender()
    s.poll(0.0)
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.01)
    s.on_feedback(ack(4, 1, 3, ranges=[(1, 1)], nack=True), 0.01)
    (tx,) = s.poll(0.02)
    assert tx.data.retransmit and tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2, 4]
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.03)  # its retransmission may be on the way
    assert s.poll(0.04) == [] and s.counters["request-held-off"] == 1
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 1.1)  # past the holdoff (the RTO): answered
    out = {serial.distance(ISN, t.data.seq): mask_ids(t.bfers) for t in s.poll(1.1)}
    # ... and the timer of 0 for silent 3 (the timer of 1, resent at 0.02, backed off to 2.02)
    assert out == {0: [3], 1: [2]}


def test_selective_ack_clears_received_sequences_only() -> None:
    s = sender()
    s.poll(0.0)
    s.on_feedback(ack(3, 1, 4, ranges=[(1, 2)]), 0.01)  # has 0 and 3
    out = s.poll(1.0)
    bits = {serial.distance(ISN, t.data.seq): mask_ids(t.bfers) for t in out}
    # 3's gaps are loss evidence (asked for at once); the timer resends to 2 and 4 only the oldest
    # sequence they owe: what comes after it waits for their cumulative point or their NACKs
    assert bits == {0: [2, 4], 1: [3], 2: [3]}
    assert [serial.distance(ISN, t.data.seq) for t in s.poll(0.011 + 1.0)] == []


def test_timeout_backoff_doubles() -> None:
    s = sender(n=1, fail_after=100.0)
    s.poll(0.0)
    times = []
    for step in range(1, 80):
        t = step * 0.25
        if s.poll(t):
            times.append(t)
    assert times == [1.0, 3.0, 7.0, 15.0]  # RTO 1, 2, 4, 8 after each transmission


def test_agg_ack_clears_a_branch_and_a_partial_resends_the_oldest_to_the_missing() -> None:
    rto = CountingRto(1.0)
    s = Sender(1, 7, RX, rto, SenderConfig(window=8), isn=ISN)
    for i in range(3):
        s.offer(bytes([i]), fin=i == 2)
    s.poll(0.0)
    s.on_feedback(
        AggAck(
            bfir_id=1,
            flow_id=7,
            cum=serial.add(ISN, 3),
            reporter=0,
            bsl=64,
            si=0,
            acked=id_mask([2, 3]),
            missing=id_mask([4]),
        ),
        0.1,
    )
    assert rto.samples == [0.1, 0.1, 0.1]
    (tx,) = s.poll(0.1)
    assert tx.data.seq == ISN and mask_ids(tx.bfers) == [4]
    s.on_feedback(
        AggAck(bfir_id=1, flow_id=7, cum=serial.add(ISN, 3), reporter=0, bsl=64, si=0, acked=id_mask([4])),
        0.2,
    )
    # Karn: the retransmitted sequence gives no sample, and (widened) neither do 1 and 2, sent before that
    # resend: at 4 they may have waited for the repair of 0, as cumulative points stop at a hole
    assert rto.samples[3:] == []
    assert s.done and s.completed_at == 0.2


def test_silent_receiver_is_declared_failed_and_the_flow_completes_for_the_others() -> None:
    s = sender(n=2, fail_after=5.0)
    s.poll(0.0)
    for t in (1.0, 2.0, 4.0):
        s.poll(t)
        for r in (2, 3):
            s.on_feedback(ack(r, 2), t)
    assert not s.done
    s.poll(4.9)  # 4 was sent the data at 0.0 and never answered
    assert s.failed == {} and not s.done
    s.poll(5.5)
    assert s.failed == {4: 5.5} and s.done
    assert s.counters["receivers-failed"] == 1


def test_feedback_for_unknown_receiver_is_counted() -> None:
    s = sender()
    s.poll(0.0)
    s.on_feedback(ack(9, 2), 0.1)
    assert s.counters["feedback-unknown-receiver"] == 1


def test_congestion_window_slow_starts_and_halves_once_per_loss_event() -> None:
    s = sender(n=40, window=32, initial_cwnd=2, nack_gather=0.0, queue_target=None)
    assert len(s.poll(0.0)) == 2
    for r in RX:
        s.on_feedback(ack(r, 2), 0.01)
    assert s.cwnd == 4  # slow start: one more per sequence every receiver acknowledged
    assert len(s.poll(0.01)) == 4
    # Two NACKs in one loss event (sequences sent before the first was seen): one halving, not two.
    s.on_feedback(ack(2, 2, 4, ranges=((2, 2),), nack=True), 0.02)
    s.on_feedback(ack(3, 2, 5, ranges=((3, 3),), nack=True), 0.02)
    assert s.cwnd == 2 and s.counters["cwnd-reductions"] == 1
    assert [t.data.seq for t in s.poll(0.02)] == [serial.add(ISN, 2), serial.add(ISN, 3)]  # resends only


def test_timeout_drops_the_congestion_window_to_one() -> None:
    s = sender(n=10, window=8, initial_cwnd=4)
    assert len(s.poll(0.0)) == 4
    # the timer covers the oldest sequence each receiver owes; the timeout is a loss event
    assert [serial.distance(ISN, t.data.seq) for t in s.poll(1.0)] == [0]
    assert s.cwnd == 1 and s.window == 1 and s.counters["cwnd-reductions"] == 1


def test_without_initial_cwnd_only_the_fixed_window_limits() -> None:
    s = sender(n=10, window=8)
    assert len(s.poll(0.0)) == 8
    s.poll(1.0)
    assert s.window == 8 and s.counters["cwnd-reductions"] == 0


def test_nacks_for_one_drop_are_gathered_into_one_retransmission() -> None:
    # A drop above a branch point opens the same hole under every BFER below it; their NACKs come a
    # little apart. One retransmission with their union repairs them all.
    s = sender(n=4, nack_gather=0.5)
    s.poll(0.0)
    for r in RX:
        s.on_feedback(ack(r, 1), 0.010)  # sequence 0 completes: SRTT 10 ms
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.020)
    assert s.poll(0.022) == []  # gathering for half an SRTT
    s.on_feedback(ack(4, 1, 3, ranges=[(1, 1)], nack=True), 0.023)
    (tx,) = s.poll(0.025)
    assert tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2, 4]
    assert s.counters["retransmitted"] == 1


def test_a_repeated_request_is_answered_at_once_only_with_evidence_of_loss() -> None:
    # RACK-like: the retransmission of 1 went out when 8 was the next new sequence. A repeated NACK
    # whose highest has not passed 8 may just precede it (a queue); one that has proves it lost.
    s = sender(n=12, window=8, nack_gather=0.0)
    assert len(s.poll(0.0)) == 8
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.01)
    (tx,) = s.poll(0.01)
    assert tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2]
    s.on_feedback(ack(2, 1, 8, ranges=[(1, 1)], nack=True), 0.02)
    assert s.poll(0.02) == [] and s.counters["request-held-off"] == 1
    for r in (3, 4):
        s.on_feedback(ack(r, 8), 0.03)
    (tx,) = s.poll(0.03)  # the window moved one: sequence 8, sent after the retransmission
    assert tx.data.seq == serial.add(ISN, 8) and not tx.data.retransmit
    s.on_feedback(ack(2, 1, 9, ranges=[(1, 1)], nack=True), 0.04)  # 8 overtook the retransmission
    (tx,) = s.poll(0.04)
    assert tx.data.seq == serial.add(ISN, 1) and tx.data.retransmit and mask_ids(tx.bfers) == [2]


def test_timeout_resends_only_to_receivers_not_heard_from() -> None:
    s = sender(n=1)
    s.poll(0.0)
    s.on_feedback(ack(2, 0), 0.9)  # receiver 2 is alive (its ACK moves nothing yet: queued)
    (tx,) = s.poll(1.0)
    assert mask_ids(tx.bfers) == [3, 4] and s.counters["timeout-deferred"] == 0
    assert s.poll(1.5) == [] and s.counters["timeout-deferred"] == 0
    assert s.poll(1.9) == []  # silent for an RTO, but the sequence's timer backed off to 3.0
    (tx,) = s.poll(3.0)
    assert mask_ids(tx.bfers) == [2, 3, 4]


def _bottleneck_run(queue_target: float | None) -> Sender:
    # One FIFO bottleneck draining a sequence per ms, 10 ms base round trip (BDP 10 sequences).
    s = Sender(
        1, 7, RX, FixedRto(10.0), SenderConfig(window=64, initial_cwnd=2, queue_target=queue_target), ISN
    )
    for i in range(600):
        s.offer(b"x", fin=i == 599)
    now, free, arrive = 0.0, 0.0, {}
    while not s.done and now < 5.0:
        for tx in s.poll(now):
            free = max(free, now) + 0.001
            arrive[serial.distance(ISN, tx.data.seq)] = free + 0.009
        for k in sorted(k for k, t in arrive.items() if t <= now):
            del arrive[k]
            for r in RX:
                s.on_feedback(ack(r, k + 1), now)
        s.counters["max-cwnd"] = max(s.counters["max-cwnd"], int(s.cwnd))
        now += 0.0005
    assert s.done
    return s


def test_delay_signal_holds_the_window_near_the_path_s_bdp() -> None:
    # Completion times that rise with the window mean a queue: with the delay signal cwnd stays within
    # a few sequences of the BDP (10); without it, nothing but a drop would stop it before the fixed 64.
    vegas, loss_only = _bottleneck_run(3.0), _bottleneck_run(None)
    assert loss_only.counters["max-cwnd"] == 64
    assert vegas.counters["cwnd-delay-reductions"] > 0
    assert 10 <= vegas.counters["max-cwnd"] <= 20, vegas.counters["max-cwnd"]
    assert 10 <= vegas.cwnd <= 14, vegas.cwnd


def test_a_loss_with_short_queues_cuts_the_window_by_a_fifth_not_half() -> None:
    # TCP Veno: the delay signal says our queues are short, so the loss is the link's, not congestion.
    s = sender(n=40, window=32, initial_cwnd=2, nack_gather=0.0)
    s.poll(0.0)
    for r in RX:
        s.on_feedback(ack(r, 2), 0.01)  # completion times equal to the base RTT: nothing queued
    s.poll(0.01)
    assert s.cwnd == 4
    s.on_feedback(ack(2, 2, 4, ranges=((2, 2),), nack=True), 0.02)
    assert s.cwnd == 3.2 and s.counters["cwnd-random-loss"] == 1
