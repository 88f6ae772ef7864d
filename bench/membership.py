"""Memberships on leaf-spine (issue 14): the MoE sample trace in the ``igmp`` and ``proxy`` replay modes,
all in one process on one deployed lab, so each ratio is against the other mode measured in the same run:

* membership latency (receiver set known at the source -> first packet at each new receiver, fabric
  time) and control traffic counted by the agents against the sources' data bytes, at the trace's own
  pace;
* the highest rate of receiver-set changes each mode sustains with exact delivery: the trace's op times
  are multiplied by a stretch (halved while delivery stays exact, doubled while not, then bisected;
  orchestrator/experiment/membership.py ``next_stretch``), and the rate is the run's changes over its
  span (first op to the last op's data, fabric seconds).

The leaves' control planes are modelled (--control-cost, fabric µs per control message, served one at a
time in arrival order; docs/igmp.md): a membership latency is then the links' time and the model's, not
our agents' Python, and each mode's line says whether it was (no message applied late, the run faithful).
--control-cost 0 turns the model off (the latency is then our speed, and the line says so).

With --search-lead, each mode first gets the shortest lead with exact delivery at the trace's own pace
(the same search over a factor of the lead, from --lead-igmp / --lead-proxy, or from 1 s for a lead of 0
under the model): how long a source must wait for its receivers' set to reach its first-hop router; the
rate search then runs at that lead.

Deploys its own lab (``bench-membership``, every host a proxy source, the shipped time.scale), configures
it per mode (the BFIRs take BitStrings from that mode's signalling alone; a long Query Interval, see
--query-interval) and destroys it. The lead (wall ms) is fixed per mode for the whole rate search.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.modes import Mode  # noqa: E402
from orchestrator.configure.ansible import configure  # noqa: E402
from orchestrator.experiment.driver import run_experiment  # noqa: E402
from orchestrator.experiment.membership import (  # noqa: E402
    DEFAULT_LEAD_S,
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
from orchestrator.experiment.modes.base import RunOptions  # noqa: E402
from orchestrator.experiment.modes.igmp import STATIC  # noqa: E402
from orchestrator.lab.deploy import deploy, destroy  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.lab.topology import Topology, load_topology  # noqa: E402
from orchestrator.workloads.trace import TraceReader, write_trace  # noqa: E402

LAB = "bench-membership"
TRACE = ROOT / "workloads" / "moe-sample.jsonl"
MODES = (Mode.IGMP, Mode.PROXY)


def lab_file(tmp: Path) -> Path:
    doc = yaml.safe_load((ROOT / "labs" / "leaf-spine.clab.yml").read_text())
    doc["name"] = LAB
    path = tmp / f"{LAB}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def mode_vars(
    tmp: Path, mode: Mode, control_cost_s: float, per_record_s: float, query_interval_s: float | None
) -> None:
    """IGMP at the leaves, every host allowed to send Receiver Proxy Reports (docs/igmp.md), the BFIRs
    taking their BitStrings from this mode's signalling alone (as tests/e2e/test_igmp_replay.py runs
    proxy): the other mode's state would answer for it, and its reports would load the control planes."""
    igmp: dict[str, Any] = {
        "enabled": True,
        "proxy_hosts": "all",
        "control_cost": control_cost_s,
        "control_cost_record": per_record_s,
        "groups": [STATIC, mode_class(mode).group_source],
    }
    if query_interval_s is not None:
        igmp["query_interval"] = query_interval_s
    (tmp / f"{LAB}.vars.yml").write_text(yaml.safe_dump(dict(igmp=igmp)))


def one_run(topo: Topology, runtime: DockerRuntime, trace: Path, mode: Mode, lead_s: float, tmp: Path):
    outcome = run_experiment(
        topo, trace, mode, RunOptions(lead_s=lead_s), runtime=runtime, results_dir=tmp / "results"
    )
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
        "member": member,
        "control": control_overhead(result.agents)["total"],
        "data": m.source_egress_bytes,
        "plane": plane,
        "why": latency_verdict(float(result.meta.settings.get("control_cost_s") or 0), plane, faithful),
    }


