"""Closed-loop training steps (docs/training.md): how long a step takes and how much of it the GPUs wait.

A DeepSeek-V3-shaped MoE training step (``aidclab workload moe-step``: per layer attention, dispatch to the
top-8 experts on at most 4 hosts, expert compute, combine; the backward pass; the gradient AllReduce) over
every GPU of the lab, replayed closed-loop: each host starts an op once its inputs are there. Leaf-spine
(its switches made INA switches, one INA job over its 8 GPUs) runs it with its messages in each step mode
(unicast, host-BIER, network-BIER) and its AllReduce in ring and in INA; bsl256 (``--labs bsl256``, long:
280 nodes) runs it over its 256 GPUs with INA. Each run is at the scale ``time.scale: auto`` picks, then at
twice that scale and, while two runs disagree, the more dilated one at twice its own, up to three
comparisons (``replay --confirm --confirm-steps 3``).
A line per run: the scale, step time against the time model's prediction (computed in the same run), GPU
utilisation against its prediction, exposed communication, the straggler and the verdict; then the last
comparison; then each message mode's step time against unicast's with the same AllReduce, for the
faithful runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab, ina_job_over_every_gpu, ina_switches  # noqa: E402
from aidcnet.modes import (  # noqa: E402
    BASELINES,
    COLLECTIVE_PAIR,
    STEP_COLLECTIVES,
    STEP_MESSAGES,
    StepModes,
    in_order,
)
from bench.harness import bench_lab, bench_parser, shipped_vars, workload  # noqa: E402
from orchestrator.experiment.modes.base import RunOptions  # noqa: E402
from orchestrator.experiment.session import LabSession  # noqa: E402
from orchestrator.run.driver import confirm_rising, run_experiment  # noqa: E402
from orchestrator.run.prediction import step_predictor  # noqa: E402

# The AllReduce modes each lab's step runs in: on leaf-spine all but the parameter server (aggregation in
# the switches, the ring between hosts); on bsl256 a ring is 510 rounds of 256 Python hosts, so aggregation
# in the switches alone.
COLLECTIVES = {"leaf-spine": in_order(STEP_COLLECTIVES - BASELINES), "bsl256": COLLECTIVE_PAIR[1:]}
# Comparisons a run's time may climb through (1:N against 1:2N, then 1:2N against 1:4N, ...) before the
# bench calls it unconfirmed: the automatic scale is a prediction of what this machine keeps up with.
CONFIRM_STEPS = 3
# The step: DeepSeek-V3's shape at --layers layers; a smaller micro-batch on the 256-GPU lab, and there
# 1,024 experts (four per GPU, as bench/fidelity.py's bsl256 MoE): DeepSeek-V3's 256 would put one on each
# of 256 GPUs, and top-8 on at most 4 nodes cannot be routed (the generator refuses it).
LAYERS = 4
TOKENS_PER_HOST = {"leaf-spine": 16, "bsl256": 4}
EXPERTS = {"bsl256": 1024}


def step_trace(lab: Lab, shipped: str) -> Path:
    hosts = LabSession.open(lab.topo, lab.runtime).gpu_hosts()
    return workload(
        lab.workdir / "moe-step.jsonl", "moe-step", "--hosts", ",".join(hosts), "--layers", str(LAYERS),
        "--tokens-per-host", str(TOKENS_PER_HOST[shipped]), "--seed", "1",
        *(("--experts", str(EXPERTS[shipped])) if shipped in EXPERTS else ()),
    )  # fmt: skip


def us(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e6:.2f} µs"


def line(shipped: str, modes: StepModes, result) -> str:
    step, timing = result.meta.settings["step"], result.timing
    predicted = step.get("predicted") or {}
    ratio = f"{step['step_s'] / predicted['step_s']:.2f}x" if predicted.get("step_s") else "no"
    utilisation = f"utilisation {step['utilisation']:.3f}"
    if predicted.get("utilisation") is not None:
        utilisation += f" (predicted {predicted['utilisation']:.3f})"
    verdict = "faithful" if timing.faithful else "NOT faithful (" + "; ".join(timing.reasons)[:300] + ")"
    return (
        f"  {shipped} moe-step {modes}: 1:{timing.scale}, step {us(step['step_s'])} fabric = {ratio} the "
        f"{us(predicted.get('step_s'))} predicted; {utilisation}; exposed {us(step['exposed_s'])}; straggler "
        f"{step['straggler']}; {verdict}"
    )


def measure(lab: Lab, shipped: str, trace: Path, modes: StepModes) -> float | None:
    """One run at the automatic scale, held to a run at twice its scale and, while two disagree, the more
    dilated one to twice its own (``replay --confirm``); the step time of the last faithful run."""
    options = RunOptions(timeout_s=900, allreduce=modes.collective, predict_step=step_predictor)
    results = lab.workdir / "results"
    started = time.monotonic()
    first = run_experiment(lab.topo, trace, modes.messages, options, runtime=lab.runtime, results_dir=results)
    if not first.ok:
        print(f"  {shipped} moe-step {modes}: FAILED (run {first.run_dir})", flush=True)
        return None
    runs, check = confirm_rising(
        lab.topo, trace, modes.messages, first, options, steps=CONFIRM_STEPS, runtime=lab.runtime,
        results_dir=results,
    )  # fmt: skip
    for run in runs:
        print(line(shipped, modes, run.result), flush=True)
    confirmed = "not confirmed: no fabric time to compare" if check is None else check.describe()
    print(f"    {confirmed}; runs took {time.monotonic() - started:.1f} s (wall)", flush=True)
    faithful = [run.result for run in runs if run.result.timing and run.result.timing.faithful]
    return faithful[-1].meta.settings["step"]["step_s"] if faithful else None


def speedups(shipped: str, steps: dict[StepModes, float | None]) -> None:
    """Each message mode's step time against the baseline's with the same AllReduce, both faithful."""
    for modes, step_s in steps.items():
        (baseline,) = BASELINES & STEP_MESSAGES
        base = steps.get(StepModes(baseline, modes.collective))
        if modes.messages != baseline and step_s and base:
            print(f"  {shipped} moe-step: {modes} step / {baseline}+{modes.collective} = {step_s / base:.3f}")


def report(lab: Lab, shipped: str, out: Path) -> None:
    """The report of every run on the lab (docs/training.md, "The report": the step table and a per-GPU
    timeline per run) into ``out/LAB``, before the lab and its results go."""
    from orchestrator.experiment.report import write_report
    from orchestrator.experiment.results import list_runs, load_run

    runs = [load_run(path) for path in list_runs(lab.workdir / "results")]
    _md, html = write_report(runs, lab.topo, out / shipped, title=f"bench training: {shipped}")
    print(f"  {shipped}: report of {len(runs)} runs: {html}", flush=True)


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--labs", default="leaf-spine", help="comma-separated, of " + ", ".join(COLLECTIVES))
    p.add_argument(
        "--report",
        metavar="DIR",
        type=Path,
        help="write each lab's report (step table, per-GPU timelines) to DIR/LAB/report.html",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = args.report.resolve() if args.report else None  # before a lab's work dir is the working directory
    print(f"bench training: a {LAYERS}-layer MoE step closed-loop, at the automatic scale, confirmed at 2x")
    ok = True
    for shipped in args.labs.split(","):
        lab_vars = {**shipped_vars(shipped), **dict(ina={"jobs": [ina_job_over_every_gpu(shipped)]})}
        with bench_lab(
            shipped, f"{args.name_prefix}train-{shipped}", vars=lab_vars, edit=ina_switches
        ) as lab:
            trace = step_trace(lab, shipped)
            steps = {}
            for collective in COLLECTIVES[shipped]:
                for messages in in_order(STEP_MESSAGES):
                    modes = StepModes(messages, collective)
                    steps[modes] = measure(lab, shipped, trace, modes)
                    ok &= steps[modes] is not None
            speedups(shipped, steps)
            if out is not None:
                report(lab, shipped, out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
