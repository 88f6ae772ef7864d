"""The fault runner's own timing: when each fault took effect against when it was due, and the run it
spoils when that was late (a busy machine wakes the runner's thread late; a change can take long)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from aidcnet.timescale import TimeScale
from orchestrator.experiment.fault_runner import FaultRunner
from orchestrator.experiment.faults import FaultRecord
from orchestrator.lab.fault_spec import parse_fault

SCALE = TimeScale(20000)  # 5 µs of fabric time is 0.1 s of wall time


def run_with(apply_s: float, run_s: float) -> FaultRunner:
    """A run of ``run_s`` wall seconds with one fault due at 5 µs whose change takes ``apply_s``."""
    session = SimpleNamespace(time_scale=SCALE)
    runner = FaultRunner([parse_fault("5us link leaf1:eth1 down")], session, None, None, 0.0)  # type: ignore[arg-type]

    def apply(record: FaultRecord) -> list[str]:
        time.sleep(apply_s)
        record.effect_s = runner._now()
        return ["applied"]

    runner._apply = apply  # type: ignore[method-assign]
    with runner:
        time.sleep(run_s)
    return runner


def test_a_fault_in_effect_on_time_leaves_the_run_faithful() -> None:
    runner = run_with(apply_s=0.0, run_s=0.6)
    (record,) = runner.records
    assert runner.end_s is not None and runner.end_s >= 0.6
    assert record.effect_s is not None and record.effect_s >= SCALE.wall_s(5e-6)
    assert runner.late_reasons(SCALE) == []


def test_a_fault_in_effect_late_makes_the_run_not_faithful() -> None:
    """Due at 0.1 s, in effect after 0.35 s more: later than 5% of a run of about 0.8 s."""
    runner = run_with(apply_s=0.35, run_s=0.8)
    (reason,) = runner.late_reasons(SCALE)
    assert reason.startswith("fault 'link leaf1:eth1 down' took effect ")
    assert "fell on other traffic than asked for" in reason


def test_no_verdict_on_lateness_before_the_run_has_ended() -> None:
    session = SimpleNamespace(time_scale=SCALE)
    runner = FaultRunner([parse_fault("5us restart spine1")], session, None, None, 0.0)  # type: ignore[arg-type]
    assert runner.late_reasons(SCALE) == []


def _leaf_spine_plan():
    from orchestrator.configure.plan import build_plan
    from orchestrator.configure.plan.schema import LabVars
    from orchestrator.lab.topology import load_topology
    from orchestrator.paths import LABS

    return build_plan(load_topology(LABS / "leaf-spine.clab.yml"), LabVars.model_validate({}))


def _judge_link_fault(tmp_path, plan, fault: str, ends: tuple[tuple[str, str], ...], fast_reroute: dict):
    """judge() a run with one link fault begun at 0.10 s (wall) on a lab of the link ``ends`` whose agents
    answer ``show bift`` with ``fast_reroute``; returns the run's outcome."""
    import json

    (a_node, a_if), (z_node, z_if) = ends
    (tmp_path / "topology-data.json").write_text(
        json.dumps(
            {
                "nodes": {
                    n: {"longname": f"clab-x-{n}", "image": "aidclab/bfr:latest"} for n in (a_node, z_node)
                },
                "links": [
                    {"a": {"node": a_node, "interface": a_if}, "z": {"node": z_node, "interface": z_if}}
                ],
            }
        )
    )
    agents = {n: SimpleNamespace(bift=lambda n=n: {"fast_reroute": fast_reroute[n]}) for n in fast_reroute}
    session = SimpleNamespace(time_scale=SCALE, plan=plan, agent=agents.__getitem__)
    runner = FaultRunner([parse_fault(fault)], session, None, tmp_path, 0.0)  # type: ignore[arg-type]
    runner.zero, runner.end_s = ZERO, 0.5
    (record,) = runner.records
    record.started_s, record.effect_s = 0.10, 0.101
    outcome = SimpleNamespace(settings={}, lines=[], messages=[], problem=None)
    runner.judge(outcome, SCALE)  # type: ignore[arg-type]
    return outcome


ZERO = 1000.0


def test_a_link_faults_bypass_switches_are_read_from_both_ends_into_its_record(tmp_path) -> None:
    """judge(): the fast-reroute events and first copies of the cut link's two ends, in the fault's record
    and its lines; an end that never switched (leaf1 here) is not listed."""
    plan = _leaf_spine_plan()
    fast_reroute = {
        "spine1": {
            "events": [{"at_ns": round((ZERO + 0.105) * 1e9), "on": ["leaf1"]}],
            "first_copies": [{"neighbor": "leaf1", "at_ns": round((ZERO + 0.11) * 1e9)}],
        },
        "leaf1": {"events": [], "first_copies": []},
    }
    link = (("leaf1", "eth1"), ("spine1", "eth1"))
    outcome = _judge_link_fault(tmp_path, plan, "5us link spine1:eth1 down", link, fast_reroute)
    (fault,) = outcome.settings["faults"]
    assert [(r["node"], r["neighbor"], r["state"]) for r in fault["fast_reroute"]] == [
        ("spine1", "leaf1", "on")
    ]
    assert round(fault["fast_reroute"][0]["after_s"], 6) == 0.005
    assert round(fault["fast_reroute"][0]["first_copy_s"], 6) == 0.01
    assert "fast_reroute_unprotected" not in fault  # both ends have a bypass to the other in the plan
    assert any("spine1's bypass to leaf1 on after 250.0 ns" in line for line in outcome.lines), outcome.lines
    # a lab without fast reroute: nothing read, nothing said
    plan.bier.fast_reroute = False
    outcome = _judge_link_fault(tmp_path, plan, "5us link spine1:eth1 down", link, fast_reroute)
    assert not {"fast_reroute", "fast_reroute_unprotected"} & set(outcome.settings["faults"][0])


