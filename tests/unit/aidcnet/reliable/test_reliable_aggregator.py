"""ACK aggregation at a BFR: one AGG-ACK when all below acked, partials, coalescing, budget, expiry."""

from __future__ import annotations

import pytest

from aidcnet.reliable import serial
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig
from aidcnet.reliable.header import Ack, AggAck, AggNack, Data
from aidcnet.reliable.sender import id_mask, mask_ids
from tests.unit.aidcnet.reliable.feedback import agg_ack

ISN = serial.MASK  # windows straddle the wrap
DOWN = id_mask([2, 3, 5])


def data(k: int, fin: bool = False) -> Data:
    return Data(bfir_id=1, flow_id=7, seq=serial.add(ISN, k), payload=b"x", fin=fin)


def ack(reporter: int, cum_k: int, nack: bool = False) -> Ack:
    cum = serial.add(ISN, cum_k)
    ranges = ((cum, cum),) if nack else ()
    return Ack(
        bfir_id=1,
        flow_id=7,
        cum=cum,
        reporter=reporter,
        highest=serial.add(cum, 1 if nack else 0),
        ranges=ranges,
        nack=nack,
    )


def agg(**cfg: float) -> AckAggregator:
    # One AGG-ACK per window unless a test says otherwise: these tests are about what one window says.
    return AckAggregator(
        17, AggregatorConfig(**{"partial_after": 0.01, "lifetime": 1.0, "report_every": 1, **cfg})
    )


def test_one_agg_ack_when_every_bfer_below_acked() -> None:
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    assert a.on_feedback(ack(2, 1), 0.001) == []
    assert a.on_feedback(ack(3, 1), 0.001) == []
    ((up, msg),) = a.on_feedback(ack(5, 1), 0.002)
    assert up == "up" and isinstance(msg, AggAck) and not msg.partial
    assert msg.cum == serial.add(ISN, 1) and mask_ids(msg.acked_mask()) == [2, 3, 5] and msg.reporter == 17
    assert a.entries == 0 and a.counters["absorbed"] == 3


def test_windows_of_several_sequences_across_the_wrap() -> None:
    a = agg(window=4)
    # ISN = 2**32 - 1 is the last sequence of the window starting at 2**32 - 4
    for k in range(5):
        a.on_data(data(k), DOWN, "up", 0.0)
    assert a.entries == 2
    out = []
    for r in (2, 3, 5):
        out += a.on_feedback(ack(r, 5), 0.001)
    # the first window's AGG-ACK (cum 0) is said by the second one's (cum 4, same BFERs): one message
    assert [(m.cum, mask_ids(m.acked_mask())) for _, m in out] == [(4, [2, 3, 5])]
    assert a.counters["agg-coalesced"] == 1


def test_fin_ends_the_last_window_early() -> None:
    a = agg(window=8)
    a.on_data(data(1), DOWN, "up", 0.0)
    a.on_data(data(2, fin=True), DOWN, "up", 0.0)
    out = []
    for r in (2, 3, 5):
        out += a.on_feedback(ack(r, 3), 0.001)
    assert [m.cum for _, m in out] == [serial.add(ISN, 3)]


def test_partial_after_timeout_names_the_missing_then_backs_off() -> None:
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 1), 0.001)
    assert a.poll(0.005) == []
    ((_, msg),) = a.poll(0.01)
    assert msg.partial and mask_ids(msg.acked_mask()) == [2] and mask_ids(msg.missing_mask()) == [3, 5]
    assert a.poll(0.02) == []  # next one after 2 × partial_after
    assert len(a.poll(0.03)) == 1
    a.on_feedback(ack(3, 1), 0.04)
    ((_, done),) = a.on_feedback(ack(5, 1), 0.05)
    assert not done.partial and a.entries == 0


def test_partial_from_below_is_passed_on_without_waiting() -> None:
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 1), 0.001)
    below = agg_ack(ISN, 1, [3], missing=[5], reporter=9)
    ((_, msg),) = a.on_feedback(below, 0.002)
    assert msg.partial and mask_ids(msg.acked_mask()) == [2, 3] and mask_ids(msg.missing_mask()) == [5]


