"""Sender: window, who owes what, subset retransmission, backoff, failed receivers, injected RTO."""

from __future__ import annotations

import pytest

from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, AggNack
from aidcnet.reliable.sender import FixedRto, SendBudget, Sender, SenderConfig, id_mask, mask_ids
from tests.unit.aidcnet.reliable.feedback import agg_ack

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
    s = sender(nack_holdoff=0.5)
    s.poll(0.0)
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.01)
    s.on_feedback(ack(4, 1, 3, ranges=[(1, 1)], nack=True), 0.01)
    (tx,) = s.poll(0.02)
    assert tx.data.retransmit and tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2, 4]
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.03)  # its retransmission may be on the way
    assert s.poll(0.04) == [] and s.counters["request-held-off"] == 1
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.6)  # past the holdoff: answered
    (tx,) = s.poll(0.6)
    assert mask_ids(tx.bfers) == [2]


def test_selective_ack_clears_received_sequences_only() -> None:
    s = sender()
    s.poll(0.0)
    s.on_feedback(ack(3, 1, 4, ranges=[(1, 2)]), 0.01)  # has 0 and 3
    # Timers: each receiver's oldest sequence owed (2 and 4 owe 0, 3 owes 1 first), each to the receivers
    # whose timer it is; 3's runs from its acknowledgment of new data at 0.01 (RFC 6298 §5.3).
    out = s.poll(1.0)
    assert {serial.distance(ISN, t.data.seq): mask_ids(t.bfers) for t in out} == {0: [2, 4]}
    assert s.next_deadline() == pytest.approx(1.01)
    out = s.poll(1.02)
    assert {serial.distance(ISN, t.data.seq): mask_ids(t.bfers) for t in out} == {1: [3]}
    s.on_feedback(ack(2, 4), 1.1)
    s.on_feedback(ack(4, 4), 1.1)
    assert s.poll(1.1) == []  # 1 was just resent to 3, and holds back its 2
    # RTO × 2 after its retransmission at 1.02
    assert [(t.data.seq, mask_ids(t.bfers)) for t in s.poll(3.02)] == [(serial.add(ISN, 1), [3])]


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
    s.on_feedback(agg_ack(ISN, 3, [2, 3], missing=[4]), 0.1)
    assert rto.samples == []  # a partial goes when a BFR's timer runs out: its timing is no round trip
    (tx,) = s.poll(0.1)
    assert tx.data.seq == ISN and mask_ids(tx.bfers) == [4]
    s.on_feedback(agg_ack(ISN, 3, [4]), 0.2)
    # One sample per feedback, from its newest sequence (sent once, cleared by it); the retransmitted
    # one would give none (Karn), and the middle one waited with it.
    assert rto.samples == [0.2]
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
    s = sender(n=40, window=32, initial_cwnd=2)
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
    # Every sequence is overdue; only the oldest is resent (its answer covers the rest), and its timeout
    # is the loss event.
    assert [t.data.seq for t in s.poll(1.0)] == [ISN]
    assert s.cwnd == 1 and s.window == 1 and s.counters["cwnd-reductions"] == 1


def test_without_initial_cwnd_only_the_fixed_window_limits() -> None:
    s = sender(n=10, window=8)
    assert len(s.poll(0.0)) == 8
    s.poll(1.0)
    assert s.window == 8 and s.counters["cwnd-reductions"] == 0


