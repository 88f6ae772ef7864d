"""``model`` command: what a replay would count, computed instead of measured (docs/scale.md).

The main ``aidclab`` CLI calls ``add_parser(subparsers)``; each leaf parser sets ``func``. The engines are
in ``orchestrator.model``, the experiments' plots in ``orchestrator.model.plots``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aidcnet.modes import COLLECTIVE, MODELLED, Mode, in_order
from orchestrator.cli.args import HelpFormatter, add_lab_argument, add_mode_argument, at_least_one, load_lab

EPILOG = """\
examples:
  aidclab model run leaf-spine workloads/moe-sample.jsonl            every mode, a table
  aidclab model run leaf-spine TRACE --mode host-bier --against results/RUN   exit 1 on any difference
  aidclab model run ina-fig1 ALLREDUCE_TRACE                           ina, ring and ps against ps
  aidclab model run ina-fig1 ALLREDUCE_TRACE --mode ps --ps-host w8      a parameter server of your choice
  aidclab model run superpod TRACE --bandwidth G2:eth2=400G            FARE weights after a link event
  aidclab model run --fabric clos:pods=2,leaves_per_pod=2,supers_per_plane=1 TRACE
  aidclab model generate clos:gpus=1024 -o labs/clos-1024.clab.yml
  aidclab model experiment all --out results/model                  plots and tables of docs/scale.md