def test_nacks_pass_through_without_merging_and_unknown_acks_fall_back_to_end_to_end() -> None:
    a = agg(merge_nacks=False)
    a.on_data(data(0), DOWN, "up", 0.0)
    nack = ack(2, 0, nack=True)
    assert a.on_feedback(nack, 0.001) == [("up", nack)]
    stray = Ack(bfir_id=1, flow_id=8, cum=5, reporter=2, highest=5)
    assert a.on_feedback(stray, 0.001) == [(None, stray)]
    outsider = ack(9, 1)  # not a BFER this BFR sent to
    assert a.on_feedback(outsider, 0.001) == [("up", outsider)]
    assert a.counters["nack-passed"] == 1 and a.counters["passed-no-entry"] == 2


def test_over_budget_forwards_without_state_and_acks_pass_end_to_end() -> None:
    a = agg(budget=1)
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_data(data(1), DOWN, "up", 0.0)
    assert a.counters["over-budget"] == 1 and a.entries == 1
    for r in (2, 3):
        assert a.on_feedback(ack(r, 2), 0.001) == []  # window 0 done for them, absorbed
    out = a.on_feedback(ack(5, 1), 0.001)  # completes window 0
    assert [m.cum for _, m in out] == [serial.add(ISN, 1)]
    late = ack(5, 2)  # window 1 never had an entry here: end to end
    assert a.on_feedback(late, 0.002) == [(None, late)]


def test_entries_expire() -> None:
    a = agg(lifetime=0.05)
    a.on_data(data(0), DOWN, "up", 0.0)
    a.poll(0.01)
    a.poll(0.05)
    assert a.entries == 0 and a.counters["expired"] == 1 and a.next_deadline() is None


def test_a_running_flow_keeps_its_entries_past_their_lifetime() -> None:
    """A hole that outlives a lifetime counted from the window's first DATA would lose its state while
    the flow still runs, and its BFERs' ACKs would then reach the BFIR end to end."""
    a = agg(lifetime=0.05)
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 1), 0.04)  # the flow is alive: every entry of it lives another lifetime
    a.on_data(data(1), DOWN, "up", 0.08)
    a.poll(0.085)
    assert a.entries == 2 and a.counters["expired"] == 0
    a.poll(0.13)  # 0.05 after the last sign of the flow
    assert a.entries == 0 and a.counters["expired"] == 2


@pytest.mark.parametrize("cfg", [{"window": 3}, {"partial_after": 2.0}, {"budget": -1}, {"bsl": 100}])
def test_bad_config_is_refused(cfg: dict) -> None:
    with pytest.raises(ValueError):
        agg(**cfg)


def _complete(a: AckAggregator, k: int, sent: float, acked: float) -> list:
    a.on_data(data(k), DOWN, "up", sent)
    out = []
    for r in (2, 3, 5):
        out += a.on_feedback(ack(r, k + 1), acked)
    return out


def test_partial_timer_follows_the_window_completion_times_it_observes() -> None:
    # Windows here take 50 ms from DATA to the last ACK (a queue below), five times the 10 ms floor:
    # after a few of them the timer waits longer than that, so a queued window gets no partial.
    a = agg()
    key = (1, 7)
    assert a.partial_wait(key) == 0.01
    t = 0.0
    for k in range(8):
        assert [m.partial for _, m in _complete(a, k, t, t + 0.05)] == [False]
        t += 0.1
    assert a.partial_wait(key) > 0.05
    a.on_data(data(8), DOWN, "up", t)
    assert a.poll(t + 0.05) == []  # still within the learnt timer: no partial for a queued window
    assert a.counters["partial-sent"] == 0


def test_fixed_partial_timer_when_not_adaptive() -> None:
    a = agg(adaptive=False)
    for k in range(8):
        _complete(a, k, k * 0.1, k * 0.1 + 0.05)
    assert a.partial_wait((1, 7)) == 0.01
    a.on_data(data(8), DOWN, "up", 1.0)
    assert [m.partial for _, m in a.poll(1.011)] == [True]


def test_partial_timer_is_capped_below_the_entry_lifetime() -> None:
    a = agg(lifetime=0.2)
    for k in range(8):
        _complete(a, k, k * 1.0, k * 1.0 + 0.5)  # no poll: the entries live on to complete
    assert a.partial_wait((1, 7)) == pytest.approx(0.1)


