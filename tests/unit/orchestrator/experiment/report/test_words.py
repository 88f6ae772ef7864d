"""Words from the same numbers as the table: every sentence names the link, direction and baseline its
group's table names (the issue: table `s7:eth2 → s6:eth1`, sentence `s6:eth1 → s7:eth2`; "How to read"
said the baseline is unicast when it was ps)."""

from __future__ import annotations

import re

from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.records import BoundRecord, LinkCounters, PaceRecord, RunResult, TimingRecord
from orchestrator.experiment.report import build_blocks
from orchestrator.experiment.report.blocks import Bullets, Para, TableBlock
from orchestrator.experiment.report.document import group_blocks, groups_of
from orchestrator.experiment.report.sections.summary import summary_table
from orchestrator.experiment.report.sections.time import time_sentences
from tests.unit.orchestrator.experiment import results_fixtures as fx
from tests.unit.orchestrator.experiment.report.test_sentences import _ina, _ps, _timed

MiB = 1 << 20
DIRECTION = re.compile(r"\S+:\S+ → \S+:\S+")


def _tied(run: RunResult, bound_end: str) -> RunResult:
    """``run`` with the link s7:eth2<->s8:eth1 carrying 8 MiB each way, the busiest in both directions,
    and its bottleneck bound on ``bound_end``."""
    tie = LinkCounters(
        link="s7:eth2<->s8:eth1",
        a_to_b_bytes=8 * MiB,
        a_to_b_packets=8,
        b_to_a_bytes=8 * MiB,
        b_to_a_packets=8,
    )
    bound = BoundRecord(link=bound_end, bytes=8 * MiB, rate_bps=10**6, wall_s=1.0, fabric_s=1.0 / 20000)
    timing = TimingRecord(scale=20000, faithful=True, bound=bound)
    return run.model_copy(update={"links": [*run.links, tie], "timing": timing, "metrics": None})


def test_a_tie_names_one_link_in_one_direction_in_the_table_and_the_sentence() -> None:
    (c,) = compare_runs([_tied(_ina(MiB), "s8:eth1"), _tied(_ps(MiB), "s8:eth1")])
    table = summary_table(c)
    assert table.row("most-loaded link")[0].startswith("s8:eth1 → s7:eth2: 8.0 MiB")
    assert " on s8:eth1 → s7:eth2, which sent 8.0 MiB" in table.row("bottleneck bound")[0]
    sentence = next(s for s in time_sentences(c) if s.startswith("ina: faithful"))
    assert "the fabric link s8:eth1 → s7:eth2, which carried 8.0 MiB" in sentence
    assert "s7:eth2 → s8:eth1" not in " ".join(time_sentences(c))


def test_without_a_tie_the_most_loaded_link_is_the_counters_busiest() -> None:
    run = _tied(_ina(MiB), "s8:eth1")
    links = [lc.model_copy(update={"a_to_b_bytes": 9 * MiB}) if lc.a == "s7:eth2" else lc for lc in run.links]
    (c,) = compare_runs([run.model_copy(update={"links": links})])
    assert summary_table(c).row("most-loaded link")[0].startswith("s7:eth2 → s8:eth1: 9.0 MiB")


def _every_direction_in_the_sentences_is_in_the_table(runs: list[RunResult]) -> None:
    for group in groups_of(runs):
        blocks = group_blocks(group)
        cells = " ".join(cell for b in blocks if isinstance(b, TableBlock) for row in b.rows for cell in row)
        for b in blocks:
            for text in b.items if isinstance(b, Bullets) else [b.text] if isinstance(b, Para) else []:
                for named in DIRECTION.findall(text):
                    assert named.rstrip(",.") in cells, (named, text)


def test_every_link_a_sentence_names_is_named_so_by_its_table() -> None:
    _every_direction_in_the_sentences_is_in_the_table(
        [_tied(_ina(MiB), "s8:eth1"), _tied(_ps(MiB), "s8:eth1")]
    )
    fabric_bound = [
        _timed(fx.run("host-bier"), 1.0, "spine1:eth2"),
        _timed(fx.run("unicast"), 2.0, "leaf1:eth1"),
    ]
    _every_direction_in_the_sentences_is_in_the_table(fabric_bound)