Unicast counters inside an ECMP group are the kernel hash's expectation (marked ~); the tier sums are exact.
Predicted completion is fabric time from max-min fair flows over the same paths (docs/scale.md
"Predicted time"); where the kernel's ECMP hash decides a unicast path, the median of --hash-draws draws
of its key, with their range; an op's t is fabric time, as the replay issues it; --against also prints
each run's measured completion over the predicted one.
The x columns are the baseline's bytes over the mode's: unicast for message traces, ps for AllReduce traces.
Ring and ps datagrams follow the unicast routes, so they are hashed wherever unicast is.
"""


def _add_run_parser(sub: Any) -> None:
    r = sub.add_parser(
        "run", help="model a trace over a lab or a generated fabric", formatter_class=HelpFormatter
    )
    add_lab_argument(r, optional=True, help="lab name or topology file (its vars file beside it is used)")
    r.add_argument("trace", help="trace file (docs/trace-format.md)")
    r.add_argument("--fabric", help="a generated fabric instead of a lab, e.g. clos:gpus=1024 (see generate)")
    add_mode_argument(
        r,
        in_order(MODELLED | COLLECTIVE),
        action="append",
        help="mode(s) to model; default every mode the trace allows (ina, ring and ps for allreduce traces)",
    )
    r.add_argument(
        "--ps-host",
        metavar="NODE",
        help="mode ps: the parameter server host, as the replay's --ps-host (default: the first gpu-host "
        "outside each op's job, as the replay picks it)",
    )
    r.add_argument(
        "--bandwidth",
        action="append",
        default=[],
        metavar="NODE:IF=BW",
        help="a link's bandwidth as 'aidclab link set NODE:IF bandwidth BW' sets it (e.g. G2:eth2=400G); "
        "on a BGP lab it moves FARE's weights and the per-plane shares",
    )
    r.add_argument("--down", action="append", default=[], metavar="NODE:IF", help="a link taken down")
    r.add_argument(
        "--hash-draws",
        type=at_least_one,
        default=argparse.SUPPRESS,
        metavar="N",
        help="draws of the kernel's ECMP hash key a unicast prediction takes the median of, where the hash "
        "decides a path (default: the time model's, 9; 1: every member of an ECMP group carries its "
        "expected share)",
    )
    r.add_argument(
        "--qps",
        type=at_least_one,
        default=8,
        metavar="N",
        help="the replay's --qps: the unicast flows (UDP source ports) per host the hash tells apart",
    )
    r.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="a replay run directory to compare with (same trace); exit 1 on any difference",
    )
    r.add_argument("-o", "--output", help="write the model runs and predictions as JSON here")
    r.set_defaults(func=run)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "model",
        help="compute a replay's counters without a lab (scale model, 64k GPUs)",
        description="The scale model: per mode, the bytes and packets per link and direction, source egress, "
        "BIER copies and packets per op that a replay would count, from the lab plan and aidcnet's own "
        "BIFT construction and §6.5 forwarding.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    sub = p.add_subparsers(dest="model_cmd", required=True)
    _add_run_parser(sub)
    g = sub.add_parser(
        "generate",
        help="write a generated fabric as a containerlab topology file",
        formatter_class=HelpFormatter,
    )
    g.add_argument(
        "spec",
        help="clos:gpus=N | clos:pods=..,leaves_per_pod=..,hosts_per_leaf=..,spines_per_pod=..,"
        "supers_per_plane=.. | rail:groups=..,servers_per_group=..,rails=..,spines=.. | superpod:gpus=..",
    )
    g.add_argument("-o", "--output", help="file to write (default: <name>.clab.yml)")
    g.set_defaults(func=run)
    e = sub.add_parser(
        "experiment",
        help="run the scale experiments; plots and tables into --out",
        formatter_class=HelpFormatter,
    )
    e.add_argument("name", choices=("savings", "bsl", "state", "all"))
    e.add_argument("--out", default="results/model", help="directory for the PNG plots and markdown tables")
    e.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192, 65536], help="GPU counts")
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return {"run": _run, "generate": _generate, "experiment": _experiment}[args.model_cmd](args)


def _plan_model(args: argparse.Namespace) -> Any:
    from orchestrator.configure.plan import build_plan
    from orchestrator.configure.plan.schema import LabVars
    from orchestrator.model.exact import PlanModel

    if args.fabric:
        from orchestrator.model.fabrics import parse_fabric

        return PlanModel(build_plan(parse_fabric(args.fabric).topology(), LabVars()), **_links(args))
    if not args.lab:
        raise ValueError("give a lab (name or topology file) or --fabric SPEC")
    return PlanModel(build_plan(load_lab(args.lab)), **_links(args))


def _links(args: argparse.Namespace) -> dict[str, Any]:
    from aidcnet.fare.bandwidth import bytes_to_bits, parse_bandwidth

    bandwidth = {}
    for item in args.bandwidth:
        where, sep, bw = item.partition("=")
        if not sep or ":" not in where:
            raise ValueError(f"--bandwidth {item!r}: write NODE:IF=BW, e.g. G2:eth2=400G")
        bandwidth[where] = bytes_to_bits(parse_bandwidth(bw))
    return {"bandwidth": bandwidth, "down": list(args.down)}


def _run(args: argparse.Namespace) -> int:
    from orchestrator.model.timing import TimeModel

    model = _plan_model(args)
    ops = _read_ops(args.trace)
    reduce = any(op.op == "allreduce" for op in ops)
    modes = args.mode or list(in_order(COLLECTIVE if reduce else MODELLED))
    runs = {m: model.run(ops, m, ps_host=args.ps_host) for m in modes}
    _print_counts(runs)
    timer = TimeModel(model, _conditions(args), **_draws(args))
    predicted = {m: timer.predict(ops, m, None, args.ps_host) for m in modes}
    print("predicted completion (fabric time):")
    for p in predicted.values():
        print(f"  {p.describe()}")
        for note in p.notes:
            print(f"    note: {note}")
    bad = 0
    for run_dir in args.against:
        bad += _against(args, model, ops, runs, run_dir)
    if args.output:
        doc = {m: {**runs[m].to_dict(), "prediction": predicted[m].to_dict()} for m in modes}
        Path(args.output).write_text(json.dumps(doc, indent=1, default=str))
        print(f"wrote {args.output}")
    return 1 if bad else 0


def _draws(args: argparse.Namespace) -> dict[str, int]:
    """The TimeModel's hash draws and QPs as the command line gives them."""
    draws = getattr(args, "hash_draws", None)
    return {"qps": args.qps} | ({} if draws is None else {"hash_draws": draws})


def _read_ops(trace: str) -> list[Any]:
    from orchestrator.workloads.trace import TraceReader

    with TraceReader(trace) as reader:
        return list(reader)


def _print_counts(runs: dict[str, Any]) -> None:
    base = runs.get(Mode.UNICAST) or runs.get(Mode.PS)
    print(
        f"{'mode':<10} {'source egress B':>16} {'fabric B':>14} {'egress x':>9} {'fabric x':>9} "
        f"{'BIER pkts/op':>12} {'exact links':>12}"
    )
    for m, r in runs.items():
        ex = sum(lk.a_to_b_exact + lk.b_to_a_exact for lk in r.links)
        eg = (
            f"{base.source_egress_bytes / r.source_egress_bytes:.2f}"
            if base and r.source_egress_bytes
            else "-"
        )
        fb = f"{base.total_fabric_bytes / r.total_fabric_bytes:.2f}" if base and r.total_fabric_bytes else "-"
        ppo = r.stats.get("bier_packets_per_op")
        print(
            f"{m:<10} {r.source_egress_bytes:>16,} {round(r.total_fabric_bytes):>14,} {eg:>9} {fb:>9} "
            f"{'-' if ppo is None else f'{ppo:.2f}':>12} {ex:>6}/{2 * len(r.links)}"
        )
    for m, r in runs.items():
        for line in _aggregation_lines(m, r.stats):
            print(line)