def test_a_repaired_window_gives_no_sample() -> None:
    # Karn: DATA again after the partial is the BFIR's repair; its completion time says nothing of the path.
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 1), 0.001)
    assert [m.partial for _, m in a.poll(0.011)] == [True]
    a.on_data(data(0), id_mask([3, 5]), "up", 0.5)
    a.on_feedback(ack(3, 1), 0.6)
    a.on_feedback(ack(5, 1), 0.6)
    assert a.entries == 0
    assert a.partial_wait((1, 7)) == 0.01 and a.timers[(1, 7)].ignored == 1


def test_learnt_timers_are_bounded_by_the_budget() -> None:
    a = agg(budget=2)
    for flow in (1, 2, 3):
        d = Data(bfir_id=1, flow_id=flow, seq=0, payload=b"x")
        a.on_data(d, id_mask([2]), "up", 0.0)
        a.on_feedback(Ack(bfir_id=1, flow_id=flow, cum=1, reporter=2, highest=1), 0.05)
    assert list(a.timers) == [(1, 2), (1, 3)]


def test_forget_drops_a_window_left_open_so_a_new_run_of_the_same_flow_id_starts_clean() -> None:
    a = agg()
    # The last run: BFER 5 never acknowledged the first window, and a finished window taught the timer.
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_data(data(1), DOWN, "up", 0.0)
    for r in (2, 3, 5):
        a.on_feedback(ack(r, 1), 0.5)
    a.on_feedback(ack(2, 2), 0.5)
    assert a.entries == 1 and a.partial_wait((1, 7)) > 0.01
    assert a.forget() == 1
    assert a.entries == 0 and a.flows == {} and a.partial_wait((1, 7)) == 0.01
    assert a.counters["forgotten"] == 1 and a.counters["absorbed"] == 4  # the counters only grow
    # The new run reuses flow 7 from the same ISN: nothing of the old window answers for it.
    assert a.poll(100.0) == []
    a.on_data(data(0), DOWN, "up", 100.0)
    assert a.on_feedback(ack(2, 1), 100.001) == []
    ((_, msg),) = a.poll(100.01)
    assert msg.partial and mask_ids(msg.missing_mask()) == [3, 5]
    assert a.forget() == 1 and a.forget() == 0  # idempotent


def sack(
    reporter: int, cum_k: int, highest_k: int, missing: list[tuple[int, int]], nack: bool = False
) -> Ack:
    """An ACK with gaps: ``reporter`` holds [cum_k, highest_k) except the ``missing`` ranges (a NACK:
    asks for them, and says nothing of the rest)."""
    return Ack(
        bfir_id=1,
        flow_id=7,
        cum=serial.add(ISN, cum_k),
        reporter=reporter,
        highest=serial.add(ISN, highest_k),
        ranges=tuple((serial.add(ISN, a), serial.add(ISN, b)) for a, b in missing),
        nack=nack,
    )


def spans(out: list) -> list[tuple[int | None, int, list[int], list[int]]]:
    """(First, Cumulative, acked, missing) of the AGG-ACKs in ``out``, relative to ISN."""

    def k(seq: int | None) -> int | None:
        return None if seq is None else serial.distance(ISN, seq)

    return [(k(m.first), k(m.cum), mask_ids(m.acked_mask()), mask_ids(m.missing_mask())) for _, m in out]


def test_windows_held_above_a_hole_are_acknowledged_selectively_then_cumulatively() -> None:
    a = agg()
    for k in range(4):
        a.on_data(data(k), DOWN, "up", 0.0)
    assert a.on_feedback(ack(2, 4), 0.001) == [] and a.on_feedback(ack(3, 4), 0.001) == []
    # 5 lost 1: its ACK's gaps say it holds 0, 2 and 3. 0 is complete; 2..3 are held by all, selectively.
    out = a.on_feedback(sack(5, 1, 4, [(1, 1)]), 0.002)
    assert spans(out) == [(2, 4, [2, 3, 5], []), (None, 1, [2, 3, 5], [])]
    assert a.counters["selective-sent"] == 1 and a.counters["selective-coalesced"] == 1
    assert a.entries == 3, "1 is open, and 2..3 wait for their cumulative AGG-ACK"
    # No partial: 2..3 are held by all, and 5 has seen past 1 (it sees the hole and asks for itself).
    assert a.poll(0.05) == [] and a.counters["partial-suppressed"] == 1 and a.counters["partial-sent"] == 0
    # The repair arrives: one cumulative AGG-ACK for 1..3, and every entry is freed.
    assert spans(a.on_feedback(ack(5, 4), 0.06)) == [(None, 4, [2, 3, 5], [])]
    assert a.entries == 0


