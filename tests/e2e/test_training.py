"""A closed-loop training step (docs/training.md) over a real leaf-spine: a small moe-step trace replayed in
unicast and in network-BIER with its gradient AllReduce in INA, and in host-BIER with it in ring; every
delivery and the AllReduce judged by the run, and the step's metrics recorded beside the time model's.
Timing verdicts are not asserted: they need a quiet machine (docs/time-and-fidelity.md);
bench/training.py measures them."""

from __future__ import annotations

import pytest

from aidclab.pytest import ina_job_over_every_gpu, ina_switches
from orchestrator.experiment.results import list_runs, load_run
from orchestrator.lab.runtime.docker import DockerRuntime
from tests.e2e.conftest import aidclab, deployed

HOSTS = [f"h{i}" for i in range(1, 9)]
# An AllReduce runs over an INA job of the lab whose workers are its hosts (docs/allreduce.md), whatever its
# mode; leaf-spine has none, and a job's switches are INA switches.
LAB_VARS = {"ina": {"jobs": [ina_job_over_every_gpu("leaf-spine")]}}


@pytest.fixture(scope="module")
def lab(runtime: DockerRuntime, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("training")
    with deployed(
        runtime, tmp, "leaf-spine", "tr-training", LAB_VARS, configured=True, edit=ina_switches
    ) as topo:
        yield topo, tmp


@pytest.fixture(scope="module")
def step_trace(lab):
    _topo, tmp = lab
    trace = tmp / "moe-step.jsonl"
    hosts = ",".join(HOSTS)
    aidclab("workload", "moe-step", "--hosts", hosts, "--layers", "2", "--seed", "1", "-o", str(trace))
    return trace


# One closed-loop step per family of messages (aidcnet/modes.py): one copy per receiver, BIER imposed by the
# source host, and IP multicast the leaves carry over BIER; AllReduces between hosts (ring) and aggregated
# in the switches (INA). A parameter server needs a GPU host outside the job, and every GPU here is in it.
@pytest.mark.parametrize(
    "messages, collective", [("unicast", "ina"), ("host-bier", "ring"), ("net-bier", "ina")]
)
def test_a_moe_step_replays_closed_loop(lab, step_trace, messages: str, collective: str) -> None:
    topo, tmp = lab
    results = tmp / f"results-{messages}-{collective}"
    # check=True: exit 0 only when every (message, receiver) arrived intact once, the AllReduce's result is
    # exact on every worker and every host's items ended.
    aidclab("replay", str(topo.path), str(step_trace), "--mode", messages, "--allreduce", collective,
            "--results-dir", str(results))  # fmt: skip
    (run_dir,) = list_runs(results)
    step = load_run(run_dir).meta.settings["step"]
    modes = f"{messages}+{collective}"
    assert step["modes"] == modes and step["clock"] == "fabric"
    assert step["step_s"] > 0 and step["step_s"] >= step["compute_only_s"] > 0
    assert set(step["gpus"]) == set(HOSTS) and step["straggler"] in HOSTS
    for name, gpu in step["gpus"].items():
        shares = gpu["compute_s"] + gpu["network_s"] + gpu["barrier_s"]
        assert shares == pytest.approx(step["step_s"], rel=1e-6), name
        assert gpu["compute_s"] > 0, name
    assert 0 < step["utilisation"] <= 1
    predicted = step["predicted"]
    assert predicted is not None and predicted["modes"] == modes and predicted["step_s"] > 0
