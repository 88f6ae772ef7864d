"""A dead BFR on a ring, with and without BIER fast reroute: what node protection saves (docs/faults.md).

On a copy of labs/ring5.clab.yml, h1 sends a model to the other four hosts (host-BIER, 4 MiB in 16 chunks of
256 KiB) while every link of r2 is down from 20 µs to 120 µs of fabric time. r1 reaches r3, and h3 behind
it, only over r2: without fast reroute (the baseline, measured in the same run) h3 loses every chunk sent
while r2 is down; with it, r1 sends h3's copies to r3 the other way round (node protection), and h3 should
lose only what was crossing r2 when it went. h2, behind r2 alone, is the failure domain either way.

Each round runs both, alternating; a line per run gives the chunks each receiver missed, the completion in
fabric time and the verdict, and the last lines the median of h3's delivered chunks with fast reroute
against without. A replay that misses deliveries is expected here: the cut costs h2 its chunks.

Run: python bench/node_protection.py [--rounds 2] [--bift static|bgp]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from aidcnet.modes import Mode  # noqa: E402
from bench.harness import bench_lab, bench_parser, set_vars, workload  # noqa: E402
from orchestrator.lab.fault_spec import schedule  # noqa: E402

LAB = "ring5"
HOSTS = ["h1", "h2", "h3", "h4", "h5"]
CHUNKS = 16
# every link of r2 at once: the node, as the rest of the ring sees it
CUT = [f"20us link r2:eth{i} down for 100us" for i in (1, 2, 3)]


def run(lab: Lab, trace: Path, fast_reroute: bool, bift: str) -> tuple[Counter[str], str]:
    """One replay with r2 cut; the chunks each receiver missed and the run's line."""
    bgp = {"bgp": {"enabled": True}} if bift == "bgp" else {}
    set_vars(lab, {**bgp, "bier": {"bift": bift, "fast_reroute": fast_reroute}})
    lab.configure()
    if bift == "bgp":
        lab.wait_routes()
    outcome = lab.replay(trace, Mode.HOST_BIER, faults=tuple(schedule(CUT)))
    missed = Counter(receiver for _op, receiver in outcome.missing)
    t, m = outcome.result.timing, outcome.result.metrics
    assert t is not None and m is not None
    completion = "–" if m.completion_fabric_time is None else f"{m.completion_fabric_time * 1e6:.1f} µs"
    verdict = "faithful" if t.faithful else "NOT faithful (" + "; ".join(t.reasons)[:200] + ")"
    missing = ", ".join(f"{h} {missed[h]}" for h in HOSTS[1:]) or "none"
    line = (
        f"  fast reroute {'on ' if fast_reroute else 'off'}: chunks missed of {CHUNKS}: {missing}; "
        f"completion {completion} at 1:{t.scale}, {verdict}"
    )
    return missed, line


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--rounds", type=int, default=2, help="rounds of both runs (default 2)")
    p.add_argument(
        "--bift",
        choices=("static", "bgp"),
        default="static",
        help="where the BIFT comes from (default static)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    delivered: dict[bool, list[int]] = {False: [], True: []}
    with bench_lab(LAB, f"{args.name_prefix}{LAB}") as lab:
        trace = workload(
            lab.workdir / "model-dist.jsonl",
            "model-dist",
            *("--hosts", ",".join(HOSTS), "--size", "4MiB", "--chunk-bytes", "256KiB"),
        )
        for r in range(args.rounds):
            print(f"round {r + 1} (bift {args.bift}):", flush=True)
            for fast_reroute in (False, True):
                missed, line = run(lab, trace, fast_reroute, args.bift)
                delivered[fast_reroute].append(CHUNKS - missed["h3"])
                print(line, flush=True)
    off, on = (statistics.median(delivered[k]) for k in (False, True))
    head = f"node protection, {LAB}, bift {args.bift}: h3 received"
    print(f"{head} {off:g} of {CHUNKS} chunks without fast reroute (baseline)")
    ratio = f"{on / off:.2f}x the baseline" if off else "the baseline received none"
    print(f"{head} {on:g} of {CHUNKS} chunks with fast reroute, {ratio} (median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
