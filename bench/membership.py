"""Memberships on leaf-spine (issue 14): the MoE sample trace in the ``igmp`` and ``proxy`` replay modes,
all in one process on one deployed lab, so each ratio is against the other mode measured in the same run:

* membership latency (the join or report a host issued -> its receiver carried: the BFIR's flow holds its
  BFER and that BFER's member ports its port, fabric time; the lead is no part of it) and control traffic
  counted by the agents against the sources' data bytes, at the trace's own pace;
* the highest rate of receiver-set changes each mode sustains with exact delivery: the trace's op times
  are multiplied by a stretch (halved while delivery stays exact, doubled while not, then bisected;
  orchestrator/experiment/membership.py ``next_stretch``), and the rate is the run's changes over its
  span (first op to the last op's data, fabric seconds: the ops' t and the lead in fabric time).

The leaves' control planes are modelled (--control-cost, fabric µs per control message, served one at a
time in arrival order; docs/igmp.md): a membership latency is then the links' time and the model's, not
our agents' Python, and each mode's line says whether it was (no message applied late, the run faithful).
--control-cost 0 turns the model off (the latency is then our speed, and the line says so).

Each mode runs at its default lead (docs/igmp.md: igmp 1 s of wall time plus the modelled control planes'
time for the trace's largest burst, proxy that time alone) unless --lead-igmp / --lead-proxy give one.
With --search-lead, each mode first gets the shortest lead with exact delivery at the trace's own pace
(the same search over a factor of that lead; a lead of 0 stays 0): how long a source must wait for its
receivers' set to reach its first-hop router; the rate search then runs at that lead.

Deploys its own lab (``bench-membership`` by default, every host a proxy source, the shipped
time.scale), configures it per mode (the BFIRs take BitStrings from that mode's signalling alone; a long
Query Interval, see --query-interval) and destroys it. The lead (wall ms) is fixed per mode for the
whole rate search.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from aidcnet.modes import MEMBERSHIP, Mode, in_order  # noqa: E402
from aidcnet.timescale import TimeScale  # noqa: E402
from bench.harness import bench_lab, bench_parser, set_vars  # noqa: E402
from orchestrator.experiment.membership import (  # noqa: E402
    RateTrial,
    control_overhead,
    control_plane,
    fastest,
    latency_is,
    latency_verdict,
    next_stretch,
    stretch_ops,
)
from orchestrator.experiment.modes import mode_class  # noqa: E402
from orchestrator.experiment.modes.igmp import STATIC  # noqa: E402
from orchestrator.workloads.trace import TraceReader, write_trace  # noqa: E402

TRACE = ROOT / "workloads" / "moe-sample.jsonl"
MODES = in_order(MEMBERSHIP)


@dataclass
class Trace:
    """The sample trace, read once: each trial writes it stretched."""

    header: Any
    ops: list


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--lead-igmp", type=float, default=None, metavar="MS", help="default: the mode's own")
    p.add_argument("--lead-proxy", type=float, default=None, metavar="MS", help="default: the mode's own")
    p.add_argument("--max-runs", type=int, default=6, help="runs per mode in the change-rate search")
    p.add_argument(
        "--lead-runs", type=int, default=None, help="runs per mode in the lead search (default: --max-runs)"
    )
    p.add_argument(
        "--search-lead",
        action="store_true",
        help="first find each mode's shortest exact lead (a lead of 0 without the model stays 0)",
    )
    p.add_argument(
        "--control-cost",
        type=float,
        default=5.0,
        metavar="US",
        help="fabric microseconds per control message at each leaf's modelled control plane; 0: not modelled",
    )
    p.add_argument(
        "--control-cost-record",
        type=float,
        default=0.0,
        metavar="US",
        help="fabric microseconds added per IGMPv3 group record a control message carries (per-(S,G) work)",
    )
    p.add_argument(
        "--query-interval",
        type=float,
        default=100000.0,
        metavar="US",
        help="IGMP Query Interval in fabric microseconds (0: the plan's, 20 s on the wall clock). Long by "
        "default: the RFC's 125 s is ages against the trace, and at the plan's 1 ms of fabric time the "
        "periodic queries and refreshes would load the modelled control planes as no fabric would",
    )
    return p


def mode_vars(mode: Mode, args: argparse.Namespace) -> dict[str, Any]:
    """IGMP at the leaves, every host allowed to send Receiver Proxy Reports (docs/igmp.md), the BFIRs
    taking their BitStrings from this mode's signalling alone (as tests/e2e/test_igmp_replay.py runs
    proxy): the other mode's state would answer for it, and its reports would load the control planes."""
    igmp: dict[str, Any] = {
        "enabled": True,
        "proxy_hosts": "all",
        "control_cost": args.control_cost / 1e6,
        "control_cost_record": args.control_cost_record / 1e6,
        "groups": [STATIC, mode_class(mode).group_source],
    }
    if args.query_interval:
        igmp["query_interval"] = args.query_interval / 1e6
    return dict(igmp=igmp)


