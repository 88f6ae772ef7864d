"""How long the driver waits for a replay (``start_and_wait``): past the deadline while the hosts still
make progress (a reliable recovery at a large time scale), and no longer than ``--timeout`` plus the mode's
quiet time once nothing changes."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.experiment.modes import replaying
from orchestrator.experiment.modes.base import RunOptions


class FakeSender:
    """A host whose status moves (one more datagram) for ``moving`` polls, then stands still; done after
    ``done_after`` polls (never when None)."""

    def __init__(self, moving: int, done_after: int | None) -> None:
        self.polls, self.moving, self.done_after = 0, moving, done_after
        self.stopped = 0

    def replay_start(self, start_ns: int) -> dict[str, Any]:
        return {"ok": True}

    def replay_stop(self, timeout: float | None = None) -> dict[str, Any]:
        self.stopped += 1
        return {"ok": True, "stopped": True, "sent_ops": 1, "ops": 2}

    def replay_status(self, timeout: float | None = None) -> dict[str, Any]:
        self.polls += 1
        done = self.done_after is not None and self.polls >= self.done_after
        return {
            "sent_ops": 1,
            "sent_datagrams": min(self.polls, self.moving),
            "received_complete": 1 if done else 0,
            "done": done,
        }


def session_of(sender: FakeSender, queued: Any = None) -> Any:
    """``queued``: the fabric's queued bytes as the run's sampler would give them (None: not sampled)."""
    lost = SimpleNamespace(nodes=set(), call=lambda node, fn, patience_s=None: fn())
    return SimpleNamespace(lost=lost, agent=lambda name: sender, unfinished={}, fabric_queued=queued)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replaying, "START_LEAD_S", 0.0)
    monkeypatch.setattr(replaying, "POLL_S", 0.01)


def wait(sender: FakeSender, timeout_s: float, quiet_s: float = 0.0, said: list[str] | None = None) -> float:
    return wait_in(session_of(sender), timeout_s, quiet_s, said)


def wait_in(session: Any, timeout_s: float, quiet_s: float = 0.0, said: list[str] | None = None) -> float:
    t0 = time.monotonic()
    options = RunOptions(drain_s=0.0, timeout_s=timeout_s)
    say = (lambda _: None) if said is None else said.append
    replaying.start_and_wait(session, ["h1"], ["h1"], 1, 1, 0.0, options, say, quiet_s=quiet_s)
    return time.monotonic() - t0


def test_a_run_that_still_makes_progress_is_waited_for_past_the_deadline() -> None:
    """The deadline is 0.1 s; the host keeps sending for 60 polls (about 0.6 s) and is done at poll 60."""
    sender = FakeSender(moving=60, done_after=60)
    wait(sender, timeout_s=0.1)
    assert sender.polls >= 60


def test_a_run_that_stands_still_is_given_up_after_the_timeout_and_the_quiet_time() -> None:
    sender = FakeSender(moving=5, done_after=None)
    took = wait(sender, timeout_s=0.2)
    assert 0.2 <= took < 1.5
    sender = FakeSender(moving=5, done_after=None)
    took_quiet = wait(sender, timeout_s=0.2, quiet_s=0.5)
    assert took_quiet >= 0.7


def test_progress_is_any_change_of_any_host_status() -> None:
    a = {"h1": {"sent_datagrams": 3, "reliable": {"sender.retransmitted": 1}}}
    b = {"h1": {"sent_datagrams": 3, "reliable": {"sender.retransmitted": 2}}}
    assert replaying.progress_of(a) != replaying.progress_of(b)
    assert replaying.progress_of(a) == replaying.progress_of({"h1": dict(reversed(list(a["h1"].items())))})


def test_a_sender_given_up_on_is_stopped_and_one_that_finished_is_not() -> None:
    """Left running, a sender given up on would refuse the next run's load and send into its links."""
    given_up, said = FakeSender(moving=5, done_after=None), []
    session = session_of(given_up)
    wait_in(session, timeout_s=0.1, said=said)
    assert given_up.stopped == 1
    assert "stopped the senders still sending: h1 (1/2 ops sent)" in said
    assert session.unfinished == {"h1": "1/2 ops sent"}  # the verdict's reason (unfinished_reasons)
    finished = FakeSender(moving=3, done_after=3)
    session = session_of(finished)
    wait_in(session, timeout_s=0.1)
    assert finished.stopped == 0 and session.unfinished == {}


class SlowShaper(FakeSender):
    """A sender done at once (its datagrams all in its socket) whose ``arriving`` messages arrive one every
    ``every_s`` behind a slow shaper."""

    def __init__(self, arriving: int, every_s: float) -> None:
        super().__init__(moving=0, done_after=1)
        self.arriving, self.every_s = arriving, every_s
        self.began: float | None = None

    def replay_status(self, timeout: float | None = None) -> dict[str, Any]:
        self.polls += 1
        self.began = self.began or time.monotonic()
        got = min(self.arriving, int((time.monotonic() - self.began) / self.every_s))
        return {"sent_ops": 1, "sent_datagrams": 1, "received_complete": got, "done": True}


def test_the_drain_waits_while_what_the_senders_queued_still_arrives() -> None:
    """Done at once, then a delivery every 50 ms: 40 of them take 2 s, ten times the 0.2 s drain, and all
    are waited for; when 30 of the 40 were lost, the wait ends a drain after the tenth."""
    options = RunOptions(drain_s=0.2, timeout_s=0.1)
    for arriving in (40, 10):
        sender = SlowShaper(arriving, every_s=0.05)
        t0 = time.monotonic()
        replaying.start_and_wait(session_of(sender), ["h1"], ["h1"], 40, 1, 0.0, options, lambda _: None)
        took = time.monotonic() - t0
        assert arriving * 0.05 <= took < arriving * 0.05 + 0.2 + 1.0


def test_a_slow_round_of_polls_is_followed_by_a_longer_pause() -> None:
    assert replaying.poll_pause_s(0.0) == replaying.POLL_S
    # 256 hosts answering in 0.1 s: a pause of 0.9 s keeps the polls to a tenth of the wall time.
    assert replaying.poll_pause_s(0.1) == pytest.approx(
        0.1 * (1 - replaying.POLL_SHARE) / replaying.POLL_SHARE
    )
    # A round that waited on a silent host is no reason to leave the others unpolled for long.
    assert replaying.poll_pause_s(30.0) == replaying.POLL_MAX_S


def test_the_drain_waits_while_the_shapers_still_hold_bytes() -> None:
    """Every host idle and done, but a slow shaper still holds 30 frames for 1.5 s: the drain of 0.2 s
    counts from when its queue is empty, not from the last change the hosts showed."""
    sender = SlowShaper(0, every_s=1.0)
    began = time.monotonic()

    def queued() -> int:
        return 9014 * 30 if time.monotonic() - began < 1.5 else 0

    options = RunOptions(drain_s=0.2, timeout_s=5.0)
    replaying.start_and_wait(session_of(sender, queued), ["h1"], ["h1"], 1, 1, 0.0, options, lambda _: None)
    # The last poll that saw the bytes came up to a poll (10 ms, and its round) before 1.5 s; without the
    # shapers' word the wait would end a drain after the senders were done, at about 0.2 s.
    assert 1.5 + 0.2 - 0.05 <= time.monotonic() - began < 1.5 + 0.2 + 1.0
