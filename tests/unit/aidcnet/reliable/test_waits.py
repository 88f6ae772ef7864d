"""ProtocolWaits (aidcnet/reliable/waits.py): the spans a reliable source waited on its protocol."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.reliable.waits import ProtocolWaits


def test_a_wait_runs_from_the_pass_to_what_may_let_the_source_send() -> None:
    w = ProtocolWaits()
    w.begin(100, until_ns=None)
    assert w.waiting
    w.end(250)
    assert w.spans == [(100, 250)] and not w.waiting


def test_a_wait_ends_when_its_timer_runs_out_however_late_the_pass_comes() -> None:
    # The timer was due at 180: a pass that came at 400 was late, and the 220 ns between are ours.
    w = ProtocolWaits()
    w.begin(100, until_ns=180)
    w.end(400)
    assert w.spans == [(100, 180)]


def test_a_later_pass_keeps_the_start_and_takes_its_own_timer() -> None:
    w = ProtocolWaits()
    w.begin(100, until_ns=150)
    w.begin(120, until_ns=300)  # a pass in between (nothing sendable still): the timer moved
    w.end(260)
    assert w.spans == [(100, 260)]


def test_an_end_without_a_wait_and_an_empty_span_leave_nothing() -> None:
    w = ProtocolWaits()
    w.end(50)
    w.begin(100, until_ns=100)
    w.end(120)
    w.begin(200, until_ns=None)
    w.end(150)  # feedback stamped before the pass that opened the wait: nothing was waited
    assert w.spans == []
    w.begin(300, None)
    w.reset()
    w.end(400)
    assert w.spans == []


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.none() | st.integers(0, 10**6))))
def test_spans_never_overlap_and_never_reach_past_their_timer(events: list) -> None:
    w = ProtocolWaits()
    now = 0
    for gap, length, timer in events:
        now += gap
        until = None if timer is None else now + timer
        w.begin(now, until)
        w.end(now + length)
        assert not w.spans or w.spans[-1][1] <= (now + length if until is None else min(now + length, until))
        now += length
    for (a0, a1), (b0, _b1) in zip(w.spans, w.spans[1:], strict=False):
        assert a0 < a1 <= b0
