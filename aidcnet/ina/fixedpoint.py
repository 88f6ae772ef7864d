"""SwitchML-style fixed point: float32 arrays summed as int32 by switches that cannot add floats.

A worker converts ``x`` to ``q = rint(x * 2**scale)`` with a per-chunk power-of-two scale carried in
the INA header's Scale field; switches add the int32 values; the receiver converts back with
``q * 2**-scale``.  Every worker of a chunk must use the same scale (the aggregator refuses a mix):
:func:`choose_fixed_point_scale` picks it from a bound on ``max |x|`` over all workers, which the workload
knows (e.g. a gradient clipping norm) or obtains the SwitchML way (exchange the per-chunk maximum first).

Saturation: values whose scaled magnitude exceeds ``INT32_LIMIT`` (= 2**31 - 1) are clamped to
``±INT32_LIMIT``, including ±inf.  The limit is symmetric so that -q never overflows.  NaN has no
integer image and raises ``ValueError``: silently turning a NaN gradient into 0 would hide a bug.

Error bound: with every ``|x_i| <= max_abs`` and ``scale = choose_fixed_point_scale(max_abs, n)``, no element
saturates, the int32 sum of ``n`` workers cannot wrap, and the float32 result ``r`` satisfies::

    |r - sum(x_i)| <= n * 2**-(scale+1)  +  2**-24 * |r|  (+ the float32 rounding of the inputs: none)

(each rint is off by at most half a unit of 2**-scale; the only float rounding left is the final
conversion to float32, whose relative error is at most 2**-24).  :func:`error_bound` computes it.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from aidcnet.ina.header import SCALE_MAX, SCALE_MIN

INT32_LIMIT: Final = 2**31 - 1


def choose_fixed_point_scale(max_abs: float, n_workers: int) -> int:
    """Largest power-of-two exponent so that ``n_workers`` values of ``|x| <= max_abs`` sum without overflow.

    Clamped to the Scale field's signed-octet range.  ``max_abs == 0`` (an all-zero chunk) gets the
    largest scale, which is harmless because zero is exact at any scale.
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    if not math.isfinite(max_abs) or max_abs < 0:
        raise ValueError(f"max_abs must be finite and >= 0, got {max_abs}")
    # The +0.5 accounts for rint rounding each worker's value up by half a unit.
    limit = INT32_LIMIT / n_workers - 0.5
    if limit < 1:
        raise ValueError(f"{n_workers} workers cannot share an int32 sum")
    if max_abs == 0:
        return SCALE_MAX
    ratio = limit / max_abs
    scale = SCALE_MAX if math.isinf(ratio) else max(SCALE_MIN, min(SCALE_MAX, math.floor(math.log2(ratio))))
    # log2 is not exact near powers of two: nudge until the condition holds exactly.
    while scale > SCALE_MIN and n_workers * (math.ldexp(max_abs, scale) + 0.5) > INT32_LIMIT:
        scale -= 1
    while scale < SCALE_MAX and n_workers * (math.ldexp(max_abs, scale + 1) + 0.5) <= INT32_LIMIT:
        scale += 1
    if n_workers * (math.ldexp(max_abs, scale) + 0.5) > INT32_LIMIT:
        raise ValueError(f"max_abs {max_abs} is too large for any scale >= {SCALE_MIN}")
    return scale


def to_fixed(values: np.ndarray, scale: int) -> np.ndarray:
    """``rint(values * 2**scale)`` as native int32, saturated to ``±INT32_LIMIT``; NaN raises."""
    x = np.asarray(values, dtype=np.float64)
    if np.isnan(x).any():
        raise ValueError("NaN cannot be converted to fixed point")
    # float64 holds every float32 exactly and a power-of-two scaling is exact, so rint is the only rounding.
    scaled = np.rint(np.ldexp(x, scale))
    np.clip(scaled, -INT32_LIMIT, INT32_LIMIT, out=scaled)
    return scaled.astype(np.int32)


def saturated_count(values: np.ndarray, scale: int) -> int:
    """How many elements :func:`to_fixed` would clamp (a worker reports it as a counter)."""
    x = np.asarray(values, dtype=np.float64)
    return int(np.count_nonzero(np.abs(np.rint(np.ldexp(x, scale))) > INT32_LIMIT))


def from_fixed(q: np.ndarray, scale: int) -> np.ndarray:
    """``q * 2**-scale`` as native float32 (accepts big-endian wire arrays)."""
    return np.ldexp(np.asarray(q).astype(np.float64), -scale).astype(np.float32)


def error_bound(n_workers: int, scale: int, result: np.ndarray | float) -> np.ndarray | float:
    """Per-element bound on ``|from_fixed(sum) - exact sum|`` when nothing saturated or wrapped."""
    return n_workers * math.ldexp(1.0, -(scale + 1)) + np.abs(result) * 2.0**-24
