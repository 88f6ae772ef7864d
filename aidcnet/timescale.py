"""The lab's time scale: the one value that turns wall time into fabric time, and the only place that does.

A shaped lab runs ``factor`` times slower than the fabric it stands for (docs/time-and-fidelity.md): every
link end is shaped to its bandwidth divided by the factor, so a transfer that takes ``d`` seconds on the
real fabric takes ``d × factor`` seconds of wall time on our veths. Bytes are never scaled. A protocol
timer written in fabric seconds therefore runs ``factor`` times longer on the wall clock, and a time
measured in the lab is divided by the factor to be reported.

An unshaped lab (``time.scale: off``) has factor 1 and ``shaped`` False: its timers run as written and its
times are the emulator's wall times, which no report may present as the fabric's.

Pure: no clock is read here. Everything that converts between the two clocks, or between a link's
bandwidth and its veth's rate, calls this class (the architecture test holds every other module to it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# tc's TBF carries a rate as 32-bit bytes/s (TCA_TBF_PARMS; no RATE64 is sent), so no veth can be
# shaped above this many bits per second.
MAX_SHAPED_BPS = (2**32 - 1) * 8
OFF = "off"


class TimeScaleError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class TimeScale:
    """``TimeScale(20000)``: the emulation runs 20000 times slower than the fabric (1:20000)."""

    factor: int = 1
    shaped: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int):
            raise TimeScaleError(f"time scale {self.factor!r} must be a whole number")
        if self.factor < 1:
            raise TimeScaleError(f"time scale {self.factor} must be at least 1")
        if not self.shaped and self.factor != 1:
            raise TimeScaleError("an unshaped lab has time scale 1")

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def unshaped(cls) -> TimeScale:
        return cls(1, shaped=False)

    @classmethod
    def of(cls, value: Any) -> TimeScale:
        """From what a plan, a node file or ``fabric.json`` holds: a factor, or None / ``"off"`` for
        unshaped links. A TimeScale is returned as it is."""
        if isinstance(value, TimeScale):
            return value
        if value is None or value == OFF:
            return cls.unshaped()
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise TimeScaleError(f"time scale {value!r}: give a whole number of at least 1, or off")
        return cls(value)

    @property
    def value(self) -> int | None:
        """What a file records: the factor, or None when unshaped."""
        return self.factor if self.shaped else None

    # -- the two clocks ----------------------------------------------------------------------------------
    def fabric_s(self, wall_s: float) -> float:
        """What ``wall_s`` seconds measured on the lab stand for on the real fabric."""
        return wall_s / self.factor

    def wall_s(self, fabric_s: float) -> float:
        """How long ``fabric_s`` seconds of the real fabric take on the lab's wall clock (a timer's
        wait, a delay's hold, a modelled cost)."""
        return fabric_s * self.factor

    def wall_ns(self, fabric_s: float) -> int:
        return round(fabric_s * self.factor * 1e9)

    def fabric_s_of_ns(self, wall_ns: int) -> float:
        """Fabric seconds of a wall-clock span in nanoseconds (kernel stamps, ``time.time_ns``)."""
        return wall_ns / 1e9 / self.factor

    def reported_s(self, wall_s: float | None) -> float | None:
        """Fabric seconds to report for a wall-clock measurement, or None when the lab was not shaped
        (its times are the emulator's) or nothing was measured."""
        if wall_s is None or not self.shaped:
            return None
        return self.fabric_s(wall_s)

    # -- links -------------------------------------------------------------------------------------------
    def veth_bps(self, bandwidth_bps: int) -> int:
        """The rate a link of ``bandwidth_bps`` is shaped to on its veth; 0 when unshaped (no shaper)."""
        if not self.shaped:
            return 0
        return max(1, round(bandwidth_bps / self.factor))

    def fabric_bps(self, veth_bps: float) -> float:
        """The fabric's rate that ``veth_bps`` measured on a veth stands for."""
        return veth_bps * self.factor

    @staticmethod
    def minimum_for(bandwidth_bps: int) -> int:
        """The smallest factor that keeps a link of ``bandwidth_bps`` within what tc's TBF can shape."""
        return max(1, math.ceil(bandwidth_bps / MAX_SHAPED_BPS))

    def check_link(self, bandwidth_bps: int) -> str | None:
        """Why a link of ``bandwidth_bps`` cannot be shaped at this scale, or None when it can."""
        if self.shaped and self.veth_bps(bandwidth_bps) > MAX_SHAPED_BPS:
            return (
                f"{self.veth_bps(bandwidth_bps) / 1e9:.1f} Gbit/s on the veth is above the "
                f"{MAX_SHAPED_BPS / 1e9:.1f} Gbit/s tc's TBF can shape; raise time.scale to at least "
                f"{self.minimum_for(bandwidth_bps)}"
            )
        return None

    def times(self, k: float) -> TimeScale:
        """This scale multiplied by ``k`` (the invariance check's second run: 2x by default)."""
        if not self.shaped:
            raise TimeScaleError("an unshaped lab has no second scale to confirm a time at")
        return TimeScale(max(1, round(self.factor * k)))

    # -- words -------------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        """``1:20000`` or ``unshaped``."""
        return f"1:{self.factor}" if self.shaped else "unshaped"

    def __str__(self) -> str:
        return self.label
