"""Replay a ~10k-token MoE dispatch trace over leaf-spine under unicast and host-BIER, in one run.

Both modes replay the same trace on the same deployed lab in this process, since the machine is shared
and noisy: the ratios are what to read. Throughput is host-BIER over unicast; source egress is unicast
over host-BIER, which should approach the trace's theoretical fan-out (the bytes-weighted receivers per
multicast op) less header overheads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.modes import MESSAGE_PAIR, Mode  # noqa: E402
from bench.harness import bench_lab, bench_parser, moe_trace  # noqa: E402
from orchestrator.run.driver import RunOutcome  # noqa: E402

HOSTS = [f"h{i}" for i in range(1, 9)]
# The pair this bench compares, the baseline first.
COMPARED = MESSAGE_PAIR
Round = dict[Mode, dict[str, float]]


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument(
        "--tokens-per-host", type=int, default=128, help="default: 10 x 128 x 8 hosts = 10240 tokens"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--dataplane", choices=("ebpf", "python"), default="ebpf",
        help="the BFRs' BIER dataplane (bier.dataplane): ebpf, the default, or python, the reference",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=300.0, help="replay timeout beyond the trace")
    p.add_argument(
        "--rounds", type=int, default=3,
        help="unicast/host-BIER pairs, back to back on the same lab; the ratio printed is the median of the "
        "pairs' ratios, so one noisy moment on a shared machine does not decide it",
    )  # fmt: skip
    return p


def lab_vars(dataplane: str) -> dict:
    # This bench measures how fast our forwarders move messages, so the links must not set the pace.
    return {"time": {"scale": "off"}, "bier": {"dataplane": dataplane}}


def figures(outcome: RunOutcome) -> dict[str, float]:
    m = outcome.result.metrics
    assert m is not None
    ct = m.completion_time or float("nan")
    delivered_bytes = sum(
        msg.bytes * len(set(msg.delivered) & set(msg.expected)) for msg in outcome.result.messages
    )
    return {
        "messages": float(m.delivery.messages),
        "complete": float(m.delivery.complete_messages),
        "delivered": float(m.delivery.delivered),
        "expected": float(m.delivery.expected),
        "completion_s": ct,
        "msgs_per_s": m.delivery.complete_messages / ct,
        "bytes_per_s": delivered_bytes / ct,
        "egress": float(m.source_egress_bytes),
        "fanout": m.theoretical_fanout or float("nan"),
    }


def report(args: argparse.Namespace, rounds: list[Round]) -> None:
    tokens = args.steps * args.tokens_per_host * len(HOSTS)
    first = rounds[0][Mode.UNICAST]
    print(
        f"bench replay leaf-spine ({args.dataplane} BIER dataplane): MoE {args.steps} steps x "
        f"{args.tokens_per_host} tokens x "
        f"{len(HOSTS)} hosts = {tokens} tokens, {int(first['messages'])} ops, "
        f"theoretical fan-out {first['fanout']:.2f}, {len(rounds)} rounds"
    )
    ratios = []
    for i, pair in enumerate(rounds, 1):
        for mode, f in pair.items():
            print(
                f"  round {i} {mode:9s}: {f['msgs_per_s']:8.1f} messages/s, "
                f"{f['bytes_per_s'] / 1e6:8.2f} MB/s delivered, completion {f['completion_s']:.2f} s (wall), "
                f"delivered {int(f['delivered'])}/"
                f"{int(f['expected'])}, source egress {f['egress'] / 1e6:.2f} MB"
            )
        uni, bier = pair[Mode.UNICAST], pair[Mode.HOST_BIER]
        ratios.append((bier["bytes_per_s"] / uni["bytes_per_s"], bier["msgs_per_s"] / uni["msgs_per_s"]))
    print(
        f"  ratio host-bier/unicast throughput, median of {len(ratios)}: "
        f"{statistics.median(r[0] for r in ratios):.2f}x (messages/s "
        f"{statistics.median(r[1] for r in ratios):.2f}x; per round "
        f"{', '.join(f'{r[1]:.2f}' for r in ratios)})"
    )
    uni, bier = rounds[0][Mode.UNICAST], rounds[0][Mode.HOST_BIER]
    print(
        f"  ratio unicast/host-bier source egress: {uni['egress'] / bier['egress']:.2f}x "
        f"(theoretical fan-out {uni['fanout']:.2f})"
    )


def incomplete(rounds: list[Round]) -> list[str]:
    """The runs that lost deliveries, named by mode and round."""
    out = {f"{mode} round {i}": f for i, pair in enumerate(rounds, 1) for mode, f in pair.items()}
    return [m for m, f in out.items() if f["delivered"] < f["expected"]]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with bench_lab("leaf-spine", f"{args.name_prefix}replay", vars=lab_vars(args.dataplane)) as lab:
        trace = moe_trace(lab.workdir / "moe-bench.jsonl", HOSTS, args.steps, args.tokens_per_host, args.seed)
        rounds = [
            {mode: figures(lab.replay(trace, mode, timeout_s=args.timeout)) for mode in COMPARED}
            for _ in range(args.rounds)
        ]
    report(args, rounds)
    lost = incomplete(rounds)
    if lost:
        print(f"  incomplete delivery in: {', '.join(lost)}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
