"""The HTML writer: one self-contained report.html, its images inlined as data URIs so the file can be
mailed or attached to an issue on its own."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence

from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Image, Para, Plot, TableBlock

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f3f7; }
tr:nth-child(even) td { background: #fafafa; }
code { font-size: 0.95em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
"""


def _inline_md(text: str) -> str:
    # Paragraphs only ever use `code` spans; escape first so the span markup is the only HTML added.
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _table(b: TableBlock) -> str:
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.header) + "</tr>"]
    for row in b.rows:
        cells = [
            f"<td><code>{html.escape(v)}</code></td>" if i in b.code_columns else f"<td>{html.escape(v)}</td>"
            for i, v in enumerate(row)
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def render_html(blocks: Sequence[Block], title: str) -> str:
    """HTML of ``blocks`` (plots already drawn: :func:`report.plots.draw`)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for b in blocks:
        match b:
            case Heading():
                out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
            case Para():
                out.append(f"<p>{_inline_md(b.text)}</p>")
            case Bullets():
                out.append("<ul>" + "".join(f"<li>{_inline_md(i)}</li>" for i in b.items) + "</ul>")
            case Image():
                data = base64.b64encode(b.path.read_bytes()).decode("ascii")
                out.append(f'<img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">')
            case TableBlock():
                out.append(_table(b))
            case Plot():
                raise ValueError(f"plot {b.filename} was not drawn; pass the blocks through plots.draw first")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
