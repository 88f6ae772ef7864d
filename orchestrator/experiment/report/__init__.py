"""Reports comparing replay runs: Markdown, self-contained HTML, PNG plots, and terminal tables.

The report is built from parts. :mod:`.document` groups runs by lab, trace and conditions
(``orchestrator.experiment.metrics.compare_runs``), one column per run, and asks every registered section
(:mod:`.sections`: summary, ratios, collectives, time, memberships, reliability, plots, ...) for its blocks
of each group. The writers turn the one list of blocks into ``report.md`` (PNGs beside it, drawn by
:mod:`.plots`), ``report.html`` (the same content, PNGs inlined) and terminal text (:mod:`.terminal`), so
their tables cannot drift apart. Output is byte-identical for identical input: no clock is read here
(pass ``generated_at`` to stamp a report), layouts are seeded and PNG metadata is fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.document import build_blocks, group_blocks, groups_of
from orchestrator.experiment.report.html import render_html
from orchestrator.experiment.report.markdown import render_markdown
from orchestrator.experiment.report.terminal import render_terminal

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology

__all__ = ["REPORT_HTML", "REPORT_MD", "build_blocks", "print_summary", "write_report"]

REPORT_MD = "report.md"
REPORT_HTML = "report.html"


def write_report(
    runs: Sequence[RunResult],
    topology: Topology | None,
    out_dir: str | Path,
    *,
    title: str = "aidclab report",
    generated_at: datetime | None = None,
) -> tuple[Path, Path]:
    """Write report.md, report.html and the PNGs into ``out_dir``; return (md path, html path)."""
    # matplotlib is loaded only to write a report, never for the terminal.
    from orchestrator.experiment.report import plots

    if not runs:
        raise ValueError("no runs to report; pass at least one run id, run directory or 'latest'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    blocks = plots.draw(build_blocks(runs, topology, title=title, generated_at=generated_at), out)
    md_path = out / REPORT_MD
    html_path = out / REPORT_HTML
    md_path.write_text(render_markdown(blocks, out), encoding="utf-8")
    html_path.write_text(render_html(blocks, title), encoding="utf-8")
    return md_path, html_path


def print_summary(runs: Sequence[RunResult], console: Console | None = None) -> None:
    """The terminal's sections (summary, ratios, collectives, time) of every group."""
    console = console or Console(highlight=False)
    for group in groups_of(runs):
        render_terminal(group_blocks(group, terminal=True), console)
