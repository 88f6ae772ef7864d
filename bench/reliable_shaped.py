"""Reliable BIER in the simulator over shaped links (issue 15): the issue's two bounds, per loss rate.

For each fabric and loss rate it runs several seeds of the aggregated mode (the design of
docs/reliability.md, "Meeting the bounds") and, in the same run, the end-to-end baseline (BFRs pass
feedback on unchanged) with the same sender, and prints one line per (fabric, loss):

* ACKs at the source per DATA packet (ACK + AGG-ACK + partial AGG-ACK; NACKs apart): the largest over
  the seeds against the BFIR's first-hop branch count (bound: <= branches), and the baseline's;
* retransmitted bytes at the source / DATA bytes the links dropped (bound: <= 1.2 for the aggregated
  NACK mode): the largest over the seeds, and the baseline's.

Every run must deliver every message exactly once and in order to every receiver (checked here too).
docs/reliability.md quotes the lines. Run: .venv/bin/python bench/reliable_shaped.py
"""

from __future__ import annotations

import dataclasses

from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.sender import SenderConfig
from aidcnet.reliable.sim import SimConfig, SimResult, simulate

SEEDS = (1, 2, 3, 4, 5)
FABRICS = (
    ("leaf-spine 4x2, 2 hosts/leaf (7 receivers)", {"leaves": 4, "spines": 2, "hosts_per_leaf": 2}),
    ("leaf-spine 8x2, 4 hosts/leaf (31 receivers)", {"leaves": 8, "spines": 2, "hosts_per_leaf": 4}),
)
BASE = SimConfig(
    rate=20e6,
    host_rate=5e6,
    queue_bytes=32_000,
    adaptive_rto=True,
    until=120.0,  # end to end with 31 receivers at 5 % takes tens of seconds (the implosion queues up)
    sender=SenderConfig(window=32, fail_after=60.0, initial_cwnd=4),
    aggregator=AggregatorConfig(partial_after=0.003),
)


def _check(res: SimResult, cfg: SimConfig) -> None:
    expected = [i.to_bytes(4, "big") * (cfg.size // 4) for i in range(cfg.messages)]
    if res.failed or res.completed_at is None:
        raise SystemExit(f"{cfg}: did not complete (failed {res.failed})")
    for bfr_id, got in res.delivered.items():
        if [p for _, p in got] != expected:
            raise SystemExit(f"{cfg}: receiver {bfr_id} did not get every message exactly once in order")


def _ratio(res: SimResult) -> float:
    return res.retransmitted_bytes / res.dropped_bytes if res.dropped_bytes else 0.0  # 0.00: no drop


def main() -> None:
    for name, shape in FABRICS:
        for loss in (0.0, 0.01, 0.05):
            rows: dict[bool, list[SimResult]] = {True: [], False: []}
            for seed in SEEDS:
                for aggregate in (True, False):
                    cfg = dataclasses.replace(BASE, loss=loss, seed=seed, aggregate=aggregate, **shape)
                    res = simulate(cfg)
                    _check(res, cfg)
                    rows[aggregate].append(res)
            agg, e2e = rows[True], rows[False]
            branches = agg[0].branches
            drops = [r.dropped_bytes for r in agg]
            print(
                f"{name}, loss {loss:.0%}, {len(SEEDS)} seeds x {agg[0].sent} x {BASE.size} B: "
                f"ACKs at source per packet aggregated max {max(r.acks_per_packet for r in agg):.3f} "
                f"(mean {sum(r.acks_per_packet for r in agg) / len(agg):.3f}) vs branches {branches}, "
                f"end to end {max(r.acks_per_packet for r in e2e):.3f}; "
                f"retx/dropped bytes aggregated max {max(_ratio(r) for r in agg):.2f} "
                f"(mean {sum(_ratio(r) for r in agg) / len(agg):.2f}, dropped {min(drops)}-{max(drops)} B), "
                f"end to end max {max(_ratio(r) for r in e2e):.2f}; "
                f"done aggregated max {max(r.completed_at or 0 for r in agg) * 1e3:.0f} ms, "
                f"end to end max {max(r.completed_at or 0 for r in e2e) * 1e3:.0f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
