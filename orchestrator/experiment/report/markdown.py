"""The Markdown writer: report.md, its images linked by paths relative to it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Image, Para, Plot, TableBlock
from orchestrator.experiment.report.text import NONE


def _cell(text: str, code: bool) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if code and text != NONE else text.replace("<", "\\<")


def _table(b: TableBlock) -> str:
    lines = ["| " + " | ".join(_cell(h, False) for h in b.header) + " |"]
    lines.append("|" + "|".join("---" for _ in b.header) + "|")
    for row in b.rows:
        lines.append("| " + " | ".join(_cell(v, i in b.code_columns) for i, v in enumerate(row)) + " |")
    return "\n".join(lines) + "\n"


def render_markdown(blocks: Sequence[Block], out_dir: Path) -> str:
    """Markdown of ``blocks`` (plots already drawn: :func:`report.plots.draw`) for a file in ``out_dir``."""
    out: list[str] = []
    for b in blocks:
        match b:
            case Heading():
                out.append(f"{'#' * b.level} {b.text}\n")
            case Para():
                out.append(b.text + "\n")
            case Bullets():
                out.append("\n".join(f"- {i}" for i in b.items) + "\n")
            case Image():
                out.append(f"![{b.alt}]({b.path.relative_to(out_dir).as_posix()})\n")
            case TableBlock():
                out.append(_table(b))
            case Plot():
                raise ValueError(f"plot {b.filename} was not drawn; pass the blocks through plots.draw first")
    return "\n".join(out)