def test_a_partial_names_the_bfers_that_saw_nothing_past_the_window() -> None:
    """5 lost the flow's last sequence and sees no hole: it stays silent and a partial says so; 3 lost the
    one before and received the last (it asks for itself): no partial for its window."""
    a = agg()
    for k in range(2):
        a.on_data(data(k, fin=k == 1), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 2), 0.001)
    a.on_feedback(sack(3, 0, 2, [(0, 0)]), 0.001)  # holds 1, lacks 0
    a.on_feedback(ack(5, 1), 0.001)  # holds 0, lacks 1 (the last): silent about it
    out = spans(a.poll(0.05))
    assert out == [(None, 2, [2], [3, 5])] and a.counters["partial-suppressed"] == 1, out


def test_a_selective_agg_ack_says_again_the_held_windows_before_it() -> None:
    """Its First goes back over the adjacent windows already reported, so a lost one is repeated."""
    a = agg()
    for k in range(4):
        a.on_data(data(k), DOWN, "up", 0.0)
    for r in (2, 3):
        a.on_feedback(ack(r, 4), 0.001)
    assert spans(a.on_feedback(sack(5, 0, 2, [(0, 0)]), 0.002)) == [(1, 2, [2, 3, 5], [])]
    assert spans(a.on_feedback(sack(5, 0, 4, [(0, 0)]), 0.003)) == [(1, 4, [2, 3, 5], [])]


def test_selective_agg_acks_from_below_nest() -> None:
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_data(data(1), DOWN, "up", 0.0)
    below = agg_ack(ISN, 2, [3, 5], first_k=1, reporter=9)
    assert a.on_feedback(below, 0.001) == [] and a.counters["absorbed"] == 1
    assert spans(a.on_feedback(ack(2, 2), 0.002)) == [(1, 2, [2, 3, 5], [])]
    # The cumulative AGG-ACK from below ends it: 0 and 1 in one message.
    below = agg_ack(ISN, 2, [3, 5], reporter=9)
    assert spans(a.on_feedback(below, 0.003)) == [(None, 2, [2, 3, 5], [])] and a.entries == 0


def test_a_nack_is_no_selective_ack() -> None:
    """A NACK's ranges are the gaps asked for now, not all of them: what lies between is not held."""
    a = agg(merge_nacks=False)
    for k in range(3):
        a.on_data(data(k), DOWN, "up", 0.0)
    for r in (2, 3):
        a.on_feedback(ack(r, 3), 0.001)
    nack = sack(5, 0, 3, [(0, 0)], nack=True)
    assert a.on_feedback(nack, 0.002) == [("up", nack)] and a.counters["selective-sent"] == 0


def test_the_wait_for_the_next_window_follows_the_data_gap_up_to_report_max() -> None:
    """Twice the flow's DATA gap here, at least report_delay and at most report_max (partial_after / 2 when
    unset): a window's AGG-ACK held longer than the BFIR's RTO floor made its timer fire without loss."""
    for report_max, want in ((None, 0.005), (0.003, 0.003)):
        a = agg(report_every=2, report_delay=0.001, report_max=report_max)  # type: ignore[arg-type]
        for k in range(3):  # DATA every 10 ms: twice the gap (20 ms) is over both caps
            a.on_data(data(k), DOWN, "up", 0.01 * k)
        assert a.report_wait((1, 7)) == pytest.approx(want)
    with pytest.raises(ValueError, match="report_max"):
        AggregatorConfig(partial_after=0.01, lifetime=1.0, report_delay=0.002, report_max=0.001)


