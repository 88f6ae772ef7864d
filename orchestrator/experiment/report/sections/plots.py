"""The plots of a group: bytes per link over the topology, source egress per mode, latency CDFs. The
figures are drawn by the plots writer (``report.plots``, matplotlib) when a report is written; this
section only says which, so the terminal never loads matplotlib."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.experiment.report.blocks import Block, Heading, Plot
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section


def _drawn_by(name: str, *args: Any) -> Callable[[Path], object]:
    def draw(path: Path) -> object:
        from orchestrator.experiment.report import plots

        return getattr(plots, name)(*args, path)

    return draw


@register
class Plots(Section):
    name = "plots"
    order = 70

    def blocks(self, group: Group) -> list[Block]:
        c, prefix = group.comparison, group.prefix
        return [
            Heading(3, "Plots"),
            Plot(
                "bytes per link over the topology",
                f"{prefix}-heatmap.png",
                _drawn_by("plot_heatmap", c, group.topology),
            ),
            Plot("source egress per mode", f"{prefix}-egress.png", _drawn_by("plot_egress", c)),
            Plot("latency CDF per mode", f"{prefix}-latency.png", _drawn_by("plot_latency_cdf", c)),
        ]
