"""The report's reliability tables: the reliable modes side by side, and feedback per link end
(docs/reliability.md)."""

from __future__ import annotations

from orchestrator.experiment.conditions import Conditions
from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report import build_blocks
from orchestrator.experiment.report.sections.reliability import feedback_links_table, reliability_table
from orchestrator.experiment.report.text import fmt_bytes
from tests.unit.orchestrator.experiment import results_fixtures as fx


def _reliable(run: RunResult, feedback: str, sources: dict, links: dict | None) -> RunResult:
    rel = {"feedback": feedback, "sources": sources}
    if links is not None:
        rel["links"] = links
    meta = run.meta.model_copy(update={"settings": {**run.meta.settings, "reliable": rel}})
    return run.model_copy(update={"meta": meta})


def _end(ack: int = 0, nack: int = 0, agg: int = 0, lost: int = 0) -> dict:
    return {
        "ack": ack,
        "nack": nack,
        "agg-ack": agg,
        "feedback_bytes": 82 * (ack + nack + agg),
        "lost_packets": 1 if lost else 0,
        "lost_bytes": lost,
    }


def _runs() -> list[RunResult]:
    topo = fx.topology()
    e2e = _reliable(
        fx.run("reliable-host-bier-e2e", topo),
        "e2e",
        {"sender.sent": 100, "source.rx.ack.packets": 700, "source.rx.ack.bytes": 57400,
         "sender.retransmitted-bytes": 8000},
        {"h1:eth1": _end(lost=2000), "leaf1:eth3": _end(ack=700), "spine1:eth1": _end(ack=500, nack=3)},
    )  # fmt: skip
    agg = _reliable(
        fx.run("reliable-host-bier", topo),
        "aggregated",
        {"sender.sent": 100, "source.rx.agg-ack.packets": 100, "source.rx.agg-ack.bytes": 9600,
         "sender.retransmitted-bytes": 3000, "sender.receivers-failed": 1},
        {"leaf1:eth3": _end(agg=100), "spine1:eth1": _end(agg=200, lost=2500)},
    )  # fmt: skip
    old = _reliable(fx.run("reliable-unicast", topo), "e2e", {"sender.sent": 0}, None)
    return [fx.run("unicast", topo), e2e, agg, old]


def test_reliable_modes_side_by_side_from_counted_feedback_and_drops() -> None:
    (c,) = compare_runs(_runs())
    table = reliability_table(c)
    assert table is not None
    # Columns in the comparison's mode order; each row read per mode.
    assert sorted(table.header[1:]) == ["reliable-host-bier", "reliable-host-bier-e2e", "reliable-unicast"]

    def row(name: str) -> dict[str, str]:
        (cells,) = [r[1:] for r in table.rows if r[0] == name]
        return dict(zip(table.header[1:], cells, strict=True))

    e2e, agg, old = "reliable-host-bier-e2e", "reliable-host-bier", "reliable-unicast"
    assert row("feedback") == {e2e: "e2e", agg: "aggregated", old: "e2e"}
    assert row("ACKs at the sources per DATA packet") == {e2e: "7.000", agg: "1.000", old: "–"}
    # A run recorded before the link-fault programs counted feedback has no link counts.
    assert row("feedback packets on the links") == {e2e: "1203", agg: "300", old: "–"}
    assert row("most feedback on one link end") == {e2e: "leaf1:eth3: 700", agg: "spine1:eth1: 200", old: "–"}
    assert row("bytes the fabric dropped") == {e2e: fmt_bytes(2000), agg: fmt_bytes(2500), old: "–"}
    assert row("retransmitted ÷ dropped") == {e2e: "4.00x", agg: "1.20x", old: "–"}
    assert row("receivers declared failed") == {e2e: "0", agg: "1", old: "0"}


def test_feedback_per_link_end_busiest_first_and_the_section_in_the_report(tmp_path) -> None:
    (c,) = compare_runs(_runs())
    table = feedback_links_table(c)
    assert table is not None
    assert [r[0] for r in table.rows] == ["leaf1:eth3", "spine1:eth1"]  # no feedback at h1:eth1: left out
    first = dict(zip(table.header[1:], table.rows[0][1:], strict=True))
    assert first == {"reliable-host-bier-e2e": "700", "reliable-host-bier": "100", "reliable-unicast": "0"}
    blocks = build_blocks(_runs(), fx.topology(), title="t")
    headings = [getattr(b, "text", None) for b in blocks]
    assert "Reliability" in headings and "Feedback packets per link end" in headings


def test_no_reliability_section_without_a_reliable_run(tmp_path) -> None:
    topo = fx.topology()
    (c,) = compare_runs([fx.run("unicast", topo), fx.run("host-bier", topo)])
    assert reliability_table(c) is None and feedback_links_table(c) is None


def _label(run: RunResult) -> str:
    return Conditions.of(run).label


def test_a_run_with_faults_says_so_in_its_conditions() -> None:
    topo = fx.topology()
    run = fx.run("reliable-host-bier", topo)
    plain = _label(run)
    faults = [
        {"fault": "15us link leaf1:eth1 down", "at_s": 15e-6, "started_s": 0.301, "done_s": 0.4, "lines": [],
         "error": None},
        {"fault": "30us restart spine2", "at_s": 30e-6, "started_s": 0.6, "done_s": 1.3, "lines": [],
         "error": None},
    ]  # fmt: skip
    meta = run.meta.model_copy(update={"settings": {**run.meta.settings, "faults": faults}})
    label = _label(run.model_copy(update={"meta": meta}))
    # Unshaped: the trace's clock is the wall clock, labelled.
    want = "link leaf1:eth1 down at 15.0 µs (wall), restart spine2 at 30.0 µs (wall)"
    assert label == f"{plain}; faults: {want}"
    shaped = run.model_copy(update={"meta": meta, "timing": fx.faithful(20000)})
    assert _label(shaped) == (
        "shaped, conditions not recorded; faults: link leaf1:eth1 down at 15.0 µs fabric, "
        "restart spine2 at 30.0 µs fabric"
    )
