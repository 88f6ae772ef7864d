"""Sequence numbers with serial number arithmetic (RFC 1982, SERIAL_BITS = 32).

A flow's sequence numbers wrap at 2**32.  Two numbers compare by the signed distance between them
modulo 2**32: ``a`` is before ``b`` when ``b`` is less than half the number space ahead of ``a``
(RFC 1982 §3.2).  At exactly half the space the order is undefined (RFC 1982 §3.2); the protocol keeps
every window far below that (:data:`MAX_SPAN`), so callers never meet the undefined case.
"""

from __future__ import annotations

from typing import Final

SERIAL_BITS: Final = 32
MOD: Final = 1 << SERIAL_BITS
HALF: Final = 1 << (SERIAL_BITS - 1)
MASK: Final = MOD - 1
# Largest distance the protocol lets two live sequence numbers of one flow be apart (windows, ranges):
# a quarter of the space keeps every comparison well inside the defined half (RFC 1982 §3.2).
MAX_SPAN: Final = 1 << (SERIAL_BITS - 2)


def add(seq: int, n: int) -> int:
    """``seq + n`` modulo 2**32 (RFC 1982 §3.1 allows 0 <= n < 2**31; negatives are ours, for ranges)."""
    return (seq + n) & MASK


def distance(a: int, b: int) -> int:
    """Signed distance from ``a`` to ``b``: positive when ``b`` is after ``a`` (RFC 1982 §3.2)."""
    d = (b - a) & MASK
    return d - MOD if d >= HALF else d


def lt(a: int, b: int) -> bool:
    """``a`` is before ``b`` (RFC 1982 §3.2; the undefined half-space case counts as not before)."""
    return 0 < distance(a, b) < HALF


def le(a: int, b: int) -> bool:
    return a == b or lt(a, b)


def span(first: int, end: int) -> list[int]:
    """The sequence numbers from ``first`` up to, not including, ``end``; empty when ``end`` is not after."""
    return [(first + k) & MASK for k in range(max(distance(first, end), 0))]
