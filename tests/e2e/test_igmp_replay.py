"""The MoE sample trace replayed on leaf-spine in the membership modes (issue 14, docs/igmp.md):

* ``igmp``: receivers join each op's (S,G) through their kernels when it is known and leave once they
  have it; the leaves learn the BitString from IGMP and the overlay to the BFIRs;
* ``proxy``: each source names a group's receivers to its first-hop router in a Receiver Proxy Report;

as the README runs them: its IGMP vars, each mode at its default lead (igmp's from the lab, proxy 0),
exact delivery (the command exits non-zero otherwise), no delivery outside a membership, membership
latency without the lead, counted control overhead per mode, side by side in a report; then proxy with the
BitString from the reports alone, and both modes with a modelled control plane, whose
messages our agents must serve in time. An unfaithful run fails the test with its verdict's reasons,
unless the busy machine was its only one (then it goes again, up to three times). Written for the lead
to run (it deploys a lab): a few minutes of lab time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.experiment.fidelity import machine_reason
from orchestrator.experiment.membership import control_overhead
from orchestrator.experiment.results import list_runs, load_run
from orchestrator.workloads.trace import TraceReader
from tests.e2e.conftest import ROOT, aidclab, deployed

LAB = "t-igmp-replay"
TRACE = ROOT / "workloads" / "moe-sample.jsonl"
# The README's IGMP vars.
LAB_VARS = {"igmp": {"enabled": True, "proxy_hosts": "all"}}


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("igmp-replay")
    with deployed(runtime, tmp, "leaf-spine", LAB, lab_vars=LAB_VARS, configured=True) as topo:
        yield topo, tmp / "results"


@pytest.fixture(scope="module")
def ops():
    with TraceReader(TRACE) as reader:
        return list(reader)


# Runs of a mode when the machine alone was the reason: the automatic scale does not yet count the
# membership agents' CPU (a burst of IGMP work can take the whole machine for a moment), and CI shares it.
BUSY_TRIES = 3


def _replay(topo_path: Path, mode: str, results: Path):
    """One run at the mode's default lead; the test fails with the verdict's reasons when it was not
    faithful. Only a verdict whose every reason is the machine's (``fidelity.machine_reason``: busy, or a
    link drained below its shaper, 8% for 0.23 s in a CI run) earns another run (``BUSY_TRIES`` in all):
    any other reason fails at once, and so does a machine busy every time (or a shaper that is wrong)."""
    for attempt in range(1, BUSY_TRIES + 1):
        before = set(list_runs(results)) if results.exists() else set()
        # check=True: exits non-zero unless every (message, receiver) arrived intact once and no packet came
        # outside a membership (the mode's own verdict).
        args = ["replay", str(topo_path), str(TRACE), "--mode", mode, "--results-dir", str(results)]
        aidclab(*args)
        (new,) = set(list_runs(results)) - before
        run = load_run(new)
        assert run.timing is not None, mode
        reasons = run.timing.reasons
        if run.timing.faithful or not all(machine_reason(r) for r in reasons):
            break
        print(f"{mode}: try {attempt} of {BUSY_TRIES} not faithful, the machine alone: {reasons}")
    assert run.timing.faithful, (mode, reasons)
    return run


def _configure(topo, igmp: dict) -> None:
    from orchestrator.configure.ansible import configure

    (topo.path.parent / f"{topo.name}.vars.yml").write_text(yaml.safe_dump({"igmp": igmp}))
    assert configure(topo).ok


@pytest.fixture(scope="module")
def runs(lab):
    topo, results = lab
    # Not confirmed: on 2026-12-02 a confirmation at twice the automatic scale refused runs whose own
    # verdicts held (igmp missed 2 of 803 deliveries at 1:120000; proxy's BitString-from-reports run was
    # 5.7% apart from its confirmation): docs/igmp.md "A second scale". Each run's own verdict must hold.
    out = {mode: _replay(topo.path, mode, results) for mode in ("igmp", "proxy")}
    # proxy with the BFIRs deaf to IGMP: the receivers' standing joins still make the BFERs' member
    # ports, but the BitString can come from the Receiver Proxy Reports alone, so exact delivery is theirs.
    _configure(topo, {**LAB_VARS["igmp"], "groups": ["static", "proxy"]})
    out["proxy-alone"] = _replay(topo.path, "proxy", results)
    _configure(topo, LAB_VARS["igmp"])
    return out


def test_both_modes_deliver_exactly_at_their_default_leads(runs, ops) -> None:
    expected = sum(len(op.dst) for op in ops)
    for mode, run in runs.items():
        m = run.metrics
        assert m is not None and m.delivery.delivered == m.delivery.expected == expected, mode
        assert m.delivery.duplicates == 0, mode
        member = run.meta.settings["membership"]
        assert member["wrong"] == 0 and member["missed"] == 0 and member["never_carried"] == 0, (mode, member)
        assert member["time"] == "fabric"
    assert runs["proxy"].meta.settings["lead_s"] == runs["proxy-alone"].meta.settings["lead_s"] == 0
    assert runs["igmp"].meta.settings["lead_s"] == 1.0  # the default, the control plane unmodelled


def test_membership_latency_per_mode_excludes_the_lead(runs, ops) -> None:
    igmp, proxy = (runs[m].meta.settings["membership"] for m in ("igmp", "proxy"))
    # igmp: every receiver of every op joins once, each timed from its join to its receiver carried
    assert igmp["changes"] == igmp["latency_samples"] == sum(len(set(op.dst)) for op in ops)
    # the lead (1 s of wall time) is no part of it: the joins reached the BFIRs well within it
    lead_fabric = runs["igmp"].meta.settings["lead_s"] / runs["igmp"].timing.scale
    assert igmp["latency_max_s"] < lead_fabric and igmp["lead_needed_s"] < 1.0
    # proxy: one report per group; every receiver of a group's first op is timed, from its report
    groups = {(op.src, frozenset(op.dst)) for op in ops}
    assert proxy["changes"] == len(groups)
    assert proxy["latency_samples"] == sum(len(dst) for _src, dst in groups)
    # One leaf's work behind the report against a BFER's, BIER to the BFIRs and the BFIRs' work
    assert proxy["latency_p50_s"] < igmp["latency_p50_s"]


def test_control_traffic_is_counted_per_mode(runs) -> None:
    igmp, proxy = (control_overhead(runs[m].agents) for m in ("igmp", "proxy"))
    # igmp: kernel reports on host ports and the leaves' reports over BIER to the BFIRs
    assert igmp["igmp from hosts"]["packets"] > 0 and igmp["overlay reports"]["packets"] > 0
    # proxy: every report the sources sent was taken by an FHR, none refused
    groups = runs["proxy"].meta.settings["membership"]["changes"]
    assert proxy["proxy reports sent"]["packets"] == 2 * groups  # install and withdraw
    assert proxy["proxy reports"]["packets"] == 2 * groups
    for name, counted in (("igmp", igmp), ("proxy", proxy)):
        dropped = sum(v for n, c in runs[name].agents.items() for k, v in c.items() if "igmp.dropped" in k)
        assert dropped == 0, (name, runs[name].agents)
        assert counted["total"]["bytes"] > 0


def test_report_shows_the_modes_side_by_side(runs, lab, tmp_path: Path) -> None:
    _topo, results = lab
    out = tmp_path / "report"
    ids = (runs[m].run_id for m in ("igmp", "proxy"))
    aidclab("report", *ids, "--results-dir", str(results), "-o", str(out))
    md = (out / "report.md").read_text()
    assert "### Memberships" in md
    for row in ("membership latency p50", "overlay reports (packets / bytes)", "control ÷ data"):
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {row}"))
        assert line.count("|") >= 4, line  # one column per mode
    assert "fabric" in md
    # These runs leave the control plane unmodelled (bench/membership.py models it): the report says so.
    verdict = next(ln for ln in md.splitlines() if ln.startswith("| membership latency is"))
    assert verdict.count("control plane not modelled") == 2, verdict


# A modelled control plane (docs/igmp.md): 1 µs of fabric time per control message at each leaf. The
# README's 5 µs holds each of the sample's 1,600 joins and leaves 5 µs x the scale of wall time at its
# leaf, one after another (0.3 s at 1:60000): 3 minutes of a CI run for the same check. bench/membership.py
# runs the README's figure. (A shorter trace is no way out: at a few µs of fabric time the automatic scale
# goes to 1:250000, and the proxy reports queued behind each other outlast the run's wait.)
MODEL = {"control_cost": 1e-6}


def _modelled_replay(topo_path: Path, mode: str, results: Path):
    """A faithful run (:func:`_replay`) whose modelled control plane kept up: a run in which some control
    messages were applied late (our agents slower than the model for a moment: 3 of 1,423 in a CI run)
    earns another run, ``BUSY_TRIES`` in all; a control plane late every time fails the test."""
    from orchestrator.experiment.membership import control_plane

    for attempt in range(1, BUSY_TRIES + 1):
        run = _replay(topo_path, mode, results)
        late = control_plane(run.agents)["late"]
        if not late:
            break
        print(f"{mode}: try {attempt} of {BUSY_TRIES}: {late} control messages applied late")
    return run


@pytest.fixture(scope="module")
def modelled_runs(runs, lab):
    topo, results = lab
    _configure(topo, {**LAB_VARS["igmp"], **MODEL})
    return {mode: _modelled_replay(topo.path, mode, results) for mode in ("proxy", "igmp")}


def test_modelled_control_planes_keep_up_and_serve_every_message_from_its_kernel_stamp(
    modelled_runs, ops, lab, tmp_path: Path
) -> None:
    from orchestrator.experiment.membership import control_plane, latency_verdict

    expected = sum(len(op.dst) for op in ops)
    for mode, run in modelled_runs.items():
        m = run.metrics
        assert m is not None and m.delivery.delivered == expected, mode
        assert run.meta.settings["control_cost_s"] == MODEL["control_cost"]
        cp = control_plane(run.agents)
        # Every message took the model's time from the moment the kernel received it, and our agents
        # applied each within its own service time: the latency is the model's, a router's.
        assert cp["served"] > 0 and cp["unstamped"] == 0, (mode, cp)
        scale = run.timing.scale if run.timing and run.timing.scale else 1
        assert cp["service_ns"] == cp["served"] * round(MODEL["control_cost"] * scale * 1e9), (mode, cp)
        assert cp["late"] == 0, (mode, cp)
        assert latency_verdict(MODEL["control_cost"], cp, run.timing.faithful) is None, (mode, cp)
        # Each join or report was served at least once (one cost) before its receiver was carried.
        member = run.meta.settings["membership"]
        assert member["latency_p50_s"] >= MODEL["control_cost"], (mode, member)
    _topo, results = lab
    out = tmp_path / "report"
    ids = [r.run_id for r in modelled_runs.values()]
    aidclab("report", *ids, "--results-dir", str(results), "-o", str(out))
    md = (out / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| control plane per message"))
    assert row.count("1.000 µs fabric") == 2, row
    verdict = next(ln for ln in md.splitlines() if ln.startswith("| membership latency is"))
    assert verdict.count("a router's") == 2, verdict
