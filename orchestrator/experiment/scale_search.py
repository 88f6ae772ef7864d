"""The smallest time scale at which a lab and trace stay faithful, found over a few short runs.

Smaller scales finish sooner in wall time; too small ones let a node's CPU or a socket, rather than the
links, decide the timing (docs/time-and-fidelity.md). The search starts at the lab's scale, halves it
while runs stay faithful (doubles it while they do not), then narrows the gap between the smallest
faithful and the largest unfaithful scale geometrically until they are within :data:`PRECISION`. A run
counts as faithful when its verdict says so and its fabric completion stays within :data:`INVARIANCE`
of the first run's (time dilation's own test).

:func:`next_scale` is the decision, pure; :func:`find_scale` runs it against a lab: it reshapes the
links between runs (the agents are not touched: their send buffers follow the queues, which do not
change) and puts the lab's own scale back afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aidcnet.timescale import TimeScale

# Stop when the smallest faithful scale is within this factor of the largest unfaithful one below it.
PRECISION = 1.3
DEFAULT_MAX_RUNS = 6
# Time dilation's own test: a faithful run takes the same fabric time at any scale. A run whose fabric
# completion strays further than this from the first run's (at the lab's scale) was paced by something
# that does not scale with the links: our software. It catches what the counters miss in a short run
# (a 76 ms run is shorter than the CPU check's 0.5 s window and never builds a standing queue).
INVARIANCE = 0.15


@dataclass(frozen=True)
class Trial:
    scale: int
    faithful: bool
    completion_s: float | None = None  # wall seconds
    run_dir: str | None = None
    reasons: list[str] = field(default_factory=list)
    bound_ratio: float | None = None  # completion over the run's bottleneck bound

    @property
    def completion_fabric_s(self) -> float | None:
        return None if self.completion_s is None else TimeScale(self.scale).fabric_s(self.completion_s)


def smallest_faithful(trials: list[Trial]) -> Trial | None:
    good = [t for t in trials if t.faithful]
    return min(good, key=lambda t: t.scale) if good else None


def next_scale(trials: list[Trial], *, floor: int = 1, ceiling: int = 10**7) -> int | None:
    """The scale to try next, or None when the answer is as precise as it gets. ``floor``: the smallest
    scale the lab's links allow (tc's TBF limit); ``ceiling``: give up doubling there."""
    if not trials:
        raise ValueError("the search starts from a first trial at the lab's own scale")
    tried = {t.scale for t in trials}
    best = smallest_faithful(trials)
    if best is None:
        nxt = 2 * max(t.scale for t in trials)
        return nxt if nxt <= ceiling else None
    below = [t.scale for t in trials if not t.faithful and t.scale < best.scale]
    if not below:
        nxt = best.scale // 2
        return nxt if nxt >= floor and nxt not in tried else None
    worst = max(below)
    if best.scale / worst <= PRECISION:
        return None
    nxt = round(math.sqrt(best.scale * worst))
    return nxt if nxt not in tried and worst < nxt < best.scale else None


def against_reference(trial: Trial, reference: Trial) -> Trial:
    """``trial`` judged also by :data:`INVARIANCE` against the faithful ``reference`` run."""
    ref, got = reference.completion_fabric_s, trial.completion_fabric_s
    if not trial.faithful or not reference.faithful or ref is None or got is None or ref <= 0:
        return trial
    off = got / ref - 1
    if abs(off) <= INVARIANCE:
        return trial
    why = (
        f"fabric completion {got * 1e6:.2f} µs is {abs(off):.0%} {'above' if off > 0 else 'below'} the "
        f"{ref * 1e6:.2f} µs at 1:{reference.scale}: the links no longer set the pace"
    )
    reasons = [*trial.reasons, why]
    return Trial(trial.scale, False, trial.completion_s, trial.run_dir, reasons, trial.bound_ratio)


def find_scale(
    start: int,
    run_at: Callable[[int], Trial],
    *,
    floor: int = 1,
    max_runs: int = DEFAULT_MAX_RUNS,
    say: Callable[[str], None] = print,
) -> list[Trial]:
    """Run the search: ``run_at(scale)`` reshapes the lab, replays once and judges the run."""
    trials: list[Trial] = []
    scale: int | None = start
    while scale is not None and len(trials) < max_runs:
        say(f"scale search: run {len(trials) + 1}/{max_runs} at 1:{scale}")
        trial = run_at(scale)
        if trials:
            trial = against_reference(trial, trials[0])
        trials.append(trial)
        verdict = "faithful" if trial.faithful else "not faithful: " + "; ".join(trial.reasons)
        say(f"scale search: 1:{scale} {verdict}")
        scale = next_scale(trials, floor=floor)
    return trials


def describe(trials: list[Trial]) -> list[str]:
    """One line per trial, smallest scale first, then the answer."""
    lines = []
    for t in sorted(trials, key=lambda t: t.scale):
        wall = "–" if t.completion_s is None else f"{t.completion_s:.3f} s wall"
        fabric = "" if t.completion_fabric_s is None else f" = {t.completion_fabric_s * 1e6:.2f} µs fabric"
        verdict = "faithful" if t.faithful else "NOT faithful (" + "; ".join(t.reasons) + ")"
        run = f", run {Path(t.run_dir).name}" if t.run_dir else ""
        bound = "" if t.bound_ratio is None else f" ({t.bound_ratio:.2f}x its bound)"
        lines.append(f"1:{t.scale}: {wall}{fabric}{bound}, {verdict}{run}")
    best = smallest_faithful(trials)
    if best is None:
        lines.append("no faithful scale found: raise time.scale further, or run fewer nodes per core")
    else:
        lines.append(f"smallest faithful scale: {best.scale} (time.scale in the lab's vars)")
    return lines
