"""``aidclab model run`` prints the predicted completion per mode, and ``--against RUN_DIR`` holds a run's
measured fabric completion to the prediction made under the run's own time scale and link conditions."""

from __future__ import annotations

from pathlib import Path

import pytest

from aidcnet.modes import Mode
from aidcnet.timescale import TimeScale
from orchestrator.cli import build_parser
from orchestrator.configure.plan import build_plan
from orchestrator.experiment.results import save_run
from orchestrator.lab.topology import load_topology, resolve_lab
from orchestrator.model.timing import HASH_DRAWS, LinkConditions, TimeModel
from orchestrator.workloads.trace import TraceHeader, TraceOp, TraceWriter
from tests.unit.orchestrator.experiment import results_fixtures as fx

SCALE = 20000


def write_trace(path: Path) -> list[TraceOp]:
    """The fixture runs' trace: h1 sends four messages to h3, h5 and h7, a millisecond apart."""
    ops = [
        TraceOp(t=i * 0.001, op="multicast", src="h1", dst=fx.RECEIVERS, bytes=fx.PAYLOAD, id=i)
        for i in range(fx.OPS)
    ]
    with TraceWriter(
        path, TraceHeader(format="aidclab-trace", version=1, generator="hand", hosts=fx.HOSTS)
    ) as w:
        for o in ops:
            w.write(o)
    return ops


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    args = build_parser().parse_args(["model", "run", *argv])
    rc = args.func(args)
    return rc, capsys.readouterr().out


def test_every_mode_gets_a_predicted_completion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace)
    rc, out = cli(capsys, "leaf-spine", str(trace))
    assert rc == 0
    assert (
        "predicted completion (fabric time):"
        in out
    )
    for mode in (Mode.UNICAST, Mode.HOST_BIER, Mode.NET_BIER):
        assert f"  {mode} on leaf-spine: predicted " in out


def test_against_a_run_uses_its_scale_and_conditions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    ops = write_trace(trace)
    conditions = {"scale": SCALE, "loss": {}, "down": [], "bandwidth_bps": {"h1:eth1": 100_000_000_000}}
    run = fx.run(Mode.UNICAST, timing=fx.faithful(SCALE), settings={"conditions": conditions})
    run_dir = save_run(run, tmp_path / "results")
    rc, out = cli(capsys, "leaf-spine", str(trace), "--mode", Mode.UNICAST, "--against", str(run_dir))
    assert rc == 1  # the fixture's counters are not the model's
    # The fixture's last delivery: op 3 sent at 3 ms, its third receiver 6.03 ms later (wall).
    measured = TimeScale(SCALE).fabric_s(0.003 + 3 * 0.002 + 3e-5)
    timer = TimeModel.for_plan(
        build_plan(load_topology(resolve_lab("leaf-spine"))), LinkConditions.of(conditions)
    )
    predicted = timer.predict(ops, Mode.UNICAST, None).completion_s
    unslowed = TimeModel.for_plan(build_plan(load_topology(resolve_lab("leaf-spine"))))
    assert predicted > unslowed.predict(ops, Mode.UNICAST, None).completion_s
    assert (
        f"  time: measured {measured * 1e6:.4g} µs fabric at 1:{SCALE}, predicted {predicted * 1e6:.4g} µs: "
        f"measured/predicted {measured / predicted:.2f}×"
    ) in out


def test_hash_draws_are_the_time_models_and_one_is_the_even_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace)
    rc, out = cli(capsys, "leaf-spine", str(trace), "--mode", Mode.UNICAST)
    assert rc == 0 and f"the median of {HASH_DRAWS} draws of the kernel's ECMP hash (" in out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["model", "run", "--help"])
    assert f"(default: the time model's, {HASH_DRAWS};" in " ".join(capsys.readouterr().out.split())
    rc, out = cli(capsys, "leaf-spine", str(trace), "--mode", Mode.UNICAST, "--hash-draws", "1")
    assert rc == 0 and "draws of the kernel's ECMP hash" not in out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["model", "run", "leaf-spine", str(trace), "--hash-draws", "0"])
