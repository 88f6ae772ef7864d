"""Every comparison sentence of the report agrees with the table it summarises: each template is tested
with the compared number on both sides of the baseline (more and less, faster and slower)."""

from __future__ import annotations

import pytest

from orchestrator.experiment.metrics import collective_load, compare_runs, is_collective, is_multicast
from orchestrator.experiment.records import LinkCounters, MessageResult, RunResult, TimingRecord
from orchestrator.experiment.report.document import trace_line
from orchestrator.experiment.report.sections.collectives import collective_sentences, collectives_table
from orchestrator.experiment.report.sections.ratios import ratio_sentences, ratios_table
from orchestrator.experiment.report.sections.summary import summary_table
from orchestrator.experiment.report.sections.time import time_sentences
from orchestrator.experiment.report.text import fmt_bytes, times_phrase
from tests.unit.orchestrator.experiment import results_fixtures as fx

MiB = 1 << 20
WORKERS = ["h1", "h2", "h3", "h4"]


def test_times_phrase_direction_follows_the_numbers():
    assert times_phrase(6.1, 4.0) == "1.52× more"
    assert times_phrase(4.0, 6.1) == "1.52× less"
    assert times_phrase(4.0, 4.0) == "the same"
    assert times_phrase(2.0, 1.0, fewer="slower", greater="faster") == "2.00× faster"
    assert times_phrase(1.0, 2.0, fewer="slower", greater="faster") == "2.00× slower"
    assert times_phrase(0, 5) == "less" and times_phrase(5, 0) == "more"


def _allreduce_run(
    mode: str, into: dict[str, int], seconds: float, points: list[str] | None = None
) -> RunResult:
    """An AllReduce run whose only traffic is ``into[node]`` bytes arriving at each node from s1."""
    links = [
        LinkCounters(
            link=f"s1:eth{i}<->{node}:eth1",
            a_to_b_bytes=n,
            a_to_b_packets=n // 1000 + 1,
            b_to_a_bytes=1000,
            b_to_a_packets=1,
        )
        for i, (node, n) in enumerate(sorted(into.items()), 1)
    ]
    settings = {"aggregation_points": points} if points else {}
    trace = fx.trace_info(
        file="workloads/allreduce.jsonl",
        sha256="a1" * 32,
        ops=1,
        ops_by_kind={"allreduce": 1},
        bytes=4 * MiB,
        delivered_bytes=16 * MiB,
        fanout_weighted=None,
    )
    msg = MessageResult(
        id=0,
        op="allreduce",
        src="h1",
        expected=WORKERS,
        delivered=WORKERS,
        bytes=4 * MiB,
        sent_at=0.0,
        latency={w: seconds for w in WORKERS},
    )
    return RunResult(meta=fx.meta(mode, trace=trace, settings=settings), links=links, messages=[msg])


def _ring(worker_bytes: int, seconds: float = 1.0) -> RunResult:
    return _allreduce_run("ring", {w: worker_bytes - i for i, w in enumerate(WORKERS)}, seconds)


def _ps(ps_bytes: int, seconds: float = 1.0) -> RunResult:
    return _allreduce_run("ps", {"h9": ps_bytes, **{w: 1000 for w in WORKERS}}, seconds, points=["h9"])


def _ina(root_bytes: int, seconds: float = 1.0) -> RunResult:
    return _allreduce_run("ina", {"s6": root_bytes, **{w: 1000 for w in WORKERS}}, seconds, points=["s6"])


def test_collective_load_names_the_aggregation_point_or_the_busiest_worker():
    ps = collective_load(_ps(4 * MiB, seconds=2.0))
    assert ps is not None and (ps.node, ps.kind, ps.bytes_in) == ("h9", "aggregation point", 4 * MiB)
    assert (ps.payload_bytes, ps.completion_s) == (4 * MiB, pytest.approx(2.0))
    ring = collective_load(_ring(3 * MiB))
    assert ring is not None and (ring.node, ring.kind, ring.bytes_in) == ("h1", "busiest worker", 3 * MiB)
    assert collective_load(fx.run("unicast")) is None


def test_run_kinds():
    assert is_collective(_ring(MiB)) and not is_multicast(_ring(MiB))
    assert is_multicast(fx.run("unicast")) and not is_collective(fx.run("unicast"))