def test_an_agg_ack_waits_for_the_next_window_or_report_delay() -> None:
    a = agg(report_every=2, report_delay=0.002)
    for k in range(4):
        a.on_data(data(k), DOWN, "up", 0.0)
    for r in (2, 3):
        a.on_feedback(ack(r, 1), 0.001)
    assert a.on_feedback(ack(5, 1), 0.001) == [] and a.next_deadline() == pytest.approx(0.003)
    for r in (2, 3):
        a.on_feedback(ack(r, 2), 0.0015)
    # The second window: one AGG-ACK says both.
    assert spans(a.on_feedback(ack(5, 2), 0.0015)) == [(None, 2, [2, 3, 5], [])]
    for r in (2, 3, 5):
        a.on_feedback(ack(r, 3), 0.002)
    assert a.poll(0.0039) == []
    assert spans(a.poll(0.004)) == [(None, 3, [2, 3, 5], [])], "the third waited report_delay alone"
    a.on_data(data(4, fin=True), DOWN, "up", 0.006)
    for r in (2, 3):
        a.on_feedback(ack(r, 5), 0.007)
    # The FIN's window does not wait: nothing follows it.
    assert spans(a.on_feedback(ack(5, 5), 0.007)) == [(None, 5, [2, 3, 5], [])]
    assert a.entries == 0 and a.next_deadline() is None


def test_no_partial_for_a_window_whose_missing_bfers_asked_for_it_themselves() -> None:
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 1), 0.001)
    a.on_feedback(ack(3, 0, nack=True), 0.002)
    a.on_feedback(ack(5, 0, nack=True), 0.003)
    # Their NACKs went up merged (one AGG-NACK: 3 and 5 ask, 2 holds it); no partial names them.
    ((_up, merged),) = a.poll(0.011)
    assert isinstance(merged, AggNack) and mask_ids(merged.askers_mask()) == [3, 5]
    assert mask_ids(merged.holders_mask()) == [2] and a.counters["partial-suppressed"] == 1
    # Silent since: the next partial goes, and names them.
    assert spans(a.poll(0.05)) == [(None, 1, [2], [3, 5])]


def test_the_answers_to_a_repair_that_crossed_the_agg_ack_are_absorbed_while_it_is_fresh() -> None:
    # The BFIR's timer resent sequence 0 to everyone just before the last BFER's ACK completed the window
    # here: the others answer the duplicate after the AGG-ACK freed the entry. Within one partial wait of
    # that AGG-ACK their ACKs say nothing it did not; later, or from a BFER it did not name, they go on.
    a = agg(partial_after=0.1, adaptive=False)
    a.on_data(data(0, fin=True), id_mask([2, 3]), "up", 0.0)
    a.on_feedback(ack(2, 1), 0.01)
    ((_up, msg),) = a.on_feedback(ack(3, 1), 0.02)
    assert isinstance(msg, AggAck) and a.entries == 0
    assert a.on_feedback(ack(2, 1), 0.05) == []
    assert a.counters["absorbed-reported"] == 1
    ((_up, passed),) = a.on_feedback(ack(5, 1), 0.06)  # not named by the AGG-ACK
    assert passed == ack(5, 1)
    ((_up, late),) = a.on_feedback(ack(3, 1), 0.2)  # the AGG-ACK may have been lost: say it again
    assert late == ack(3, 1)
    assert a.counters["passed-no-entry"] == 2


def test_a_repair_after_the_agg_ack_makes_an_entry_that_answers_again() -> None:
    # The AGG-ACK was lost: the BFIR resends, the repair makes a new entry here, and the answers to it
    # complete that entry (a new AGG-ACK) instead of being taken for what was said before.
    a = agg(partial_after=0.1, adaptive=False)
    a.on_data(data(0, fin=True), id_mask([2, 3]), "up", 0.0)
    a.on_feedback(ack(2, 1), 0.01)
    a.on_feedback(ack(3, 1), 0.02)
    a.on_data(data(0, fin=True), id_mask([2, 3]), "up", 0.03)
    assert a.on_feedback(ack(2, 1), 0.04) == []
    ((_up, again),) = a.on_feedback(ack(3, 1), 0.05)
    assert isinstance(again, AggAck) and mask_ids(again.acked_mask()) == [2, 3]
    assert a.counters["absorbed-reported"] == 0


# -- NACK merging (issue 38) -----------------------------------------------------------------------


def merged(out: list) -> list[tuple[int, int, list[int], list[int], bool]]:
    """The AGG-NACKs of a BFR's output: (first, last, askers, holders, again), sequences relative to ISN."""
    return [
        (serial.distance(ISN, m.first), serial.distance(ISN, m.last), mask_ids(m.askers_mask()),
         mask_ids(m.holders_mask()), m.again)
        for _up, m in out
        if isinstance(m, AggNack)
    ]  # fmt: skip


