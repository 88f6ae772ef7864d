"""orchestrator.experiment.results: run models, run ids, save_run/load_run and their error messages."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.experiment import records, results
from orchestrator.experiment.metrics import compute_metrics, trace_fanout
from orchestrator.experiment.records import LinkCounters, MessageResult, ResultsError, RunMeta, RunResult
from orchestrator.experiment.results import (
    LINK_COLUMNS,
    MESSAGE_COLUMNS,
    git_commit,
    latest_experiment,
    load_run,
    new_meta,
    new_run_id,
    save_run,
    trace_info,
)
from orchestrator.workloads.trace import TraceHeader, TraceOp, write_trace
from tests.unit.orchestrator.experiment import results_fixtures as fx


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------- run ids


def test_run_id_shape_sorts_by_time_and_names_lab_and_mode() -> None:
    t = datetime(2025, 3, 14, 10, 15, 2, 123456, tzinfo=UTC)
    rid = new_run_id("leaf-spine", "net-bier", now=t)
    assert rid == "20250314T101502.123456Z-leaf-spine-net-bier"
    assert results.is_run_id(rid)
    later = [new_run_id("a", "unicast", now=t + timedelta(seconds=s)) for s in (1, 10, 100, 3600 * 30)]
    assert sorted(later) == later


def test_run_ids_are_unique_for_the_same_instant() -> None:
    t = datetime(2030, 1, 1, tzinfo=UTC)
    ids = [new_run_id("lab", "unicast", now=t) for _ in range(5)]
    assert len(set(ids)) == 5
    assert sorted(ids) == ids


def test_run_id_converts_to_utc_and_sanitises_names() -> None:
    t = datetime(2031, 6, 1, 12, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    rid = new_run_id("my lab/../x", "host bier", now=t)
    assert rid.startswith("20310601T100000.")
    assert "/" not in rid and " " not in rid
    assert rid.endswith("Z-my-lab-..-x-host-bier")


# ---------------------------------------------------------------------------------------------- models


def test_meta_requires_timezone_and_order() -> None:
    good = fx.meta("unicast").model_dump()
    naive = {**good, "started": datetime(2025, 1, 1)}
    with pytest.raises(ValidationError, match="timezone"):
        RunMeta.model_validate(naive)
    backwards = {**good, "finished": good["started"] - timedelta(seconds=1)}
    with pytest.raises(ValidationError, match="before started"):
        RunMeta.model_validate(backwards)
    local = {**good, "started": datetime(2025, 3, 14, 12, 15, 2, tzinfo=timezone(timedelta(hours=2)))}
    assert RunMeta.model_validate(local).started.tzinfo == UTC


def test_meta_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="modee"):
        RunMeta.model_validate({**fx.meta("unicast").model_dump(), "modee": "x"})


def test_link_counters_id_and_endpoints() -> None:
    lc = LinkCounters(
        link="h1:eth1<->leaf1:eth3", a_to_b_bytes=5, a_to_b_packets=1, b_to_a_bytes=7, b_to_a_packets=2
    )
    assert (lc.a, lc.b, lc.a_node, lc.b_node) == ("h1:eth1", "leaf1:eth3", "h1", "leaf1")
    assert (lc.total_bytes, lc.total_packets) == (12, 3)
    for bad in ("h1:eth1-leaf1:eth3", "h1<->leaf1:eth3", "h1:eth1<->"):
        with pytest.raises(ValidationError, match="not a link id"):
            LinkCounters(link=bad, a_to_b_bytes=0, a_to_b_packets=0, b_to_a_bytes=0, b_to_a_packets=0)
    with pytest.raises(ValidationError):
        LinkCounters(link="a:e1<->b:e1", a_to_b_bytes=-1, a_to_b_packets=0, b_to_a_bytes=0, b_to_a_packets=0)


def test_message_result_checks_consistency() -> None:
    m = MessageResult(
        id=1,
        src="h1",
        expected=["h2", "h3"],
        delivered=["h3", "h9"],
        bytes=10,
        sent_at=0.5,
        latency={"h3": 0.1, "h9": 0.2},
        duplicates={"h3": 2},
    )
    assert m.missing == ["h2"]
    assert m.wrong == ["h9"]
    with pytest.raises(ValidationError, match="not in 'delivered'"):
        MessageResult(id=1, src="h1", expected=["h2"], bytes=1, sent_at=0, latency={"h2": 0.1})
    with pytest.raises(ValidationError, match="listed twice"):
        MessageResult(id=1, src="h1", expected=["h2"], delivered=["h2", "h2"], bytes=1, sent_at=0)
    with pytest.raises(ValidationError, match="finite number"):
        MessageResult(
            id=1, src="h1", expected=["h2"], delivered=["h2"], bytes=1, sent_at=0, latency={"h2": -1}
        )
    with pytest.raises(ValidationError):
        MessageResult(id=1, src="h1", expected=[], bytes=1, sent_at=0)


# ---------------------------------------------------------------------------------------------- save / load


def test_save_load_round_trip(tmp_path: Path) -> None:
    run = fx.run("unicast")
    assert run.metrics is None
    path = save_run(run, tmp_path)
    assert path == tmp_path / run.run_id
    assert sorted(p.name for p in path.iterdir()) == [
        "agents.csv",
        "links.csv",
        "messages.csv",
        "run.json",
        "summary.json",
    ]
    loaded = load_run(run.run_id, tmp_path)
    assert loaded.metrics == compute_metrics(run)
    assert loaded.model_copy(update={"metrics": None}) == run
    # Every way of naming the run gives the same record.
    for spec in (path, path / "run.json", "latest", str(path)):
        assert load_run(spec, tmp_path) == loaded
    assert not list(tmp_path.glob(".*"))


def test_saved_files_content(tmp_path: Path) -> None:
    run = fx.run("net-bier")
    path = save_run(run, tmp_path)
    doc = json.loads((path / "run.json").read_text())
    assert doc["format_version"] == records.FORMAT_VERSION
    assert doc["meta"]["started"].startswith("2025-03-14T10:15:02.123456")
    summary = json.loads((path / "summary.json").read_text())
    assert summary["mode"] == "net-bier" and summary["lab"] == "leaf-spine"
    assert summary["metrics"]["source_egress_bytes"] == fx.OPS * fx.PAYLOAD

    links = read_csv(path / "links.csv")
    assert tuple(links[0]) == LINK_COLUMNS
    assert [r["link"] for r in links] == [lc.link for lc in run.links]
    h1 = next(r for r in links if r["a"] == "h1:eth1")
    assert int(h1["a_to_b_bytes"]) == fx.OPS * fx.PAYLOAD
    assert int(h1["total_bytes"]) == int(h1["a_to_b_bytes"]) + int(h1["b_to_a_bytes"])

    msgs = read_csv(path / "messages.csv")
    assert tuple(msgs[0]) == MESSAGE_COLUMNS
    assert len(msgs) == fx.OPS * len(fx.RECEIVERS)
    first = msgs[0]
    assert (first["id"], first["receiver"], first["expected"], first["delivered"]) == ("0", "h3", "1", "1")
    assert float(first["latency_s"]) == run.messages[0].latency["h3"]

    agents = read_csv(path / "agents.csv")
    assert {(r["node"], r["counter"], r["delta"]) for r in agents} == {
        ("leaf1", "bier.rx", str(fx.OPS)),
        ("leaf1", "bier.tx", "1"),
        ("spine1", "bier.rx", str(fx.OPS)),
    }


def test_messages_csv_lists_missing_and_wrong_receivers(tmp_path: Path) -> None:
    run = fx.run("unicast")
    odd = MessageResult(
        id=99,
        src="h1",
        expected=["h2", "h3"],
        delivered=["h3", "h8"],
        bytes=5,
        sent_at=1.0,
        latency={"h3": 0.25},
        duplicates={"h3": 1},
    )
    path = save_run(run.model_copy(update={"messages": [odd]}), tmp_path)
    rows = [
        (r["receiver"], r["expected"], r["delivered"], r["latency_s"], r["duplicates"])
        for r in read_csv(path / "messages.csv")
    ]
    assert rows == [("h2", "1", "0", "", "0"), ("h3", "1", "1", "0.25", "1"), ("h8", "0", "1", "", "0")]


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    run = fx.run("unicast")
    save_run(run, tmp_path)
    with pytest.raises(
        ResultsError, match=re.escape(str(tmp_path / run.run_id)) + ".*already exists.*new_run_id"
    ):
        save_run(run, tmp_path)


def test_failed_save_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_result: RunResult) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(results, "links_csv", boom)
    with pytest.raises(OSError, match="disk full"):
        save_run(fx.run("unicast"), tmp_path)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- errors


def test_unknown_run_names_paths_and_known_runs(tmp_path: Path) -> None:
    save_run(fx.run("unicast"), tmp_path)
    with pytest.raises(ResultsError) as e:
        load_run("nope", tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "nope") in msg
    assert fx.run("unicast").run_id in msg
    assert "'latest'" in msg


def test_latest_with_no_runs(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"no runs yet.*aidclab replay"):
        load_run("latest", tmp_path / "empty")


def test_directory_without_run_json(tmp_path: Path) -> None:
    (tmp_path / "junk").mkdir()
    with pytest.raises(ResultsError, match=r"junk: not a run directory \(no run.json\)"):
        load_run("junk", tmp_path)


def test_damaged_json(tmp_path: Path) -> None:
    path = save_run(fx.run("unicast"), tmp_path) / "run.json"
    path.write_text(path.read_text()[:50])
    with pytest.raises(ResultsError, match=re.escape(str(path)) + r": not valid JSON .*line \d+.*rerun"):
        load_run(path)


def test_newer_format_version(tmp_path: Path) -> None:
    path = save_run(fx.run("unicast"), tmp_path) / "run.json"
    doc = json.loads(path.read_text())
    doc["format_version"] = records.FORMAT_VERSION + 1
    path.write_text(json.dumps(doc))
    with pytest.raises(
        ResultsError, match=r"version 3 is not supported.*reads version\(s\) 1, 2 \(upgrade aidclab\)"
    ):
        load_run(path)


def test_invalid_field_is_named(tmp_path: Path) -> None:
    path = save_run(fx.run("unicast"), tmp_path) / "run.json"
    doc = json.loads(path.read_text())
    del doc["meta"]["mode"]
    doc["links"][2]["a_to_b_bytes"] = -5
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError) as e:
        load_run(path)
    msg = str(e.value)
    assert "2 problem(s)" in msg
    assert "field 'meta.mode'" in msg
    assert "field 'links[2].a_to_b_bytes'" in msg


# ---------------------------------------------------------------------------------------------- latest


def test_latest_experiment_takes_newest_of_each_mode_for_the_same_lab_and_trace(tmp_path: Path) -> None:
    t = datetime(2025, 5, 1, tzinfo=UTC)
    topo = fx.topology()

    def saved(mode: str, minutes: int, lab: str = "leaf-spine", trace: str = "ab" * 32) -> Path:
        rid = new_run_id(lab, mode, now=t + timedelta(minutes=minutes))
        run = fx.run(mode, topo, run_id=rid, lab=lab, trace=fx.trace_info(sha256=trace))
        return save_run(run, tmp_path) / "run.json"

    saved("unicast", 0)
    uni = saved("unicast", 1)
    saved("unicast", 2, lab="other")
    saved("net-bier", 3, trace="cd" * 32)
    host = saved("host-bier", 4)
    net = saved("net-bier", 5)
    assert latest_experiment(tmp_path) == [uni, host, net]


CLEAN = {"scale": 20000, "loss": {}, "down": [], "bandwidth_bps": {}}
LOSSY = {**CLEAN, "loss": {"s5:eth1": 0.02}}


def test_latest_keeps_the_newest_run_of_each_mode_under_each_conditions(tmp_path: Path) -> None:
    """The AllReduce quick start: clean ina and ps, then ina again after 'link set ... loss 0.02'. The lossy
    ina must not replace the clean one (and be compared with the clean ps)."""
    t = datetime(2025, 5, 1, tzinfo=UTC)
    topo = fx.topology()

    def saved(mode: str, minutes: int, conditions: dict) -> Path:
        rid = new_run_id("leaf-spine", mode, now=t + timedelta(minutes=minutes))
        run = fx.run(mode, topo, fx.faithful(), run_id=rid, settings={"conditions": conditions})
        return save_run(run, tmp_path) / "run.json"

    saved("ina", 0, CLEAN)
    ina = saved("ina", 1, CLEAN)
    ps = saved("ps", 2, CLEAN)
    saved("ina", 3, LOSSY)
    lossy_ina = saved("ina", 4, LOSSY)
    assert latest_experiment(tmp_path) == [ina, ps, lossy_ina]
    # The same answer from run.json alone (runs saved before summary.json kept the conditions).
    for path in tmp_path.glob("*/summary.json"):
        doc = json.loads(path.read_text())
        del doc["conditions"]
        path.write_text(json.dumps(doc))
    assert latest_experiment(tmp_path) == [ina, ps, lossy_ina]


# ---------------------------------------------------------------------------------------------- environment


def test_trace_info_summarises_and_hashes(tmp_path: Path) -> None:
    header = TraceHeader(format="aidclab-trace", version=1, generator="hand", params={"k": 1}, hosts=fx.HOSTS)
    ops = [
        TraceOp(t=0.0, op="multicast", src="h1", dst=["h2", "h3"], bytes=1000, id=0),
        TraceOp(t=0.1, op="multicast", src="h2", dst=["h1", "h3", "h4", "h5"], bytes=3000, id=1),
        TraceOp(t=0.2, op="unicast", src="h3", dst=["h4"], bytes=50000, id=2),
    ]
    path = tmp_path / "t.jsonl"
    write_trace(path, header, ops)
    info = trace_info(path)
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (info.ops, info.bytes, info.hosts, info.params) == (3, 54000, fx.HOSTS, {"k": 1})
    assert info.ops_by_kind == {"multicast": 2, "unicast": 1}
    assert info.fanout_weighted == pytest.approx(3.5)
    assert info.fanout_weighted == pytest.approx(trace_fanout(ops))


def test_new_meta_records_versions_and_machine(tmp_path: Path) -> None:
    started = datetime(2025, 1, 1, tzinfo=UTC)
    meta = new_meta(
        run_id="r",
        lab="leaf-spine",
        mode="unicast",
        trace=fx.trace_info(),
        started=started,
        finished=started + timedelta(seconds=1),
        topology_file=fx.LAB_FILE,
        settings={"rate": 1},
        repo=tmp_path,
    )
    assert meta.aidclab_version
    assert meta.machine.cpu_count and meta.machine.cpu_count >= 1
    assert meta.machine.kernel and meta.machine.python.startswith("3.")
    assert meta.topology_file == str(fx.LAB_FILE)
    assert meta.git_commit is None  # tmp_path is no repository


def test_git_commit_from_ref_and_packed_refs(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    assert git_commit(tmp_path) == "a" * 40
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text(f"# pack-refs\n{'b' * 40} refs/heads/main\n")
    assert git_commit(tmp_path) == "b" * 40
    (git / "HEAD").write_text("c" * 40 + "\n")
    assert git_commit(tmp_path) == "c" * 40
