"""The scale model against the emulator: replay a trace over a real lab and hold every counter the model
computes (per-link bytes and packets per direction, source egress, the agents' BIER copies) to the
measured one. Exact where the paths are deterministic; where the kernel's ECMP hash decides (unicast
over a leaf-spine), the per-tier sums. Any difference fails with the link, tier or node that differs.

Only the replay may move the counters, so before replaying the test pins every ARP entry (a neighbour
refresh is a 42-byte frame the model rightly does not count) and sets the hosts' IGMP robustness to 1
and their unsolicited report interval to 1 ms (so a join's report leaves at the join, not up
to a second later inside the run). Labs are named ``model-*``.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
import yaml

from aidcnet.trace import TraceReader
from orchestrator.model.compare import differences
from orchestrator.model.exact import PlanModel
from orchestrator.plan.model import LabPlan
from orchestrator.replay import load_plan, replay
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.topology import Topology
from tests.e2e.conftest import ROOT, deployed

TRACE = ROOT / "workloads" / "moe-sample.jsonl"


def _ip(netns: str, *args: str) -> str:
    proc = subprocess.run(["ip", "-n", netns, *args], capture_output=True, text=True)
    assert proc.returncode == 0, f"ip -n {netns} {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def quiet_control_plane(topo: Topology, plan: LabPlan) -> None:
    """Permanent ARP entries on both ends of every data link, IGMP robustness 1 on the hosts."""
    macs: dict[tuple[str, str], str] = {}
    for link in plan.links:
        for ep in (link.a, link.b):
            ns = topo.container_name(ep.node)
            macs[(ep.node, ep.interface)] = json.loads(_ip(ns, "-j", "link", "show", "dev", ep.interface))[0][
                "address"
            ]
    for link in plan.links:
        for here, there in ((link.a, link.b), (link.b, link.a)):
            if there.address is None:
                continue
            _ip(
                topo.container_name(here.node), "neigh", "replace", str(there.address.ip), "lladdr",
                macs[(there.node, there.interface)], "dev", here.interface, "nud", "permanent",
            )
    for name, node in plan.nodes.items():
        if node.role != "gpu-host":
            continue
        # One report per join, sent within a millisecond of the join (at load, before the snapshot),
        # instead of a repeat up to a second later, inside the run.
        settings = ["net.ipv4.igmp_qrv=1"] + [
            f"net.ipv4.conf.{ep.interface}.igmpv3_unsolicited_report_interval=1"
            for link in plan.links
            for ep in (link.a, link.b)
            if ep.node == name
        ]
        subprocess.run(
            ["ip", "netns", "exec", topo.container_name(name), "sysctl", "-qw", *settings], check=True
        )


def crossval(runtime: DockerRuntime, topo: Topology, trace: Path, modes: tuple[str, ...], tmp: Path) -> None:
    with TraceReader(trace) as reader:
        ops = list(reader)
    quiet_control_plane(topo, load_plan(topo))
    problems: list[str] = []
    for mode in modes:
        outcome = replay(topo, trace, mode, runtime=runtime, results_dir=tmp / "results")
        assert outcome.ok, f"{mode}: the replay itself lost or duplicated messages: {outcome.missing[:5]}"
        model = PlanModel(load_plan(topo))
        diff = differences(model.run(ops, mode), outcome.result, model.tiers)
        problems += [f"{topo.name} {mode}: {d}" for d in diff]
    assert not problems, "model and emulator differ:\n" + "\n".join(problems)


def test_leaf_spine_unicast_host_bier_net_bier(runtime: DockerRuntime, tmp_path: Path) -> None:
    with deployed(runtime, tmp_path, "leaf-spine", "model-ls", configured=True) as topo:
        crossval(runtime, topo, TRACE, ("unicast", "host-bier", "net-bier"), tmp_path)
