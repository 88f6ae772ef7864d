"""RFC 6298's retransmission timer (aidcnet.rto): the formulas of §2 on worked samples, the backoff of
§5.5, Karn's rule (§3), and hypothesis properties over any sequence of samples and timeouts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.rto import InFlight, RtoEstimator


def test_before_any_sample_the_rto_is_the_initial_one() -> None:
    assert RtoEstimator(initial=1.0, min_rto=1.0, max_rto=60.0).rto == 1.0  # RFC 6298 §2.1
    assert RtoEstimator(initial=0.2, min_rto=0.5, max_rto=60.0).rto == 0.5  # still within the bounds


def test_first_and_later_samples_follow_section_2() -> None:
    e = RtoEstimator(initial=1.0, min_rto=0.001, max_rto=60.0, granularity=0.01)
    assert e.sample(0.1)
    # §2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + max(G, 4 RTTVAR) = 0.1 + 0.2
    assert (e.srtt, e.rttvar, e.rto) == pytest.approx((0.1, 0.05, 0.3))
    assert e.sample(0.2)
    # §2.3, RTTVAR first with the old SRTT: 3/4 * 0.05 + 1/4 * |0.1 - 0.2| = 0.0625;
    # SRTT = 7/8 * 0.1 + 1/8 * 0.2 = 0.1125; RTO = 0.1125 + 4 * 0.0625 = 0.3625
    assert (e.srtt, e.rttvar, e.rto) == pytest.approx((0.1125, 0.0625, 0.3625))
    assert e.sample(0.05)
    # RTTVAR = 3/4 * 0.0625 + 1/4 * 0.0625 = 0.0625; SRTT = 0.0984375 + 0.00625 = 0.1046875
    assert (e.srtt, e.rttvar, e.rto) == pytest.approx((0.1046875, 0.0625, 0.3546875))


def test_a_steady_round_trip_leaves_the_clock_granularity_as_the_margin() -> None:
    e = RtoEstimator(initial=1.0, min_rto=0.001, max_rto=60.0, granularity=0.01)
    for _ in range(200):
        e.sample(0.1)
    assert e.rttvar == pytest.approx(0.0, abs=1e-12)
    assert e.rto == pytest.approx(0.1 + 0.01)  # max(G, K * RTTVAR) = G


def test_the_rfc_floor_rounds_a_short_rto_up() -> None:
    e = RtoEstimator(initial=1.0, min_rto=1.0, max_rto=60.0)
    e.sample(0.1)
    assert e.rto == 1.0  # §2.4: 0.3 s rounded up to the 1 s floor


def test_timeouts_double_up_to_the_ceiling_and_a_sample_collapses_them() -> None:
    e = RtoEstimator(initial=1.0, min_rto=0.001, max_rto=5.0, granularity=0.01)
    e.sample(0.1)
    assert [e.timeout() for _ in range(6)] == pytest.approx([0.6, 1.2, 2.4, 4.8, 5.0, 5.0])
    assert e.backoffs == 6
    e.sample(0.1)  # §5.7: a new measurement recomputes the RTO from SRTT and RTTVAR
    assert e.backoffs == 0 and e.rto == pytest.approx(0.1 + 4 * (0.75 * 0.05))


def test_karn_a_sample_of_a_retransmitted_item_changes_nothing() -> None:
    e = RtoEstimator(initial=1.0, min_rto=0.001, max_rto=60.0)
    e.sample(0.1)
    e.timeout()
    before = (e.srtt, e.rttvar, e.rto, e.backoffs)
    assert not e.sample(5.0, retransmitted=True)
    assert (e.srtt, e.rttvar, e.rto, e.backoffs) == before and e.ignored == 1 and e.samples == 1


def test_nonsense_bounds_and_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="min_rto"):
        RtoEstimator(initial=1.0, min_rto=2.0, max_rto=1.0)
    with pytest.raises(ValueError, match="initial"):
        RtoEstimator(initial=0.0, min_rto=0.1, max_rto=1.0)
    with pytest.raises(ValueError, match="negative"):
        RtoEstimator(initial=1.0, min_rto=0.1, max_rto=1.0).sample(-0.1)


bounds = st.tuples(st.floats(1e-4, 10.0), st.floats(1.0, 100.0)).map(lambda t: (t[0], t[0] * t[1]))
event = st.one_of(
    st.tuples(st.just("sample"), st.floats(0.0, 1000.0), st.booleans()),
    st.tuples(st.just("timeout"), st.just(0.0), st.just(False)),
)


@given(bounds, st.floats(1e-3, 100.0), st.floats(0.0, 1.0), st.lists(event, max_size=60))
def test_the_rto_stays_within_its_bounds_backs_off_and_obeys_karn(b, initial, g, events) -> None:
    lo, hi = b
    e = RtoEstimator(initial=initial, min_rto=lo, max_rto=hi, granularity=g)
    assert lo <= e.rto <= hi
    for kind, rtt, retransmitted in events:
        before = (e.srtt, e.rttvar, e.rto, e.backoffs)
        if kind == "timeout":
            assert e.timeout() == pytest.approx(min(hi, 2 * before[2]))
            assert e.backoffs == before[3] + 1
        elif retransmitted:
            assert not e.sample(rtt, retransmitted=True)
            assert (e.srtt, e.rttvar, e.rto, e.backoffs) == before
        else:
            assert e.sample(rtt)
            assert e.backoffs == 0 and e.rto >= min(hi, e.srtt)  # never below the smoothed round trip
        assert lo <= e.rto <= hi


# ------------------------------------------------------------------------------------------- InFlight


def flight(initial: float = 1.0) -> InFlight[int]:
    return InFlight(RtoEstimator(initial=initial, min_rto=0.01, max_rto=60.0))


def test_items_lost_in_one_window_are_resent_a_round_trip_after_their_send_without_backoff() -> None:
    f = flight()
    for i in range(8):
        f.sent(i, 0.0 + i * 0.01)
    # 2 and 5 are lost; the others are answered 0.1 s after their send, in order.
    for i in (0, 1, 3, 4, 6, 7):
        assert f.answered(i, 0.1 + i * 0.01)
    srtt = f.rto.srtt
    assert srtt == pytest.approx(0.1)
    rto_before = f.rto.rto
    # RACK (RFC 8985): sent before an answered item and older than 1.25 SRTT; no timeout needed.
    assert f.due(0.02 + 1.25 * srtt - 0.001) == []
    assert f.due(0.02 + 1.25 * srtt + 0.001) == [2]
    assert f.due(0.05 + 1.25 * srtt + 0.001) == [5]
    assert f.rto.rto == rto_before and f.timeouts == 0 and f.lost == 2 and f.retransmits == 2
    # Resent, they are the newest: nothing answered after them yet, so not lost again; only the timer
    # (restarted by the last answer, at 0.17) resends one, the oldest.
    assert f.due(0.17 + f.rto.rto - 0.001) == [] and f.lost == 2
    assert f.due(0.17 + f.rto.rto + 0.001) == [2] and f.timeouts == 1


def test_a_queue_that_delays_answers_in_order_marks_nothing_lost() -> None:
    f = flight()
    for i in range(32):
        f.sent(i, 0.0)
    for i in range(32):  # each answer 33 ms after the previous: the last waited ~1 s
        now = 0.033 * (i + 1)
        assert f.due(now) == []
        assert f.answered(i, now)
    assert f.retransmits == 0


def test_a_tail_loss_waits_for_the_timer_which_resends_only_the_oldest() -> None:
    f = flight(initial=0.5)
    for i in range(3):
        f.sent(i, 0.0)
    # Nothing answered: no RACK information, only the timer (RTO 0.5 from the first send).
    assert f.due(0.49) == []
    assert f.due(0.5) == [0] and f.rto.rto == pytest.approx(1.0) and f.timeouts == 1
    assert f.due(1.49) == []  # restarted at 0.5, doubled
    assert f.due(1.5) == [1]


def test_an_answer_to_a_resent_item_counts_its_first_send_for_the_send_order() -> None:
    f = flight(initial=0.2)
    f.sent(0, 0.0)
    f.sent(1, 0.05)
    assert f.due(0.2) == [0]  # timeout: 0 resent at 0.2
    # 0's answer at 0.25 may be for its first copy (sent at 0.0): 1 (sent at 0.05) is not later than
    # that, so 1 is not declared lost, and there is no sample (Karn).
    assert f.answered(0, 0.25) and f.rto.samples == 0
    assert f.answered_sent == 0.0 and f.due(0.3) == []


@given(
    st.lists(st.tuples(st.integers(0, 20), st.floats(0.0, 0.5)), min_size=1, max_size=40),
    st.sets(st.integers(0, 20)),
)
def test_in_order_answers_never_cause_a_resend_before_the_timer(sends, lost) -> None:
    """Answers in send order, however late, never trigger a resend of an unanswered item by send order:
    only missing answers (``lost``) can, and only the timer resends anything when nothing is missing."""
    f = flight(initial=60.0)
    now = 0.0
    order = []
    for key, gap in sends:
        if key in f or key in order:
            continue
        now += gap
        f.sent(key, now)
        order.append(key)
    for key in order:
        now += 0.01
        resent = f.due(now)
        assert all(k in lost for k in resent), (resent, lost)
        if key not in lost:
            f.answered(key, now)
    if not lost & set(order):
        assert f.retransmits == 0


def test_the_estimator_is_the_reliable_senders_rto_policy() -> None:
    """aidcnet.reliable.sender takes an injected RtoPolicy (current, observe): this estimator is one."""
    from aidcnet.reliable.sender import RtoPolicy

    policy: RtoPolicy = RtoEstimator(initial=1.0, min_rto=0.001, max_rto=60.0, granularity=0.01)
    assert policy.current() == 1.0
    policy.observe(0.1)
    assert policy.current() == pytest.approx(0.3)
