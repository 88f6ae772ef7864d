"""Each run against its group's baseline (unicast, or ps for AllReduce): the ratio table and one sentence
per run, built from the same byte counts the summary prints."""

from __future__ import annotations

from collections.abc import Sequence

from aidcnet.modes import Mode
from orchestrator.experiment.metrics import Comparison, is_collective, is_multicast
from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Para, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.text import fmt_bytes, fmt_pct, fmt_ratio, than, times_phrase


def ratios_table(c: Comparison) -> TableBlock | None:
    """Ratio rows, one column per mode compared with the baseline (same layout as the summary)."""
    if not c.ratios:
        return None
    rs = c.ratios
    rows = [["source egress ÷", *(fmt_ratio(r.source_egress) for r in rs)]]
    # Fan-out is a property of multicast ops: an AllReduce has none, and the rows would only mislead.
    if c.multicast:
        rows += [
            ["theoretical fan-out", *("–" if r.fanout is None else f"{r.fanout:.2f}" for r in rs)],
            ["egress ÷ / fan-out", *(fmt_pct(r.egress_vs_fanout) for r in rs)],
        ]
    rows += [
        ["fabric bytes ÷", *(fmt_ratio(r.fabric_bytes) for r in rs)],
        ["bandwidth saved", *(fmt_pct(r.bandwidth_saved) for r in rs)],
        ["most-loaded link ÷", *(fmt_ratio(r.max_link) for r in rs)],
        ["completion speed-up", *(fmt_ratio(r.completion_speedup) for r in rs)],
    ]
    return TableBlock(header=[f"against {c.baseline}", *(r.label for r in rs)], rows=rows)


def ratio_sentences(c: Comparison) -> list[str]:
    """One sentence per message-mode run against the baseline, built from the same byte counts the summary
    table prints, so its direction (more/less) always agrees with the table. Collectives are compared by
    their own section (``collectives``)."""
    out = []
    by_label = {col.label: col for col in c.columns}
    for r in c.ratios:
        mine, base = by_label[r.label], by_label[r.baseline]
        if is_collective(mine.run) or is_collective(base.run):
            continue
        if r.source_egress is None:
            out.append(f"{r.label}: no source egress measured on one side, so no ratio.")
            continue
        mine_b, base_b = mine.metrics.source_egress_bytes, base.metrics.source_egress_bytes
        text = (
            f"{r.label}: the sources sent {fmt_bytes(mine_b)}, "
            f"{than(times_phrase(mine_b, base_b), f'{r.baseline} ({fmt_bytes(base_b)})')}"
        )
        if is_multicast(mine.run) and r.fanout is not None and r.egress_vs_fanout is not None:
            text += (
                f"; the trace's theoretical fan-out is {r.fanout:.2f}, so {r.label} reached "
                f"{r.egress_vs_fanout:.1%} of the ideal source saving"
            )
        if r.bandwidth_saved is not None:
            verb = "saved" if r.bandwidth_saved >= 0 else "added"
            text += f"; over the whole fabric it {verb} {abs(r.bandwidth_saved):.1%} of the bytes"
        out.append(text + ".")
    return out


@register
class Ratios(Section):
    name = "ratios"
    order = 20
    terminal = True

    def blocks(self, group: Group) -> list[Block]:
        c = group.comparison
        heading = Heading(3, f"Ratios against {c.baseline or group.baseline_mode}")
        rt = ratios_table(c)
        if rt is None:
            return [heading, Para(no_ratios(group))]
        sentences = ratio_sentences(c)
        return [heading, rt, *([Bullets(sentences)] if sentences else [])]

    def reading(self, groups: Sequence[Group]) -> list[str]:
        """Names the baseline each group had: unicast for messages, ps for AllReduce."""
        bases = sorted({g.baseline_mode for g in groups}, key=list(Mode).index)
        if not bases:
            return []
        who = " or ".join(f"{b}'s" for b in bases)
        text = f"Source egress ÷: the baseline's ({who}) source egress divided by the mode's."
        if any(g.comparison.multicast for g in groups):
            text += (
                " With multicast it should approach the theoretical fan-out; 'egress ÷ / fan-out' is how "
                "close it came (header overheads differ)."
            )
        return [text]


def no_ratios(group: Group) -> str:
    """Why a group has no ratios: no baseline run under its conditions, or nothing beside the baseline."""
    c, base = group.comparison, group.baseline_mode
    if c.baseline is not None:
        return f"Only {c.baseline} ran under these conditions: nothing to compare it with."
    elsewhere = [o for o in group.others if o.baseline is not None]
    if elsewhere:
        labels = "; ".join(o.conditions.label for o in elsewhere)
        return (
            f"No {base} run under these conditions, so there is no baseline for the ratios: the {base} runs "
            f"of this trace were made under other conditions ({labels}) and are not compared with these."
        )
    return (
        f"No {base} run in this group, so there is no baseline for the ratios; replay the same trace with "
        f"--mode {base} under the same conditions and report both runs together."
    )
