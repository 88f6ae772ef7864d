"""The conditions a run was made under, as a comparison needs them: like is compared with like only.

A run records the link settings in force when it started (``settings.conditions``: the time scale, loss
per link end, ends taken down, bandwidths pinned by ``aidclab link set``; docs/results-format.md) and the
faults it had mid-run (``settings.faults``). Two runs under different conditions differ in more than their
mode, so a report compares their bytes, times and ratios only within one :class:`Conditions` and names
what differs between groups; ``aidclab report latest`` keeps the newest run of each mode under each.

The time scale is not one of them, only whether the links were shaped at all: a faithful run's fabric
time is the same at any scale (that is what faithful means, and what ``replay --confirm`` checks), and
with ``time.scale: auto`` every mode runs at the scale its own trace needs. An unfaithful run's times are
not compared anyway.

Pure: built from a run record or from what ``summary.json`` keeps of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aidcnet.timescale import TimeScale
from orchestrator.experiment.clock import WALL, format_seconds
from orchestrator.lab.fabric import conditions_label

if TYPE_CHECKING:
    from orchestrator.experiment.records import RunResult

NONE_WORD = "none"


@dataclass(frozen=True)
class Difference:
    """One thing two conditions disagree on: ``loss on s5:eth1``, ``2.00%`` here, ``none`` there."""

    what: str
    here: str
    there: str

    def __str__(self) -> str:
        return f"{self.what} {self.here} against {self.there}"


@dataclass(frozen=True)
class Conditions:
    """Equal conditions compare; each field is one thing a user can change between runs."""

    # settings.conditions was in the record (runs from before it was recorded have only their scale).
    recorded: bool
    # The run's own scale, shown and kept; equal conditions need only both shaped or both unshaped.
    scale: int | None = field(compare=False)
    loss: tuple[tuple[str, float], ...] = ()
    down: tuple[str, ...] = ()
    bandwidth_bps: tuple[tuple[str, int], ...] = ()
    # (the fault as written, its moment in fabric seconds after the run's zero)
    faults: tuple[tuple[str, float], ...] = ()
    # A closed-loop step's AllReduce mode (docs/training.md): steps whose AllReduces ran differently are
    # compared apart, each message mode against the others with the same AllReduce.
    allreduce: str | None = None
    shaped: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shaped", self.scale is not None)

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def of(cls, run: RunResult) -> Conditions:
        settings = run.meta.settings
        timing_scale = run.timing.scale if run.timing is not None else None
        return cls.from_parts(
            settings.get("conditions"), settings.get("faults"), timing_scale, step_allreduce(settings)
        )

    @classmethod
    def from_parts(
        cls,
        conditions: Mapping[str, Any] | None,
        faults: Sequence[Mapping[str, Any]] | None,
        timing_scale: Any,
        allreduce: str | None = None,
    ) -> Conditions:
        """From a run's ``settings.conditions``, ``settings.faults`` and ``timing.scale`` (the scale of a
        run that recorded no conditions), and its step's AllReduce mode (:func:`step_allreduce`)."""
        written = tuple((str(f["fault"]), float(f["at_s"])) for f in faults or ())
        if not conditions:
            return cls(False, TimeScale.of(timing_scale).value, faults=written, allreduce=allreduce)
        return cls(
            True,
            TimeScale.of(conditions.get("scale")).value,
            tuple(sorted((str(e), float(p)) for e, p in (conditions.get("loss") or {}).items())),
            tuple(sorted(str(e) for e in conditions.get("down") or ())),
            tuple(sorted((str(e), int(b)) for e, b in (conditions.get("bandwidth_bps") or {}).items())),
            written,
            allreduce,
        )

    def to_dict(self) -> dict[str, Any]:
        """What ``summary.json`` keeps (``from_dict`` reads it back)."""
        return {
            "recorded": self.recorded,
            "scale": self.scale,
            "loss": dict(self.loss),
            "down": list(self.down),
            "bandwidth_bps": dict(self.bandwidth_bps),
            "faults": [list(f) for f in self.faults],
        } | ({} if self.allreduce is None else {"allreduce": self.allreduce})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Conditions:
        faults = [{"fault": text, "at_s": at} for text, at in d.get("faults") or ()]
        allreduce = d.get("allreduce")
        if not d.get("recorded"):
            return cls.from_parts(None, faults, d.get("scale"), allreduce)
        return cls.from_parts(d, faults, None, allreduce)

    # -- words -------------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        """``shaped, loss 2.00% s5:eth1; faults: restart spine2 at 15.0 µs fabric``."""
        shaped = "shaped" if self.shaped else "unshaped"
        # A run from before conditions were recorded is known by its time scale only.
        label = (
            conditions_label({**self._settings(), "scale": shaped})
            if self.recorded
            else f"{shaped}, conditions {conditions_label(None)}"
        )
        if self.allreduce is not None:
            label += f"; AllReduce in {self.allreduce}"
        if self.faults:
            label += "; faults: " + ", ".join(
                f"{' '.join(text.split()[1:])} at {format_seconds(at)} {'fabric' if self.shaped else WALL}"
                for text, at in self.faults
            )
        return label

    @property
    def detail(self) -> str:
        """One run's conditions with its own time scale: ``1:20000, loss 2.00% s5:eth1`` (a summary
        table's row; a group heading says ``shaped``, its runs may have run at several scales)."""
        return self.label.replace("shaped", _scale(self.scale), 1) if self.shaped else self.label

    @property
    def changed(self) -> int:
        """How many things differ from a clean fabric: link ends with loss, down or re-rated, and faults."""
        return len(self.loss) + len(self.down) + len(self.bandwidth_bps) + len(self.faults)

    @property
    def rank(self) -> tuple[int, int, int, str]:
        """Clean conditions first, then by how much was changed (a report's order of groups)."""
        return (0 if self.recorded else 1, self.changed, self.scale or 0, self.label)

    def differences(self, other: Conditions) -> list[Difference]:
        """What differs from ``other``: each thing with its value here and there."""
        out = []
        if self.shaped != other.shaped:
            out.append(Difference("time scale", _scale(self.scale), _scale(other.scale)))
        if self.recorded != other.recorded:
            words = {True: "recorded", False: "not recorded"}
            out.append(Difference("link conditions", words[self.recorded], words[other.recorded]))
        mine, theirs = dict(self.loss), dict(other.loss)
        for end in sorted(mine.keys() | theirs.keys()):
            if mine.get(end) != theirs.get(end):
                out.append(Difference(f"loss on {end}", _loss(mine.get(end)), _loss(theirs.get(end))))
        for end in sorted(set(self.down) ^ set(other.down)):
            out.append(Difference(end, _state(end, self.down), _state(end, other.down)))
        bw, other_bw = dict(self.bandwidth_bps), dict(other.bandwidth_bps)
        for end in sorted(bw.keys() | other_bw.keys()):
            if bw.get(end) != other_bw.get(end):
                out.append(
                    Difference(f"bandwidth of {end}", _bandwidth(bw.get(end)), _bandwidth(other_bw.get(end)))
                )
        if self.faults != other.faults:
            out.append(Difference("faults", _faults(self.faults), _faults(other.faults)))
        if self.allreduce != other.allreduce:
            here, there = self.allreduce or NONE_WORD, other.allreduce or NONE_WORD
            out.append(Difference("the step's AllReduce in", here, there))
        return out

    def _settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if k not in ("recorded", "faults", "allreduce")}


def step_allreduce(settings: Mapping[str, Any]) -> str | None:
    """The collective mode a closed-loop step's AllReduces ran in (``settings.step.allreduce``), or None."""
    step = settings.get("step")
    return step.get("allreduce") if isinstance(step, Mapping) else None


def _scale(scale: int | None) -> str:
    return TimeScale.of(scale).label


def _loss(p: float | None) -> str:
    return NONE_WORD if p is None else f"{p:.2%}"


def _state(end: str, down: tuple[str, ...]) -> str:
    return "down" if end in down else "up"


def _bandwidth(bps: int | None) -> str:
    from aidcnet.fare.bandwidth import format_bandwidth

    return "as planned" if bps is None else format_bandwidth(bps / 8)


def _faults(faults: tuple[tuple[str, float], ...]) -> str:
    return "; ".join(text for text, _ in faults) if faults else NONE_WORD
