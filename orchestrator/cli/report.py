"""``report`` command: compare replay runs side by side (Markdown + HTML with PNG plots, terminal table).

The main ``aidclab`` CLI calls ``add_parser(subparsers)``; the leaf parser sets ``func`` (called with the
parsed namespace, returns an exit code). Run alone as ``python -m orchestrator.cli.report RUN...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orchestrator.experiment.records import ResultsError, RunResult
from orchestrator.experiment.results import DEFAULT_RESULTS_DIR, latest_experiment, load_run, resolve_run

PROG = "python -m orchestrator.cli.report"

DESCRIPTION = """\
Compare replay runs side by side. Runs of the same lab and trace form one group with one column per
mode (unicast first, as the baseline of the ratios). Writes report.md and report.html (self-contained:
plots inlined) plus PNGs: bytes per link as a heat map over the topology, source egress per mode and
latency CDFs. The summary table is printed too.

RUN is a run id (a directory name under --results-dir), a run directory, a run.json file, or
'latest': the newest run together with the newest run of every other mode for the same lab and trace.
"""

EXAMPLES = """\
examples:
  aidclab report latest
  aidclab report 20250314T101502.123456Z-leaf-spine-unicast 20250314T101533.918204Z-leaf-spine-net-bier
  aidclab report results/*-leaf-spine-* --out /tmp/leaf-spine-report
  aidclab report latest --results-dir /data/aidclab-results --topology labs/leaf-spine.clab.yml

The file formats and how to read a report: docs/results-format.md
"""


def resolve_specs(specs: list[str], results_dir: str | Path) -> list[Path]:
    """run.json paths for the RUN arguments, in argument order, each once."""
    out: list[Path] = []
    for spec in specs:
        paths = latest_experiment(results_dir) if spec == "latest" else [resolve_run(spec, results_dir)]
        for p in paths:
            if p.resolve() not in {q.resolve() for q in out}:
                out.append(p)
    return out


def default_out_dir(runs: list[RunResult], results_dir: str | Path) -> Path:
    newest = max(r.run_id for r in runs)
    suffix = "" if len(runs) == 1 else f"+{len(runs) - 1}"
    return Path(results_dir) / "reports" / f"{newest}{suffix}"


def _topology_for(args: argparse.Namespace, runs: list[RunResult]) -> Any:
    from orchestrator.lab.topology import TopologyError, load_topology, resolve_lab

    if args.topology:
        return load_topology(resolve_lab(args.topology))
    # The lab file may have changed or vanished since the run; the link ids in the run still draw the
    # graph, only without nodes that carried no link, so a stale file is not worth failing over.
    for run in runs:
        path = run.meta.topology_file
        if path and Path(path).is_file():
            try:
                return load_topology(path)
            except TopologyError:
                continue
    return None


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.experiment.report import print_summary, write_report
    from orchestrator.progress import Phases, console

    phases = Phases("report")
    with phases.phase("load", f"{' '.join(args.runs)} from {args.results_dir}/"):
        paths = resolve_specs(args.runs, args.results_dir)
        runs = [load_run(p, args.results_dir) for p in paths]
        topology = _topology_for(args, runs)
    out = Path(args.out) if args.out else default_out_dir(runs, args.results_dir)
    with phases.phase("write", f"{len(runs)} run(s) -> {out}/"):
        md, html = write_report(runs, topology, out, title=args.title or "aidclab report")
    print_summary(runs)
    console.print(f"  {md}\n  {html}")
    phases.summary(f"{len(runs)} run(s) compared, report: {html}")
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report",
        help="compare replay runs: Markdown/HTML report with plots, and a summary table",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run id, run directory, run.json, or 'latest'")
    p.add_argument(
        "-o",
        "--out",
        metavar="DIR",
        help="where to write report.md, report.html and the PNGs "
        "(default: RESULTS_DIR/reports/<newest run id>[+N])",
    )
    p.add_argument(
        "--results-dir",
        default=DEFAULT_RESULTS_DIR,
        metavar="DIR",
        help=f"where run directories live (default: {DEFAULT_RESULTS_DIR})",
    )
    p.add_argument(
        "--topology",
        metavar="LAB",
        help="lab name or topology file for the heat-map layout (default: the file recorded in the run, "
        "else the graph of the measured links)",
    )
    p.add_argument("--title", help="report title (default: aidclab report)")
    p.set_defaults(func=cmd_report)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="aidclab run reports")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from orchestrator.lab.topology import TopologyError
    from orchestrator.progress import fail

    argv = list(sys.argv[1:] if argv is None else argv)
    # Standalone use needs no subcommand word, but accept it so commands copied from aidclab docs work.
    if not argv or argv[0] != "report":
        argv = ["report", *argv]
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ResultsError, TopologyError, ValueError) as exc:
        fail(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
