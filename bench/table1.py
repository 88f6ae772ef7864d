"""Seed 001's requirement table (its Table 1) from runs: the MoE sample and the model distribution on
leaf-spine through every multicast technology this machine runs, clean, at loss on every link end and with
a link failing mid-run, then the report's requirements section of each trace (docs/requirements.md).

Technologies: unicast (ingress replication, the baseline every figure is set against), host-BIER,
network-BIER with static groups, with IGMP and with the Receiver Proxy Report, and reliable BIER with its
ACKs aggregated (host and network). Each runs clean; the best-effort baseline, host-BIER and reliable
BIER also at ``--loss`` on every link end and with ``--fault-link`` going down halfway through the mode's
clean run. All in one process on one deployed lab (``bench-table1``, igmp on, every host a proxy
source), so every column is measured on the same machine in the same hour. PIM-SM and PIM-SSM run only
on a kernel with IP multicast routing: the bench says whether this one has it.

Writes ``report.md`` (every section, the requirements table among them) for each trace under ``--out``,
beside the runs it came from (``runs/``: ``aidclab report --results-dir`` reads them again), and prints the
tables.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from aidcnet.modes import MESSAGE, MESSAGE_PAIR, RELIABLE_END_TO_END, Mode, in_order  # noqa: E402
from bench.harness import bench_lab, bench_parser, set_loss, shipped_vars  # noqa: E402
from orchestrator.experiment.records import RunResult  # noqa: E402
from orchestrator.experiment.report import write_report  # noqa: E402
from orchestrator.experiment.report.document import groups_of  # noqa: E402
from orchestrator.experiment.report.markdown import render_markdown  # noqa: E402
from orchestrator.experiment.report.sections.requirements import Requirements  # noqa: E402
from orchestrator.lab.fault_spec import schedule  # noqa: E402
from orchestrator.lab.kernel import NO_MULTICAST_ROUTING, has_multicast_routing  # noqa: E402

TRACES = ("moe-sample", "model-dist-sample")
# Every way the project carries messages, reliable ones with their ACKs aggregated in the network.
CLEAN = in_order(MESSAGE - RELIABLE_END_TO_END)
# The modes that run under loss and with the link fault too: the baseline, BIER and reliable BIER.
STRESSED = (*MESSAGE_PAIR, Mode.RELIABLE_HOST_BIER)
# leaf1's uplink to spine1: every trace's sources behind leaf1 lose half their paths.
FAULT_LINK = "leaf1:eth1"
LAB_VARS = dict(igmp={"enabled": True, "proxy_hosts": "all"})


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument(
        "--traces",
        default=",".join(TRACES),
        help=f"comma-separated traces of workloads/ (default {','.join(TRACES)})",
    )
    p.add_argument(
        "--loss", type=float, default=0.01, help="loss on every link end for the lossy runs (0.01)"
    )
    p.add_argument("--fault-link", default=FAULT_LINK, help=f"the link end taken down mid-run ({FAULT_LINK})")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("results/table1"),
        help="where the reports and runs go (./results/table1)",
    )
    return p


def halfway(clean: RunResult) -> str:
    """Halfway through the mode's clean run, in fabric time, as a fault's AT: the sample traces start
    every op at t = 0, so only a run says when the middle of the transfer is."""
    m = clean.metrics
    if m is None or m.completion_fabric_time is None:
        raise SystemExit(
            f"bench table1: run {clean.meta.run_id} has no fabric completion time (unshaped lab?)"
        )
    return f"{m.completion_fabric_time / 2:.9f}s"


def runs_of(lab: Lab, trace: Path, args: argparse.Namespace, keep: Path) -> list[RunResult]:
    """Every run of ``trace``, each run's directory copied into ``keep`` (the lab's own go with it)."""
    out: list[RunResult] = []

    def run(mode: Mode, conditions: str, **options: Any) -> RunResult:
        outcome = lab.replay(trace, mode, **options)
        shutil.copytree(outcome.run_dir, keep / outcome.run_dir.name, dirs_exist_ok=True)
        verdict = "faithful" if outcome.result.timing and outcome.result.timing.faithful else "not faithful"
        print(f"  {trace.stem} {mode} {conditions}: exact {outcome.ok}, {verdict}", flush=True)
        out.append(outcome.result)
        return outcome.result

    clean = {mode: run(mode, "clean") for mode in CLEAN}
    for mode in STRESSED:
        set_loss(lab, args.loss)
        try:
            run(mode, f"loss {args.loss:.2%} on every link end")
        finally:
            set_loss(lab, 0.0)
        fault = f"{halfway(clean[mode])} link {args.fault_link} down"
        run(mode, f"fault {fault}", faults=tuple(schedule([fault])))
        lab.link_set(args.fault_link, "up")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out_dir = args.out.resolve()
    pim = "present" if has_multicast_routing() else f"not measured: {NO_MULTICAST_ROUTING}"
    print(f"bench table1: PIM-SM, PIM-SSM: {pim}")
    lab_vars = {**shipped_vars("leaf-spine"), **LAB_VARS}
    with bench_lab("leaf-spine", f"{args.name_prefix}table1", vars=lab_vars) as lab:
        for name in args.traces.split(","):
            trace = ROOT / "workloads" / f"{name}.jsonl"
            runs = runs_of(lab, trace, args, out_dir / name / "runs")
            md, _html = write_report(runs, lab.topo, out_dir / name, title=f"Requirements: {name}")
            for group in groups_of(runs, lab.topo):
                blocks = Requirements().blocks(group)
                if blocks:
                    print(render_markdown(blocks, out_dir), flush=True)
            print(f"bench table1 {name}: {len(runs)} runs, report {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
