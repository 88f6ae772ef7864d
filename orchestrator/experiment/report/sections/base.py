"""What every report section implements, and the group of runs it is handed.

A report has one group per lab, trace and conditions (``orchestrator.experiment.metrics.compare_runs``);
every registered section is asked, in its ``order``, for its blocks of each group, and returns none when
the group has nothing for it (no reliable run, no membership run, ...).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from aidcnet.modes import BASELINES, COLLECTIVE, Mode
from orchestrator.experiment.metrics import Comparison, is_collective
from orchestrator.experiment.report.blocks import Block
from orchestrator.experiment.report.text import slug

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology


@dataclass(frozen=True)
class Group:
    """One compared group of runs, as a section sees it."""

    comparison: Comparison
    # 1-based position in the report: plot files are named by it (g1-leaf-spine-heatmap.png).
    index: int = 1
    topology: Topology | None = None
    # The groups of the same lab and trace under other conditions: reported apart, never compared.
    others: tuple[Comparison, ...] = ()

    @property
    def prefix(self) -> str:
        return f"g{self.index}-{slug(self.comparison.lab)}"

    @property
    def baseline_mode(self) -> Mode:
        """The mode this group's runs are compared against: ps for AllReduce, unicast otherwise."""
        return baseline_mode(self.comparison)

    def apart(self) -> list[str]:
        """The other conditions this trace ran under, each with its runs and what differs from these:
        ``1:20000, loss 2.00% s5:eth1 (ina: loss on s5:eth1 2.00% there, none here)``."""
        mine = self.comparison.conditions
        out = []
        for other in self.others:
            diffs = mine.differences(other.conditions)
            words = "; ".join(f"{d.what} {d.there} there, {d.here} here" for d in diffs)
            out.append(f"{other.conditions.label} ({', '.join(other.labels)}: {words or 'nothing recorded'})")
        return out


def baseline_mode(c: Comparison) -> Mode:
    """A collective group's baseline is the collective family's (ps), any other's the messages' (unicast):
    the families and their baselines are aidcnet.modes's."""
    collective = any(is_collective(col.run) for col in c.columns)
    return next(m for m in Mode if m in BASELINES and (m in COLLECTIVE) == collective)


class Section(ABC):
    """One part of each group of a report (a table, its sentences, its plots)."""

    # Unique among the sections; the registry refuses a second one.
    name: ClassVar[str]
    # Where the section stands in a group: smallest first.
    order: ClassVar[int]
    # Printed on the terminal too (aidclab replay, aidclab report), not only in report.md and report.html.
    terminal: ClassVar[bool] = False

    @abstractmethod
    def blocks(self, group: Group) -> list[Block]:
        """The section's blocks for ``group``, heading first; [] when the group has nothing for it."""

    def reading(self, groups: Sequence[Group]) -> list[str]:
        """What the section adds to "How to read this report" for a report of ``groups``."""
        return []
