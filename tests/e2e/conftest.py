"""End-to-end fixtures: real containers through the Docker engine that `make test` starts."""

from __future__ import annotations

import contextlib
import copy
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from aidclab.pytest import deployed_lab, working_dir
from aidcnet.agent.client import AgentClient
from orchestrator.experiment.modes.base import ModeOutcome, RunOptions
from orchestrator.experiment.results import load_run
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.topology import Topology
from orchestrator.run.driver import RunOutcome, confirm_rising, run_experiment

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def runtime() -> DockerRuntime:
    # No skip: make test installs and starts dockerd and builds the images, so a failure here is real.
    rt = DockerRuntime()
    for role in ("bfr", "gpu-host", "ina-switch", "frr", "gobgp", "bird"):
        rt.client.images.get(f"aidclab/{role}:latest")
    return rt


def lab_copy(tmp_path: Path, lab: str, name: str, mgmt: dict | None = None) -> Path:
    """The shipped lab under another name, so tests never touch a lab a user has running; ``mgmt``
    gives it a management network of its own."""
    doc = yaml.safe_load((ROOT / "labs" / f"{lab}.clab.yml").read_text())
    doc["name"] = name
    if mgmt:
        doc["mgmt"] = mgmt
    path = tmp_path / f"{name}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def aidclab_runtime(runtime: DockerRuntime) -> DockerRuntime:
    """The plugin's labs deploy with the runtime that checked the images."""
    return runtime


@contextlib.contextmanager
def deployed(
    runtime: DockerRuntime,
    tmp: Path,
    lab: str,
    name: str,
    lab_vars: dict | None = None,
    nodes: dict | None = None,
    configured: bool = False,
    edit: Callable[[dict], None] | None = None,
) -> Iterator[Topology]:
    """A copy of a shipped lab (optionally with vars and replaced nodes) deployed by the aidclab.pytest
    plugin from ``tmp``, destroyed afterwards whatever happens. ``tmp`` stays the working directory while
    the lab is up: the modules read ``clab-<lab>/`` relative to it."""

    def change(doc: dict) -> None:
        if edit is not None:  # e.g. scale a shipped lab down for CI (tests/e2e/test_fare.py)
            edit(doc)
        if nodes:
            doc["topology"]["nodes"].update(nodes)

    with (
        working_dir(tmp),
        deployed_lab(
            ROOT / "labs" / f"{lab}.clab.yml",
            tmp,
            name=name,
            vars=lab_vars or {},
            edit=change,
            configure=configured,
            runtime=runtime,
        ) as handle,
    ):
        yield handle.topo


# Both BIER dataplanes run every BIER, network-BIER, BIER-over-BGP and INA-dissemination suite (issue 13):
# ebpf, the default, and python, the reference it is checked against.
DATAPLANES = ("ebpf", "python")


def on_dataplane(runtime: DockerRuntime, topo: Topology, lab_vars: dict | None, dataplane: str) -> None:
    """(Re)configure a deployed lab with ``bier.dataplane`` set, and check that every BFR's table is held
    by that dataplane: a kernel that refused the program must fail the ebpf run, not pass it on Python."""
    from orchestrator.configure.ansible import configure
    from orchestrator.experiment.session import LabSession

    doc = copy.deepcopy(lab_vars or {})
    doc.setdefault("bier", {})["dataplane"] = dataplane
    (topo.path.parent / f"{topo.name}.vars.yml").write_text(yaml.safe_dump(doc))
    assert configure(topo).ok
    assert_tables_held_by(bift_rows(LabSession.open(topo, runtime)), dataplane)


def bift_rows(session) -> dict[str, dict]:
    """``show bift`` of every BFR with an agent (GPU hosts included: they are BFIRs and BFERs)."""
    return {
        node: session.agent(node).bift()
        for node, planned in session.plan.nodes.items()
        if planned.bfr_id is not None and node in session.agents
    }


def assert_tables_held_by(rows: dict[str, dict], dataplane: str) -> None:
    held = {node: (r.get("dataplane"), r.get("dataplane_error")) for node, r in rows.items()}
    assert held, "no BFR answered show bift"
    assert held == {n: (dataplane, None) for n in held}, f"tables not held by {dataplane}: {held}"


def host_veths() -> set[str]:
    out = subprocess.run(
        ["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True, check=True
    )
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()}


def aidclab(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=cwd
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"aidclab {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def agent(runtime: DockerRuntime, topo: Topology, node: str) -> AgentClient:
    """The aidcnet agent of a lab node, through its control socket (an agent's refusal raises)."""
    return runtime.agent(topo.container_name(node), node, timeout=30.0)


def scale_superpod(gpus: int):
    """An ``edit=`` for ``deployed``: the SuperPoD with its four plane leaves and only G1..G<gpus>, so the
    FARE and FRR tests keep every plane while CI deploys a handful of nodes."""

    def edit(doc: dict) -> None:
        keep = {f"L{p}" for p in range(1, 5)} | {f"G{g}" for g in range(1, gpus + 1)}
        nodes = doc["topology"]["nodes"]
        doc["topology"]["nodes"] = {n: v for n, v in nodes.items() if n in keep}
        doc["topology"]["links"] = [
            link
            for link in doc["topology"]["links"]
            if all(ep.split(":")[0] in keep for ep in link["endpoints"])
        ]

    return edit


def faithful_run(
    topo: Topology,
    trace: Path,
    mode: str,
    options: RunOptions | None = None,
    *,
    runtime: DockerRuntime,
    results_dir: Path,
) -> RunOutcome:
    """A run whose times a test may compare: the run at its automatic scale, held to time dilation's test
    when it was not faithful (:func:`confirmed_when_unfaithful`). The caller still asserts the verdict."""
    done = run_experiment(topo, trace, mode, options, runtime=runtime, results_dir=results_dir)
    return confirmed_when_unfaithful(
        topo, trace, mode, done, options, runtime=runtime, results_dir=results_dir
    )


def confirmed_when_unfaithful(
    topo: Topology,
    trace: Path,
    mode: str,
    done: RunOutcome | Path,
    options: RunOptions | None = None,
    *,
    runtime: DockerRuntime | None = None,
    results_dir: Path,
) -> RunOutcome:
    """``done`` (a run, or the directory a CLI replay saved it in) when it is faithful; when it is not (on a
    loaded CI machine something other than the links paced it), the same trace once more at twice its
    scale, as ``replay --confirm --confirm-steps 2`` runs it (the further runs saved under ``results_dir``):
    the two held to time dilation's test, which clears a busy machine when they agree and counts against
    both when they do not; when they do not, the second is held in turn to a run at twice its scale.
    Returns the first run that is faithful, else the last."""
    if isinstance(done, Path):
        done = RunOutcome(load_run(done), done, ModeOutcome(messages=[]))
    timing = done.result.timing
    if timing is None or timing.scale is None or timing.faithful is not False:
        return done
    print(f"{mode}: not faithful at 1:{timing.scale} ({'; '.join(timing.reasons)}): confirming at twice it")
    runs, check = confirm_rising(
        topo, trace, mode, done, options, steps=2, runtime=runtime, results_dir=results_dir
    )
    print(f"{mode}: {check.describe() if check else 'nothing to compare'}")
    return next((o for o in runs if o.result.timing and o.result.timing.faithful), runs[-1])