def trial(topo, runtime, header, ops, mode: Mode, lead_s: float, stretch: float, tmp: Path):
    path = tmp / f"moe-{mode}-{stretch:.6g}.jsonl"
    stretched = stretch_ops(ops, stretch)
    write_trace(path, header, stretched)
    r = one_run(topo, runtime, path, mode, lead_s, tmp)
    times = [op.t for op in stretched]
    span_wall = max(times) - min(times) + lead_s
    span = span_wall / (r["scale"] or 1)
    r["trial"] = RateTrial(stretch, r["exact"], int(r["member"].get("changes", 0)), span)
    print(
        f"  {mode} lead {lead_s * 1e3:g} ms stretch {stretch:.4g}: exact {r['exact']}, faithful "
        f"{r['faithful']}, changes {r['trial'].changes} over {span * 1e3:.4f} ms, control messages "
        f"{r['plane']['served']} served {r['plane']['late']} late",
        flush=True,
    )
    return r


def shortest_lead(topo, runtime, header, ops, mode: Mode, lead_s: float, tmp: Path, max_runs: int):
    """The shortest lead (a factor of ``lead_s``, same search as the stretch) with exact delivery at the
    trace's own pace: how long a source must wait for its receiver set to reach its first-hop router.
    Returns the lead and that run (the exact one, or the longest lead's when none was exact)."""
    trials: list[RateTrial] = []
    runs: dict[float, dict[str, Any]] = {}
    factor = 1.0
    while True:
        r = runs[factor] = trial(topo, runtime, header, ops, mode, lead_s * factor, 1.0, tmp)
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


