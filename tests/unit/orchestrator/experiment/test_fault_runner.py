"""The fault runner's own timing: when each fault took effect against when it was due, and the run it
spoils when that was late (a busy machine wakes the runner's thread late; a change can take long)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from aidcnet.timescale import TimeScale
from orchestrator.experiment.fault_runner import FaultRunner
from orchestrator.experiment.faults import FaultRecord
from orchestrator.lab.fault_spec import parse_fault

SCALE = TimeScale(20000)  # 5 µs of fabric time is 0.1 s of wall time


def run_with(apply_s: float, run_s: float) -> FaultRunner:
    """A run of ``run_s`` wall seconds with one fault due at 5 µs whose change takes ``apply_s``."""
    session = SimpleNamespace(time_scale=SCALE)
    runner = FaultRunner([parse_fault("5us link leaf1:eth1 down")], session, None, None, 0.0)  # type: ignore[arg-type]

    def apply(record: FaultRecord) -> list[str]:
        time.sleep(apply_s)
        record.effect_s = runner._now()
        return ["applied"]

    runner._apply = apply  # type: ignore[method-assign]
    with runner:
        time.sleep(run_s)
    return runner


def test_a_fault_in_effect_on_time_leaves_the_run_faithful() -> None:
    runner = run_with(apply_s=0.0, run_s=0.6)
    (record,) = runner.records
    assert runner.end_s is not None and runner.end_s >= 0.6
    assert record.effect_s is not None and record.effect_s >= SCALE.wall_s(5e-6)
    assert runner.late_reasons(SCALE) == []


def test_a_fault_in_effect_late_makes_the_run_not_faithful() -> None:
    """Due at 0.1 s, in effect after 0.35 s more: later than 5% of a run of about 0.8 s."""
    runner = run_with(apply_s=0.35, run_s=0.8)
    (reason,) = runner.late_reasons(SCALE)
    assert reason.startswith("fault 'link leaf1:eth1 down' took effect ")
    assert "fell on other traffic than asked for" in reason


def test_no_verdict_on_lateness_before_the_run_has_ended() -> None:
    session = SimpleNamespace(time_scale=SCALE)
    runner = FaultRunner([parse_fault("5us restart spine1")], session, None, None, 0.0)  # type: ignore[arg-type]
    assert runner.late_reasons(SCALE) == []
