"""``aidclab replay LAB TRACE --mode MODE``: the command-line face of ``orchestrator.run.driver``."""

from __future__ import annotations

import argparse
from typing import Any

from aidcnet.replay import DEFAULT_MAX_DATAGRAM
from orchestrator.cli.args import HelpFormatter, add_lab_argument, add_mode_argument, at_least_one
from orchestrator.experiment.fidelity import CONFIRM_STEPS
from orchestrator.experiment.results import DEFAULT_RESULTS_DIR

DESCRIPTION = """\
Replay a trace (docs/trace-format.md) over a deployed and configured lab in one transport mode, write
the run to RESULTS_DIR/<run-id>/ (docs/results-format.md) and print its summary. Exits 1 if any
expected receiver did not get a message intact (the first missing one is named), got it twice, or a
collective gave a wrong result.
"""

EXAMPLES = """\
examples:
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode unicast
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode host-bier
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode net-bier
  aidclab replay ina-fig1 workloads/allreduce-sample.jsonl --mode ina
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode host-bier --confirm
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode host-bier --find-scale
  aidclab replay leaf-spine workloads/moe-sample.jsonl --mode reliable-host-bier --fault "14us restart spine2"
  aidclab replay leaf-spine moe-step.jsonl --mode host-bier --allreduce ina   # a closed-loop step
  aidclab report latest
"""


def modes_text() -> str:
    """The modes, by family, from the registry (each mode's own one-line summary)."""
    import textwrap

    from orchestrator.experiment.modes import registered
    from orchestrator.experiment.modes.base import Family

    heads = {
        Family.MESSAGES: "modes for traces of unicast and multicast ops:",
        Family.COLLECTIVE: "modes for traces of allreduce ops (INA jobs from lab vars, docs/allreduce.md):",
    }
    out = []
    for family, head in heads.items():
        out.append(head)
        for mode, cls in registered().items():
            if cls.family is family:
                text = cls.summary + (" (the baseline)" if cls.is_baseline() else "")
                lines = textwrap.wrap(text, 88) or [""]
                out.append(f"  {mode:<10} {lines[0]}")
                out += [f"  {'':<10} {line}" for line in lines[1:]]
        out.append("")
    return "\n".join(out)


def cmd_replay(args: argparse.Namespace) -> int:
    from orchestrator.cli.args import load_lab
    from orchestrator.experiment.modes.base import RunOptions
    from orchestrator.experiment.report import print_summary
    from orchestrator.lab.fault_spec import FaultSpecError, schedule
    from orchestrator.progress import fail
    from orchestrator.run.driver import run_experiment
    from orchestrator.run.prediction import step_predictor

    try:
        faults = tuple(schedule(args.fault))
    except FaultSpecError as exc:
        fail(str(exc))
        return 2
    options = RunOptions(
        faults=faults,
        max_datagram=args.max_datagram,
        drain_s=args.drain,
        timeout_s=args.timeout,
        gap_us=args.gap_us,
        qps=args.qps,
        ps_host=args.ps_host,
        lead_s=None if args.lead is None else args.lead / 1e3,
        allreduce=args.allreduce,
        compute=args.compute,
        predict_step=step_predictor,
    )
    if args.find_scale:
        return cmd_find_scale(args, options)
    lab = load_lab(args.lab)
    outcome = run_experiment(lab, args.trace, args.mode, options, results_dir=args.results_dir)
    if args.confirm is not None and outcome.ok:
        outcome = confirm_outcome(lab, args, options, outcome)
    if outcome.mode.lines:
        # A mode with its own account of the run (a collective: one line per AllReduce) prints that.
        for line in outcome.mode.lines:
            print(line)
    else:
        print_summary([outcome.result])
    for name in outcome.mode.files:
        print(f"results: {outcome.run_dir / name}")
    if outcome.missing:
        msg_id, host = outcome.missing[0]
        fail(
            f"{len(outcome.missing)} (message, receiver) deliveries missing; first: message {msg_id} to "
            f"{host} (run {outcome.run_dir})"
        )
        return 1
    if outcome.wrong:
        msg_id, host = outcome.wrong[0]
        run = outcome.run_dir
        fail(f"{len(outcome.wrong)} wrong deliveries; first: message {msg_id} at {host} (run {run})")
        return 1
    if outcome.mode.problem is not None:
        fail(f"{outcome.mode.problem} (run {outcome.run_dir})")
        return 1
    if not outcome.ok:
        fail(f"duplicates delivered (run {outcome.run_dir})")
        return 1
    return 0


