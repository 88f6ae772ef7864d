"""The report's membership table: igmp and proxy side by side with net-bier (docs/results-format.md)."""

from __future__ import annotations

from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.sections.memberships import membership_table
from tests.unit.orchestrator.experiment import results_fixtures as fx

IGMP_COUNTERS = {
    "leaf1": {
        "igmp.rx": 6,
        "igmp.rx-bytes": 240,
        "igmp.bier-reports-out": 3,
        "igmp.bier-report-bytes-out": 120,
    },
    "leaf2": {"igmp.shell.queries-sent": 1, "igmp.shell.query-bytes-sent": 36},
}
PROXY_COUNTERS = {
    "leaf1": {"igmp.rx": 2, "igmp.rx-bytes": 112, "igmp.proxy-reports": 2},
    "h1": {"replay.proxy-reports-sent": 2, "replay.proxy-report-bytes-sent": 112},
}


def _with(run: RunResult, settings: dict, agents: dict) -> RunResult:
    meta = run.meta.model_copy(update={"settings": {**run.meta.settings, **settings}})
    return run.model_copy(update={"meta": meta, "agents": agents})


def _membership(changes: int, p50: float, wrong: int = 0) -> dict:
    return {
        "changes": changes,
        "latency_samples": changes,
        "latency_p50_s": p50,
        "latency_p99_s": 2 * p50,
        "latency_max_s": 3 * p50,
        "wrong": wrong,
        "missed": 0,
        "time": "fabric",
    }


def test_membership_modes_side_by_side_with_counted_control_against_data() -> None:
    topo = fx.topology()
    runs = [
        fx.run("net-bier", topo),
        _with(fx.run("igmp", topo), {"lead_s": 0.05, "membership": _membership(6, 0.004)}, IGMP_COUNTERS),
        _with(
            fx.run("proxy", topo), {"lead_s": 0.0, "membership": _membership(2, 0.0001, 1)}, PROXY_COUNTERS
        ),
    ]
    (c,) = compare_runs(runs)
    table = membership_table(c)
    assert table is not None
    assert table.header == ["memberships", "net-bier", "igmp", "proxy"]
    rows = {r[0]: r[1:] for r in table.rows}
    assert rows["receiver-set changes"] == ["–", "6", "2"]
    assert rows["lead (wall)"] == ["–", "50.00 ms", "0 s"]
    # Recorded in fabric time (the runs' "time"): shown with their unit and no label.
    assert rows["membership latency p50"] == ["–", "4.00 ms", "100.0 µs"]
    assert rows["membership latency max"] == ["–", "12.00 ms", "300.0 µs"]
    assert rows["wrong deliveries"] == ["–", "0", "1"]
    assert rows["igmp from hosts (packets / bytes)"][1:] == ["6 / 240 B", "2 / 112 B"]
    assert rows["overlay reports (packets / bytes)"] == ["0", "3 / 120 B", "0"]
    assert rows["proxy reports (packets / bytes)"] == ["0", "0", "2"]
    # igmp: hosts' IGMP + queries + overlay; proxy: its reports are in the hosts' IGMP, counted once
    assert rows["control bytes"][1:] == ["396 B", "112 B"]
    data = [col.metrics.source_egress_bytes for col in c.columns]
    assert data[1] > 0
    assert rows["control ÷ data"][1] == f"{396 / data[1] * 100:.1f}%"


def test_no_membership_table_without_a_membership_mode() -> None:
    topo = fx.topology()
    (c,) = compare_runs([fx.run("net-bier", topo), fx.run("unicast", topo)])
    assert membership_table(c) is None


def test_control_plane_rows_say_whose_time_the_latency_is() -> None:
    """Not modelled: our Python's. Modelled with nothing late in a faithful run: a router's. Modelled
    with a late message: not a router's, and the count is named."""
    topo = fx.topology()
    # 4 ms of wall time queued over 4 messages: 1 ms each, 50 ns of fabric time at 1:20000.
    modelled = {
        "leaf1": {"igmp.control.served": 4, "igmp.control.wait-ns": 4_000_000, "igmp.control.late": 0}
    }
    late = {"leaf1": {"igmp.control.served": 4, "igmp.control.late": 3}}
    timing = fx.faithful()
    modelled_settings = {"membership": _membership(2, 0.001), "control_cost_s": 1e-6}
    late_settings = {
        "membership": _membership(6, 0.004),
        "control_cost_s": 1e-6,
        "control_cost_record_s": 2e-7,
    }
    runs = [
        _with(fx.run("igmp", topo, timing), {"membership": _membership(6, 0.004)}, IGMP_COUNTERS),
        _with(fx.run("proxy", topo, timing), modelled_settings, modelled),
        _with(fx.run("igmp", topo, timing), late_settings, late),
    ]
    (c,) = compare_runs(runs)
    table = membership_table(c)
    assert table is not None
    rows = {r[0]: r[1:] for r in table.rows}
    # Columns by the runs' own settings (the comparison orders them its way).
    cols = [col for col in c.columns if col.run.meta.mode in ("igmp", "proxy")]
    index = {
        ("modelled" if col.run.agents is modelled else "late" if col.run.agents is late else "plain"): i
        for i, col in enumerate(cols)
    }
    assert timing.scale == 20000
    assert rows["control plane per message"][index["plain"]] == "not modelled"
    assert rows["control plane per message"][index["modelled"]] == "1.000 µs fabric"
    assert rows["control plane per message"][index["late"]] == "1.000 µs fabric + 0.200 µs per group record"
    served = rows["control messages served"][index["modelled"]]
    assert served == "4, 0 late, 50.0 ns mean queueing"
    verdicts = rows["membership latency is"]
    assert verdicts[index["plain"]].startswith("not a router's: control plane not modelled")
    assert verdicts[index["modelled"]] == "a router's (faithful)"
    assert "3 control messages applied late" in verdicts[index["late"]]


def test_an_unshaped_run_shows_its_membership_times_as_wall() -> None:
    """No fabric time without a time scale: the latencies and the queueing are labelled (wall)."""
    topo = fx.topology()
    wall_membership = {**_membership(2, 0.004), "time": "wall"}
    modelled = {"leaf1": {"igmp.control.served": 2, "igmp.control.wait-ns": 2_000_000}}
    settings = {"membership": wall_membership, "control_cost_s": 1e-6}
    (c,) = compare_runs([_with(fx.run("igmp", topo), settings, modelled)])
    table = membership_table(c)
    assert table is not None
    assert table.row("membership latency p50") == ["4.00 ms (wall)"]
    assert table.row("membership latency max") == ["12.00 ms (wall)"]
    assert table.row("control messages served") == ["2, 0 late, 1.00 ms (wall) mean queueing"]
