"""Reliable BIER in the simulator over shaped links (issue 15): old design against adaptive timers + cwnd.

Prints one line per (loss, mode); docs/reliability.md quotes them.
Run: .venv/bin/python bench/reliable_shaped.py
"""

from __future__ import annotations

import argparse

from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.sender import SenderConfig
from aidcnet.reliable.sim import SimConfig, simulate, summary

# (label, aggregate in the BFRs, adaptive partial timer, initial cwnd: None for the old fixed window)
DESIGNS = (
    ("unicast, old sender", False, False, None),
    ("aggregated, old (fixed timers, window 32)", True, False, None),
    ("unicast, cwnd", False, False, 4),
    ("aggregated, new (adaptive partial timer + cwnd + RFC 6298 RTO)", True, True, 4),
)


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: list[str] | None = None) -> int:
    parser().parse_args(argv)
    for loss in (0.0, 0.01, 0.05):
        for label, aggregate, adaptive, cwnd in DESIGNS:
            cfg = SimConfig(
                loss=loss,
                rate=20e6,
                host_rate=5e6,
                queue_bytes=32_000,
                aggregate=aggregate,
                adaptive_rto=cwnd is not None,
                sender=SenderConfig(window=32, fail_after=60.0, initial_cwnd=cwnd),
                aggregator=AggregatorConfig(partial_after=0.003, adaptive=adaptive),
            )
            line = summary(f"loss {loss:.0%} {label}", simulate(cfg))
            print(line.replace("receivers 7, branches 1, ", ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
