"""Memberships on leaf-spine (issue 14): the MoE sample trace in the ``igmp`` and ``proxy`` replay modes,
all in one process on one deployed lab, so each ratio is against the other mode measured in the same run:

* membership latency (receiver set known at the source -> first packet at each new receiver, fabric
  time) and control traffic counted by the agents against the sources' data bytes, at the trace's own
  pace;
* the highest rate of receiver-set changes each mode sustains with exact delivery: the trace's op times
  are multiplied by a stretch (halved while delivery stays exact, doubled while not, then bisected;
  orchestrator/experiment/membership.py ``next_stretch``), and the rate is the run's changes over its
  span (first op to the last op's data, fabric seconds).

With --search-lead, a mode whose lead is > 0 (igmp) first gets the shortest lead with exact delivery at the
trace's own pace (the same search over a factor of the lead): how long a source must wait for its
receivers' joins to reach the BFIRs; the rate search then runs at that lead.

Deploys its own lab (``bench-membership``, igmp enabled, every host a proxy source, the shipped
time.scale) and destroys it. The lead (--lead-igmp, --lead-proxy, wall ms) is fixed per mode for the
whole search.
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
    fastest,
    next_stretch,
    stretch_ops,
)
from orchestrator.experiment.modes.base import RunOptions  # noqa: E402
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
    # IGMP at the leaves, every host allowed to send Receiver Proxy Reports (docs/igmp.md).
    (tmp / f"{LAB}.vars.yml").write_text("igmp: {enabled: true, proxy_hosts: all}\n")
    return path


def one_run(topo: Topology, runtime: DockerRuntime, trace: Path, mode: Mode, lead_s: float, tmp: Path):
    outcome = run_experiment(
        topo, trace, mode, RunOptions(lead_s=lead_s), runtime=runtime, results_dir=tmp / "results"
    )
    result = outcome.result
    m = result.metrics
    assert m is not None
    member = result.meta.settings.get("membership") or {}
    scale = result.timing.scale if result.timing is not None else None
    return {
        "exact": outcome.ok,
        "faithful": None if result.timing is None else result.timing.faithful,
        "scale": scale,
        "member": member,
        "control": control_overhead(result.agents)["total"],
        "data": m.source_egress_bytes,
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
        f"  {mode} stretch {stretch:.4g}: exact {r['exact']}, faithful {r['faithful']}, "
        f"changes {r['trial'].changes} over {span * 1e3:.4f} ms",
        flush=True,
    )
    return r


def shortest_lead(topo, runtime, header, ops, mode: Mode, lead_s: float, tmp: Path, max_runs: int) -> float:
    """The shortest lead (a factor of ``lead_s``, same search as the stretch) with exact delivery at the
    trace's own pace: how long a source must wait for receivers' joins to reach the BFIRs."""
    trials: list[RateTrial] = []
    factor = 1.0
    while True:
        r = trial(topo, runtime, header, ops, mode, lead_s * factor, 1.0, tmp)
        trials.append(RateTrial(factor, r["exact"], 1, factor))
        nxt = next_stretch(trials)
        if nxt is None or len(trials) >= max_runs:
            break
        factor = nxt
    exact = [t.stretch for t in trials if t.exact]
    found = lead_s * min(exact) if exact else lead_s * max(t.stretch for t in trials)
    print(f"  {mode} shortest exact lead {found * 1e3:.3f} ms (wall) after {len(trials)} runs", flush=True)
    return found


def fmt_ms(v: Any) -> str:
    return "n/a" if v is None else f"{v * 1e3:.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lead-igmp", type=float, default=DEFAULT_LEAD_S[Mode.IGMP] * 1e3, metavar="MS")
    parser.add_argument("--lead-proxy", type=float, default=DEFAULT_LEAD_S[Mode.PROXY] * 1e3, metavar="MS")
    parser.add_argument("--max-runs", type=int, default=6, help="runs per mode in the rate search")
    parser.add_argument(
        "--search-lead",
        action="store_true",
        help="first find the shortest lead with exact delivery for a mode whose lead is > 0 (igmp)",
    )
    args = parser.parse_args()
    leads = {Mode.IGMP: args.lead_igmp / 1e3, Mode.PROXY: args.lead_proxy / 1e3}
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
            deploy(topo, runtime)
            if not configure(topo).ok:
                print(f"bench membership: configure {LAB} failed", file=sys.stderr)
                return 1
            for mode in MODES:
                if leads[mode] > 0 and args.search_lead:
                    leads[mode] = shortest_lead(
                        topo, runtime, header, ops, mode, leads[mode], tmp, args.max_runs
                    )
                r = trial(topo, runtime, header, ops, mode, leads[mode], 1.0, tmp)
                first[mode] = r
                trials = [r["trial"]]
                while len(trials) < args.max_runs and (nxt := next_stretch(trials)) is not None:
                    trials.append(trial(topo, runtime, header, ops, mode, leads[mode], nxt, tmp)["trial"])
                best[mode] = fastest(trials)
        finally:
            destroy(LAB, runtime, cleanup=True, quiet=True)
            os.chdir(old)
    print(f"bench membership leaf-spine: {TRACE.name}, {len(ops)} ops")
    for mode in MODES:
        r, m, b = first[mode], first[mode]["member"], best[mode]
        ratio = r["control"]["bytes"] / r["data"] if r["data"] else float("nan")
        rate = "none exact" if b is None else f"{b.rate:.0f} changes/s at stretch {b.stretch:.4g}"
        print(
            f"  {mode:6s} lead {leads[mode] * 1e3:g} ms: exact {r['exact']}, faithful {r['faithful']}, "
            f"changes {m.get('changes')}, membership latency p50 {fmt_ms(m.get('latency_p50_s'))} "
            f"p99 {fmt_ms(m.get('latency_p99_s'))} ({m.get('time')}), wrong {m.get('wrong')}, "
            f"missed {m.get('missed')}, control {r['control']['packets']} packets / "
            f"{r['control']['bytes']} B against {r['data']} B data ({ratio:.2%}); highest rate {rate}"
        )
    pi, pp = (first[m]["member"].get("latency_p50_s") for m in MODES)
    bi, bp = best[Mode.IGMP], best[Mode.PROXY]
    if pi and pp:
        print(f"  ratio membership latency p50 igmp/proxy {pi / pp:.1f}x")
    if bi and bp and bi.rate and bp.rate:
        print(f"  ratio highest change rate proxy/igmp {bp.rate / bi.rate:.1f}x")
    return 0 if all(first[m]["exact"] for m in MODES) else 1


if __name__ == "__main__":
    sys.exit(main())