def test_max_rto_bounds_the_doubling_so_a_live_receiver_is_probed_until_it_answers() -> None:
    """RFC 6298 §5.5: the maximum RTO may bound the backed-off timer. Without it a receiver whose
    answers are lost four times in a row hears nothing more before fail_after declares it failed."""
    unbounded = sender(n=1, fail_after=30.0)
    bounded = sender(n=1, fail_after=30.0, max_rto=2.0)
    sent = {"unbounded": [], "bounded": []}
    for s, name in ((unbounded, "unbounded"), (bounded, "bounded")):
        s.poll(0.0)
        for step in range(1, 160):  # 40 s, every answer lost
            if s.poll(step * 0.25):
                sent[name].append(step * 0.25)
    # 1, 2, 4, 8 s: four probes, then silence past fail_after and every receiver is declared failed
    assert sent["unbounded"] == [1.0, 3.0, 7.0, 15.0] and sorted(unbounded.failed) == list(RX)
    assert sent["bounded"][:4] == [1.0, 3.0, 5.0, 7.0] and len(sent["bounded"]) >= 14  # then every 2 s
    # A receiver that answers the 12th probe (at 23 s, past four unbounded probes) is still alive.
    live = sender(n=1, fail_after=30.0, max_rto=2.0)
    live.poll(0.0)
    for step in range(1, 160):
        t = step * 0.25
        if live.poll(t) and t >= 23.0:
            for r in RX:
                live.on_feedback(ack(r, 1), t + 0.01)
    assert live.done and not live.failed
    SenderConfig(max_rto=2.0, fail_after=30.0)
    with pytest.raises(ValueError, match="max_rto"):
        SenderConfig(max_rto=40.0, fail_after=30.0)


def test_nacks_of_one_drop_are_gathered_into_one_retransmission() -> None:
    # One drop above three receivers: their NACKs arrive a few milliseconds apart.
    s = sender(nack_gather=0.25)  # RTO 1 s: the first request waits 0.25 s for the others
    s.poll(0.0)
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.010)
    assert s.poll(0.010) == []
    s.on_feedback(ack(3, 1, 3, ranges=[(1, 1)], nack=True), 0.012)
    s.on_feedback(ack(4, 1, 3, ranges=[(1, 1)], nack=True), 0.015)
    assert s.poll(0.2) == [] and s.next_deadline() == pytest.approx(0.26)
    (tx,) = s.poll(0.26)
    assert tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2, 3, 4]
    assert s.counters["requests-gathered"] == 2 and s.counters["retransmitted"] == 1


def test_a_receiver_under_repair_holds_back_its_later_timers_for_two_rtos_after_each_repair() -> None:
    s = sender(n=3)  # RTO 1 s
    s.poll(0.0)
    for r in (2, 3):
        s.on_feedback(ack(r, 3), 0.1)
    # 4 owes all three; only the oldest is resent at each timeout while its repair may be answered...
    assert [(t.data.seq, mask_ids(t.bfers)) for t in s.poll(1.0)] == [(ISN, [4])]
    assert s.poll(1.5) == [] and s.poll(2.0) == []
    assert [t.data.seq for t in s.poll(3.0)] == [ISN]  # RTO × 2 after the first retransmission
    assert s.poll(4.9) == [] and s.next_deadline() == 5.0
    # ...and two RTOs after its last retransmission the silence is not explained: the next one's timer
    # fires (its timer ran out at 1.0), and that one holds back the last in turn.
    assert [t.data.seq for t in s.poll(5.0)] == [serial.add(ISN, 1)]
    assert s.poll(5.1) == []


def test_a_send_budget_is_shared_by_the_flows_of_a_node() -> None:
    budget = SendBudget(25)  # two 10-byte messages
    flows = [Sender(1, f, RX, FixedRto(1.0), SenderConfig(window=8), ISN, budget) for f in (7, 8)]
    for s in flows:
        for i in range(3):
            s.offer(bytes([i]) * 10, fin=i == 2)
    assert len(flows[0].poll(0.0)) == 2 and flows[1].poll(0.0) == [] and budget.used == 20
    assert flows[1].next_deadline() is None  # no room: not a busy loop; flow 7's feedback makes some
    flows[0].on_feedback(ack(2, 1), 0.1)
    # 2 holds the first: it has left the node's link, whatever 3 and 4 still owe (the budget bounds what
    # waits behind the link)
    assert budget.used == 10 and flows[1].next_deadline() == 0.0
    assert [t.data.flow_id for t in flows[1].poll(0.1)] == [8] and budget.used == 20
    flows[0].on_feedback(ack(3, 1), 0.2)  # 3 holds the first too: nothing more has left
    assert budget.used == 20
    flows[0].on_feedback(ack(4, 0, 2, ranges=[(0, 0)]), 0.2)  # 4 holds 1 (0 lost): 0 and 1 have left
    assert budget.used == 10


