"""Replay a ~10k-token MoE dispatch trace over leaf-spine under unicast and host-BIER, in one run.

Both modes replay the same trace on the same deployed lab in this process, since the machine is shared
and noisy: the ratios are what to read. Throughput is host-BIER over unicast; source egress is unicast
over host-BIER, which should approach the trace's theoretical fan-out (the bytes-weighted receivers per
multicast op) less header overheads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.modes import Mode  # noqa: E402
from orchestrator.configure.ansible import configure  # noqa: E402
from orchestrator.experiment.driver import RunOutcome, run_experiment  # noqa: E402
from orchestrator.experiment.modes.base import RunOptions  # noqa: E402
from orchestrator.lab.deploy import deploy, destroy  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.lab.topology import load_topology  # noqa: E402

LAB = "bench-replay"
HOSTS = [f"h{i}" for i in range(1, 9)]
MODES = (Mode.UNICAST, Mode.HOST_BIER)


def make_trace(
    path: Path,
    steps: int,
    tokens_per_host: int,
    seed: int,
    hosts: list[str] = HOSTS,
    experts: int | None = None,
) -> None:
    """``experts``: the workload's default when None (one per host is too few for top-8 at 256 hosts)."""
    subprocess.run(
        [
            sys.executable, "-m", "orchestrator.cli.workload", "moe", "--hosts", ",".join(hosts),
            "--steps", str(steps), "--tokens-per-host", str(tokens_per_host), "--seed", str(seed),
            *(["--experts", str(experts)] if experts else []), "-o", str(path),
        ],
        check=True, cwd=ROOT,
    )  # fmt: skip


def lab_file(tmp: Path, dataplane: str) -> Path:
    doc = yaml.safe_load((ROOT / "labs" / "leaf-spine.clab.yml").read_text())
    doc["name"] = LAB
    path = tmp / f"{LAB}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    # This bench measures how fast our forwarders move messages, so the links must not set the pace.
    lab_vars = {"time": {"scale": "off"}, "bier": {"dataplane": dataplane}}
    (tmp / f"{LAB}.vars.yml").write_text(yaml.safe_dump(lab_vars))
    return path


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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument(
        "--tokens-per-host", type=int, default=128, help="default: 10 x 128 x 8 hosts = 10240 tokens"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--dataplane", choices=("ebpf", "python"), default="ebpf",
        help="the BFRs' BIER dataplane (bier.dataplane): ebpf, the default, or python, the reference",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=300.0, help="replay timeout beyond the trace")
    parser.add_argument(
        "--rounds", type=int, default=3,
        help="unicast/host-BIER pairs, back to back on the same lab; the ratio printed is the median of the "
        "pairs' ratios, so one noisy moment on a shared machine does not decide it",
    )  # fmt: skip
    args = parser.parse_args()
    runtime = DockerRuntime()
    destroy(LAB, runtime, quiet=True)
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trace = tmp / "moe-bench.jsonl"
        make_trace(trace, args.steps, args.tokens_per_host, args.seed)
        old = Path.cwd()
        os.chdir(tmp)
        try:
            topo = load_topology(lab_file(tmp, args.dataplane))
            deploy(topo, runtime)
            if not configure(topo).ok:
                print(f"bench replay: configure {LAB} failed", file=sys.stderr)
                return 1
            for _ in range(args.rounds):
                pair = {}
                for mode in MODES:
                    outcome = run_experiment(
                        topo, trace, mode, RunOptions(timeout_s=args.timeout), runtime=runtime,
                        results_dir=tmp / "results",
                    )  # fmt: skip
                    pair[mode] = figures(outcome)
                rounds.append(pair)
        finally:
            destroy(LAB, runtime, cleanup=True, quiet=True)
            os.chdir(old)
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
                f"{f['bytes_per_s'] / 1e6:8.2f} MB/s delivered, completion {f['completion_s']:.2f} s, "
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
    out = {f"{mode} round {i}": f for i, pair in enumerate(rounds, 1) for mode, f in pair.items()}
    lost = [m for m, f in out.items() if f["delivered"] < f["expected"]]
    if lost:
        print(f"  incomplete delivery in: {', '.join(lost)}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
