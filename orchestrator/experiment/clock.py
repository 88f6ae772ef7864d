"""Whose clock a printed time is on: fabric time with its unit, and wall time only labelled ``(wall)``.

Every time a lab measures is a wall-clock time. On a shaped lab it stands for fabric time, which
:class:`aidcnet.timescale.TimeScale` computes (nothing here divides by a scale); an unshaped lab has no
fabric time, so its times are shown as what they are, the emulator's wall time, labelled. The report,
its plots and the replay's lines format their times through a :class:`Clock`, so none can show a wall
time as if it were the fabric's (docs/time-and-fidelity.md). Rates follow the same rule: bytes per second
of fabric time, or per wall second labelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aidcnet.timescale import TimeScale
from orchestrator.units import format_bytes

if TYPE_CHECKING:
    from orchestrator.experiment.records import RunResult

WALL = "(wall)"
NONE = "–"
# Largest first: the first unit a duration reaches is the one to print it in.
SECOND_UNITS: tuple[tuple[str, float], ...] = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def format_seconds(s: float | None) -> str:
    """``0.0203`` → ``20.30 ms``: a duration for people, whatever clock it is on (say which beside it)."""
    if s is None:
        return NONE
    if s == 0:
        return "0 s"
    if abs(s) >= 1:
        return f"{s:.3f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    if abs(s) >= 1e-6:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e9:.1f} ns"


def second_unit(largest_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) to show durations up to ``largest_s`` in: a plot axis's unit."""
    for unit, size in SECOND_UNITS:
        if abs(largest_s) >= size:
            return size, unit
    return SECOND_UNITS[-1][1], SECOND_UNITS[-1][0]


def wall(s: float | None) -> str:
    """A wall-clock time, labelled."""
    return NONE if s is None else f"{format_seconds(s)} {WALL}"


@dataclass(frozen=True)
class Clock:
    """The clock a run's times are shown on: its lab's :class:`TimeScale` decides fabric or wall."""

    scale: TimeScale = field(default_factory=TimeScale.unshaped)

    @classmethod
    def of(cls, scale: Any) -> Clock:
        """From a time scale as a record holds it (a factor, None or ``"off"``) or a TimeScale."""
        return cls(TimeScale.of(scale))

    @classmethod
    def of_run(cls, run: RunResult) -> Clock:
        """A run's clock: its timing record's scale (a run without one was not shaped, as far as anyone
        can tell, so its times are wall times)."""
        return cls.of(run.timing.scale if run.timing is not None else None)

    @property
    def fabric(self) -> bool:
        """Its times are the fabric's (the lab was shaped)."""
        return self.scale.shaped

    @property
    def name(self) -> str:
        return "fabric" if self.fabric else "wall"

    def seconds(self, wall_s: float | None) -> float | None:
        """``wall_s`` on this clock: fabric seconds on a shaped lab, else the wall seconds themselves."""
        if wall_s is None or not self.fabric:
            return wall_s
        return self.scale.reported_s(wall_s)

    def shown(self, s: float | None) -> str:
        """A time already on this clock (fabric seconds on a shaped lab), in words."""
        if s is None:
            return NONE
        return format_seconds(s) if self.fabric else wall(s)

    def time(self, wall_s: float | None) -> str:
        """A measured wall-clock time as this clock shows it: fabric time, or wall time labelled."""
        return self.shown(self.seconds(wall_s))

    def both(self, wall_s: float | None) -> str:
        """Fabric time with the wall time it was measured as (a fault's moment, which the user gave in
        wall seconds); only the wall time, labelled, on an unshaped lab."""
        if wall_s is None or not self.fabric:
            return wall(wall_s)
        return f"{self.time(wall_s)} = {wall(wall_s)}"

    def rate(self, nbytes: float, wall_s: float | None) -> str:
        """``nbytes`` over ``wall_s`` measured: bytes per second of fabric time, or per wall second
        labelled."""
        s = self.seconds(wall_s)
        if not s:
            return NONE
        text = f"{format_bytes(nbytes / s)}/s"
        return text if self.fabric else f"{text} {WALL}"

    def axis(self, quantity: str, unit: str) -> str:
        """A plot axis's label: ``latency per receiver (µs)`` or ``latency per receiver (ms) (wall)``."""
        text = f"{quantity} ({unit})"
        return text if self.fabric else f"{text} {WALL}"
