"""The terminal writer: the sections marked ``terminal`` of every group, as rich tables and indented
sentences (what ``aidclab replay`` and ``aidclab report`` print)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Para, TableBlock


def rich_table(title: str | None, block: TableBlock) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for i, h in enumerate(block.header):
        table.add_column(h, style="cyan" if i == 0 else None, overflow="fold")
    for row in block.rows:
        table.add_row(*row)
    return table


def _plain(text: str) -> str:
    # `code` spans are Markdown's; a terminal shows the words.
    return text.replace("`", "")


def render_terminal(blocks: Sequence[Block], console: Console) -> None:
    """A level-3 heading titles the table after it; a group's heading stands on its own line."""
    title: str | None = None
    for b in blocks:
        match b:
            case Heading(level=2):
                console.print(b.text, style="bold")
            case Heading():
                title = b.text
            case TableBlock():
                console.print(rich_table(title, b))
                title = None
            case Para():
                console.print(f"  {_plain(b.text)}")
            case Bullets():
                for item in b.items:
                    console.print(f"  {_plain(item)}")
