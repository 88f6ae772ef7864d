"""Two ends of a BFD session on a simulated link: the three-way handshake, detection within the
detection time whichever way the link fails, and the loss threshold for gray failures."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.bfd.packet import ControlPacket, State
from aidcnet.bfd.session import Session, Transition

INTERVAL = 0.01


class Link:
    """Both ends, each sending every INTERVAL (b offset by ``phase``), over a link whose two directions
    each drop a packet when ``drop_ab(t)`` / ``drop_ba(t)`` says so; the delay is ``delay`` s."""

    def __init__(self, loss_threshold=None, phase=0.003, delay=0.0001, multiplier=3) -> None:
        self.a = Session(1, INTERVAL, multiplier, loss_threshold)
        self.b = Session(2, INTERVAL, multiplier, loss_threshold)
        self.phase, self.delay = phase, delay
        self.drop_ab = self.drop_ba = lambda _t: False
        self.log: list[tuple[str, Transition]] = []
        self.now = 0.0
        self.interval = {"a": INTERVAL, "b": INTERVAL}

    def run(self, until: float, step: float = 0.0005) -> None:
        inflight: list[tuple[float, str, bytes]] = []
        next_tx = {"a": self.now, "b": self.now + self.phase}
        ends = {"a": self.a, "b": self.b}
        while self.now < until:
            self.now = round(self.now + step, 9)
            arrived = [i for i in inflight if i[0] <= self.now]
            inflight = [i for i in inflight if i[0] > self.now]
            for at, to, wire in arrived:
                change = ends[to].receive(ControlPacket.decode(wire), at)
                if change:
                    self.log.append((to, change))
            for name, end in ends.items():
                change = end.expire(self.now)
                if change:
                    self.log.append((name, change))
                while next_tx[name] <= self.now:
                    drop = self.drop_ab if name == "a" else self.drop_ba
                    if not drop(next_tx[name]):
                        inflight.append(
                            (next_tx[name] + self.delay, "b" if name == "a" else "a", end.packet().encode())
                        )
                    next_tx[name] += self.interval[name]

    def downs(self, end: str) -> list[Transition]:
        return [t for n, t in self.log if n == end and t.state == State.DOWN and t.reason != "loss-cleared"]


def test_the_handshake_brings_both_ends_up():
    link = Link()
    link.run(0.05)
    assert link.a.state == link.b.state == State.UP
    assert [t.state for n, t in link.log if n == "a"][-1] == State.UP


@pytest.mark.parametrize("direction", ["both", "a-to-b", "b-to-a"])
def test_a_cut_in_either_direction_takes_both_ends_down_within_the_detection_time(direction):
    link = Link()
    link.run(0.1)
    cut = link.now
    if direction in ("both", "a-to-b"):
        link.drop_ab = lambda t: t >= cut
    if direction in ("both", "b-to-a"):
        link.drop_ba = lambda t: t >= cut
    link.run(0.3)
    detection = 3 * INTERVAL
    for end in ("a", "b"):
        downs = link.downs(end)
        assert downs, f"{end} never went down ({direction})"
        # the end that stops hearing its peer: within the detection time after the last packet it heard;
        # the other: told by the first packet that gets through
        assert downs[0].at - cut <= detection + INTERVAL + 0.001, (end, downs[0])
    assert link.a.state != State.UP and link.b.state != State.UP


def test_a_link_that_comes_back_comes_up_again():
    link = Link()
    link.run(0.1)
    cut = link.now
    link.drop_ab = link.drop_ba = lambda t: cut <= t < cut + 0.1
    link.run(0.4)
    assert link.downs("a") and link.a.state == link.b.state == State.UP


def test_a_late_reader_is_not_fooled_when_the_packets_arrived_in_time():
    """The packets carry the kernel's arrival time: applied late, in order, before the timers, they keep
    the session up."""
    s = Session(1, INTERVAL, 3)
    peer = Session(2, INTERVAL, 3)
    s.receive(peer.packet(), 0.0)  # Down -> Init
    peer.receive(s.packet(), 0.0)  # Down -> Up (it heard Init)
    s.receive(peer.packet(), 0.001)
    assert s.state == State.UP
    # the reader stalls for 0.2 s; meanwhile the kernel queued the peer's packets every INTERVAL
    for k in range(1, 21):
        s.receive(peer.packet(), 0.001 + k * INTERVAL)
    assert s.expire(0.2) is None and s.state == State.UP
    # and when nothing arrived, the decision says how late it came
    change = s.expire(0.4)
    assert change.state == State.DOWN and change.reason == "detection-time"
    assert change.late_s == pytest.approx(0.4 - (0.201 + 3 * INTERVAL))


@pytest.mark.parametrize(("loss", "detected"), [(0.4, True), (0.02, False)])
def test_the_loss_threshold_catches_a_gray_one_way_failure(loss, detected):
    rng = random.Random(5880)
    link = Link(loss_threshold=0.2)
    link.run(0.1)
    start = link.now
    link.drop_ab = lambda t: t >= start and rng.random() < loss
    link.run(start + 3.0)
    reasons = {t.reason for n, t in link.log if t.state == State.DOWN}
    assert ("loss" in reasons) == detected, link.log[-5:]
    if detected:  # and it stays down instead of flapping while the loss lasts
        ups_after = [t for n, t in link.log if t.state == State.UP and t.at > link.downs("b")[0].at]
        assert not ups_after, ups_after
        # once the link is clean again, the session comes back after its hold-down
        link.drop_ab = lambda _t: False
        link.run(link.now + 1.0)
        assert link.a.state == link.b.state == State.UP
        assert any(t.reason == "loss-cleared" for n, t in link.log if n == "b")


def test_a_packet_for_another_session_is_ignored():
    s = Session(1, INTERVAL, 3)
    assert s.receive(ControlPacket(State.DOWN, 5, 99, 10_000, 10_000, 3), 0.0) is None
    assert s.remote_discriminator == 0


@settings(max_examples=40, deadline=None)
@given(
    phase=st.floats(0.0, INTERVAL),
    delay=st.floats(0.0, INTERVAL / 2),
    cut_at=st.floats(0.06, 0.2),
    mult=st.integers(2, 5),
)
def test_any_cut_is_detected_within_the_detection_time(phase, delay, cut_at, mult):
    link = Link(phase=phase, delay=delay, multiplier=mult)
    link.run(cut_at)
    assert link.a.state == link.b.state == State.UP
    cut = link.now
    link.drop_ab = link.drop_ba = lambda t: t >= cut
    link.run(cut + (mult + 2) * INTERVAL)
    for end in ("a", "b"):
        downs = link.downs(end)
        assert downs and downs[0].at - cut <= mult * INTERVAL + delay + 0.001, (end, downs)


def test_a_session_just_up_has_no_window_to_judge_loss_by():
    """Cut a moment after the handshake: the window reaches back before the peer was heard at all, so the
    Down is the detection time's, not a loss (which would hold the link down once it is back)."""
    link = Link(loss_threshold=0.2)
    link.run(0.04)
    assert link.a.state == link.b.state == State.UP
    cut = link.now
    link.drop_ab = link.drop_ba = lambda t: t >= cut
    link.run(cut + 0.1)
    assert [t.reason for t in link.downs("b")] == ["detection-time"]
    assert not link.b.held_for_loss


@pytest.mark.parametrize("factor", [0.25, 2, 4])
def test_a_new_time_scale_keeps_the_session_up_whichever_end_changes_first(factor):
    """Each end rescales on its own, 40 ms apart: the one still waiting at the old, shorter interval
    stretches its detection time when it rescales, and until then hears the other at its new one."""
    link = Link()
    link.run(0.2)
    link.a.rescale(INTERVAL * factor, link.now)
    link.interval["a"] = INTERVAL * factor
    link.run(link.now + 0.04)
    link.b.rescale(INTERVAL * factor, link.now)
    link.interval["b"] = INTERVAL * factor
    link.run(link.now + 1.0)
    assert link.downs("a") == link.downs("b") == [], link.log[-4:]
    assert link.a.state == link.b.state == State.UP
