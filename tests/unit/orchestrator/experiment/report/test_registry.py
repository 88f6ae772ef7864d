"""The report's sections are registered parts: the document asks the registry, never a feature by name."""

from __future__ import annotations

import ast
import io
from collections.abc import Iterator

import pytest
from rich.console import Console

from orchestrator.experiment.report import build_blocks, print_summary, sections
from orchestrator.experiment.report.blocks import Block, Heading, Para
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.paths import ROOT
from tests.unit.orchestrator.experiment import results_fixtures as fx

FEATURES = {"summary", "ratios", "collectives", "time", "memberships", "reliability", "plots"}


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, type[Section]]]:
    """The registry, loaded, with anything a test registers removed afterwards."""
    sections.registered()
    registry = dict(sections._SECTIONS.classes)
    monkeypatch.setattr(sections._SECTIONS, "classes", registry)
    yield registry


def test_every_feature_registers_its_section_in_order() -> None:
    got = sections.registered()
    names = [s.name for s in got]
    assert set(names) >= FEATURES
    assert len(names) == len(set(names))
    assert [s.order for s in got] == sorted(s.order for s in got)
    assert names.index("summary") < names.index("ratios") < names.index("time") < names.index("plots")


def test_a_registered_section_appears_in_every_group_at_its_place(scratch_registry: dict) -> None:
    @sections.register
    class Extra(Section):
        name = "extra"
        order = 35  # after collectives, before time

        def blocks(self, group: Group) -> list[Block]:
            return [Heading(3, "Extra"), Para(f"{len(group.comparison.columns)} runs")]

        def reading(self, groups: object) -> list[str]:
            return ["Extra: a section a test added."]

    blocks = build_blocks(fx.leaf_spine_runs(), fx.topology())
    headings = [b.text for b in blocks if isinstance(b, Heading)]
    assert headings.index("Ratios against unicast") < headings.index("Extra") < headings.index("Time")
    assert Para("2 runs") in blocks
    assert any("Extra: a section a test added." in getattr(b, "items", []) for b in blocks)


def test_a_name_registered_twice_is_refused(scratch_registry: dict) -> None:
    class Again(Section):
        name = "summary"
        order = 1

        def blocks(self, group: Group) -> list[Block]:
            return []

    with pytest.raises(RuntimeError, match="'summary' registered twice"):
        sections.register(Again)


def test_the_terminal_prints_only_the_terminal_sections() -> None:
    buf = io.StringIO()
    print_summary(fx.leaf_spine_runs(), Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    terminal = {s.name for s in sections.registered() if s.terminal}
    assert terminal == {"summary", "ratios", "collectives", "step", "time"}
    assert "Summary" in text and "Ratios against unicast" in text
    assert "Bytes per link" not in text and "Runs" not in text and "Plots" not in text


def test_the_document_names_no_feature() -> None:
    """document.py imports the registry and the base, never a feature's section module."""
    tree = ast.parse((ROOT / "orchestrator/experiment/report/document.py").read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and ".sections" in node.module
    }
    assert imported == {
        "orchestrator.experiment.report.sections",
        "orchestrator.experiment.report.sections.base",
    }
