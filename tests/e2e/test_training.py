"""A closed-loop training step (docs/training.md) over a real leaf-spine: a small moe-step trace replayed in
host-BIER with its gradient AllReduce in ring; every delivery and the AllReduce judged by the run, and the
step's metrics recorded beside the time model's. Timing verdicts are not asserted: they need a quiet
machine (docs/time-and-fidelity.md)."""

from __future__ import annotations

import pytest

from orchestrator.experiment.results import list_runs, load_run
from orchestrator.lab.runtime.docker import DockerRuntime
from tests.e2e.conftest import aidclab, deployed

HOSTS = [f"h{i}" for i in range(1, 9)]
# An AllReduce runs over an INA job of the lab whose workers are its hosts (docs/allreduce.md), whatever its
# mode; leaf-spine has none, and a job's switches are INA switches (as tests/e2e/test_fabric.py makes them).
INA_JOB = {
    "job": 1,
    "workers": HOSTS,
    "root": "spine1",
    "abm": {**{f"leaf{k}": HOSTS[2 * k - 2 : 2 * k] for k in range(1, 5)}, "spine1": HOSTS},
}
LAB_VARS = {"ina": {"jobs": [INA_JOB]}}


def ina_switches(doc: dict) -> None:
    for group in ("leaf", "spine"):
        doc["topology"]["groups"][group]["image"] = "aidclab/ina-switch:latest"


@pytest.fixture(scope="module")
def lab(runtime: DockerRuntime, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("training")
    with deployed(
        runtime, tmp, "leaf-spine", "tr-training", LAB_VARS, configured=True, edit=ina_switches
    ) as topo:
        yield topo, tmp


def test_a_moe_step_replays_closed_loop_in_host_bier_with_a_ring_allreduce(lab) -> None:
    topo, tmp = lab
    trace, results = tmp / "moe-step.jsonl", tmp / "results"
    hosts = ",".join(HOSTS)
    aidclab("workload", "moe-step", "--hosts", hosts, "--layers", "2", "--seed", "1", "-o", str(trace))
    # check=True: exit 0 only when every (message, receiver) arrived intact once, the AllReduce's result is
    # exact on every worker and every host's items ended.
    aidclab("replay", str(topo.path), str(trace), "--mode", "host-bier", "--allreduce", "ring",
            "--results-dir", str(results))  # fmt: skip
    (run_dir,) = list_runs(results)
    step = load_run(run_dir).meta.settings["step"]
    assert step["modes"] == "host-bier+ring" and step["clock"] == "fabric"
    assert step["step_s"] > 0 and step["step_s"] >= step["compute_only_s"] > 0
    assert set(step["gpus"]) == set(HOSTS) and step["straggler"] in HOSTS
    for name, gpu in step["gpus"].items():
        shares = gpu["compute_s"] + gpu["network_s"] + gpu["barrier_s"]
        assert shares == pytest.approx(step["step_s"], rel=1e-6), name
        assert gpu["compute_s"] > 0, name
    assert 0 < step["utilisation"] <= 1
    predicted = step["predicted"]
    assert predicted is not None and predicted["modes"] == "host-bier+ring" and predicted["step_s"] > 0
