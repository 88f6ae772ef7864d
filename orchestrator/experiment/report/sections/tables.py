"""The reference tables closing each group: bytes per link, the agents' counters and the runs themselves."""

from __future__ import annotations

from orchestrator.experiment.clock import format_seconds
from orchestrator.experiment.metrics import Comparison
from orchestrator.experiment.report.blocks import Block, Heading, Para, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.text import fmt_bytes

# Tables longer than this show the busiest rows only; the CSVs in each run directory have them all.
MAX_LINK_ROWS = 40
MAX_COUNTER_ROWS = 40


def links_table(c: Comparison) -> TableBlock:
    per_link: dict[str, list[int | None]] = {}
    for i, col in enumerate(c.columns):
        for lc in col.run.links:
            per_link.setdefault(lc.link, [None] * len(c.columns))[i] = lc.total_bytes
    names = list(per_link)
    if len(names) > MAX_LINK_ROWS:
        names = sorted(names, key=lambda n: (-max(v or 0 for v in per_link[n]), names.index(n)))[
            :MAX_LINK_ROWS
        ]
        names.sort(key=list(per_link).index)
    rows = [[n, *(fmt_bytes(v) for v in per_link[n])] for n in names]
    return TableBlock(header=["link", *c.labels], rows=rows, code_columns=frozenset({0}))


def counters_table(c: Comparison) -> TableBlock | None:
    totals: dict[str, list[int]] = {}
    for i, col in enumerate(c.columns):
        for counters in col.run.agents.values():
            for name, v in counters.items():
                totals.setdefault(name, [0] * len(c.columns))[i] += v
    names = sorted(n for n, vs in totals.items() if any(vs))
    if not names:
        return None
    if len(names) > MAX_COUNTER_ROWS:
        names = sorted(sorted(names, key=lambda n: -max(totals[n]))[:MAX_COUNTER_ROWS])
    rows = [[n, *(str(v) for v in totals[n])] for n in names]
    return TableBlock(header=["counter (sum over nodes)", *c.labels], rows=rows, code_columns=frozenset({0}))


def runs_table(c: Comparison) -> TableBlock:
    rows = []
    for col in c.columns:
        m = col.run.meta
        mem = m.machine.memory_bytes
        rows.append(
            [
                col.label,
                m.run_id,
                m.started.isoformat(timespec="seconds"),
                format_seconds(m.duration),
                m.aidclab_version,
                (m.git_commit or "–")[:12],
                f"{m.machine.cpu_count or '?'} CPU, {fmt_bytes(mem) if mem else '?'} RAM, "
                f"kernel {m.machine.kernel}, Python {m.machine.python}",
            ]
        )
    return TableBlock(
        header=["mode", "run id", "started (UTC)", "duration (wall)", "aidclab", "commit", "machine"],
        rows=rows,
        code_columns=frozenset({1}),
    )


@register
class Links(Section):
    name = "links"
    order = 80

    def blocks(self, group: Group) -> list[Block]:
        c = group.comparison
        table = links_table(c)
        out: list[Block] = [Heading(3, "Bytes per link (both directions)")]
        if len(table.rows) < len({lc.link for col in c.columns for lc in col.run.links}):
            out.append(Para(f"The {MAX_LINK_ROWS} busiest links; links.csv in each run directory has all."))
        return [*out, table]


@register
class Counters(Section):
    name = "counters"
    order = 90

    def blocks(self, group: Group) -> list[Block]:
        table = counters_table(group.comparison)
        return [] if table is None else [Heading(3, "Agent counters (sum over nodes, non-zero only)"), table]


@register
class Runs(Section):
    name = "runs"
    order = 100

    def blocks(self, group: Group) -> list[Block]:
        return [Heading(3, "Runs"), runs_table(group.comparison)]
