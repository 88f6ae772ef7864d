"""Seed 001's requirement table scored from runs (docs/requirements.md): every cell from the run it names,
clean runs for the figures of a run as it should go, the lossiest for reliability, a link-fault run for
the failure domain."""

from __future__ import annotations

from orchestrator.experiment.metrics import compare_runs, metrics_of
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.document import groups_of
from orchestrator.experiment.report.sections.requirements import Requirements
from orchestrator.experiment.requirements import NOT_MEASURED, ROWS, TECHNOLOGY, requirement_columns
from tests.unit.orchestrator.experiment import results_fixtures as fx

INTERACTIVITY, RELIABILITY, DYNAMICS, SPARSENESS, SIMPLICITY, FAILURE = range(6)


def _with(run: RunResult, run_id: str, settings: dict | None = None, agents: dict | None = None) -> RunResult:
    meta = run.meta.model_copy(
        update={"run_id": run_id, "settings": {**run.meta.settings, **(settings or {})}}
    )
    return run.model_copy(update={"meta": meta, "agents": run.agents if agents is None else agents})


def _lose(run: RunResult, receiver: str, ops: set[int]) -> RunResult:
    """``receiver`` misses the messages ``ops``."""
    messages = [
        m.model_copy(update={"delivered": [r for r in m.delivered if not (r == receiver and m.id in ops)]})
        for m in run.messages
    ]
    return run.model_copy(update={"messages": messages, "metrics": None})


def _columns(runs: list[RunResult]) -> dict[str, tuple[str, ...]]:
    return {col.mode.value: col.cells for col in requirement_columns(runs)}


def test_a_column_per_message_mode_in_the_modes_order() -> None:
    topo = fx.topology()
    runs = [fx.run("igmp", topo), fx.run("unicast", topo), fx.run("host-bier", topo), fx.run("ina", topo)]
    columns = requirement_columns(runs)
    assert [c.mode.value for c in columns] == ["unicast", "host-bier", "igmp"]  # ina is a collective
    assert [c.name for c in columns] == [TECHNOLOGY[c.mode] for c in columns]
    assert all(len(c.cells) == len(ROWS) for c in columns)


def test_sparseness_is_fabric_bytes_per_payload_byte_delivered() -> None:
    topo = fx.topology()
    unicast, bier = fx.run("unicast", topo), fx.run("host-bier", topo)
    cells = _columns([unicast, bier])
    for name, run in (("unicast", unicast), ("host-bier", bier)):
        m = metrics_of(run)
        assert cells[name][SPARSENESS] == f"{m.total_fabric_bytes / m.payload_delivered_bytes:.2f}"
    # The fixture's unicast carries 12 copies on the fabric against BIER's 8 for the same deliveries.
    assert float(cells["unicast"][SPARSENESS]) > float(cells["host-bier"][SPARSENESS])


def test_interactivity_counts_every_feedback_kind_at_the_source_per_data_packet() -> None:
    topo = fx.topology()
    sources = {"sender.sent": 100, "source.rx.agg-ack.packets": 40, "source.rx.nack.packets": 3}
    reliable = _with(fx.run("reliable-host-bier", topo), "r1", {"reliable": {"sources": sources}})
    cells = _columns([reliable, fx.run("host-bier", topo)])
    assert cells["reliable-host-bier"][INTERACTIVITY] == "0.430 (hop feedback, 100 DATA packets)"
    assert cells["host-bier"][INTERACTIVITY].startswith("none: best effort")


