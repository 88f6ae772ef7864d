"""A report compares runs only under the same conditions, groups them by condition and says what it left
out (the AllReduce quick start: a lossy ina run was set against the clean ps run, "1.04x slower")."""

from __future__ import annotations

from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report import build_blocks
from orchestrator.experiment.report.blocks import Bullets, Heading, Para
from orchestrator.experiment.report.document import groups_of
from tests.unit.orchestrator.experiment import results_fixtures as fx
from tests.unit.orchestrator.experiment.report.test_sentences import _ina, _ps

MiB = 1 << 20
CLEAN = {"scale": 20000, "loss": {}, "down": [], "bandwidth_bps": {}}
LOSSY = {**CLEAN, "loss": {"s5:eth1": 0.02}}


def _under(run: RunResult, conditions: dict) -> RunResult:
    meta = run.meta.model_copy(update={"settings": {**run.meta.settings, "conditions": conditions}})
    return run.model_copy(update={"meta": meta, "timing": fx.faithful(), "metrics": None})


def _quick_start() -> list[RunResult]:
    return [_under(_ina(MiB), CLEAN), _under(_ps(4 * MiB), CLEAN), _under(_ina(MiB, seconds=1.3), LOSSY)]


def test_clean_is_compared_with_clean_and_the_lossy_run_stands_apart() -> None:
    clean, lossy = groups_of(_quick_start())
    assert clean.comparison.labels == ["ina", "ps"] and [r.label for r in clean.comparison.ratios] == ["ina"]
    assert lossy.comparison.labels == ["ina"] and lossy.comparison.ratios == []
    assert clean.others == (lossy.comparison,) and lossy.others == (clean.comparison,)


def test_the_report_says_what_it_left_out_and_compares_nothing_across() -> None:
    blocks = build_blocks(_quick_start(), None)
    headings = [b.text for b in blocks if isinstance(b, Heading) and b.level == 2]
    assert headings[:2] == [
        "leaf-spine / allreduce.jsonl: shaped, clean",
        "leaf-spine / allreduce.jsonl: shaped, loss 2.00% s5:eth1",
    ]
    lossy_start = next(i for i, b in enumerate(blocks) if getattr(b, "text", None) == headings[1])
    lossy_blocks = blocks[lossy_start:]
    paras = [b.text for b in lossy_blocks if isinstance(b, Para)]
    assert any(
        "shaped, clean (ina, ps: loss on s5:eth1 none there, 2.00% here)" in p for p in paras
    ), paras
    assert any(p.startswith("No ps run under these conditions") and "shaped, clean" in p for p in paras)
    sentences = [s for b in lossy_blocks if isinstance(b, Bullets) for s in b.items]
    assert not any("than ps" in s or "against ps" in s for s in sentences), sentences