def confirm_outcome(lab: Any, args: argparse.Namespace, options: Any, first: Any) -> Any:
    """The run, confirmed (or not) by a run at ``--confirm`` times its scale, climbing up to
    ``--confirm-steps`` comparisons while they disagree; prints each further run's line and the last
    comparison. Returns the first run with its amended verdict."""
    from orchestrator.experiment.report import print_summary
    from orchestrator.run.driver import confirm_rising

    runs, check = confirm_rising(
        lab,
        args.trace,
        args.mode,
        first,
        options,
        steps=args.confirm_steps,
        factor=args.confirm,
        results_dir=args.results_dir,
    )
    quiet = [run.result for run in runs[1:] if not run.mode.lines]
    if quiet:
        print_summary(quiet)
    if check is None:
        print("not confirmed: one of the two runs has no fabric completion (unshaped links?)")
    else:
        print(check.describe())
    return first


def cmd_find_scale(args: argparse.Namespace, options: Any) -> int:
    from orchestrator.cli.args import load_lab
    from orchestrator.experiment.scale_search import describe, smallest_faithful
    from orchestrator.run.driver import search_scale

    trials = search_scale(
        load_lab(args.lab),
        args.trace,
        args.mode,
        options,
        results_dir=args.results_dir,
        max_runs=args.max_runs,
    )
    print(f"scale search for {args.mode} of {args.trace} on {args.lab}:")
    for line in describe(trials):
        print(f"  {line}")
    return 0 if smallest_faithful(trials) is not None else 1


CALIBRATE_DESCRIPTION = """\
Measure what this machine's software costs per packet on a configured lab: two replays of a small MoE
dispatch over every GPU host (unicast, then host-BIER) at the lab's own scale, from every node's CPU
seconds and the packets its links counted (on a lab with delay, the delay relay's CPU per packet it held
too, docs/delay.md). Keeps clab-<lab>/calibration.json, which time.scale: auto
reads to choose the smallest scale at which a trace stays faithful (docs/time-and-fidelity.md). Run it
again after changing the lab's dataplane or moving to another machine.
"""


def cmd_calibrate(args: argparse.Namespace) -> int:
    from orchestrator.cli.args import load_lab
    from orchestrator.run.driver import calibrate

    calibrate(load_lab(args.lab), say=lambda text: print(f"  {text}"))
    return 0


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "calibrate",
        help="measure this machine's CPU per packet on a configured lab (for time.scale: auto)",
        description=CALIBRATE_DESCRIPTION,
        epilog="example:\n  aidclab calibrate leaf-spine",
        formatter_class=HelpFormatter,
    )
    add_lab_argument(p, help="lab name or topology file (deployed and configured)")
    p.set_defaults(func=cmd_calibrate)
    return p


def add_step_arguments(p: argparse.ArgumentParser) -> None:
    """What a closed-loop step's replay takes beyond its mode (docs/training.md)."""
    from aidcnet.modes import STEP_COLLECTIVES, in_order

    add_mode_argument(
        p, in_order(STEP_COLLECTIVES), dest="allreduce", flag="--allreduce",
        help="a closed-loop step (docs/training.md): the collective mode its AllReduce ops run in while "
        "its messages travel in --mode",
    )  # fmt: skip
    p.add_argument(
        "--compute",
        choices=["wait", "work"],
        default="wait",
        help="a closed-loop step: each compute phase is a wait of its fabric seconds x the time scale "
        "(wait), or real arithmetic on the host's CPU for that long (work)",
    )


