"""The smallest faithful time scale per lab and mode, and how wall time grows as the scale shrinks.

For leaf-spine (the MoE sample trace) and the SuperPoD (a MoE dispatch over its 64 GPUs), in unicast and
host-BIER: ``aidclab replay --find-scale`` from the lab's default scale (1:20000), i.e. halve while the
runs stay faithful, narrow the gap when they do not (orchestrator/experiment/scale_search.py). Each
search's baseline is its own first run at the default scale, measured in the same process: the ratio
printed is wall time at the smallest faithful scale over wall time at the default (below 1: the lab can
run faster than its default and stay honest).

Long: every trial is one replay, and the SuperPoD has 68 nodes (``--labs leaf-spine`` for the short one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.modes import Mode  # noqa: E402
from orchestrator.configure.ansible import configure  # noqa: E402
from orchestrator.experiment.driver import search_scale  # noqa: E402
from orchestrator.experiment.modes.base import RunOptions  # noqa: E402
from orchestrator.experiment.scale_search import Trial, smallest_faithful  # noqa: E402
from orchestrator.lab.deploy import deploy, destroy  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.lab.topology import load_topology  # noqa: E402

MODES = (Mode.UNICAST, Mode.HOST_BIER)
SUPERPOD_GPUS = [f"G{i}" for i in range(1, 65)]


def lab_copy(tmp: Path, lab: str) -> Path:
    name = f"bench-fid-{lab}"
    doc = yaml.safe_load((ROOT / "labs" / f"{lab}.clab.yml").read_text())
    doc["name"] = name
    path = tmp / f"{name}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    shipped = ROOT / "labs" / f"{lab}.vars.yml"
    if shipped.exists():
        (tmp / f"{name}.vars.yml").write_text(shipped.read_text())
    return path


def superpod_trace(path: Path) -> Path:
    subprocess.run(
        [
            sys.executable, "-m", "orchestrator.cli.workload", "moe", "--hosts", ",".join(SUPERPOD_GPUS),
            "--steps", "1", "--tokens-per-host", "4", "--seed", "1", "-o", str(path),
        ],
        check=True, cwd=ROOT,
    )  # fmt: skip
    return path


def report(lab: str, mode: str, trials: list[Trial]) -> bool:
    first = trials[0]
    best = smallest_faithful(trials)
    curve = ", ".join(
        f"1:{t.scale} {t.completion_s:.3f} s"
        + ("" if t.bound_ratio is None else f" {t.bound_ratio:.2f}x bound")
        + ("" if t.faithful else " (not faithful)")
        for t in sorted(trials, key=lambda t: -t.scale)
        if t.completion_s is not None
    )
    print(f"  {lab} {mode}: wall completion per scale: {curve}")
    if best is None or best.completion_s is None or first.completion_s is None:
        print(f"  {lab} {mode}: no faithful scale among {[t.scale for t in trials]}")
        return False
    print(
        f"  {lab} {mode}: smallest faithful scale 1:{best.scale}; wall time there / at the default "
        f"1:{first.scale} = {best.completion_s / first.completion_s:.2f}x "
        f"({best.completion_s:.3f} s vs {first.completion_s:.3f} s)"
    )
    return True


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--labs", default="leaf-spine,superpod", help="comma-separated (default: both)")
    parser.add_argument("--max-runs", type=int, default=5, help="runs per search (default 5)")
    args = parser.parse_args()
    runtime = DockerRuntime()
    ok = True
    print("bench fidelity: smallest faithful time scale per lab and mode (docs/time-and-fidelity.md)")
    for lab in args.labs.split(","):
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            trace = (
                ROOT / "workloads" / "moe-sample.jsonl"
                if lab == "leaf-spine"
                else superpod_trace(tmp / "t.jsonl")
            )
            path = lab_copy(tmp, lab)
            old = Path.cwd()
            os.chdir(tmp)
            topo = load_topology(path)
            destroy(topo.name, runtime, quiet=True)
            try:
                deploy(topo, runtime)
                if not configure(topo).ok:
                    print(f"bench fidelity: configure {topo.name} failed", file=sys.stderr)
                    return 1
                for mode in MODES:
                    trials = search_scale(
                        topo, trace, mode, RunOptions(timeout_s=300), runtime=runtime,
                        results_dir=tmp / "results", max_runs=args.max_runs, progress=lambda _: None,
                    )  # fmt: skip
                    ok &= report(lab, mode, trials)
            finally:
                destroy(topo.name, runtime, cleanup=True, quiet=True)
                os.chdir(old)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
