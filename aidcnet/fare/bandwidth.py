"""Human bandwidth strings used in lab vars ("800G", "1.6T", "25Gbps") ↔ bytes per second.

Lab files speak the way port speeds are sold: bits per second with a decimal (SI) prefix.
The FARE link-bandwidth community (and therefore everything in :mod:`aidcnet.fare`)
carries bytes per second, so :func:`parse_bandwidth` returns bytes/s and
:func:`format_bandwidth` takes bytes/s.

Accepted forms (case-insensitive except the 'b' of the suffix, surrounding spaces ignored)::

    <number>[<prefix>][bps | b/s]      prefix: K, M, G, T, P (powers of 1000)
    800G  400G  100M  1.6T  25Gbps  10gb/s  1e9  125000000

A plain number with no prefix and no suffix is bits per second. ``m`` is mega, never
milli: nobody configures a link in millibits. Bytes-per-second spellings ("GB/s",
"GBps") are rejected rather than guessed at, because "GB" is a common typo for "Gb".
"""

from __future__ import annotations

import math
import re

__all__ = [
    "ACCEPTED_FORMS",
    "BandwidthError",
    "bits_to_bytes",
    "bytes_to_bits",
    "format_bandwidth",
    "parse_bandwidth",
]

ACCEPTED_FORMS = (
    "a non-negative number of bits/s with an optional K/M/G/T/P prefix (powers of 1000) "
    "and an optional 'bps' or 'b/s' suffix, e.g. '800G', '1.6T', '25Gbps', '100M', '1e9'"
)

_PREFIXES: dict[str, float] = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
# Largest first so format_bandwidth picks the biggest prefix that keeps the mantissa >= 1.
_FORMAT_PREFIXES: tuple[tuple[str, float], ...] = (
    ("P", 1e15),
    ("T", 1e12),
    ("G", 1e9),
    ("M", 1e6),
    ("K", 1e3),
)

_BANDWIDTH_RE = re.compile(
    r"""^\s*
    (?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)
    \s*
    (?P<prefix>[kmgtp]?)
    (?P<suffix>bps|b/s|bit/s|bits/s)?
    \s*$""",
    re.IGNORECASE | re.VERBOSE,
)
_BYTES_RE = re.compile(r"[kmgtp]?(?:B/s|Bps|B)\s*$")


class BandwidthError(ValueError):
    """A bandwidth string or value that cannot be used; the message names it and the accepted forms."""


def bits_to_bytes(bits_per_s: float) -> float:
    return bits_per_s / 8.0


def bytes_to_bits(bytes_per_s: float) -> float:
    return bytes_per_s * 8.0


def parse_bandwidth(text: str | int | float) -> float:
    """Return the bandwidth in **bytes per second** for a lab-vars string such as ``"800G"``.

    ints and floats (YAML gives those for plain numbers) are bits per second too.
    """
    if isinstance(text, bool):
        # bool is an int subclass; "true" in a vars file is a mistake, not 1 bit/s.
        raise BandwidthError(f"bandwidth {text!r} is a boolean; expected {ACCEPTED_FORMS}")
    if isinstance(text, int | float):
        bits = float(text)
        if not math.isfinite(bits) or bits < 0:
            raise BandwidthError(f"bandwidth {text!r} must be finite and >= 0; expected {ACCEPTED_FORMS}")
        return bits_to_bytes(bits)
    if not isinstance(text, str):
        raise BandwidthError(f"bandwidth {text!r} has type {type(text).__name__}; expected {ACCEPTED_FORMS}")
    match = _BANDWIDTH_RE.match(text)
    if match is None:
        hint = ""
        if _BYTES_RE.search(text.strip()):
            hint = " (bytes/s units such as 'GB/s' are not accepted: write bits, e.g. '800G')"
        raise BandwidthError(f"bad bandwidth {text!r}{hint}; expected {ACCEPTED_FORMS}")
    if match["suffix"] and "B" in match["suffix"]:
        # IGNORECASE lets "GB/s" through the pattern; a capital B means bytes, which we refuse.
        raise BandwidthError(
            f"bad bandwidth {text!r} (bytes/s units such as 'GB/s' are not accepted: write bits, "
            f"e.g. '800G'); expected {ACCEPTED_FORMS}"
        )
    bits = float(match["num"]) * _PREFIXES[match["prefix"].lower()]
    if not math.isfinite(bits):
        raise BandwidthError(f"bandwidth {text!r} overflows; expected {ACCEPTED_FORMS}")
    return bits_to_bytes(bits)


def format_bandwidth(bytes_per_s: float, *, suffix: str = "") -> str:
    """Format bytes/s back to the lab-vars form: ``1e11`` → ``"800G"``, ``2e11`` → ``"1.6T"``.

    Up to 6 significant digits are kept, so ``parse_bandwidth(format_bandwidth(x))`` is within
    a relative 5e-6 of ``x``; ``suffix="bps"`` gives ``"800Gbps"``.
    """
    if isinstance(bytes_per_s, bool) or not isinstance(bytes_per_s, int | float):
        raise BandwidthError(f"bandwidth {bytes_per_s!r} is not a number of bytes/s")
    if not math.isfinite(bytes_per_s) or bytes_per_s < 0:
        raise BandwidthError(f"bandwidth {bytes_per_s!r} bytes/s must be finite and >= 0")
    bits = bytes_to_bits(float(bytes_per_s))
    for prefix, unit in _FORMAT_PREFIXES:
        if bits >= unit:
            # .6g may round 999999.5 up to "1e+06"; parse_bandwidth accepts that form too.
            return f"{bits / unit:.6g}{prefix}{suffix}"
    return f"{bits:.6g}{suffix}"
