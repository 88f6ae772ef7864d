"""The summary of a group: one row per metric, one column per run (delivery, bytes, time, conditions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orchestrator.experiment.clock import Clock, format_seconds
from orchestrator.experiment.conditions import Conditions
from orchestrator.experiment.metrics import Column, Comparison, delivery_problems, end_tx
from orchestrator.experiment.records import RunMetrics, RunResult
from orchestrator.experiment.report.blocks import Block, Heading, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.text import NONE, direction, fmt_bytes

# The latency rows: per (message, receiver), and per message its slowest receiver.
LATENCY_ROWS: tuple[tuple[str, Callable[[RunMetrics], float | None]], ...] = (
    ("latency p50", lambda m: m.latency.p50),
    ("latency p99", lambda m: m.latency.p99),
    ("latency max", lambda m: m.latency.max),
    ("slowest receiver p99", lambda m: m.message_latency.p99),
)


def _fidelity_cell(col: Column) -> str:
    t = col.run.timing
    if t is None or t.scale is None:
        return "not judged (unshaped)"
    if not t.faithful:
        return f"NOT faithful ({len(t.reasons)} reason{'s' if len(t.reasons) != 1 else ''})"
    # The links set the pace, but of a run that lost messages: not a time to compare.
    if delivery_problems(col.metrics.delivery) is not None:
        return "links faithful, deliveries not exact: times not compared"
    return "faithful"


def end_peer(run: RunResult, end: str) -> str | None:
    """The end ``end`` sends to, from the run's links (or its timing record's ends)."""
    if (tx := end_tx(run.links, end)) is not None:
        return tx[1]
    return next((e.peer for e in run.timing.ends if e.end == end), None) if run.timing else None


def busiest_sender(col: Column) -> str | None:
    """The sending end of the most-loaded link direction. When the run's bottleneck bound is on another
    end that carried exactly as many bytes (both directions of a link tie in an AllReduce), the bound's:
    the table and the time sentences then name one link, in one direction."""
    m, run = col.metrics, col.run
    bound = run.timing.bound if run.timing is not None else None
    if bound is not None and bound.link != m.max_link_from:
        tx = end_tx(run.links, bound.link)
        if tx is not None and tx[0] == m.max_link_bytes:
            return bound.link
    return m.max_link_from


def _most_loaded_cell(col: Column) -> str:
    m, sender = col.metrics, busiest_sender(col)
    if m.max_link is None or sender is None:
        return NONE
    where = direction(sender, end_peer(col.run, sender))
    return f"{where}: {fmt_bytes(m.max_link_bytes)} ({m.max_link_share:.1%})"


def _bound_cell(run: RunResult, clock: Clock) -> str:
    bound = run.timing.bound if run.timing is not None else None
    if bound is None:
        return NONE
    where = direction(bound.link, end_peer(run, bound.link))
    return f"{clock.time(bound.wall_s)} on {where}, which sent {fmt_bytes(bound.bytes)}"


def _pace_cell(run: RunResult) -> str:
    """Completion against the time its links need: the ratio and who predicted it."""
    pace = run.timing.pace if run.timing is not None else None
    if pace is None:
        return NONE
    return f"{pace.ratio:.2f}× {format_seconds(pace.predicted_fabric_s)} ({pace.by})"


def _confirmation_cell(run: RunResult) -> str:
    c = run.timing.confirmation if run.timing is not None else None
    if c is None:
        return "not tried (replay --confirm)"
    word = "confirmed" if c.confirmed else "NOT confirmed"
    return f"{word} at 1:{c.scale} ({c.off:.1%} apart{'' if c.same_bytes else ', bytes differ'})"


def _time_rows(c: Comparison) -> list[list[str]]:
    """Every time on its run's clock: fabric time on a shaped lab, wall time labelled on an unshaped one."""
    ms = [col.metrics for col in c.columns]
    runs = [col.run for col in c.columns]
    clocks = [Clock.of_run(r) for r in runs]
    return [
        ["completion", *(k.time(m.completion_time) for k, m in zip(clocks, ms, strict=True))],
        ["completion (wall)", *(format_seconds(m.completion_time) for m in ms)],
        ["time scale", *(k.scale.label for k in clocks)],
        ["link conditions", *(Conditions.of(r).detail for r in runs)],
        ["fidelity", *(_fidelity_cell(col) for col in c.columns)],
        ["bottleneck bound", *(_bound_cell(r, k) for r, k in zip(runs, clocks, strict=True))],
        ["completion ÷ bound", *(NONE if m.bound_ratio is None else f"{m.bound_ratio:.2f}×" for m in ms)],
        ["completion ÷ predicted", *(_pace_cell(r) for r in runs)],
        ["at a second scale", *(_confirmation_cell(r) for r in runs)],
        *([name, *(k.time(get(m)) for k, m in zip(clocks, ms, strict=True))] for name, get in LATENCY_ROWS),
    ]


def summary_table(c: Comparison) -> TableBlock:
    """Metric rows, one column per mode (the layout of the Markdown, HTML and terminal tables)."""
    ms = [col.metrics for col in c.columns]
    rows = [
        ["delivered / expected"]
        + [f"{m.delivery.delivered}/{m.delivery.expected} ({m.delivery.ratio:.1%})" for m in ms],
        ["integrity", *(delivery_problems(m.delivery) or "ok" for m in ms)],
        ["source egress", *(fmt_bytes(m.source_egress_bytes) for m in ms)],
        ["total fabric bytes", *(fmt_bytes(m.total_fabric_bytes) for m in ms)],
        ["most-loaded link", *(_most_loaded_cell(col) for col in c.columns)],
        *_time_rows(c),
    ]
    return TableBlock(header=["metric", *c.labels], rows=rows)


@register
class Summary(Section):
    name = "summary"
    order = 10
    terminal = True

    def blocks(self, group: Group) -> list[Block]:
        return [Heading(3, "Summary"), summary_table(group.comparison)]

    def reading(self, groups: Sequence[Group]) -> list[str]:
        return [
            "Source egress: bytes the trace's source hosts transmitted on their data interfaces "
            "(kernel veth counters, headers included). Total fabric bytes: every data link, both "
            "directions; eth0 (management) never counts.",
            "Completion: last delivery minus first send. Latencies are per (message, receiver), "
            "nearest-rank percentiles; 'slowest receiver' is per message, the receiver a collective "
            "waits for. Every time is fabric time (the lab's wall time ÷ its time scale) unless it says "
            "(wall): an unshaped lab has no fabric time, so its times are the emulator's, labelled.",
        ]
