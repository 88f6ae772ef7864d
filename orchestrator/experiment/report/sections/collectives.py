"""AllReduce runs (ina, ring, ps) side by side: the bytes that converged on one node and the algorithm
bandwidth, and each run against the baseline by those bytes (docs/allreduce.md)."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.experiment.clock import Clock
from orchestrator.experiment.metrics import Comparison, collective_load, is_collective
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.blocks import Block, Bullets, Heading, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.text import NONE, fmt_bytes, than, times_phrase


def collectives_table(c: Comparison) -> TableBlock | None:
    cols = [col for col in c.columns if is_collective(col.run)]
    if not cols:
        return None
    loads = [collective_load(col.run) for col in cols]
    rows = [
        ["bytes into aggregation point"]
        + [NONE if ld is None else f"{ld.node} ({ld.kind}): {fmt_bytes(ld.bytes_in)}" for ld in loads],
        # On the run's clock: bytes per second of fabric time, never of wall time unlabelled.
        ["algorithm bandwidth"]
        + [
            NONE if ld is None else Clock.of_run(col.run).rate(ld.payload_bytes, ld.completion_s)
            for col, ld in zip(cols, loads, strict=True)
        ],
    ]
    return TableBlock(header=["collective", *(col.label for col in cols)], rows=rows)


def collective_sentence(label: str, run: RunResult, baseline: str, base_run: RunResult) -> str:
    """A collective against its baseline by the bytes that converged on one node (the PS host, the INA
    root, or the busiest worker), with each side's node named."""
    mine, base = collective_load(run), collective_load(base_run)
    if mine is None or base is None:
        return f"{label}: no aggregation point or worker traffic measured on one side, so no comparison."
    return (
        f"{label}: {fmt_bytes(mine.bytes_in)} arrived at {mine.node} ({mine.kind}), "
        + than(
            times_phrase(mine.bytes_in, base.bytes_in),
            f"at {base.node} ({base.kind}) under {baseline} ({fmt_bytes(base.bytes_in)})",
        )
        + "."
    )


def collective_sentences(c: Comparison) -> list[str]:
    by_label = {col.label: col for col in c.columns}
    return [
        collective_sentence(r.label, by_label[r.label].run, r.baseline, by_label[r.baseline].run)
        for r in c.ratios
        if is_collective(by_label[r.label].run) or is_collective(by_label[r.baseline].run)
    ]


@register
class Collectives(Section):
    name = "collectives"
    order = 30
    terminal = True

    def blocks(self, group: Group) -> list[Block]:
        table = collectives_table(group.comparison)
        if table is None:
            return []
        sentences = collective_sentences(group.comparison)
        return [Heading(3, "Collectives"), table, *([Bullets(sentences)] if sentences else [])]

    def reading(self, groups: Sequence[Group]) -> list[str]:
        if not any(collectives_table(g.comparison) for g in groups):
            return []
        return [
            "Collectives: the bytes that arrived over the data links at the aggregation point (the PS "
            "host, the INA root switch) or, for ring, at the busiest worker; algorithm bandwidth is the "
            "ops' payload bytes over the completion time, per second of fabric time."
        ]