def test_how_to_read_names_the_baseline_the_groups_had() -> None:
    allreduce = build_blocks([_ina(MiB), _ps(4 * MiB)])
    reading = next(b.items for b in reversed(allreduce) if isinstance(b, Bullets))
    egress = next(i for i in reading if i.startswith("Source egress ÷"))
    assert "(ps's)" in egress and "unicast" not in egress and "fan-out" not in egress
    both = build_blocks([_ina(MiB), _ps(4 * MiB), *fx.leaf_spine_runs()])
    reading = next(b.items for b in reversed(both) if isinstance(b, Bullets))
    assert any("(unicast's or ps's)" in i and "fan-out" in i for i in reading)


def test_a_collective_group_without_ps_asks_for_ps() -> None:
    (group,) = groups_of([_ina(MiB)])
    text = " ".join(b.text for b in group_blocks(group) if isinstance(b, Para))
    assert "No ps run in this group" in text and "--mode ps" in text and "unicast" not in text
    (group,) = groups_of([fx.run("unicast")])
    text = " ".join(b.text for b in group_blocks(group) if isinstance(b, Para))
    assert "Only unicast ran under these conditions" in text


def test_a_run_that_lost_deliveries_is_not_called_faithful_nor_timed() -> None:
    """The issue: '786/803 delivered' beside 'faithful at time scale 20000'."""
    lossy = _timed(fx.run("host-bier"), 1.0, "h1:eth1")
    first = lossy.messages[0].model_copy(update={"delivered": ["h3"], "latency": {"h3": 1.0}})
    lossy = lossy.model_copy(update={"messages": [first, *lossy.messages[1:]], "metrics": None})
    (c,) = compare_runs([lossy, _timed(fx.run("unicast"), 2.0, "h1:eth1")])
    table = summary_table(c)
    assert table.row("integrity") == ["ok", "2 missing"]
    assert table.row("fidelity") == ["faithful", "links faithful, deliveries not exact: times not compared"]
    assert c.ratios[0].completion_speedup is None
    sentences = time_sentences(c)
    assert any(
        s.startswith("host-bier: its links were faithful at 1:1000, but it did not deliver")
        for s in sentences
    )
    assert any("host-bier did not deliver exactly (2 missing)" in s for s in sentences)
    assert not any("finished" in s for s in sentences)


def test_every_run_gets_its_time_sentence_even_without_a_bound() -> None:
    """A faithful run with no bound recorded had no sentence, and the Time section printed nothing."""
    faithful = [r.model_copy(update={"timing": fx.faithful()}) for r in (_ina(MiB), _ps(4 * MiB))]
    (c,) = compare_runs(faithful)
    assert time_sentences(c) == [
        "ina: faithful at 1:20000; completed in 50.0 µs of fabric time (no bottleneck bound recorded).",
        "ps: faithful at 1:20000; completed in 50.0 µs of fabric time (no bottleneck bound recorded).",
        "ina finished as fast as ps in fabric time.",
    ]


def test_a_run_over_long_links_says_what_their_delay_adds_to_its_prediction() -> None:
    """Issue 41: the report shows how much the delay added to each completion."""
    pace = PaceRecord(
        predicted_fabric_s=24e-6, by="the time model, with the links' propagation delay",
        completion_fabric_s=25e-6, ratio=25 / 24, propagation_s=4e-6,
    )  # fmt: skip
    long = fx.run("unicast").model_copy(update={"timing": fx.faithful().model_copy(update={"pace": pace})})
    (c,) = compare_runs([long])
    (sentence,) = time_sentences(c)
    assert "(24.0 µs, 4.0 µs of it the links' delay)" in sentence, sentence
    short = fx.run("unicast").model_copy(
        update={
            "timing": fx.faithful().model_copy(
                update={"pace": pace.model_copy(update={"propagation_s": None})}
            )
        }
    )
    (c,) = compare_runs([short])
    assert "delay" not in time_sentences(c)[0].replace("propagation delay", "")
