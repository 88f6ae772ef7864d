"""Serial number arithmetic (RFC 1982 §3, SERIAL_BITS = 32)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.reliable import serial

u32 = st.integers(0, serial.MASK)


def test_rfc1982_style_examples_at_32_bits() -> None:
    # RFC 1982 §5.2 shows SERIAL_BITS = 8: 255 + 1 = 0, and 255 < 0 < 100 < 200 < 0; the same at 32 bits.
    top = serial.MASK
    assert serial.add(top, 1) == 0
    assert serial.add(200, serial.HALF - 1) == (200 + serial.HALF - 1)
    assert serial.lt(top, 0)
    assert serial.lt(0, 100)
    assert serial.lt(100, serial.HALF)
    assert serial.lt(serial.HALF + 100, 0)  # 0 is less than half the space after it
    assert not serial.lt(0, serial.HALF)  # exactly half: undefined, counted as not before either way
    assert not serial.lt(serial.HALF, 0)
    assert serial.distance(top, 2) == 3
    assert serial.distance(2, top) == -3
    assert serial.span(top - 1, 2) == [top - 1, top, 0, 1]
    assert serial.span(5, 5) == []
    assert serial.span(6, 5) == []


@given(u32, st.integers(1, serial.HALF - 1))
def test_adding_less_than_half_moves_forward(a: int, n: int) -> None:
    b = serial.add(a, n)
    assert serial.lt(a, b)
    assert not serial.lt(b, a)
    assert serial.distance(a, b) == n
    assert serial.le(a, b) and not serial.le(b, a)


@given(u32, u32)
def test_order_is_antisymmetric(a: int, b: int) -> None:
    assert not (serial.lt(a, b) and serial.lt(b, a))
    if a != b and (b - a) % serial.MOD != serial.HALF:
        assert serial.lt(a, b) != serial.lt(b, a)
