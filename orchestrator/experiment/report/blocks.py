"""What a report is made of, before any output format: headings, paragraphs, bullets, tables and plots.

The sections (``sections/``) build these; the writers (``markdown``, ``html``, ``terminal``, and
``plots`` for the PNGs) turn them into files or terminal text, so every output shows the same tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TableBlock:
    header: list[str]
    rows: list[list[str]]
    # Columns that hold literal identifiers (link ids, run ids): code spans in Markdown.
    code_columns: frozenset[int] = frozenset()

    def row(self, name: str) -> list[str]:
        """The cells of the row named ``name`` (its first cell), without the name; KeyError if none."""
        for r in self.rows:
            if r[0] == name:
                return r[1:]
        raise KeyError(f"table {self.header[0]!r} has no row {name!r}")


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Plot:
    """A figure to draw: ``draw(path)`` writes a PNG there. The plots writer draws it into the report's
    directory as ``filename`` and hands the document an :class:`Image` of it; the terminal skips it."""

    alt: str
    filename: str
    draw: Callable[[Path], object]


@dataclass(frozen=True)
class Image:
    alt: str
    path: Path


Block = TableBlock | Heading | Para | Bullets | Plot | Image