@pytest.mark.parametrize(
    ("mine", "base", "word"),
    [(int(6.1 * MiB), 4 * MiB, "more"), (MiB, 4 * MiB, "less")],
)
def test_collective_sentence_both_sides(mine: int, base: int, word: str):
    (c,) = compare_runs([_ina(mine), _ps(base)])
    (sentence,) = collective_sentences(c)
    runs = {col.label: col.run for col in c.columns}
    ina, ps = collective_load(runs["ina"]), collective_load(runs["ps"])
    assert ina is not None and ps is not None
    factor = max(ina.bytes_in, ps.bytes_in) / min(ina.bytes_in, ps.bytes_in)
    assert sentence == (
        f"ina: {fmt_bytes(ina.bytes_in)} arrived at s6 (aggregation point), "
        f"{factor:.2f}× {word} than at h9 (aggregation point) under ps ({fmt_bytes(ps.bytes_in)})."
    )


def test_the_readme_bug_ring_sent_more_than_ps_is_said_so():
    """The issue's example: ring 6.1 MiB against ps 4.0 MiB was reported as '0.66× less'."""
    (c,) = compare_runs([_ring(int(6.1 * MiB)), _ps(4 * MiB)])
    (sentence,) = collective_sentences(c)
    assert "1.52× more than" in sentence and "less" not in sentence
    assert sentence.startswith("ring: 6.1 MiB arrived at h1 (busiest worker)")


def test_collective_tables_have_collective_rows_and_no_fanout():
    (c,) = compare_runs([_ina(MiB), _ps(4 * MiB)])
    rows = {r[0]: r[1:] for r in collectives_table(c).rows}  # type: ignore[union-attr]
    assert c.labels == ["ina", "ps"]
    assert rows["bytes into aggregation point"] == [
        "s6 (aggregation point): 1.0 MiB",
        "h9 (aggregation point): 4.0 MiB",
    ]
    # Unshaped runs: bytes per wall second, labelled.
    assert rows["algorithm bandwidth"] == ["4.0 MiB/s (wall)", "4.0 MiB/s (wall)"]
    ratio_rows = [r[0] for r in ratios_table(c).rows]  # type: ignore[union-attr]
    assert "theoretical fan-out" not in ratio_rows and "egress ÷ / fan-out" not in ratio_rows
    assert "fan-out" not in trace_line(c)


def test_multicast_tables_keep_the_fanout_and_no_collective_rows():
    (c,) = compare_runs(fx.leaf_spine_runs())
    assert "bytes into aggregation point" not in [r[0] for r in summary_table(c).rows]
    assert "theoretical fan-out" in [r[0] for r in ratios_table(c).rows]  # type: ignore[union-attr]


def _with_egress(mode: str, egress: int) -> RunResult:
    run = fx.run(mode)
    links = [lc.model_copy(update={"a_to_b_bytes": egress}) if lc.a_node == "h1" else lc for lc in run.links]
    return run.model_copy(update={"links": links})


@pytest.mark.parametrize(("egress", "word"), [(1000, "less"), (10**7, "more")])
def test_multicast_sentence_both_sides(egress: int, word: str):
    (c,) = compare_runs([_with_egress("host-bier", egress), fx.run("unicast")])
    (sentence,) = ratio_sentences(c)
    base = c.columns[0].metrics.source_egress_bytes
    factor = max(egress, base) / min(egress, base)
    assert sentence.startswith(
        f"host-bier: the sources sent {fmt_bytes(egress)}, {factor:.2f}× {word} than unicast "
        f"({fmt_bytes(base)})"
    )
    if word == "more":
        assert "it added" in sentence  # more fabric bytes than unicast is not a saving


def _timed(run: RunResult, seconds: float, bound_link: str) -> RunResult:
    from orchestrator.experiment.records import BoundRecord

    msgs = [
        m.model_copy(update={"sent_at": 0.0, "latency": dict.fromkeys(m.expected, seconds)})
        for m in run.messages
    ]
    timing = TimingRecord(
        scale=1000,
        faithful=True,
        bound=BoundRecord(
            link=bound_link, bytes=1000, rate_bps=10**6, wall_s=seconds / 2, fabric_s=seconds / 2000
        ),
    )
    return run.model_copy(update={"messages": msgs, "timing": timing, "metrics": None})


@pytest.mark.parametrize(("mine_s", "word"), [(1.0, "2.00× faster"), (4.0, "2.00× slower")])
def test_time_sentence_both_sides(mine_s: float, word: str):
    (c,) = compare_runs(
        [_timed(fx.run("host-bier"), mine_s, "h1:eth1"), _timed(fx.run("unicast"), 2.0, "h1:eth1")]
    )
    line = next(s for s in time_sentences(c) if s.startswith("host-bier finished"))
    assert line.startswith(f"host-bier finished {word} than unicast in fabric time: ")
    mine_b, base_b = c.columns[1].metrics.source_egress_bytes, c.columns[0].metrics.source_egress_bytes
    assert mine_b < base_b  # the fixture's host-BIER sends one copy where unicast sends three
    assert f"which host-bier loads {base_b / mine_b:.2f}× less than unicast" in line