def test_a_sequence_someone_asks_past_has_left_the_link() -> None:
    budget = SendBudget(100)
    s = Sender(1, 7, RX, FixedRto(1.0), SenderConfig(window=8), ISN, budget)
    for i in range(4):
        s.offer(bytes([i]) * 10, fin=i == 3)
    s.poll(0.0)
    assert budget.used == 40
    # A NACK for 1 from a receiver that got 2: 0, 1 and 2 have left (one path per flow, in order).
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.1)
    assert budget.used == 10


def test_one_message_larger_than_the_budget_still_goes_when_nothing_is_in_flight() -> None:
    budget = SendBudget(5)
    s = Sender(1, 7, RX, FixedRto(1.0), SenderConfig(window=8), ISN, budget)
    s.offer(b"x" * 10)
    s.offer(b"y" * 10, fin=True)
    assert len(s.poll(0.0)) == 1 and budget.used == 10


def test_a_sequence_asked_for_waits_for_its_gathered_retransmission_not_its_timer() -> None:
    s = sender(nack_gather=0.5)  # RTO 1 s: a request waits 0.5 s
    s.poll(0.0)
    for r in RX:
        s.on_feedback(ack(r, 1), 0.1)
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)], nack=True), 0.9)
    assert s.poll(1.0) == []  # the timer of sequence 1 ran out, but its retransmission is due at 1.4
    (tx,) = s.poll(1.4)
    assert tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2]
    assert s.counters["timeouts"] == 0 and s.counters["retransmitted"] == 1


def test_next_deadline_follows_new_sequences_and_feedback() -> None:
    # Found by the simulation's hypothesis test: after everything in flight was acknowledged, the next
    # poll's new sequences were left out of next_deadline, and the flow slept until fail_after.
    s = sender(n=3, window=1, fail_after=60.0)
    s.poll(0.0)
    assert s.next_deadline() == 1.0
    for r in RX:
        s.on_feedback(ack(r, 1), 0.1)
    assert s.next_deadline() == 0.0  # the window has room again
    (tx,) = s.poll(0.1)
    assert tx.data.seq == serial.add(ISN, 1) and s.next_deadline() == pytest.approx(1.1)
    for r in RX:
        s.on_feedback(ack(r, 2), 0.2)
    s.poll(0.2)
    assert s.next_deadline() == pytest.approx(1.2)


def test_a_selective_agg_ack_clears_its_range_only() -> None:
    s = sender(n=4)
    s.poll(0.0)
    s.on_feedback(agg_ack(ISN, 4, [2, 3, 4], first_k=2), 0.1)
    owed = {serial.distance(ISN, q): mask_ids(slot.owing) for q, slot in s._slots.items() if slot.owing}
    assert owed == {0: [2, 3, 4], 1: [2, 3, 4]}


def test_one_receivers_repairs_do_not_hold_back_anothers_timer() -> None:
    """3 lost the last sequence and sees no hole, so it sends nothing; 4 is being repaired all along."""
    s = sender(n=3)  # RTO 1 s
    s.poll(0.0)
    s.on_feedback(ack(2, 3), 0.1)
    s.on_feedback(ack(3, 2), 0.1)  # 3 holds 0 and 1: 2 (the last) was lost on its way
    t = 0.2
    timed_out_for_3 = None
    while t < 3.0 and timed_out_for_3 is None:
        s.on_feedback(ack(4, 0, 1, ranges=[(0, 0)], nack=True), t)  # 4 asks for 0 again and again
        for tx in s.poll(t):
            if 3 in mask_ids(tx.bfers):
                timed_out_for_3 = (serial.distance(ISN, tx.data.seq), t)
        t = round(t + 0.1, 1)
    # Its timer runs from its last acknowledgment of new data (0.1), one RTO: RFC 6298 §5.3's restart.
    assert timed_out_for_3 == (2, 1.1), "3's oldest owed sequence times out on its own timer"


