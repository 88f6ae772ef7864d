"""Propagation delay on a link, in fabric time: what a fibre does to a packet after the sender's shaper has
serialised it (docs/delay.md).

Pure logic: how a user writes a delay (containerlab's ``tools netem`` words: ``delay``, ``jitter``), and
when a held packet is due. The relay that holds packets is :mod:`orchestrator.lab.relay`; the plan's
defaults per link class are :mod:`orchestrator.configure.plan.delay`.

A delay is one way: ``A:eth1`` delayed by 2 ms holds what A sends on eth1 for 2 ms of fabric time, which is
``2 ms x time scale`` of wall time on the lab (:class:`aidcnet.timescale.TimeScale` converts). Jitter, as
netem's, varies each packet's delay uniformly by up to ± ``jitter``; unlike netem's, it never reorders: a
packet is never released before the one sent ahead of it on the same link end, as on a fibre, whose
length does not change between two packets.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ns|us|µs|ms|s)?\s*$")
# Per second: dividing by these gives 0.0001 for 100us, where multiplying by 1e-6 gives 9.999...e-05.
_PER_S = {"ns": 1e9, "us": 1e6, "µs": 1e6, "ms": 1e3, "s": 1.0}
# Fibre carries light at about 2/3 c: 5 µs per km, so 2 ms one way is some 400 km.
FIBRE_S_PER_KM = 5e-6
DELAY_FORMS = "delay D [jitter J] (D, J: fabric time with a unit, e.g. 2ms, 100us, 1.5s; delay 0 removes it)"


class DelayError(ValueError):
    pass


def parse_duration(text: str | int | float, what: str = "delay") -> float:
    """Fabric seconds from ``2ms``, ``100us`` (or ``100µs``), ``250ns``, ``1.5s``; a number alone is only
    accepted as 0 (a bare ``2`` could mean seconds or milliseconds, and the two differ a thousandfold)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text == 0:
            return 0.0
        raise DelayError(f"{what} {text!r}: give a unit, e.g. {text}ms or {text}us")
    match = _DURATION.match(str(text))
    if match is None:
        raise DelayError(f"{what} {text!r} is not a duration; write it with a unit: 2ms, 100us, 250ns, 1.5s")
    value = float(match["n"])
    if match["unit"] is None:
        if value == 0:
            return 0.0
        raise DelayError(f"{what} {text!r}: give a unit, e.g. {text}ms or {text}us")
    return value / _PER_S[match["unit"]]


def format_duration(seconds: float) -> str:
    """``0.002`` → ``2 ms``, ``1e-06`` → ``1 µs``: fabric time for people, in the largest unit it reaches."""
    if seconds == 0:
        return "0"
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= size:
            return f"{seconds / size:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


@dataclass(frozen=True)
class LinkDelay:
    """The delay of one link end (what it sends), fabric seconds."""

    delay_s: float = 0.0
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("delay", self.delay_s), ("jitter", self.jitter_s)):
            if not math.isfinite(value) or value < 0:
                raise DelayError(f"{name} {value!r} must be a duration of at least 0")
        if self.jitter_s > self.delay_s:
            raise DelayError(
                f"jitter {format_duration(self.jitter_s)} is above the delay "
                f"{format_duration(self.delay_s)}: a packet cannot arrive before it was sent; "
                "lower the jitter or raise the delay"
            )

    @property
    def is_none(self) -> bool:
        return self.delay_s == 0 and self.jitter_s == 0

    def describe(self) -> str:
        if self.is_none:
            return "no delay"
        text = f"delay {format_duration(self.delay_s)}"
        if self.jitter_s:
            text += f" ± {format_duration(self.jitter_s)} (never reordered)"
        return text


def parse_delay_words(words: list[str]) -> LinkDelay:
    """What follows ``aidclab link set NODE:IF delay``: ``2ms``, ``2ms jitter 100us`` or ``0``."""
    if not words or len(words) not in (1, 3) or (len(words) == 3 and words[1] != "jitter"):
        raise DelayError(f"want {DELAY_FORMS}; got {' '.join(words) or 'nothing'}")
    delay = parse_duration(words[0], "delay")
    jitter = parse_duration(words[2], "jitter") if len(words) == 3 else 0.0
    return LinkDelay(delay, jitter)


class HoldLine:
    """When each packet of one link end leaves the relay, in wall seconds of the clock the caller reads.

    A packet that arrived at ``t`` is due at ``t + delay + jitter × (2u - 1)`` for a draw ``u`` in [0, 1),
    but never before the packet ahead of it (no reordering) and never before it arrived. A change of delay
    applies to packets that arrive after it; those already held keep their time."""

    def __init__(self, delay_wall_s: float, jitter_wall_s: float = 0.0) -> None:
        self.last_due = -math.inf
        self.set(delay_wall_s, jitter_wall_s)

    def set(self, delay_wall_s: float, jitter_wall_s: float = 0.0) -> None:
        if delay_wall_s < 0 or jitter_wall_s < 0:
            raise DelayError(f"a hold of {delay_wall_s} ± {jitter_wall_s} s: both must be at least 0")
        self.delay = delay_wall_s
        self.jitter = jitter_wall_s

    def due(self, arrived: float, draw: float = 0.5) -> float:
        own = arrived + max(0.0, self.delay + self.jitter * (2.0 * draw - 1.0))
        self.last_due = max(own, self.last_due)
        return self.last_due


def bdp_bytes(bandwidth_bps: float, delay_s: float) -> int:
    """The bandwidth-delay product of a link in bytes: what it holds in flight when it is full."""
    return math.ceil(bandwidth_bps * delay_s / 8)


# The kernel's ARP retransmit time (net.ipv4.neigh.*.retrans_time_ms), which it waits for a reply before it
# asks again; after three unanswered it gives up and drops what waited.
KERNEL_NEIGH_RETRANS_MS = 1000


def neighbour_retrans_ms(round_trip_wall_s: float) -> int:
    """The ARP retransmit time for a link whose round trip takes ``round_trip_wall_s`` of wall time: twice
    the round trip, and never below the kernel's own. A neighbour is asked on the wire like any packet, so
    on a long link the kernel's 1 s (3 s for three tries) would give up before the answer could come back;
    the real link's round trip is far below a second, so this only stretches what the scale stretched."""
    return max(KERNEL_NEIGH_RETRANS_MS, math.ceil(2 * round_trip_wall_s * 1000))
