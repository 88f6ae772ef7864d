"""INA on Figure 1 of the draft (labs/ina-fig1): both jobs at once, exact int32 sums on every worker,
results delivered by BIER from the VAT roots; still exact with 2% loss injected on a link; and the
ring and parameter-server baselines give the same exact results. Float jobs alongside: fixed32 sums on
Figure 1's own VAT (job 3) and native float32 sums on job 2's (job 4), identical on every worker and
within the stated tolerance of numpy's sum."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aidcnet.ina.worker import job_fixed_point_scale
from orchestrator.experiment.modes.collective import run_allreduce, run_concurrent
from orchestrator.experiment.session import LabSession

from .conftest import DATAPLANES, ROOT, agent, aidclab, deployed, on_dataplane

LAB = "t-ina-fig1"
# 3 chunks of 2048 elements and a short last one per worker; ragged on purpose.
ELEMENTS = 3 * 2048 + 517


def float_jobs(lab_vars: dict) -> dict:
    """labs/ina-fig1.vars.yml plus two float tenants on the same trees (test-only; the committed vars
    stay Figure 1 as drawn): job 3 = job 1's VAT in fixed32, job 4 = job 2's VAT in native float32."""
    job1, job2 = (next(j for j in lab_vars["ina"]["jobs"] if j["job"] == n) for n in (1, 2))
    lab_vars["ina"]["jobs"] += [dict(job1, job=3, dtype="fixed32"), dict(job2, job=4, dtype="float32")]
    return lab_vars


LAB_VARS = float_jobs(yaml.safe_load((ROOT / "labs" / "ina-fig1.vars.yml").read_text()))


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ina")
    with deployed(runtime, tmp, "ina-fig1", LAB, LAB_VARS, configured=True) as topo:
        session = LabSession.open(topo, runtime)
        yield topo, session.plan, session


@pytest.fixture(scope="module", params=DATAPLANES)
def bier_lab(runtime, lab, request):
    """The lab on each BIER dataplane in turn, for the tests whose results travel by BIER (the INA
    roots' dissemination); the ring and PS baselines are unicast and run once."""
    on_dataplane(runtime, lab[0], LAB_VARS, request.param)
    return lab


def counters(runtime, topo, node: str) -> dict[str, int]:
    return agent(runtime, topo, node).counters()


def test_figure1_both_jobs_concurrently_exact_by_bier(runtime, bier_lab):
    topo, plan, session = bier_lab
    before = {n: counters(runtime, topo, n) for n in ("s1", "s5", "s6", "s7", "w1", "w5")}
    runs = run_concurrent(session, [1, 2], "ina", ELEMENTS)
    for run in runs:
        assert run.ok, f"job {run.job}: wrong result on {run.wrong}: {run.replies}"
        assert sorted(r["bfr_id"] for r in run.replies.values()) == sorted(
            plan.nodes[w].bfr_id for w in next(j for j in plan.ina if j.job == run.job).workers
        )
    after = {n: counters(runtime, topo, n) for n in before}

    def delta(node: str, key: str) -> int:
        return after[node].get(key, 0) - before[node].get(key, 0)

    chunks = 4
    # Figure 1: s1 sums w1+w2 and sends up; s7 sums w3+w4 and passes s1's sums on (AND test fails);
    # s6 completes and multicasts by BIER; s5 is only a transit hop of job 1 and the root of job 2.
    assert delta("s1", "ina.completed") >= chunks
    assert delta("s7", "ina.completed") >= chunks and delta("s7", "ina.forwarded") >= chunks
    assert delta("s6", "ina.completed") >= chunks and delta("s6", "ina.disseminated") >= chunks
    assert delta("s5", "ina.transit") >= 3 * chunks and delta("s5", "ina.completed") >= chunks
    assert delta("s6", "bier.imposed") >= chunks
    # Results reached the workers inside BIER packets, not as plain UDP.
    for w in ("w1", "w5"):
        assert delta(w, "ina.rx.bier.packets") >= chunks and delta(w, "ina.rx.udp.packets") == 0
        assert delta(w, "bier.delivered") >= chunks


def injected_on(topo, ends: tuple[str, ...]) -> int:
    """Packets the link-fault program dropped at these ends, read from the host (orchestrator.lab.shaping)."""
    from orchestrator.lab.shaping import node_netns, read_link_fault

    total = 0
    for end in ends:
        node, iface = end.split(":")
        total += read_link_fault(node_netns(topo.container_name(node)), iface)[1].lost_packets
    return total


def test_figure1_exact_with_two_percent_loss_on_a_link(runtime, bier_lab):
    topo, _plan, session = bier_lab
    # s5:eth1 -- s7:eth1 carries every INA packet of job 1 from s1 and s2 (s5 -> s7), and job 1's BIER
    # results toward w1..w4 and job 2's partial sums toward its root s5 (s7 -> s5). The fault sits on
    # the link, both directions, so everything crossing it meets it, whatever sent it.
    ends = ("s5:eth1", "s7:eth1")
    before = injected_on(topo, ends)
    # Through the user's command, from the directory the lab was deployed in.
    out = aidclab("link", "set", "--lab", LAB, "s5:eth1", "loss", "0.02").stdout
    assert out.count("2.00% independent loss") == 2, out
    try:
        # 300 small chunks: some 1200 packets cross the two lossy egresses, so P(no loss) ~ 3e-11.
        run = run_allreduce(session, 1, "ina", 300 * 256, seed=5, timeout_s=0.1, chunk_elements=256)
    finally:
        aidclab("link", "set", "--lab", LAB, "s5:eth1", "loss", "0")
    fabric = json.loads((Path.cwd() / topo.lab_dir_name / "fabric.json").read_text())
    assert not (set(fabric["faults"]) & set(ends))
    assert run.ok, f"wrong result on {run.wrong}"
    injected = injected_on(topo, ends) - before
    assert injected > 0 and run.retransmits > 0, (injected, run.retransmits)


@pytest.mark.parametrize("mode", ["ring", "ps"])
def test_baselines_give_the_same_exact_result(runtime, lab, mode):
    _topo, _plan, session = lab
    run = run_allreduce(session, 1, mode, ELEMENTS, seed=9)
    assert run.ok, f"{mode}: wrong result on {run.wrong}"


def test_float_jobs_next_to_the_int32_job_identical_and_within_tolerance(runtime, bier_lab):
    """Job 1 (int32), job 3 (fixed32 on the same switches s1, s7, s6) and job 4 (float32 on s3, s4, s5)
    at once: int32 and fixed32 bit-exact against numpy's reduction (fixed32 in int32 on the scaled
    values), float32 identical on every worker; both float jobs within tolerance of numpy's sum."""
    topo, _plan, session = bier_lab
    before = {n: counters(runtime, topo, n) for n in ("s1", "s6", "s5")}
    runs = {run.job: run for run in run_concurrent(session, [1, 3, 4], "ina", ELEMENTS)}
    for run in runs.values():
        assert run.ok, f"job {run.job} ({run.dtype}): {run.verdict}"
        assert len(run.replies) == 4 and {r["digest"] for r in run.replies.values()} == {run.expected}
    assert (runs[3].dtype, runs[4].dtype) == ("fixed32", "float32")
    assert 0 < runs[3].max_error < 1e-6 and 0 <= runs[4].max_error < 1e-5
    assert {r["scale"] for r in runs[3].replies.values()} == {job_fixed_point_scale(4)}
    after = {n: counters(runtime, topo, n) for n in before}
    # Every job's 4 chunks were summed on the switches: jobs 1 and 3 at s1 and at their root s6, job 4
    # at its root s5.
    assert after["s6"]["ina.disseminated"] - before["s6"].get("ina.disseminated", 0) >= 8
    assert after["s1"]["ina.completed"] - before["s1"].get("ina.completed", 0) >= 8
    assert after["s5"]["ina.completed"] - before["s5"].get("ina.completed", 0) >= 4
    for node in before:
        assert not {k for k in after[node] if k.startswith("ina.dropped.") and "mismatch" in k}


@pytest.mark.parametrize("mode", ["ring", "ps"])
@pytest.mark.parametrize("job", [3, 4])
def test_baselines_run_the_float_jobs(runtime, lab, mode, job):
    """The baselines add fixed32 in int32 too (job 3: the very bits INA gives, same Scale, same wrap) and
    float32 in float32 (job 4: one result for all, within tolerance)."""
    _topo, _plan, session = lab
    run = run_allreduce(session, job, mode, ELEMENTS, seed=9)
    assert run.ok, f"{mode}: {run.verdict}"
    assert len({r["digest"] for r in run.replies.values()}) == 1


def test_vat_is_configured_as_drawn(runtime, lab):
    topo, _plan, _pids = lab
    jobs = {n: agent(runtime, topo, n).ina()["switch"]["jobs"] for n in ("s1", "s6", "s7")}
    # Job 1 as drawn; job 3 (the test's fixed32 tenant, float_jobs) is the same tree in fixed32.
    assert [(j["job"], j["abm"], j["root"], j["parent"], j["dtype"]) for j in jobs["s1"]] == [
        (1, [1, 2], False, "s6", "int32"), (3, [1, 2], False, "s6", "fixed32"),
    ]  # fmt: skip
    assert [(j["job"], j["abm"], j["root"], j["parent"], j["dtype"]) for j in jobs["s7"]] == [
        (1, [3, 4], False, "s6", "int32"), (3, [3, 4], False, "s6", "fixed32"),
    ]  # fmt: skip
    assert [(j["job"], j["abm"], j["root"], j["dtype"]) for j in jobs["s6"]] == [
        (1, [1, 2, 3, 4], True, "int32"), (3, [1, 2, 3, 4], True, "fixed32"),
    ]  # fmt: skip
    assert Path(topo.path).exists()


def test_replay_of_an_allreduce_trace_runs_both_jobs_exactly(runtime, bier_lab, tmp_path):
    from orchestrator.workloads.trace import TraceHeader, TraceOp, TraceWriter

    topo, _plan, _pids = bier_lab
    trace = tmp_path / "ar.jsonl"
    hosts = [f"w{i}" for i in range(1, 9)]
    header = TraceHeader(format="aidclab-trace", version=1, generator="test", hosts=hosts)
    with TraceWriter(trace, header) as w:
        w.write(TraceOp(t=0.0, op="allreduce", src="w1", dst=["w2", "w3", "w4"], bytes=20000, id=0))
        w.write(TraceOp(t=0.0, op="allreduce", src="w5", dst=["w6", "w7", "w8"], bytes=20000, id=1))
        w.write(TraceOp(t=0.1, op="allreduce", src="w4", dst=["w3", "w2", "w1"], bytes=4, id=2))
    out = aidclab("replay", str(topo.path), str(trace), "--mode", "ina", "--results-dir", str(tmp_path))
    assert out.stdout.count("exact on every worker") == 3, out.stdout
    (ina_run,) = [p.parent for p in tmp_path.glob("*/allreduce.json")]
    doc = json.loads((ina_run / "allreduce.json").read_text())
    assert [(r["id"], r["job"], r["exact"]) for r in doc["ops"]] == [(0, 1, True), (1, 2, True), (2, 1, True)]
    run = json.loads((ina_run / "run.json").read_text())
    assert run["meta"]["mode"] == "ina"
    assert all(set(m["delivered"]) == set(m["expected"]) for m in run["messages"])
    # The same trace under the parameter server, then one report comparing both (ps is the baseline).
    out = aidclab("replay", str(topo.path), str(trace), "--mode", "ps", "--results-dir", str(tmp_path))
    assert out.stdout.count("exact on every worker") == 3, out.stdout
    runs = sorted(p.parent.name for p in tmp_path.glob("*/allreduce.json"))
    report = aidclab("report", *runs, "--results-dir", str(tmp_path), "-o", str(tmp_path / "report"))
    text = (tmp_path / "report" / "report.md").read_text()
    assert "ina" in text and "ps" in text, report.stdout
    # A trace naming workers no job has is refused with the fix.
    bad = tmp_path / "bad.jsonl"
    with TraceWriter(bad, header) as w:
        w.write(TraceOp(t=0.0, op="allreduce", src="w1", dst=["w5"], bytes=8, id=0))
    proc = aidclab("replay", str(topo.path), str(bad), "--mode", "ring", check=False)
    assert proc.returncode != 0 and "ina.jobs" in proc.stdout + proc.stderr