def test_a_cut_host_link_says_neither_end_has_a_bypass(tmp_path) -> None:
    """h1 hangs off leaf1 by one link: the plan has no bypass either way, and the run says so (its copies
    are lost until the link is back); giving the link back says nothing of it."""
    plan = _leaf_spine_plan()
    quiet = {n: {"events": [], "first_copies": []} for n in ("leaf1", "h1")}
    link = (("h1", "eth1"), ("leaf1", "eth3"))
    outcome = _judge_link_fault(tmp_path, plan, "5us link leaf1:eth3 down", link, quiet)
    (fault,) = outcome.settings["faults"]
    assert fault["fast_reroute_unprotected"] == [
        {"node": "leaf1", "neighbor": "h1", "through_hosts": False},
        {"node": "h1", "neighbor": "leaf1", "through_hosts": False},
    ]
    assert any(
        line.endswith("fast reroute: no bypass for leaf1 to h1 or h1 to leaf1 (there is no other way round)")
        for line in outcome.lines
    ), outcome.lines
    outcome = _judge_link_fault(tmp_path, plan, "5us link leaf1:eth3 up", link, quiet)
    assert "fast_reroute_unprotected" not in outcome.settings["faults"][0]


def test_a_link_taken_down_names_both_its_ends_as_downed(tmp_path) -> None:
    """What was lost at either end of a link a fault took down is the fault's (fidelity.fault_port_losses);
    a link given back, or a fault that never began, downs nothing."""
    plan = _leaf_spine_plan()
    quiet = {n: {"events": [], "first_copies": []} for n in ("leaf1", "h1")}
    link = (("h1", "eth1"), ("leaf1", "eth3"))
    _judge_link_fault(tmp_path, plan, "5us link leaf1:eth3 down", link, quiet)
    session = SimpleNamespace(time_scale=SCALE, plan=plan)
    for fault, began, want in (
        ("5us link leaf1:eth3 down", True, {"leaf1": {"eth3"}, "h1": {"eth1"}}),
        ("5us link leaf1:eth3 up", True, {}),
        ("5us link leaf1:eth3 down", False, {}),
    ):
        runner = FaultRunner([parse_fault(fault)], session, None, tmp_path, 0.0)  # type: ignore[arg-type]
        runner.records[0].started_s = 0.1 if began else None
        assert runner.downed_ports() == want, fault


def test_a_bfd_session_down_on_a_link_no_fault_touched_makes_the_run_not_faithful(tmp_path) -> None:
    """A plain run (no faults) on a lab running BFD: leaf1's session on eth2 went down mid-run. The link's
    forwarding changed for a reason that is not the fabric's (a late agent, BFD behind data in the shaper's
    one queue), so the verdict names it; a down before the run's zero, or none, does not."""
    plan = _leaf_spine_plan().model_copy(deep=True)
    plan.bfd.enabled = True
    zero = ZERO

    def events_of(at_s: float) -> dict:
        down = {"interface": "eth2", "state": "down", "reason": "detection-time", "late_s": 0.0}
        return {
            n: ([{**down, "at_ns": round((zero + at_s) * 1e9)}] if n == "leaf1" else []) for n in plan.nodes
        }

    for at_s, spoils in ((0.2, True), (-0.5, False)):
        events = events_of(at_s)
        agents = {n: SimpleNamespace(call=lambda _op, e=events[n]: {"events": e}) for n in plan.nodes}
        session = SimpleNamespace(time_scale=SCALE, plan=plan, agent=agents.__getitem__)
        runner = FaultRunner([], session, None, tmp_path, 0.0)  # type: ignore[arg-type]
        runner.zero, runner.end_s = zero, 0.5
        outcome = SimpleNamespace(settings={}, lines=[], messages=[], problem=None)
        runner.judge(outcome, SCALE)  # type: ignore[arg-type]
        reasons = runner.late_reasons(SCALE)
        if spoils:
            (reason,) = reasons
            assert reason.startswith("BFD took down links no fault touched: leaf1:eth2 at 10.0 µs"), reason
            assert outcome.settings["bfd_unexplained"][0]["interface"] == "eth2"
        else:
            assert reasons == [] and "bfd_unexplained" not in outcome.settings


def test_a_runs_node_fault_becomes_a_link_fault_per_link_of_the_node() -> None:
    """``--fault "20us node r2 down for 100us"`` on ring5: the runner's records are r2's three links going
    down at 20 µs and up at 120 µs, each as a link fault the rest of the run (reroutes, the port-loss rule,
    the failure domain) already knows."""
    from orchestrator.configure.plan import build_plan
    from orchestrator.experiment.modes.base import RunOptions
    from orchestrator.lab.fault_spec import schedule
    from orchestrator.lab.topology import load_topology
    from orchestrator.paths import LABS

    topo = load_topology(LABS / "ring5.clab.yml")
    session = SimpleNamespace(time_scale=SCALE, plan=build_plan(topo))
    spec = SimpleNamespace(
        options=RunOptions(faults=tuple(schedule(["20us node r2 down for 100us"]))), start_lead_s=0.0
    )
    runner = FaultRunner.for_run(spec, session, topo, runtime=object())  # type: ignore[arg-type]
    got = [(round(r.fault.at_s * 1e6), r.fault.describe()) for r in runner.records]
    assert got == [
        (20, "link r2:eth1 down"),
        (20, "link r2:eth2 down"),
        (20, "link r2:eth3 down"),
        (120, "link r2:eth1 up"),
        (120, "link r2:eth2 up"),
        (120, "link r2:eth3 up"),
    ]
