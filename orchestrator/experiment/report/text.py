"""Numbers in a report's words: bytes, ratios, shares, and "how many times more or less"."""

from __future__ import annotations

import re

from orchestrator.units import format_bytes

NONE = "–"


def fmt_bytes(n: float | None) -> str:
    return NONE if n is None else format_bytes(n)


def fmt_ratio(r: float | None) -> str:
    return NONE if r is None else f"{r:.2f}×"


def fmt_pct(r: float | None) -> str:
    return NONE if r is None else f"{r:.1%}"


def times_phrase(mine: float, base: float, fewer: str = "less", greater: str = "more") -> str:
    """How ``mine`` compares with ``base`` in words whose direction matches the numbers: ``"1.52× more"``
    when mine is larger, ``"2.00× less"`` when smaller (the factor is always ≥ 1), ``"the same"`` when equal
    to the printed precision. Sentences built on it cannot contradict the table they summarise."""
    if base <= 0 or mine <= 0:
        return "the same" if mine == base else (greater if mine > base else fewer)
    factor = mine / base if mine >= base else base / mine
    if f"{factor:.2f}" == "1.00":
        return "the same"
    return f"{factor:.2f}× {greater if mine > base else fewer}"


def than(phrase: str, base_text: str) -> str:
    """``phrase`` (from times_phrase) joined to what it is compared with."""
    return f"{phrase} as {base_text}" if phrase == "the same" else f"{phrase} than {base_text}"


def natural(name: str) -> tuple[object, ...]:
    # h2 before h10, leaf2 before leaf10.
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def direction(sender: str, peer: str | None) -> str:
    """A link in the direction it carried bytes: ``s7:eth2 → s6:eth1``; every table cell and sentence
    that names a link direction says it this way."""
    return f"{sender} → {peer or '?'}"
