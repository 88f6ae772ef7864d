"""Whose clock: every time the report shows is fabric time with its unit, and a wall time only labelled
"(wall)". A report of shaped and unshaped runs is scanned row by row, cell by cell, sentence by sentence."""

from __future__ import annotations

import re

import pytest

from orchestrator.experiment.clock import Clock, format_seconds, second_unit, wall
from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.records import BoundRecord, LinkEndTiming, RunResult, TimingRecord
from orchestrator.experiment.report.blocks import Bullets, Para, TableBlock
from orchestrator.experiment.report.document import group_blocks
from orchestrator.experiment.report.plots import latency_series
from orchestrator.experiment.report.sections.base import Group
from orchestrator.experiment.report.sections.collectives import collectives_table
from orchestrator.experiment.report.sections.summary import summary_table
from tests.unit.orchestrator.experiment import results_fixtures as fx
from tests.unit.orchestrator.experiment.report.test_memberships import IGMP_COUNTERS, _membership, _with
from tests.unit.orchestrator.experiment.report.test_sentences import _ina, _ps

SCALE = 20000
TIME = re.compile(r"(\d+(?:\.\d+)?) (s|ms|µs|ns)\b")
# Every wall time of the runs below is at least 1 ms; at 1:20000 none of their fabric times reaches it.
FABRIC_UNITS = {"µs", "ns"}
FAULTS = [
    {"fault": "0.3 restart spine2", "at_s": 0.3, "started_s": 0.3, "done_s": 0.5, "lines": [], "error": None}
]


def _shaped(run: RunResult) -> RunResult:
    end = "h1:eth1"
    timing = TimingRecord(
        scale=SCALE,
        faithful=True,
        bound=BoundRecord(link=end, bytes=36000, rate_bps=50_000, wall_s=0.00576, fabric_s=0.00576 / SCALE),
        ends=[
            LinkEndTiming(
                end=end, peer="leaf1:eth3", bandwidth_bps=10**9, rate_bps=50_000, tx_bytes=1, busy_s=1
            )
        ],
    )
    return run.model_copy(update={"timing": timing, "metrics": None})


def _with_faults(run: RunResult) -> RunResult:
    meta = run.meta.model_copy(update={"settings": {**run.meta.settings, "faults": FAULTS}})
    return run.model_copy(update={"meta": meta})


def _runs(shaped: bool) -> list[RunResult]:
    topo = fx.topology()
    # The membership record holds fabric seconds on a shaped lab (orchestrator.experiment.membership).
    membership = {
        **_membership(3, 0.004 / SCALE if shaped else 0.004),
        "time": "fabric" if shaped else "wall",
    }
    igmp = _with(fx.run("igmp", topo), {"lead_s": 0.05, "membership": membership}, IGMP_COUNTERS)
    runs = [
        fx.run("unicast", topo),
        _with_faults(fx.run("host-bier", topo)),
        igmp,
        _ina(1 << 20),
        _ps(4 << 20),
    ]
    return [_shaped(r) if shaped else r for r in runs]


def _unlabelled(text: str) -> list[tuple[float, str]]:
    """(value, unit) of every time in ``text`` not followed by "(wall)" nor named "fabric"."""
    out = []
    for m in TIME.finditer(text):
        rest = text[m.end() :]
        if not rest.startswith((" (wall)", " fabric")):
            out.append((float(m.group(1)), m.group(2)))
    return out


def _scan(runs: list[RunResult]) -> list[str]:
    """Every time shown as the fabric's that is not: a wall time without its label."""
    bad = []
    for i, c in enumerate(compare_runs(runs), 1):
        shaped = {col.label: Clock.of_run(col.run).fabric for col in c.columns}
        for block in group_blocks(Group(c, i)):
            if isinstance(block, TableBlock):
                for row in block.rows:
                    if "(wall)" in row[0]:
                        continue
                    for label, cell in zip(block.header[1:], row[1:], strict=True):
                        for value, unit in _unlabelled(cell):
                            if "(wall)" in label or (shaped.get(label) and unit in FABRIC_UNITS):
                                continue
                            bad.append(f"{block.header[0]} / {row[0]} / {label}: {cell!r} ({value} {unit})")
            elif isinstance(block, Bullets | Para):
                for text in block.items if isinstance(block, Bullets) else [block.text]:
                    for value, unit in _unlabelled(text):
                        if not (any(shaped.values()) and unit in FABRIC_UNITS):
                            bad.append(f"sentence: {text!r} ({value} {unit})")
    return bad


