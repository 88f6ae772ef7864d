"""The reliable modes side by side (docs/reliability.md): the feedback each source heard per DATA packet,
the feedback on the links, and what was resent against what the fabric dropped."""

from __future__ import annotations

from aidcnet.modes import RELIABLE
from orchestrator.experiment.metrics import Comparison
from orchestrator.experiment.modes.reliable import (
    ACK_KINDS,
    FEEDBACK_KINDS,
    busiest_end,
    link_feedback_packets,
)
from orchestrator.experiment.report.blocks import Block, Heading, Para, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.sections.tables import MAX_LINK_ROWS
from orchestrator.experiment.report.text import fmt_bytes

_RELIABILITY_ROWS = (
    "feedback",
    "DATA packets sent first",
    "ACKs at the sources per DATA packet",
    "NACKs at the sources per DATA packet",
    "feedback bytes at the sources",
    "feedback packets on the links",
    "most feedback on one link end",
    "retransmitted payload bytes",
    "bytes the fabric dropped",
    "retransmitted ÷ dropped",
    "receivers declared failed",
)


def _reliability_column(rel: dict[str, object]) -> list[str]:
    """One reliable run's cells, in :data:`_RELIABILITY_ROWS` order, from ``settings["reliable"]``."""
    src: dict[str, int] = rel.get("sources") or {}  # type: ignore[assignment]
    links: dict[str, dict[str, int]] | None = rel.get("links")  # type: ignore[assignment]
    sent = src.get("sender.sent", 0)

    def per_sent(kinds: tuple[str, ...]) -> str:
        got = sum(src.get(f"source.rx.{k}.packets", 0) for k in kinds)
        return f"{got / sent:.3f}" if sent else "–"

    fb_bytes = sum(src.get(f"source.rx.{k}.bytes", 0) for k in FEEDBACK_KINDS)
    retx = src.get("sender.retransmitted-bytes", 0)
    on_links, busiest, lost = "–", "–", None
    if links is not None:  # runs recorded before the link-fault programs counted feedback have none
        on_links = str(sum(link_feedback_packets(v) for v in links.values()))
        lost = sum(v["lost_bytes"] for v in links.values())
        if (most := busiest_end(links)) is not None:
            busiest = f"{most[0]}: {most[1]}"
    return [
        str(rel.get("feedback", "–")),
        str(sent),
        per_sent(ACK_KINDS),
        per_sent(("nack",)),
        fmt_bytes(fb_bytes),
        on_links,
        busiest,
        fmt_bytes(retx),
        "–" if lost is None else fmt_bytes(lost),
        f"{retx / lost:.2f}x" if lost else "–",
        str(src.get("sender.receivers-failed", 0)),
    ]


def reliability_table(c: Comparison) -> TableBlock | None:
    """The reliable modes side by side (docs/reliability.md): the ACKs each source heard per DATA packet
    (the implosion, or what aggregation left of it), the feedback on the links, and what was resent
    against what the fabric dropped. All counted by the agents and the link-fault programs."""
    cols = [col for col in c.columns if col.run.meta.mode in RELIABLE]
    if not cols:
        return None
    cells = [_reliability_column(col.run.meta.settings.get("reliable") or {}) for col in cols]
    rows = [[name, *(column[k] for column in cells)] for k, name in enumerate(_RELIABILITY_ROWS)]
    return TableBlock(header=["reliability", *(col.label for col in cols)], rows=rows)


def feedback_links_table(c: Comparison) -> TableBlock | None:
    """ACK, NACK and AGG-ACK packets per link end (what that end sent), the busiest first: where an
    implosion is carried, and where aggregation stopped it."""
    cols = [col for col in c.columns if col.run.meta.mode in RELIABLE]
    per_end: dict[str, list[int]] = {}
    for i, col in enumerate(cols):
        ls = (col.run.meta.settings.get("reliable") or {}).get("links") or {}
        for end, counts in ls.items():
            if link_feedback_packets(counts):
                per_end.setdefault(end, [0] * len(cols))[i] = link_feedback_packets(counts)
    if not per_end:
        return None
    names = sorted(per_end, key=lambda n: (-max(per_end[n]), n))[:MAX_LINK_ROWS]
    rows = [[n, *(str(v) for v in per_end[n])] for n in names]
    return TableBlock(
        header=["link end (sends)", *(col.label for col in cols)], rows=rows, code_columns=frozenset({0})
    )


@register
class Reliability(Section):
    name = "reliability"
    order = 60

    def blocks(self, group: Group) -> list[Block]:
        return reliability_blocks(group.comparison)


def reliability_blocks(c: Comparison) -> list[Block]:
    """The Reliability section of a group, or nothing when it has no reliable run."""
    rt = reliability_table(c)
    if rt is None:
        return []
    note = (
        "ACKs at the sources: feedback packets that arrived at the sources' reliable service per DATA "
        "packet they first sent (end-to-end ACKs: one per receiver; aggregated: one per first-hop "
        "branch). Feedback on the links and the bytes the fabric dropped are counted on the wire by the "
        "link-fault program of every link end (docs/reliability.md)."
    )
    blocks: list[Block] = [Heading(3, "Reliability"), rt, Para(note)]
    ft = feedback_links_table(c)
    if ft is not None:
        blocks += [Heading(3, "Feedback packets per link end"), ft]
    return blocks
