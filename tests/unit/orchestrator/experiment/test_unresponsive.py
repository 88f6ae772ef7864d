"""orchestrator.experiment.session.Unresponsive: a node that fails a request is given up, at once or,
for polls, only after it stayed silent for the patience given."""

from __future__ import annotations

import pytest

from aidcnet.agent.control import ControlError
from orchestrator.experiment.session import Unresponsive


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def silent() -> dict:
    raise ControlError("agent on /run/x did not answer replay_status (timed out)")


def test_without_patience_one_failure_gives_a_node_up_and_it_is_not_asked_again() -> None:
    said: list[str] = []
    lost = Unresponsive(said.append)
    assert lost.call("h1", silent) is None
    assert "h1" in lost.nodes and said == [
        "node h1 stopped answering; counting its deliveries as lost "
        "(agent on /run/x did not answer replay_status (timed out))"
    ]
    asked = []
    assert lost.call("h1", lambda: asked.append(1) or {"ok": True}) is None
    assert asked == []


@pytest.mark.parametrize("answers_again_at", [5.0, 19.9])
def test_a_poll_that_misses_answers_within_its_patience_keeps_the_node(answers_again_at: float) -> None:
    clock = Clock()
    lost = Unresponsive(clock=clock)
    assert lost.call("h1", silent, patience_s=20.0) is None
    clock.now += answers_again_at
    assert lost.call("h1", silent, patience_s=20.0) is None
    assert lost.call("h1", lambda: {"done": True}, patience_s=20.0) == {"done": True}
    assert lost.nodes == {}
    # The silence is counted afresh after an answer.
    clock.now += 15.0
    assert lost.call("h1", silent, patience_s=20.0) is None
    clock.now += 15.0
    assert lost.call("h1", silent, patience_s=20.0) is None
    assert lost.nodes == {}


def test_a_node_silent_for_its_whole_patience_is_given_up() -> None:
    clock = Clock()
    lost = Unresponsive(clock=clock)
    for _ in range(5):
        assert lost.call("h2", silent, patience_s=20.0) is None
        clock.now += 4.0
    assert lost.nodes == {}
    clock.now += 0.1
    assert lost.call("h2", silent, patience_s=20.0) is None
    assert list(lost.nodes) == ["h2"]