def initial_leads(args: argparse.Namespace) -> dict[Mode, float | None]:
    """Each mode's lead (wall s) from the options; None: the mode's default for the lab and the trace."""
    given = {Mode.IGMP: args.lead_igmp, Mode.PROXY: args.lead_proxy}
    return {mode: None if ms is None else ms / 1e3 for mode, ms in given.items()}


def one_run(lab: Lab, trace: Path, mode: Mode, lead_s: float | None) -> dict[str, Any]:
    outcome = lab.replay(trace, mode, lead_s=lead_s)
    result = outcome.result
    m = result.metrics
    assert m is not None
    member = result.meta.settings.get("membership") or {}
    scale = result.timing.scale if result.timing is not None else None
    faithful = None if result.timing is None else result.timing.faithful
    plane = control_plane(result.agents)
    return {
        "exact": outcome.ok,
        "faithful": faithful,
        "scale": scale,
        "lead_s": float(result.meta.settings.get("lead_s") or 0.0),
        "member": member,
        "control": control_overhead(result.agents)["total"],
        "data": m.source_egress_bytes,
        "plane": plane,
        "why": latency_verdict(float(result.meta.settings.get("control_cost_s") or 0), plane, faithful),
    }


def trial(lab: Lab, trace: Trace, mode: Mode, lead_s: float | None, stretch: float) -> dict[str, Any]:
    path = lab.workdir / f"moe-{mode}-{stretch:.6g}.jsonl"
    stretched = stretch_ops(trace.ops, stretch)
    write_trace(path, trace.header, stretched)
    r = one_run(lab, path, mode, lead_s)
    times = [op.t for op in stretched]  # fabric seconds; the lead is wall time, at the run's scale
    span = max(times) - min(times) + TimeScale.of(r["scale"]).fabric_s(r["lead_s"])
    r["trial"] = RateTrial(stretch, r["exact"], int(r["member"].get("changes", 0)), span)
    print(
        f"  {mode} lead {r['lead_s'] * 1e3:g} ms stretch {stretch:.4g}: exact {r['exact']}, faithful "
        f"{r['faithful']}, changes {r['trial'].changes} over {span * 1e3:.4f} ms, control messages "
        f"{r['plane']['served']} served {r['plane']['late']} late",
        flush=True,
    )
    return r


def shortest_lead(lab: Lab, trace: Trace, mode: Mode, lead_s: float, max_runs: int):
    """The shortest lead (a factor of ``lead_s``, same search as the stretch) with exact delivery at the
    trace's own pace: how long a source must wait for its receiver set to reach its first-hop router.
    Returns the lead and that run (the exact one, or the longest lead's when none was exact)."""
    trials: list[RateTrial] = []
    runs: dict[float, dict[str, Any]] = {}
    factor = 1.0
    while True:
        r = runs[factor] = trial(lab, trace, mode, lead_s * factor, 1.0)
        trials.append(RateTrial(factor, r["exact"], 1, factor))
        nxt = next_stretch(trials)
        if nxt is None or len(trials) >= max_runs:
            break
        factor = nxt
    exact = [t.stretch for t in trials if t.exact]
    chosen = min(exact) if exact else max(t.stretch for t in trials)
    found = lead_s * chosen
    print(f"  {mode} shortest exact lead {found * 1e3:.3f} ms (wall) after {len(trials)} runs", flush=True)
    return found, runs[chosen]


def measure(lab: Lab, trace: Trace, mode: Mode, leads: dict[Mode, float | None], args: argparse.Namespace):
    """``mode``'s run at the trace's own pace (after the lead search, with --search-lead; the lead found
    replaces ``leads[mode]``), then the change-rate search; returns that run and the fastest exact trial."""
    set_vars(lab, mode_vars(mode, args))
    lab.configure()
    r = trial(lab, trace, mode, leads[mode], 1.0)
    leads[mode] = r["lead_s"]  # the mode's default, when it chose
    if r["lead_s"] > 0 and args.search_lead:
        # The search's run at the lead it found is this mode's run at the trace's pace.
        leads[mode], r = shortest_lead(lab, trace, mode, r["lead_s"], args.lead_runs or args.max_runs)
    trials = [r["trial"]]
    while len(trials) < args.max_runs and (nxt := next_stretch(trials)) is not None:
        trials.append(trial(lab, trace, mode, leads[mode], nxt)["trial"])
    return r, fastest(trials)


