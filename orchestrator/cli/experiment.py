"""``aidclab replay LAB TRACE --mode MODE``: the command-line face of ``orchestrator.experiment.driver``."""

from __future__ import annotations

import argparse
from typing import Any

from aidcnet.replay import DEFAULT_MAX_DATAGRAM
from orchestrator.experiment.results import DEFAULT_RESULTS_DIR

# orchestrator.experiment.driver's MODES, repeated so --help does not import the driver and Docker.
MODES = ("unicast", "host-bier", "net-bier")
# orchestrator.experiment.collective's MODES: for traces of allreduce ops (docs/allreduce.md).
ALLREDUCE_MODES = ("ina", "ring", "ps")

DESCRIPTION = """\
Replay a trace (docs/trace-format.md) over a deployed and configured lab in one transport mode, write
the run to RESULTS_DIR/<run-id>/ (docs/results-format.md) and print its summary. Exits 1 if any
expected receiver did not get a message intact (the first missing one is named), or got it twice.

modes:
  unicast    the source sends one copy per receiver, host loopback to host loopback, UDP 4791
  host-bier  the source host is the BFIR: one copy with the receivers' BFR-ids (docs/bier.md)
  net-bier   plain IP multicast from the source's loopback to one group per (source, receivers) of
             the trace (239.100.0.0/16); the leaves are BFIR/BFER. The groups are configured on the
             leaves first (aidclab configure with them added; the vars file is not edited)

AllReduce modes (traces of allreduce ops only; the lab's vars define INA jobs, docs/allreduce.md):
  ina        in-network aggregation on the job's VAT; the root returns the result by BIER
  ring       ring AllReduce between the workers over UDP
  ps         a parameter server host (--ps-host, default the first gpu-host outside the job)
"""

EXAMPLES = """\
examples:
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode unicast
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode host-bier
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode net-bier
  aidclab replay ina-fig1 workloads/allreduce-sample.jsonl --mode ina
  aidclab report latest
"""


def cmd_replay(args: argparse.Namespace) -> int:
    from orchestrator.experiment.driver import replay
    from orchestrator.experiment.report import print_summary
    from orchestrator.lab.topology import load_topology, resolve_lab
    from orchestrator.progress import fail

    topo = load_topology(resolve_lab(args.lab))
    if args.mode in ALLREDUCE_MODES:
        return _replay_allreduce(topo, args)
    outcome = replay(
        topo,
        args.trace,
        args.mode,
        results_dir=args.results_dir,
        max_datagram=args.max_datagram,
        drain_s=args.drain,
        timeout_s=args.timeout,
        gap_us=args.gap_us,
    )
    print_summary([outcome.result])
    if outcome.missing:
        msg_id, host = outcome.missing[0]
        fail(
            f"{len(outcome.missing)} (message, receiver) deliveries missing; first: message {msg_id} to "
            f"{host} (run {outcome.run_dir})"
        )
        return 1
    if outcome.wrong:
        msg_id, host = outcome.wrong[0]
        fail(
            f"{len(outcome.wrong)} wrong deliveries; first: message {msg_id} at {host} "
            f"(run {outcome.run_dir})"
        )
        return 1
    if not outcome.ok:
        fail(f"duplicates delivered (run {outcome.run_dir})")
        return 1
    return 0


def _replay_allreduce(topo: Any, args: argparse.Namespace) -> int:
    from orchestrator.experiment.collective import replay_allreduce
    from orchestrator.progress import console, fail

    def say(text: str) -> None:
        console.print(f"  {text}", highlight=False)

    runs, run_dir = replay_allreduce(
        topo, args.trace, args.mode, args.results_dir, ps_host=args.ps_host, say=say
    )
    for run in runs:
        mib = run.elements * 4 / (1 << 20)
        print(
            f"allreduce job {run.job} {run.mode}: {mib:.2f} MiB x {len(run.replies)} workers in "
            f"{run.seconds:.3f} s, {run.retransmits} retransmits, "
            + run.verdict
        )
    print(f"results: {run_dir}/allreduce.json")
    wrong = [r for r in runs if not r.ok]
    if wrong:
        fail(f"{len(wrong)} AllReduce ops gave a wrong result (run {run_dir})")
        return 1
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "replay",
        help="replay a trace over a configured lab in one transport mode and record the run",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("lab", help="lab name or topology file (deployed and configured)")
    p.add_argument("trace", help="trace file (JSON Lines, docs/trace-format.md)")
    p.add_argument("--mode", required=True, choices=MODES + ALLREDUCE_MODES, help="transport mode")
    p.add_argument("--ps-host", metavar="HOST", help="parameter server host for --mode ps")
    p.add_argument(
        "--results-dir", default=DEFAULT_RESULTS_DIR, metavar="DIR", help=f"default: {DEFAULT_RESULTS_DIR}"
    )
    p.add_argument(
        "--max-datagram",
        type=int,
        default=DEFAULT_MAX_DATAGRAM,
        metavar="BYTES",
        help=f"largest UDP payload per fragment (default {DEFAULT_MAX_DATAGRAM}: fits a 9500 MTU with BIER)",
    )
    p.add_argument(
        "--drain", type=float, default=5.0, metavar="S", help="wait after the last send (default 5)"
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="S", help="beyond the trace duration (default 60)"
    )
    p.add_argument(
        "--gap-us", type=float, default=0.0, metavar="US", help="pause between datagrams a host sends"
    )
    p.set_defaults(func=cmd_replay)
    return p