def test_the_nacks_of_one_drop_go_up_as_one_agg_nack_naming_askers_and_holders() -> None:
    a = agg()
    for k in range(3):
        a.on_data(data(k), DOWN, "up", 0.0)
    a.on_feedback(ack(2, 3), 0.001)  # 2 holds all three
    wait = a.gather_wait((1, 7))  # the round's gather, as the first NACK opens it
    assert merged(a.on_feedback(sack(3, 1, 3, [(1, 1)], nack=True), 0.002)) == []  # 3 and 5 lost 1
    assert merged(a.on_feedback(sack(5, 1, 3, [(1, 1)], nack=True), 0.0021)) == []
    assert wait > 0 and a.next_deadline() == pytest.approx(0.002 + wait)
    assert merged(a.poll(0.002 + wait)) == [(1, 1, [3, 5], [2], False)]
    # Until the repair passes, their repeated NACKs are absorbed.
    a.on_feedback(sack(3, 1, 3, [(1, 1)], nack=True), 0.004)
    assert merged(a.poll(0.005)) == [] and a.counters["nack-merged"] == 2
    assert a.counters["round-opened"] == 1 and a.counters["agg-nack-sent"] == 1


def test_askers_the_repair_missed_ask_again_at_once_and_a_lost_repair_is_asked_for_again() -> None:
    a = agg()
    for k in range(3):
        a.on_data(data(k), DOWN, "up", 0.0)
    a.on_feedback(sack(3, 1, 3, [(1, 1)], nack=True), 0.001)
    wait = a.gather_wait((1, 7))
    assert merged(a.poll(0.001 + wait)) == [(1, 1, [3], [], False)]
    a.on_feedback(sack(5, 1, 3, [(1, 1)], nack=True), 0.008)  # late: the AGG-NACK went without it
    # The repair for 3 passes; 5 asked in this round and it missed 5: 5's round goes at once, flagged.
    a.on_data(Data(bfir_id=1, flow_id=7, seq=serial.add(ISN, 1), payload=b"x", retransmit=True),
              id_mask([3]), "up", 0.010)  # fmt: skip
    assert merged(a.poll(0.010)) == [(1, 1, [5], [], True)]
    # The repair to 5 passes too, and is lost below: 5 asks again, and the BFR knows the repair went by.
    a.on_data(Data(bfir_id=1, flow_id=7, seq=serial.add(ISN, 1), payload=b"x", retransmit=True),
              id_mask([5]), "up", 0.015)  # fmt: skip
    a.on_feedback(sack(5, 1, 3, [(1, 1)], nack=True), 0.020)
    assert merged(a.poll(0.020 + a.gather_wait((1, 7)))) == [(1, 1, [5], [], True)]
    assert a.counters["round-repaired"] == 2 and a.counters["round-again"] == 2


def test_a_round_whose_repair_never_passes_expires_and_the_next_nack_opens_another() -> None:
    a = agg()
    a.on_data(data(0), DOWN, "up", 0.0)
    a.on_data(data(1), DOWN, "up", 0.0)
    a.on_feedback(sack(3, 0, 2, [(0, 0)], nack=True), 0.001)
    sent = 0.001 + a.gather_wait((1, 7))
    assert merged(a.poll(sent)) == [(0, 0, [3], [], False)]
    later = sent + a.round_wait("up")  # the AGG-NACK or its repair was lost above
    a.on_feedback(sack(3, 0, 2, [(0, 0)], nack=True), later)
    assert merged(a.poll(later + a.gather_wait((1, 7)))) == [(0, 0, [3], [], False)]
    assert a.counters["round-expired"] == 1


def test_an_agg_nack_from_below_joins_the_round_and_its_holders_hold() -> None:
    from aidcnet.reliable.header import AggNack

    a = agg()
    for k in range(2):
        a.on_data(data(k), DOWN, "up", 0.0)
    below = AggNack(bfir_id=1, flow_id=7, first=serial.add(ISN, 0), last=serial.add(ISN, 0), reporter=9,
                    bsl=64, si=0, askers=id_mask([3]), holders=id_mask([5]))  # fmt: skip
    assert a.on_feedback(below, 0.001) == []
    a.on_feedback(sack(2, 0, 2, [(0, 0)], nack=True), 0.0015)
    assert merged(a.poll(0.002 + a.gather_wait((1, 7)))) == [(0, 0, [2, 3], [5], False)]
