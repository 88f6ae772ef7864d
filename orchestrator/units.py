"""Byte counts as people write them: parsing sizes (``64KiB``, ``10MB``) and printing them.

One table of binary units serves the workload options, trace summaries, reports and plot axes.
"""

from __future__ import annotations

import argparse
import re

# Largest first: the first unit a value reaches is the one to print it in.
BINARY_UNITS: tuple[tuple[str, int], ...] = (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10))

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}


def parse_size(text: str) -> int:
    """``4096``, ``64KiB``, ``1.5GiB``, ``10MB``; bare K/M/G/T are binary (as in dd and ls)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; use bytes or a unit: 512KiB, 64MiB, 1GiB (binary) or 10MB (decimal)"
        )
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    """Inverse of parse_size for exact binary multiples, so help shows 1GiB rather than 1073741824."""
    for unit, shift in BINARY_UNITS:
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)



def format_bytes(n: float) -> str:
    """``1536`` → ``1.5 KiB``: a byte count for people, one decimal past bytes."""
    for unit, shift in BINARY_UNITS:
        if abs(n) >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n:.0f} B"


def byte_unit(largest: float) -> tuple[int, str]:
    """(divisor, name) of the binary unit that keeps ``largest`` below 1024, for round axis ticks."""
    for unit, shift in BINARY_UNITS:
        if largest >= 1 << shift:
            return 1 << shift, unit
    return 1, "B"