def fmt_ms(v: Any) -> str:
    return "n/a" if v is None else f"{v * 1e3:.3f} ms"


def mode_lines(mode: Mode, r: dict[str, Any], b: RateTrial | None, lead_s: float) -> None:
    m = r["member"]
    ratio = r["control"]["bytes"] / r["data"] if r["data"] else float("nan")
    rate = "none exact" if b is None else f"{b.rate:.0f} changes/s at stretch {b.stretch:.4g}"
    lead = f"lead {lead_s * 1e3:g} ms"
    if r["scale"]:
        lead += f" ({TimeScale.of(r['scale']).fabric_s(lead_s) * 1e6:.3f} µs fabric)"
    print(
        f"  {mode:6s} {lead}: exact {r['exact']}, faithful {r['faithful']}, "
        f"changes {m.get('changes')}, membership latency p50 {fmt_ms(m.get('latency_p50_s'))} "
        f"p99 {fmt_ms(m.get('latency_p99_s'))} ({m.get('time')}), wrong {m.get('wrong')}, "
        f"missed {m.get('missed')}, control {r['control']['packets']} packets / "
        f"{r['control']['bytes']} B against {r['data']} B data ({ratio:.2%}); "
        f"control messages served {r['plane']['served']}, late {r['plane']['late']}; highest rate {rate}"
    )
    p = r["plane"]
    if p["served"]:
        queued_fabric_s = TimeScale.of(r["scale"]).fabric_s_of_ns(p["wait_ns"] / p["served"])
        print(
            f"  {mode:6s} control plane per message: model {p['service_ns'] / p['served'] / 1e6:.3f} ms "
            f"wall mean; "
            f"ours {p['busy_ns'] / p['served'] / 1e6:.3f} ms wall; "
            f"mean lateness {p['lateness_ns'] / p['served'] / 1e6:.3f} ms wall; "
            f"queued behind others {queued_fabric_s * 1e6:.3f} µs fabric mean; "
            f"unstamped {p['unstamped']}"
        )
    print(f"  {mode:6s} membership latency: {latency_is(r['why'])}")


def report(args, trace: Trace, leads, first: dict[Mode, dict[str, Any]], best) -> None:
    model = f"{args.control_cost:g} µs fabric per control message" if args.control_cost else "not modelled"
    if args.control_cost and args.control_cost_record:
        model += f" + {args.control_cost_record:g} µs per group record"
    qi = f"{args.query_interval:g} µs fabric" if args.query_interval else "the plan's"
    print(
        f"bench membership leaf-spine: {TRACE.name}, {len(trace.ops)} ops, control plane {model}, "
        f"query interval {qi}"
    )
    for mode in MODES:
        mode_lines(mode, first[mode], best[mode], leads[mode])
    pi, pp = (first[m]["member"].get("latency_p50_s") for m in in_order(MEMBERSHIP))
    bi, bp = best[Mode.IGMP], best[Mode.PROXY]
    if pi and pp:
        print(f"  ratio membership latency p50 igmp/proxy {pi / pp:.1f}x")
    if bi and bp and bi.rate and bp.rate:
        print(f"  ratio highest change rate proxy/igmp {bp.rate / bi.rate:.1f}x")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    leads = initial_leads(args)
    with TraceReader(TRACE) as reader:
        trace = Trace(reader.header, list(reader))
    first: dict[Mode, dict[str, Any]] = {}
    best: dict[Mode, RateTrial | None] = {}
    name = f"{args.name_prefix}membership"
    # Configured per mode (measure): each mode's BFIRs take their BitStrings from its signalling alone.
    with bench_lab("leaf-spine", name, vars=mode_vars(MODES[0], args), configure=False) as lab:
        for mode in MODES:
            first[mode], best[mode] = measure(lab, trace, mode, leads, args)
    report(args, trace, leads, first, best)
    return 0 if all(first[m]["exact"] for m in MODES) else 1


if __name__ == "__main__":
    sys.exit(main())