def test_one_round_trip_sample_per_feedback_from_the_sequence_it_answers() -> None:
    rto = CountingRto(1.0)
    s = Sender(1, 7, [2], rto, SenderConfig(window=8), isn=ISN)
    for i in range(3):
        s.offer(bytes([i]), fin=i == 2)
    s.poll(0.0)
    s.on_feedback(ack(2, 0, 3, ranges=[(0, 0)]), 0.1)  # 1 and 2 arrived, 0 did not: one sample, 2's
    assert rto.samples == [0.1]
    s.on_feedback(ack(2, 0, 3, ranges=[(0, 0)], nack=True), 0.2)  # a NACK: none
    (repair,) = s.poll(0.2)
    assert repair.data.seq == ISN
    s.on_feedback(ack(2, 3), 0.3)  # clears 0 only, resent (Karn); 2 was cleared before: none
    assert rto.samples == [0.1] and s.done


def agg_nack(first_k: int, last_k: int, askers, holders=(), again: bool = False) -> AggNack:
    first, last = serial.add(ISN, first_k), serial.add(ISN, last_k)
    return AggNack(bfir_id=1, flow_id=7, first=first, last=last, reporter=9, bsl=64, si=0,
                   askers=id_mask(askers), holders=id_mask(holders), again=again)  # fmt: skip


def test_an_agg_nack_clears_its_holders_and_repairs_its_askers_at_once() -> None:
    s = sender(n=3, nack_gather=0.5)
    s.poll(0.0)
    s.on_feedback(agg_nack(1, 1, [2], holders=[3, 4]), 0.1)
    (tx,) = s.poll(0.1)  # no gather: the BFR merged its BFERs' NACKs already
    assert tx.data.seq == serial.add(ISN, 1) and mask_ids(tx.bfers) == [2]
    owed = {serial.distance(ISN, q): mask_ids(slot.owing) for q, slot in s._slots.items()}
    assert owed[1] == [2] and owed[0] == [2, 3, 4]  # the holders hold 1 only
    assert s.counters["agg-nack"] == 1


def test_a_repeated_request_waits_for_the_holdoff_unless_the_bfr_saw_the_repair_miss() -> None:
    s = sender(n=3)  # RTO 1 s, no round trip measured: the holdoff is one RTO
    s.poll(0.0)
    for r in (3, 4):
        s.on_feedback(ack(r, 3), 0.05)
    s.on_feedback(ack(2, 1, 3, ranges=[(1, 1)]), 0.05)  # 2 lacks only 1
    s.on_feedback(agg_nack(1, 1, [2]), 0.1)
    s.poll(0.1)
    s.on_feedback(agg_nack(1, 1, [2]), 0.3)  # the repair may still be on its way: held off...
    assert s.poll(0.3) == [] and s.next_deadline() == pytest.approx(1.1)
    (tx,) = s.poll(1.1)  # ...until the holdoff ends, not dropped (nothing said 2 got it meanwhile)
    assert mask_ids(tx.bfers) == [2] and s.counters["request-held-off"] == 1
    s.on_feedback(agg_nack(1, 1, [2], again=True), 1.2)  # the BFR saw it pass and miss 2: at once
    (tx,) = s.poll(1.2)
    assert mask_ids(tx.bfers) == [2] and s.counters["request-held-off"] == 1


def test_each_branch_has_its_round_trip_and_a_timer_waits_for_the_slowest_of_its_receivers() -> None:
    from aidcnet.reliable.sender import BranchRto
    from aidcnet.rto import RtoEstimator

    rtos = BranchRto(lambda: RtoEstimator(1.0, min_rto=0.01, max_rto=5.0))
    s = Sender(1, 7, RX, rtos, SenderConfig(window=8), isn=ISN)
    for i in range(4):
        s.offer(bytes([i]), fin=i == 3)
    s.poll(0.0)
    s.on_feedback(ack(2, 1), 0.02, "near")  # one sample per branch and sequence
    s.on_feedback(ack(3, 1), 0.30, "far")
    s.on_feedback(ack(4, 1), 0.02, "near")
    near, far = rtos.policy("near").current(), rtos.policy("far").current()
    assert near < 0.1 and far == pytest.approx(0.9)  # SRTT + 4 RTTVAR of one 300 ms sample
    assert s.rto_of(id_mask([2, 4])) == near and s.rto_of(id_mask(RX)) == far
    # A flow opened later on the node starts from what was measured, not the first guess.
    later = Sender(1, 8, RX, rtos, SenderConfig(window=8), isn=ISN)
    assert later.rto_of(id_mask([2])) == rtos.first.current() == 1.0  # not heard yet: the first guess
    later.offer(b"x", fin=True)
    later.poll(0.5)
    later.on_feedback(ack(2, 0, 1, ranges=[(0, 0)], nack=True), 0.51, "near")
    assert later.rto_of(id_mask([2])) == near