TIMEOUT_HELP = (
    "give up on a run once S seconds (wall) past the trace's duration have gone by with nothing sent or "
    "received at any host (a reliable mode waits its largest RTO more)"
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from orchestrator.experiment.modes import registered

    p = subparsers.add_parser(
        "replay",
        help="replay a trace over a configured lab in one transport mode and record the run",
        description=DESCRIPTION + "\n" + modes_text(),
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_lab_argument(p, help="lab name or topology file (deployed and configured)")
    p.add_argument("trace", help="trace file (JSON Lines, docs/trace-format.md)")
    add_mode_argument(p, registered(), required=True, help="transport mode (see above)")
    p.add_argument("--ps-host", metavar="HOST", help="parameter server host of --mode or --allreduce ps")
    add_step_arguments(p)
    p.add_argument(
        "--lead",
        type=float,
        metavar="MS",
        help="igmp/proxy: milliseconds (wall) from the moment an op's receivers are known (joins or "
        "proxy report issued) to its data; default 50 for igmp, 0 for proxy (docs/igmp.md)",
    )
    p.add_argument("--results-dir", default=DEFAULT_RESULTS_DIR, metavar="DIR", help="where runs are written")
    p.add_argument(
        "--max-datagram",
        type=int,
        default=DEFAULT_MAX_DATAGRAM,
        metavar="BYTES",
        help="largest replay fragment per datagram; each UDP payload is it plus the 12-byte RoCEv2 BTH "
        "(the default fits a 9500 MTU with BIER; docs/replay-payload.md)",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=5.0,
        metavar="S",
        help="once every sender is done, stop after S seconds (wall) in which nothing was sent or "
        "received (what the senders queued on slow links is still waited for)",
    )
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help=TIMEOUT_HELP)
    p.add_argument(
        "--gap-us", type=float, default=0.0, metavar="US", help="pause between datagrams a host sends"
    )
    p.add_argument(
        "--qps",
        type=int,
        default=8,
        metavar="N",
        help="unicast flows per sending host (UDP source ports 49152+): what per-flow ECMP/FARE hashes over",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar='"AT WHAT"',
        help="a fault during the run, repeatable (docs/faults.md): at AT of fabric time after the run's "
        "zero (the trace's t = 0; 8us, 0.5ms, 1e-5s), 'link NODE:IF down|up|bandwidth BW|loss P ...' as "
        "aidclab link set does it (add 'for D' to undo it D later), 'node NODE down [for D]' (every link of "
        "NODE at once: a dead node), or 'restart NODE' (a BFR's or INA switch's agent restarts in place and "
        "loses its state). The run records when each took effect; one that fails or never comes makes the "
        "command exit 1",
    )
    add_fidelity_arguments(p)
    p.set_defaults(func=cmd_replay)
    return p


def add_fidelity_arguments(p: argparse.ArgumentParser) -> None:
    """The replay's checks of its own time: a confirmation at a second scale, or a scale search."""
    p.add_argument(
        "--confirm",
        type=float,
        nargs="?",
        const=2.0,
        metavar="FACTOR",
        help="then replay the same trace at FACTOR times the lab's scale (default 2) and hold the two to "
        "time dilation's test: the same fabric completion within 5%% and the same bytes. A run more than "
        "1.25x its predicted time is faithful only when so confirmed (docs/time-and-fidelity.md)",
    )
    p.add_argument(
        "--confirm-steps",
        type=at_least_one,
        default=CONFIRM_STEPS,
        metavar="N",
        help="with --confirm: while two runs disagree, hold the more dilated one to a run at FACTOR times "
        "its own scale, up to N comparisons in all (default %(default)s). A disagreement means the less "
        "dilated run was paced by something other than its links; it stays NOT confirmed, and the run the "
        "climb confirms is saved beside it",
    )
    p.add_argument(
        "--find-scale",
        action="store_true",
        help="instead of one run, search for the smallest time scale at which this trace and mode stay "
        "faithful: runs at the lab's scale, halves it while faithful (doubles it while not), narrows the "
        "gap; reshapes the links between runs and restores the lab's scale after (docs/time-and-fidelity.md)",
    )
    p.add_argument(
        "--max-runs", type=int, default=6, metavar="N", help="runs --find-scale may use (default 6)"
    )
