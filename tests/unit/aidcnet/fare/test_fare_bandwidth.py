"""Human bandwidth strings ↔ bytes per second."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.fare.bandwidth import ACCEPTED_FORMS, BandwidthError, format_bandwidth, parse_bandwidth


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [
        ("800G", 1e11),
        ("400G", 5e10),
        ("100M", 1.25e7),
        ("1.6T", 2e11),
        ("25Gbps", 3.125e9),
        ("10gb/s", 1.25e9),
        (" 800 G ", 1e11),
        ("1K", 125.0),
        ("2P", 2.5e14),
        ("1000", 125.0),  # plain number: bits/s
        ("1e9", 1.25e8),
        (".5G", 6.25e7),
        ("0", 0.0),
        (1000, 125.0),
        (8.0, 1.0),
    ],
)
def test_parse(text: str | int | float, bytes_per_s: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s, rel=1e-12)


@pytest.mark.parametrize(
    ("bytes_per_s", "text"),
    [
        (1e11, "800G"),
        (5e10, "400G"),
        (2e11, "1.6T"),
        (1.25e7, "100M"),
        (3.125e9, "25G"),
        (125.0, "1K"),
        (100.0, "800"),
        (0.0, "0"),
    ],
)
def test_format(bytes_per_s: float, text: str) -> None:
    assert format_bandwidth(bytes_per_s) == text


def test_format_suffix() -> None:
    assert format_bandwidth(1e11, suffix="bps") == "800Gbps"


@pytest.mark.parametrize(
    ("bad", "hint"),
    [
        ("800GB/s", "bytes/s units"),
        ("100GBps", "bytes/s units"),
        ("fast", None),
        ("-5G", None),
        ("800X", None),
        ("8 0 0G", None),
        ("nan", None),
        ("", None),
    ],
)
def test_parse_errors_name_string_and_forms(bad: str, hint: str | None) -> None:
    with pytest.raises(BandwidthError) as info:
        parse_bandwidth(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert ACCEPTED_FORMS in message
    if hint is not None:
        assert hint in message


@pytest.mark.parametrize("bad", [True, -1, math.nan, math.inf, "1e400", None, [800]])
def test_parse_rejects_bad_values(bad: object) -> None:
    with pytest.raises(BandwidthError) as info:
        parse_bandwidth(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "800G", True])
def test_format_rejects_bad_values(bad: object) -> None:
    with pytest.raises(BandwidthError) as info:
        format_bandwidth(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)


def test_error_is_value_error() -> None:
    assert issubclass(BandwidthError, ValueError)


@given(st.floats(min_value=0.0, max_value=1e18, allow_nan=False, allow_infinity=False))
def test_format_parse_round_trip(bytes_per_s: float) -> None:
    # format keeps 6 significant digits: at most half a unit in the 6th digit is lost.
    assert parse_bandwidth(format_bandwidth(bytes_per_s)) == pytest.approx(bytes_per_s, rel=5e-6, abs=1e-9)


@given(st.integers(min_value=1, max_value=999), st.sampled_from(["", "K", "M", "G", "T"]))
def test_canonical_strings_are_stable(mantissa: int, prefix: str) -> None:
    text = f"{mantissa}{prefix}"
    assert format_bandwidth(parse_bandwidth(text)) == text