def test_a_receiver_that_owes_nothing_sets_no_deadline_however_long_it_is_silent() -> None:
    """Only a receiver that owes something can be declared failed, so only its silence is a deadline: a
    caught-up receiver's last word plus fail_after, once past, had the agent's timer wake at once, again
    and again (a source at 100% of a core while another receiver's repairs went on)."""
    s = Sender(1, 7, RX, FixedRto(1.0), SenderConfig(window=8, fail_after=5.0), isn=ISN)
    s.offer(b"a" * 10)
    s.offer(b"b" * 10)  # no FIN: the flow stays open for more
    s.poll(0.0)
    for r in (2, 3):
        s.on_feedback(ack(r, 2), 0.1)
    s.on_feedback(ack(4, 1, 2, nack=True, ranges=[(1, 1)]), 0.1)  # 4 lost the second: under repair
    for t in (3.0, 6.0, 9.0, 12.0):
        s.on_feedback(ack(4, 1, 2, nack=True, ranges=[(1, 1)]), t)  # still missing it, still talking
        s.poll(t)
        deadline = s.next_deadline()
        assert deadline is None or deadline > t, (t, deadline)
    s.on_feedback(ack(4, 2), 14.0)
    s.poll(14.0)
    assert s.next_deadline() is None and s.failed == {}
    s.poll(100.0)
    assert s.next_deadline() is None and s.failed == {}


def test_after_a_timeout_the_repair_answered_sends_the_rest_of_a_lost_tail_at_once() -> None:
    """A tail lost to every receiver (a BFR restarted with sequences 2-9 in flight): no receiver sees a
    hole, so no NACK comes; the oldest one's timer resends it, and once the receivers answer that repair,
    what they still owe that was sent before it is lost too (one path per flow keeps order) and goes out
    at once (RFC 5681 §3.1, RFC 6675 §5.1), not one RTO each (a recovery of 68 sequences took 68 RTOs)."""
    s = sender(n=10, window=16)
    assert len(s.poll(0.0)) == 10
    for r in RX:
        s.on_feedback(ack(r, 2), 0.1)
    (timer,) = s.poll(1.1)  # one RTO after the last progress: the oldest owed, to everyone
    assert timer.data.seq == serial.add(ISN, 2) and mask_ids(timer.bfers) == list(RX)
    assert s.poll(1.15) == []
    for r in RX:
        s.on_feedback(ack(r, 3), 1.2)
    rest = s.poll(1.2)
    assert [serial.distance(ISN, t.data.seq) for t in rest] == list(range(3, 10))
    assert all(t.data.retransmit and mask_ids(t.bfers) == list(RX) for t in rest)
    for r in RX:
        s.on_feedback(ack(r, 10), 1.3)
    assert s.done and s.counters["timeouts"] == 1


def test_a_receiver_that_holds_the_later_sequences_is_not_sent_them_again() -> None:
    """Only what the answering receiver still owes goes back: one that selectively acknowledged 3-9 (only
    2 was lost to it, and its NACK too) is sent nothing more after its repair."""
    s = sender(n=10, window=16)
    s.poll(0.0)
    for r in RX:
        s.on_feedback(ack(r, 2, 10, ranges=[(2, 2)]), 0.1)  # holds all but 2 (ranges: its gaps)
    (timer,) = s.poll(1.1)
    assert timer.data.seq == serial.add(ISN, 2)
    for r in RX:
        s.on_feedback(ack(r, 10), 1.2)
    assert s.poll(1.2) == [] and s.done
