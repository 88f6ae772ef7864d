"""The reliable transport in the simulator, shaped as the lab runs it (issue 38): leaf-spine or the superpod,
aggregated in the BFRs against end to end, over several seeds, at each loss per link.

Time is the lab's wall clock at the scale the timers were tuned at (aidcnet/reliable/timers.py, 1:20000):
links at their bandwidth / 20000 (leaf-spine 400G: 20 Mbit/s; the superpod's 800G GPU ports: 40 Mbit/s),
the replay's timers, send budget (0.1 s of the source's link) and message sizes (eight flows of 33 DATA of
8 kB from the first host, as a 2 MiB model distribution in 256 KiB chunks), 0.5 ms per hop for the
agents' software. At any other scale the lab's timers are the same fabric time, so these runs stand for
it at every scale. Prints the mean and the worst of each figure over the seeds:

    .venv/bin/python bench/reliable_sim.py --fabric superpod --seeds 3 --losses 0,0.05
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.reliable.aggregator import AggregatorConfig  # noqa: E402
from aidcnet.reliable.receiver import ReceiverConfig  # noqa: E402
from aidcnet.reliable.sender import SenderConfig  # noqa: E402
from aidcnet.reliable.sim import SimConfig, SimResult, simulate  # noqa: E402
from aidcnet.reliable.timers import WALL  # noqa: E402

# The fabrics' GPU links at 1:20000 (labs/*.vars.yml: 400G, the superpod's 800G ports).
RATES = {"leaf-spine": 20e6, "superpod": 40e6}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fabric", choices=sorted(RATES), default="leaf-spine")
    p.add_argument("--gpus", type=int, default=64, help="the superpod's GPUs (its first sends to the others)")
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--losses", default="0,0.01,0.05", help="loss per link and packet, comma-separated")
    return p


def lab_config(fabric: str, gpus: int) -> SimConfig:
    """The lab's shape, timers and budget (aidcnet.reliable.timers, orchestrator's reliable modes)."""
    t, rate = WALL, RATES[fabric]
    return SimConfig(
        topology=fabric,
        gpus=gpus,
        flows=8,
        messages=33,
        size=8000,
        rate=rate,
        queue_bytes=4 << 20,
        delay=0.0005,
        tick=0.001,
        until=600.0,
        inflight_bytes=int(rate / 8 * t.inflight),
        adaptive_rto=True,
        rto=t.initial_rto,
        min_rto=t.min_rto,
        max_rto=t.max_rto,
        sender=SenderConfig(window=64, fail_after=t.fail_after, max_rto=t.max_rto, nack_gather=0.1),
        receiver=ReceiverConfig(
            ack_delay=t.ack_delay, nack_interval=t.nack_interval, nack_max_interval=t.nack_max_interval
        ),
        aggregator=AggregatorConfig(
            partial_after=t.partial_after,
            partial_floor=t.partial_floor,
            lifetime=t.lifetime,
            report_delay=t.report_delay,
        ),
    )


def line(label: str, runs: list[SimResult]) -> str:
    done = [r.completed_at if r.completed_at is not None else float("inf") for r in runs]

    def both(values: list[float], fmt: str) -> str:
        return f"{statistics.mean(values):{fmt}} (worst {max(values):{fmt}})"

    return (
        f"{label}: completion {both([d * 1e3 for d in done], '.1f')} ms, ACKs at the source per packet "
        f"{both([r.acks_per_packet for r in runs], '.3f')}, NACKs at the source per DATA copy dropped "
        f"{both([r.nacks_per_dropped for r in runs], '.2f')} and per sequence lost "
        f"{both([r.nacks_per_lost for r in runs], '.2f')}, retransmitted per dropped byte "
        f"{both([r.retransmitted_bytes / max(1, r.dropped_bytes) for r in runs], '.2f')}, repair path "
        f"{statistics.mean(r.repair_path for r in runs):.2f} links, timeouts "
        f"{sum(r.sender['timeouts'] for r in runs)}, failed {sum(len(r.failed) for r in runs)}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    base = lab_config(args.fabric, args.gpus)
    print(f"{args.fabric} ({base.gpus if args.fabric == 'superpod' else 8} hosts), {args.seeds} seeds")
    for loss in (float(x) for x in args.losses.split(",")):
        runs = {
            agg: [
                simulate(dataclasses.replace(base, loss=loss, aggregate=agg, seed=s))
                for s in range(args.seeds)
            ]
            for agg in (True, False)
        }
        print(line(f"loss {loss:.0%} aggregated", runs[True]), flush=True)
        print(line(f"loss {loss:.0%} end to end", runs[False]), flush=True)
        ratio = statistics.mean(r.completed_at or 0 for r in runs[True])
        ratio /= statistics.mean(r.completed_at or 1 for r in runs[False])
        print(f"loss {loss:.0%}: completion aggregated / end to end {ratio:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
