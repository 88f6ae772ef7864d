"""The report's training-step section (orchestrator/experiment/report/sections/step.py): the table from
settings.step, sentences from its cells, the per-GPU timeline PNG in the HTML, and runs whose AllReduces
ran in other modes compared apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.records import TimingRecord
from orchestrator.experiment.report import write_report
from orchestrator.experiment.report.sections.step import step_sentences, step_table
from orchestrator.workloads.step import simulate
from orchestrator.workloads.step_metrics import analyse
from orchestrator.workloads.trace import ComputeOp, TraceOp
from tests.unit.orchestrator.experiment import results_fixtures as fx

RECEIVERS = ["h3", "h5", "h7"]
OPS = [
    ComputeOp(t=0.0, op="compute", src="h1", seconds=10e-6, tag="attention", id=0),
    TraceOp(t=0.0, op="multicast", src="h1", dst=RECEIVERS, bytes=3000, after=[0], tag="dispatch", id=1),
    *(ComputeOp(t=0.0, op="compute", src=h, seconds=4e-6, after=[1], id=i)
      for i, h in enumerate(RECEIVERS, 2)),
]


def step_settings(network_s: float, allreduce: str | None = "ring") -> dict:
    metrics = analyse(OPS, simulate(OPS, lambda op, d: network_s))
    record = metrics.to_dict({op.id: op for op in OPS})
    predicted = {k: v for k, v in record.items() if k != "gpus"}
    return {"step": {"modes": f"x+{allreduce}", "allreduce": allreduce, "clock": "fabric", "compute": "wait",
                     **record, "predicted": predicted}}  # fmt: skip


def runs(allreduce: str | None = "ring"):
    topo = fx.topology()
    timing = TimingRecord(scale=20000, faithful=True)
    return [
        fx.run("unicast", topo, timing, settings=step_settings(6e-6, allreduce)),
        fx.run("host-bier", topo, timing, settings=step_settings(2e-6, allreduce)),
    ]


def test_the_table_says_step_time_utilisation_and_the_straggler_per_mode() -> None:
    (c,) = compare_runs(runs())
    table = step_table(c.columns)
    assert table.header == ["step", "unicast", "host-bier"]
    assert table.row("step time") == ["20.0 µs", "16.0 µs"]
    assert table.row("predicted step (time model)") == ["20.0 µs", "16.0 µs"]
    assert table.row("exposed communication") == ["6.0 µs", "2.0 µs"]
    assert table.row("straggler (others waited on it)")[0] == "h1 (30.0 µs)"
    # h1 computes 10 of 20 µs, each receiver 4: 50% and 20%, a mean of 27.5% (to the float's rounding).
    assert table.row("GPU utilisation, mean (range)")[0] in ("27% (20%–50%)", "28% (20%–50%)")
    assert table.row("AllReduce in") == ["ring", "ring"]
    (first, _) = step_sentences(table)
    assert first.startswith("unicast: the step took 20.0 µs (the time model: 20.0 µs)")
    assert "Straggler: h1 (30.0 µs)" in first


def test_the_report_draws_each_gpus_timeline(tmp_path: Path) -> None:
    md, html = write_report(runs(), fx.topology(), tmp_path)
    png = tmp_path / "g1-leaf-spine-step-timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    alt = "per-GPU timeline of the step: compute, network, barrier"
    assert f'alt="{alt}" src="data:image/png' in html.read_text()
    text = md.read_text()
    assert "### Training step" in text and "exposed communication" in text


def test_steps_with_their_allreduce_in_other_modes_are_compared_apart() -> None:
    groups = compare_runs([*runs("ring"), *runs("ina")])
    assert len(groups) == 2
    assert {g.conditions.allreduce for g in groups} == {"ring", "ina"}
    assert "AllReduce in ring" in next(g for g in groups if g.conditions.allreduce == "ring").conditions.label
    a, b = (g.conditions for g in groups)
    assert [d.what for d in a.differences(b)] == ["the step's AllReduce in"]


@pytest.mark.parametrize("settings", [{}, {"step": "bad"}])
def test_a_run_without_a_step_adds_nothing(settings) -> None:
    from orchestrator.experiment.report.sections.base import Group
    from orchestrator.experiment.report.sections.step import Step

    (c,) = compare_runs([fx.run("unicast", settings=settings)])
    assert Step().blocks(Group(c)) == []
