"""A report as blocks: a title, then per group (one lab, trace and conditions) its heading and every
registered section's blocks, then how to read it. The writers (Markdown, HTML, terminal, plots) render the
same blocks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from orchestrator.experiment.metrics import Comparison, compare_runs
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Para
from orchestrator.experiment.report.sections import registered
from orchestrator.experiment.report.sections.base import Group
from orchestrator.units import format_bytes

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology


def conditions_heading(group: Group) -> str:
    """The group's heading: its lab and trace, and its conditions when the trace ran under others too."""
    c = group.comparison
    heading = f"{c.lab} / {c.trace}"
    return f"{heading}: {c.conditions.label}" if group.others else heading


def apart_line(group: Group) -> Para | None:
    """What the group leaves out: runs of the same trace under other conditions, and how those differ."""
    if not group.others:
        return None
    return Para(
        f"Under {group.comparison.conditions.label}. Runs of this trace under other conditions are "
        "reported in their own groups and compared with none of these: " + "; ".join(group.apart()) + "."
    )


def trace_line(c: Comparison) -> str:
    t = c.columns[0].run.meta.trace
    kinds = ", ".join(f"{k} {v}" for k, v in t.ops_by_kind.items())
    text = (
        f"Trace `{t.name}` (generator {t.generator}): {t.ops} ops ({kinds}) over {len(t.hosts)} hosts, "
        f"{format_bytes(t.bytes)} sent once per op, {format_bytes(t.delivered_bytes)} delivered in total."
    )
    if c.multicast:
        fanout = "–" if c.fanout is None else f"{c.fanout:.2f}"
        text += f" Theoretical fan-out (receivers per multicast op, weighted by bytes): {fanout}."
    return text


def groups_of(runs: Sequence[RunResult], topology: Topology | None = None) -> list[Group]:
    """The compared groups, each knowing the groups of its lab and trace under other conditions."""
    comparisons = compare_runs(runs)

    def others(c: Comparison) -> tuple[Comparison, ...]:
        return tuple(o for o in comparisons if o is not c and (o.lab, o.trace_key) == (c.lab, c.trace_key))

    return [Group(c, i, topology, others(c)) for i, c in enumerate(comparisons, 1)]


def group_blocks(group: Group, *, terminal: bool = False) -> list[Block]:
    """A group's heading, trace line and every registered section's blocks (only the terminal's when
    ``terminal``)."""
    c = group.comparison
    out: list[Block] = [Heading(2, conditions_heading(group)), Para(trace_line(c))]
    if (apart := apart_line(group)) is not None:
        out.append(apart)
    for section in registered():
        if section.terminal or not terminal:
            out += section.blocks(group)
    return out


def reading(groups: Sequence[Group]) -> list[Block]:
    """How to read this report: what each section says it needs, then where the definitions are."""
    items = [
        "Groups: runs of one lab and trace under the same conditions (time scale, loss, links down, "
        "bandwidths set with aidclab link set, faults during the run). Only runs of one group are "
        "compared; a group says which runs of its trace it left out and how their conditions differ.",
        *(item for section in registered() for item in section.reading(groups)),
        "Definitions and file formats: docs/results-format.md.",
    ]
    return [Heading(2, "How to read this report"), Bullets(items)]


def build_blocks(
    runs: Sequence[RunResult],
    topology: Topology | None = None,
    *,
    title: str = "aidclab report",
    generated_at: datetime | None = None,
) -> list[Block]:
    """The whole report as blocks; its plots are still to be drawn (:func:`report.plots.draw`)."""
    groups = groups_of(runs, topology)
    stamp = f", generated {generated_at.isoformat(timespec='seconds')}" if generated_at else ""
    blocks: list[Block] = [
        Heading(1, title),
        Para(f"{len(runs)} run(s) in {len(groups)} group(s) of one lab, trace and conditions{stamp}."),
    ]
    for group in groups:
        blocks += group_blocks(group)
    return blocks + reading(groups)