def test_no_row_or_sentence_shows_a_wall_time_without_its_label() -> None:
    runs = [*_runs(shaped=True), *_runs(shaped=False)]
    assert _scan(runs) == []


def test_the_scan_sees_an_unlabelled_wall_time() -> None:
    """The scan fails on a report that prints a wall latency as the run's time (the old summary did)."""
    (c, *_rest) = compare_runs(_runs(shaped=False))
    table = summary_table(c)
    old = TableBlock(table.header, [["latency p50", *(format_seconds(0.004) for _ in c.columns)]])
    assert _unlabelled(old.rows[0][1]) == [(4.0, "ms")]


def test_shaped_times_are_fabric_and_unshaped_ones_wall() -> None:
    shaped = next(c for c in compare_runs(_runs(shaped=True)) if "unicast" in c.labels)
    plain = next(c for c in compare_runs(_runs(shaped=False)) if "unicast" in c.labels)
    p50_wall = shaped.columns[0].metrics.latency.p50
    assert p50_wall is not None and p50_wall >= 1e-3
    assert summary_table(shaped).row("latency p50")[0] == format_seconds(p50_wall / SCALE)
    assert summary_table(plain).row("latency p50")[0] == f"{format_seconds(p50_wall)} (wall)"
    completion = shaped.columns[0].metrics.completion_time
    assert summary_table(shaped).row("completion")[0] == format_seconds(completion / SCALE)  # type: ignore[operator]
    assert summary_table(shaped).row("completion (wall)")[0] == format_seconds(completion)
    assert summary_table(shaped).row("bottleneck bound")[0].startswith(format_seconds(0.00576 / SCALE))


def test_algorithm_bandwidth_is_per_second_of_fabric_time() -> None:
    """16 MiB... here 4 MiB in 1 s of wall time: 4 MiB/s (wall) unshaped, 80000 MiB/s of fabric at 1:20000
    (the issue's 581.5 KiB/s that should have read 11.9 GB/s)."""
    (shaped,) = [c for c in compare_runs(_runs(shaped=True)) if c.trace == "allreduce.jsonl"]
    (plain,) = [c for c in compare_runs(_runs(shaped=False)) if c.trace == "allreduce.jsonl"]
    assert collectives_table(plain).row("algorithm bandwidth") == ["4.0 MiB/s (wall)"] * 2  # type: ignore[union-attr]
    assert collectives_table(shaped).row("algorithm bandwidth") == ["78.1 GiB/s"] * 2  # type: ignore[union-attr]


def test_the_latency_plot_is_on_the_runs_clock() -> None:
    shaped = next(c for c in compare_runs(_runs(shaped=True)) if "unicast" in c.labels)
    plain = next(c for c in compare_runs(_runs(shaped=False)) if "unicast" in c.labels)
    drawn = latency_series(shaped)
    assert drawn.xlabel == "latency per receiver (ns)"
    wall_max = max(x for m in shaped.columns[0].run.messages for x in m.latency.values())
    assert max(drawn.series[0][1]) == pytest.approx(wall_max / SCALE / 1e-9)
    assert latency_series(plain).xlabel == "latency per receiver (ms) (wall)"


def test_clock_words() -> None:
    fabric, emulator = Clock.of(SCALE), Clock.of(None)
    assert fabric.time(10.0) == "500.0 µs" and emulator.time(20.377) == "20.377 s (wall)"
    assert fabric.both(0.3) == "15.0 µs = 300.00 ms (wall)" and emulator.both(0.3) == "300.00 ms (wall)"
    assert emulator.rate(1 << 20, 1.0) == "1.0 MiB/s (wall)" and fabric.rate(1 << 20, SCALE) == "1.0 MiB/s"
    assert fabric.time(None) == "–" and wall(None) == "–" and format_seconds(2e-8) == "20.0 ns"
    assert (
        second_unit(5e-7) == (1e-9, "ns")
        and second_unit(2.0) == (1.0, "s")
        and second_unit(0) == (1e-9, "ns")
    )