def fmt_ms(v: Any) -> str:
    return "n/a" if v is None else f"{v * 1e3:.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lead-igmp", type=float, default=DEFAULT_LEAD_S[Mode.IGMP] * 1e3, metavar="MS")
    parser.add_argument("--lead-proxy", type=float, default=DEFAULT_LEAD_S[Mode.PROXY] * 1e3, metavar="MS")
    parser.add_argument("--max-runs", type=int, default=6, help="runs per mode in the change-rate search")
    parser.add_argument(
        "--lead-runs", type=int, default=None, help="runs per mode in the lead search (default: --max-runs)"
    )
    parser.add_argument(
        "--search-lead",
        action="store_true",
        help="first find each mode's shortest exact lead (a lead of 0 without the model stays 0)",
    )
    parser.add_argument(
        "--control-cost",
        type=float,
        default=5.0,
        metavar="US",
        help="fabric microseconds per control message at each leaf's modelled control plane; 0: not modelled",
    )
    parser.add_argument(
        "--control-cost-record",
        type=float,
        default=0.0,
        metavar="US",
        help="fabric microseconds added per IGMPv3 group record a control message carries (per-(S,G) work)",
    )
    parser.add_argument(
        "--query-interval",
        type=float,
        default=100000.0,
        metavar="US",
        help="IGMP Query Interval in fabric microseconds (0: the plan's, 20 s on the wall clock). Long by "
        "default: the RFC's 125 s is ages against the trace, and at the plan's 1 ms of fabric time the "
        "periodic queries and refreshes would load the modelled control planes as no fabric would",
    )
    args = parser.parse_args()
    leads = {Mode.IGMP: args.lead_igmp / 1e3, Mode.PROXY: args.lead_proxy / 1e3}
    if args.control_cost > 0:  # under the model every mode waits for its control messages
        leads = {mode: lead or 1.0 for mode, lead in leads.items()}
    with TraceReader(TRACE) as reader:
        header, ops = reader.header, list(reader)
    runtime = DockerRuntime()
    destroy(LAB, runtime, quiet=True)
    first: dict[Mode, dict[str, Any]] = {}
    best: dict[Mode, RateTrial | None] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        old = Path.cwd()
        os.chdir(tmp)
        try:
            topo = load_topology(lab_file(tmp))
            qi = args.query_interval / 1e6 if args.query_interval else None
            deploy(topo, runtime)
            for mode in MODES:
                mode_vars(tmp, mode, args.control_cost / 1e6, args.control_cost_record / 1e6, qi)
                if not configure(topo).ok:
                    print(f"bench membership: configure {LAB} for {mode} failed", file=sys.stderr)
                    return 1
                if leads[mode] > 0 and args.search_lead:
                    # The search's run at the lead it found is this mode's run at the trace's pace.
                    leads[mode], r = shortest_lead(
                        topo, runtime, header, ops, mode, leads[mode], tmp, args.lead_runs or args.max_runs
                    )
                else:
                    r = trial(topo, runtime, header, ops, mode, leads[mode], 1.0, tmp)
                first[mode] = r
                trials = [r["trial"]]
                while len(trials) < args.max_runs and (nxt := next_stretch(trials)) is not None:
                    trials.append(trial(topo, runtime, header, ops, mode, leads[mode], nxt, tmp)["trial"])
                best[mode] = fastest(trials)
        finally:
            destroy(LAB, runtime, cleanup=True, quiet=True)
            os.chdir(old)
    model = f"{args.control_cost:g} µs fabric per control message" if args.control_cost else "not modelled"
    if args.control_cost and args.control_cost_record:
        model += f" + {args.control_cost_record:g} µs per group record"
    qi = f"{args.query_interval:g} µs fabric" if args.query_interval else "the plan's"
    print(
        f"bench membership leaf-spine: {TRACE.name}, {len(ops)} ops, control plane {model}, "
        f"query interval {qi}"
    )
    for mode in MODES:
        r, m, b = first[mode], first[mode]["member"], best[mode]
        ratio = r["control"]["bytes"] / r["data"] if r["data"] else float("nan")
        rate = "none exact" if b is None else f"{b.rate:.0f} changes/s at stretch {b.stretch:.4g}"
        lead = f"lead {leads[mode] * 1e3:g} ms"
        if r["scale"]:
            lead += f" ({leads[mode] / r['scale'] * 1e6:.3f} µs fabric)"
        print(
            f"  {mode:6s} {lead}: exact {r['exact']}, faithful {r['faithful']}, "
            f"changes {m.get('changes')}, membership latency p50 {fmt_ms(m.get('latency_p50_s'))} "
            f"p99 {fmt_ms(m.get('latency_p99_s'))} ({m.get('time')}), wrong {m.get('wrong')}, "
            f"missed {m.get('missed')}, control {r['control']['packets']} packets / "
            f"{r['control']['bytes']} B against {r['data']} B data ({ratio:.2%}); "
            f"control messages served {r['plane']['served']}, late {r['plane']['late']}; highest rate {rate}"
        )
        p, scale = r["plane"], r["scale"] or 1
        if p["served"]:
            print(
                f"  {mode:6s} control plane per message: model {p['service_ns'] / p['served'] / 1e6:.3f} ms "
                f"wall mean; "
                f"ours {p['busy_ns'] / p['served'] / 1e6:.3f} ms wall; "
                f"mean lateness {p['lateness_ns'] / p['served'] / 1e6:.3f} ms wall; "
                f"queued behind others {p['wait_ns'] / p['served'] / scale / 1e3:.3f} µs fabric mean; "
                f"unstamped {p['unstamped']}"
            )
        print(f"  {mode:6s} membership latency: {latency_is(r['why'])}")
    pi, pp = (first[m]["member"].get("latency_p50_s") for m in MODES)
    bi, bp = best[Mode.IGMP], best[Mode.PROXY]
    if pi and pp:
        print(f"  ratio membership latency p50 igmp/proxy {pi / pp:.1f}x")
    if bi and bp and bi.rate and bp.rate:
        print(f"  ratio highest change rate proxy/igmp {bp.rate / bi.rate:.1f}x")
    return 0 if all(first[m]["exact"] for m in MODES) else 1


if __name__ == "__main__":
    sys.exit(main())