def test_reliability_comes_from_the_lossiest_run_and_failure_from_a_link_fault_run() -> None:
    topo = fx.topology()
    clean = _with(fx.run("host-bier", topo), "a-clean")
    lossy = _with(
        fx.run("host-bier", topo), "b-lossy", {"conditions": {"scale": 20000, "loss": {"spine1:eth2": 0.01}}}
    )
    lossier = _with(
        _lose(fx.run("host-bier", topo), "h3", {0}),
        "c-lossier",
        {"conditions": {"scale": 20000, "loss": {"spine1:eth2": 0.05}}},
    )
    fault = {"fault": "10us link leaf2:eth1 down", "at_s": 1e-5, "started_s": 0.0005, "done_s": 0.0006}
    faulted = _with(
        _lose(fx.run("host-bier", topo, fx.faithful(1000)), "h3", {1, 2}),
        "d-fault",
        {"conditions": {"scale": 1000}, "faults": [fault]},
    )
    (column,) = requirement_columns([clean, lossy, lossier, faulted])
    assert column.runs == ("a-clean", "c-lossier", "d-fault")
    expected = fx.OPS * len(fx.RECEIVERS)
    assert (
        column.cells[RELIABILITY]
        == f"{(expected - 1) / expected:.2%} of {expected} at 5.00% loss per link end"
    )
    # h3 missed ops 1 and 2: two of the 12 (message, receiver) pairs, one receiver of the three; from its
    # op 0's arrival to its op 3's, it had none of h1's (the fixture's messages, at 1:1000)
    assert column.cells[FAILURE] == (
        "2 of 12 deliveries missed, by 1 of 3 receivers (10us link leaf2:eth1 down); "
        "longest without: h3, 3.0 µs of h1's"
    )
    assert _columns([clean])["host-bier"][FAILURE] == "no run with a link fault"
    assert _columns([clean])["host-bier"][RELIABILITY] == "100.00% of 12 with no loss (no run under loss)"


def test_dynamics_is_the_membership_latency_or_why_none_is_needed() -> None:
    topo = fx.topology()
    membership = {"latency_p99_s": 4e-6, "latency_samples": 7, "time": "fabric"}
    igmp = _with(fx.run("igmp", topo, fx.faithful()), "i", {"membership": membership})
    cells = _columns([igmp, fx.run("net-bier", topo), fx.run("unicast", topo)])
    assert cells["igmp"][DYNAMICS] == "4.0 µs fabric over 7 new receivers"
    assert cells["net-bier"][DYNAMICS] == "none: groups configured before the run"
    assert cells["unicast"][DYNAMICS].startswith("no signalling")
    unfaithful = _with(
        fx.run("igmp", topo, fx.TimingRecord(scale=20000, faithful=False)), "j", {"membership": membership}
    )
    assert _columns([unfaithful])["igmp"][DYNAMICS].endswith("(run not faithful) over 7 new receivers")


def test_simplicity_counts_the_control_traffic_on_the_wire() -> None:
    topo = fx.topology()
    agents = {
        "leaf1": {"igmp.rx": 6, "igmp.rx-bytes": 240},
        "leaf2": {"igmp.shell.queries-sent": 1, "igmp.shell.query-bytes-sent": 36},
    }
    igmp = _with(fx.run("igmp", topo), "i", agents=agents)
    assert _columns([igmp])["igmp"][SIMPLICITY] == "7 packets, 276 B"


def test_the_report_shows_the_table_once_per_trace_in_its_cleanest_group() -> None:
    topo = fx.topology()
    clean = [fx.run("unicast", topo), fx.run("host-bier", topo)]
    lossy = _with(
        fx.run("host-bier", topo), "z-lossy", {"conditions": {"scale": 20000, "loss": {"spine1:eth2": 0.01}}}
    )
    groups = groups_of([*clean, lossy], topo)
    assert len(groups) == 2
    shown = [Requirements().blocks(g) for g in groups]
    clean_group = next(i for i, g in enumerate(groups) if not g.comparison.conditions.loss)
    assert shown[1 - clean_group] == []
    blocks = shown[clean_group]
    table = blocks[1]
    assert table.header == ["requirement", TECHNOLOGY[clean[0].meta.mode], TECHNOLOGY[clean[1].meta.mode]]  # type: ignore[union-attr]
    # the lossy run, in the other group, still scores host-BIER's reliability
    assert table.row(ROWS[RELIABILITY])[1].endswith("at 1.00% loss per link end")  # type: ignore[union-attr]
    assert len(blocks[3].items) == len(NOT_MEASURED)  # type: ignore[union-attr]


def test_no_table_for_a_collective_trace() -> None:
    topo = fx.topology()
    (c,) = compare_runs([fx.run("ina", topo, trace=fx.trace_info(ops_by_kind={"allreduce": fx.OPS}))])
    assert Requirements().blocks(groups_of([c.columns[0].run], topo)[0]) == []