def _conditions(args: argparse.Namespace) -> Any:
    from orchestrator.model.timing import LinkConditions

    bandwidth = _links(args)["bandwidth"]
    return LinkConditions({k: round(v) for k, v in bandwidth.items()}, tuple(args.down))


def _against(args: argparse.Namespace, model: Any, ops: list[Any], runs: dict[str, Any], run_dir: str) -> int:
    """Counters against the run's (1 when any differs), and its completion against the prediction under
    the run's own conditions and time scale."""
    from orchestrator.experiment.metrics import metrics_of
    from orchestrator.experiment.results import load_run
    from orchestrator.model.compare import differences
    from orchestrator.model.timing import LinkConditions, TimeModel

    measured = load_run(run_dir)
    mode = measured.meta.mode
    ps_host = measured.meta.settings.get("ps_host") or args.ps_host
    if mode not in runs:
        runs[mode] = model.run(ops, mode, ps_host=ps_host)
    diff = differences(runs[mode], measured, model.tiers)
    print(f"against {run_dir} ({mode}): {'equal' if not diff else f'{len(diff)} difference(s)'}")
    for d in diff:
        print(f"  {d}")
    timing = measured.timing
    fabric = metrics_of(measured).completion_fabric_time
    if timing is None or timing.scale is None or fabric is None:
        print("  time: the run's links were not shaped, or it has no completion: no fabric time to compare")
        return int(bool(diff))
    conditions = LinkConditions.of(measured.meta.settings.get("conditions"))
    same = conditions == _conditions(args)
    drawn = _draws(args) | {"qps": int(measured.meta.settings.get("qps") or args.qps)}
    if same:
        timer = TimeModel(model, conditions, **drawn)
    else:
        timer = TimeModel.for_plan(model.plan, conditions, **drawn)
    p = timer.predict(ops, mode, None, ps_host)
    print(
        f"  time: measured {fabric * 1e6:.4g} µs fabric at 1:{timing.scale}, "
        f"predicted {p.completion_s * 1e6:.4g} µs: measured/predicted {fabric / p.completion_s:.2f}×"
    )
    return int(bool(diff))


def _aggregation_lines(mode: str, stats: dict[str, Any]) -> list[str]:
    """Where an AllReduce mode's bytes converge: each job's INA root or parameter server, and for the ring
    the busiest worker (bench/allreduce.py reads the same figures off a replay's link counters)."""
    if mode == Mode.INA:
        roots = stats.get("ina_root_bytes_in", {})
        return [f"{mode}: job {j} root takes in {b:,} B" for j, b in roots.items()]
    bytes_in = stats.get("bytes_in", {})
    if mode == Mode.PS:
        return [
            f"{mode}: job {j} parameter server {h} takes in {bytes_in[h][0]:,} B / {bytes_in[h][1]:,} packets"
            for j, h in stats.get("ps_hosts", {}).items()
        ]
    if mode == Mode.RING and bytes_in:
        w = max(bytes_in, key=lambda n: bytes_in[n][0])
        return [f"{mode}: busiest worker {w} takes in {bytes_in[w][0]:,} B / {bytes_in[w][1]:,} packets"]
    return []


def _generate(args: argparse.Namespace) -> int:
    import yaml

    from orchestrator.model.fabrics import parse_fabric

    fabric = parse_fabric(args.spec)
    doc = fabric.clab()
    out = Path(args.output or f"{fabric.name}.clab.yml")
    out.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    nodes = doc["topology"]["nodes"]
    print(f"wrote {out}: {len(nodes)} nodes, {len(doc['topology']['links'])} links")
    return 0


def _experiment(args: argparse.Namespace) -> int:
    from orchestrator.model.plots import write_experiment

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = ["savings", "bsl", "state"] if args.name == "all" else [args.name]
    for name in names:
        png, md, table = write_experiment(name, tuple(args.sizes), out)
        print(f"{name}: {png}, {md}")
        sys.stdout.write(table)
    return 0
