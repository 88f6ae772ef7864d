"""One live time scale: what a scale search or the automatic scale reshapes (``fabric.json``) is what the
faults of the next run are timed by, not the plan's number."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from aidcnet.timescale import TimeScale
from orchestrator.experiment.fault_runner import FaultRunner
from orchestrator.experiment.session import live_time_scale
from orchestrator.lab.fabric import EndShaper, Fabric, tbf_burst
from orchestrator.lab.fault_spec import parse_fault
from orchestrator.lab.shaping import write_fabric

PLAN_SCALE, TRIAL_SCALE = 20000, 40000


def lab_at_trial_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SimpleNamespace, object]:
    """A lab configured at the plan's scale whose links a trial then reshaped to another."""
    end = EndShaper(
        "h1", "eth1", "leaf1:eth1", 400_000_000_000, 20_000_000, 4 << 20, tbf_burst(20_000_000, 9500), 9500
    )
    topo = SimpleNamespace(name="x", lab_dir_name="clab-x")
    (tmp_path / "clab-x").mkdir()
    write_fabric(tmp_path / "clab-x", Fabric("x", PLAN_SCALE, {end.name: end}).with_scale(TRIAL_SCALE))
    monkeypatch.chdir(tmp_path)
    plan = SimpleNamespace(time=SimpleNamespace(scale=PLAN_SCALE))
    return topo, plan


def test_the_live_scale_is_the_trials_not_the_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topo, plan = lab_at_trial_scale(tmp_path, monkeypatch)
    assert live_time_scale(topo, plan) == TimeScale(TRIAL_SCALE)  # type: ignore[arg-type]
    (tmp_path / "clab-x" / "fabric.json").unlink()
    assert live_time_scale(topo, plan) == TimeScale(PLAN_SCALE)  # type: ignore[arg-type]


def test_a_fault_during_a_trial_is_due_at_the_trials_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topo, plan = lab_at_trial_scale(tmp_path, monkeypatch)
    session = SimpleNamespace(time_scale=live_time_scale(topo, plan))  # type: ignore[arg-type]
    runner = FaultRunner([parse_fault("5us restart spine1")], session, None, tmp_path, 0.0)  # type: ignore[arg-type]
    runner._apply = lambda fault: ["applied"]  # type: ignore[method-assign]
    with runner:
        time.sleep(0.5)
    (record,) = runner.records
    # 5 µs of fabric time: 0.2 s of wall time at 1:40000 (0.1 s at the plan's 1:20000).
    assert record.lines == ["applied"] and record.started_s is not None
    assert record.started_s >= TimeScale(TRIAL_SCALE).wall_s(5e-6) - 0.01
