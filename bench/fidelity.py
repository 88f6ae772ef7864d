"""Times that hold at every size: each lab at its automatic time scale, against the time model, confirmed.

For leaf-spine (the MoE sample and the model-distribution sample; leaf-spine-1us: the same with 1 µs of
propagation delay on every link, a hop's switching and a few hundred metres), the SuperPoD (a MoE
dispatch over its 64 GPUs) and bsl256 (a 1,024-expert MoE step over its 256 GPUs, 8 tokens per host),
in unicast and host-BIER, and for ina-fig1 (the AllReduce sample) in ina, ring and ps: one replay at the
scale ``time.scale: auto`` picks for it on this machine (after the lab's calibration, ``aidclab calibrate``),
then the same trace at twice that scale (``replay --confirm``). Each line prints the scale chosen,
completion against the time model's prediction (the baseline, computed in the same run), whether the
verdict called it faithful, whether the second scale confirmed it, and the wall time the run took. A time
is quoted only when it is faithful, within 1.25x of its prediction or confirmed.

Long: bsl256 has 280 nodes (``--labs leaf-spine`` for the short one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from aidcnet.modes import COLLECTIVE, MESSAGE_PAIR, Mode, in_order  # noqa: E402
from bench.harness import bench_lab, bench_parser, moe_trace, shipped_vars  # noqa: E402
from orchestrator.experiment.modes.base import RunOptions  # noqa: E402
from orchestrator.experiment.records import RunResult  # noqa: E402
from orchestrator.experiment.session import LabSession  # noqa: E402
from orchestrator.run.driver import confirm, run_experiment  # noqa: E402

# The pair the seeds compare for messages; each message trace runs in both, an AllReduce trace in every
# collective mode.
COMPARED = MESSAGE_PAIR
TRACES = {
    "leaf-spine": ("moe-sample", "model-dist-sample"),
    "leaf-spine-1us": ("moe-sample", "model-dist-sample"),
    "ina-fig1": ("allreduce-sample",),
    "superpod": ("moe-64",),
    "bsl256": ("moe-1024",),
}


# A generated MoE step's experts and tokens per host. The superpod's links are 800G: with 4 tokens per host
# its busiest link carried about eight frames, and the shapers' buckets (two frames each, let through at
# once) made up a quarter of the run; 64 tokens make them a small share.
MOE = {"moe-1024": (1024, 8), "moe-64": (256, 64)}


# Every link a hop's worth of length (docs/delay.md): what a leaf-spine fabric's completions gain.
ONE_MICROSECOND = {"host": "1us", "fabric": "1us"}


def trace_for(lab: Lab, name: str) -> Path:
    """A shipped sample, or a MoE step generated over the lab's GPUs."""
    if name.endswith("-sample"):
        return ROOT / "workloads" / f"{name}.jsonl"
    hosts = LabSession.open(lab.topo, lab.runtime).gpu_hosts()
    experts, tokens = MOE[name]
    return moe_trace(
        lab.workdir / f"{name}.jsonl", hosts, steps=1, tokens_per_host=tokens, seed=1, experts=experts
    )


def line(lab: str, trace: str, mode: str, first: RunResult, wall_s: float, confirmed: str) -> str:
    t, m = first.timing, first.metrics
    assert t is not None and m is not None
    pace = "no prediction"
    if t.pace is not None:
        pace = f"{t.pace.ratio:.2f}x the {t.pace.predicted_fabric_s * 1e6:.2f} µs"
    fabric = "–" if m.completion_fabric_time is None else f"{m.completion_fabric_time * 1e6:.2f} µs"
    if t.pace is not None and t.pace.propagation_s is not None:
        pace += f" ({t.pace.propagation_s * 1e6:.2f} µs of it the links' delay)"
    verdict = "faithful" if t.faithful else "NOT faithful (" + "; ".join(t.reasons)[:300] + ")"
    return (
        f"  {lab} {trace} {mode}: 1:{t.scale}, completion {fabric} fabric = {pace} predicted; {verdict}; "
        f"{confirmed}; runs took {wall_s:.1f} s (wall)"
    )


def measure(lab: Lab, shipped: str, trace_name: str, mode: Mode) -> bool:
    """One run at the automatic scale and its confirmation at twice it; True when faithful."""
    trace = trace_for(lab, trace_name)
    options = RunOptions(timeout_s=600)
    results = lab.workdir / "results"
    started = time.monotonic()
    first = run_experiment(lab.topo, trace, mode, options, runtime=lab.runtime, results_dir=results)
    _second, check = confirm(lab.topo, trace, mode, first, options, runtime=lab.runtime, results_dir=results)
    took = time.monotonic() - started
    confirmed = "not confirmed: no fabric time to compare" if check is None else check.describe()
    print(line(shipped, trace_name, mode, first.result, took, confirmed), flush=True)
    t = first.result.timing
    return bool(t and t.faithful)


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument(
        "--labs",
        default="leaf-spine,leaf-spine-1us,ina-fig1,superpod,bsl256",
        help="comma-separated, of " + ", ".join(TRACES) + " (default: all)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print("bench fidelity: each lab at its automatic scale, against the time model, confirmed at 2x")
    ok = True
    for shipped in args.labs.split(","):
        # The shipped vars: time.scale is auto by default, and each lab keeps its own bandwidths.
        lab_vars = None
        source = shipped
        if shipped == "leaf-spine-1us":
            source, lab_vars = "leaf-spine", {**shipped_vars("leaf-spine"), "delay": ONE_MICROSECOND}
        with bench_lab(source, f"{args.name_prefix}fid-{shipped}", vars=lab_vars) as lab:
            for trace_name in TRACES[shipped]:
                modes = in_order(COLLECTIVE) if trace_name.startswith("allreduce") else COMPARED
                for mode in modes:
                    ok &= measure(lab, shipped, trace_name, mode)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
