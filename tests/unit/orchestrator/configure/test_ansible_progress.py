"""configure never goes quiet: a task still running says so every TICK_S with the hosts done so far."""

from __future__ import annotations

import time

from orchestrator.configure import ansible
from orchestrator.configure.ansible import TICK_S, _Progress


def _start(progress: _Progress, task: str) -> float:
    progress({"event": "playbook_on_task_start", "event_data": {"task": task}})
    return progress.task_started


def test_a_long_task_is_reported_every_tick_with_hosts_done():
    progress = _Progress(hosts=68)
    assert progress.tick(time.monotonic() + 100) is None  # no task open: nothing to say
    t0 = _start(progress, "BGP sessions are Established")
    assert progress.tick(t0 + TICK_S / 2) is None
    for _ in range(40):
        progress({"event": "runner_on_ok", "event_data": {"res": {"changed": False}}})
    line = progress.tick(t0 + TICK_S)
    assert line == "  BGP sessions are Established: still running, 40/68 hosts done (10 s)"
    assert progress.tick(t0 + TICK_S + 1) is None  # not again until another TICK_S has passed
    assert progress.tick(t0 + 2 * TICK_S) is not None


def test_a_new_task_restarts_the_clock():
    progress = _Progress(hosts=4)
    t0 = _start(progress, "one")
    t1 = _start(progress, "two")
    assert t1 >= t0 and progress.tick(t1 + TICK_S - 0.5) is None


def test_the_ticker_thread_prints_while_the_block_runs(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(ansible.console, "print", lambda text: lines.append(text))
    monkeypatch.setattr(ansible, "TICK_S", 0.0)
    progress = _Progress(hosts=2)
    _start(progress, "slow")
    with ansible._ticking(progress):
        time.sleep(1.3)
    assert lines and all("slow: still running, 0/2 hosts done" in line for line in lines)
