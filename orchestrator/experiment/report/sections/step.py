"""Closed-loop steps (docs/training.md): per run, what a user of an AI cluster pays for. The step time, GPU
utilisation (the compute share of the step, mean and range over the GPUs), the shares spent waiting on
the network and at a barrier, the exposed communication, the straggler and what it waited for, each
beside the time model's prediction of the same step; then a per-GPU timeline of every run.

Everything is read from ``settings.step`` of the runs (docs/results-format.md); times are on the run's
clock (fabric time on a shaped lab, wall time labelled on an unshaped one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.experiment.clock import NONE, Clock
from orchestrator.experiment.metrics import Column
from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Plot, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section

SHARES = ("compute", "network", "barrier")


def step_of(col: Column) -> dict[str, Any] | None:
    step = col.run.meta.settings.get("step")
    return step if isinstance(step, dict) and "step_s" in step else None


def _clock(col: Column, step: dict[str, Any]) -> Clock:
    return Clock.of_run(col.run) if step.get("clock") != "wall" else Clock()


def _range(step: dict[str, Any], kind: str) -> str:
    total = step["step_s"]
    if not total or not step["gpus"]:
        return NONE
    shares = [g[f"{kind}_s"] / total for g in step["gpus"].values()]
    mean = sum(shares) / len(shares)
    return f"{mean:.0%} ({min(shares):.0%}–{max(shares):.0%})"


def _waited(step: dict[str, Any], clock: Clock) -> str:
    name = step.get("straggler")
    gpu = step["gpus"].get(name) if name else None
    if gpu is None:
        return NONE
    w = gpu["longest_wait"]
    if w["op"] is None:
        return f"{name}: never waited"
    what = f"op {w['op']}" + (f" ({w['tag']})" if w.get("tag") else "")
    on = f" on {w['on']}" if w.get("on") else ""
    return f"{name}: {clock.shown(w['seconds'])} at {w['kind']}{on} for {what}"


def _predicted(step: dict[str, Any], clock: Clock, key: str, share: bool = False) -> str:
    p = step.get("predicted")
    if not isinstance(p, dict) or p.get(key) is None:
        return NONE
    return f"{p[key]:.0%}" if share else clock.shown(p[key])


def step_table(cols: Sequence[Column]) -> TableBlock:
    steps = [(col, step_of(col)) for col in cols]
    rows: list[tuple[str, Callable[[Column, dict[str, Any], Clock], str]]] = [
        ("step time", lambda c, s, k: k.shown(s["step_s"])),
        ("predicted step (time model)", lambda c, s, k: _predicted(s, k, "step_s")),
        ("GPU utilisation, mean (range)", lambda c, s, k: _range(s, "compute")),
        ("predicted GPU utilisation", lambda c, s, k: _predicted(s, k, "utilisation", share=True)),
        ("waiting on the network", lambda c, s, k: _range(s, "network")),
        ("at a barrier", lambda c, s, k: _range(s, "barrier")),
        ("exposed communication", lambda c, s, k: k.shown(s["exposed_s"])),
        ("compute and dependencies alone", lambda c, s, k: k.shown(s["compute_only_s"])),
        ("straggler (others waited on it)", lambda c, s, k: _straggler(s, k)),
        ("the straggler's longest wait", lambda c, s, k: _waited(s, k)),
        ("AllReduce in", lambda c, s, k: s.get("allreduce") or NONE),
    ]
    body = [[name, *(fn(c, s, _clock(c, s)) for c, s in steps if s is not None)] for name, fn in rows]
    return TableBlock(header=["step", *(c.label for c, s in steps if s is not None)], rows=body)


def _straggler(step: dict[str, Any], clock: Clock) -> str:
    name = step.get("straggler")
    return NONE if not name else f"{name} ({clock.shown(step.get('straggler_blame_s', 0.0))})"


def step_sentences(table: TableBlock) -> list[str]:
    """One sentence per run from the table's own cells."""
    out = []
    for i, label in enumerate(table.header[1:]):
        cell = {row[0]: row[1 + i] for row in table.rows}
        predicted, waited = cell["predicted step (time model)"], cell["the straggler's longest wait"]
        out.append(
            f"{label}: the step took {cell['step time']} (the time model: {predicted}); "
            f"its GPUs computed {cell['GPU utilisation, mean (range)']} of it, waited on the network "
            f"{cell['waiting on the network']} and at a barrier {cell['at a barrier']}; "
            f"{cell['exposed communication']} of communication was not hidden behind compute. "
            f"Straggler: {cell['straggler (others waited on it)']}; {waited}."
        )
    return out


def _drawn(cols: list[Column], title: str) -> Callable[[Path], object]:
    runs = [(c.label, step_of(c), _clock(c, step_of(c) or {})) for c in cols]

    def draw(path: Path) -> object:
        from orchestrator.experiment.report import plots

        return plots.plot_step_timeline(runs, title, path)

    return draw


@register
class Step(Section):
    name = "step"
    order = 35
    terminal = True

    def blocks(self, group: Group) -> list[Block]:
        cols = [col for col in group.comparison.columns if step_of(col) is not None]
        if not cols:
            return []
        table = step_table(cols)
        c = group.comparison
        return [
            Heading(3, "Training step"),
            table,
            Bullets(step_sentences(table)),
            Plot(
                "per-GPU timeline of the step: compute, network, barrier",
                f"{group.prefix}-step-timeline.png",
                _drawn(cols, f"{c.lab} / {c.trace}: each GPU's step"),
            ),
        ]

    def reading(self, groups: Sequence[Group]) -> list[str]:
        if not any(step_of(col) for g in groups for col in g.comparison.columns):
            return []
        return [
            "Training step (closed loop, docs/training.md): each host started an op once its inputs had "
            "arrived and its compute had run. Step time runs from the step's zero to the last GPU done. A "
            "GPU's moment is compute, network (waiting for bytes already sent) or barrier (waiting for "
            "another GPU to get there, or for the step's end); GPU utilisation is the compute share. "
            "Exposed communication is how much longer the step took than compute and dependencies alone. "
            "The straggler is the GPU the others spent the most barrier time waiting for. Steps whose "
            "AllReduces ran in different modes are compared apart."
        ]
