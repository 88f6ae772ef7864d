"""Time and peak memory of the scale model against fabric size: a 3-tier Clos of 64-port switches at
1k, 8k and 64k GPUs, ten MoE dispatch steps (DeepSeek-V3 shape, EP groups of 32 spread over the fabric),
every mode (unicast, host-BIER, network-BIER).

Each size runs in a fresh child process so its peak RSS is its own; its CPU seconds are printed beside
the wall time because the machine is shared (a loaded machine stretches wall time, not CPU time). The
ratio line compares every size with the smallest one measured in the same run (machines are noisy;
docs/design.md §6).

    .venv/bin/python bench/model.py                # 1k, 8k, 64k
    .venv/bin/python bench/model.py --gpus 1024 8192
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(gpus: int, steps: int) -> dict[str, float]:
    from aidcnet.modes import MODELLED, Mode, in_order
    from orchestrator.model.clos import ClosModel
    from orchestrator.model.fabrics import Clos
    from orchestrator.model.workload import moe_steps

    t0 = time.perf_counter()
    fabric = Clos.for_gpus(gpus)
    model = ClosModel(fabric)
    counted = {"ops": 0, "pairs": 0, "trace_s": 0.0}

    def stream():
        # Trace generation is timed apart from the model: the batches are made lazily, one step each.
        it = moe_steps(fabric.hosts, steps=steps, placement="strided")
        while True:
            t = time.perf_counter()
            batch = next(it, None)
            counted["trace_s"] += time.perf_counter() - t
            if batch is None:
                return
            counted["ops"] += len(batch)
            counted["pairs"] += int(batch.dst.size)
            yield batch

    runs = model.runs(in_order(MODELLED), stream())
    egress = {m: r.source_egress_bytes for m, r in runs.items()}
    total = time.perf_counter() - t0
    return {
        "gpus": fabric.hosts,
        "switches": fabric.leaves + fabric.spines + fabric.supers,
        "ops": counted["ops"],
        "pairs": counted["pairs"],
        "trace_s": counted["trace_s"],
        "model_s": total - counted["trace_s"],
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # CPU seconds of the whole child (trace + model): what a shared machine's load does not inflate.
        "cpu_s": (lambda u: u.ru_utime + u.ru_stime)(resource.getrusage(resource.RUSAGE_SELF)),
        "wall_s": total,
        "egress_ratio": egress[Mode.UNICAST] / egress[Mode.HOST_BIER],
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, nargs="+", default=[1024, 8192, 65536])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.child:
        print(json.dumps(one(args.child, args.steps)))
        return 0
    rows = []
    for gpus in args.gpus:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(gpus), "--steps", str(args.steps)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        base = rows[0]
        print(
            f"model {r['gpus']:>6} GPUs {r['switches']:>5} switches, {args.steps} MoE steps: "
            f"{r['ops']:>10,} ops {r['pairs']:>11,} (op, receiver) pairs; trace {r['trace_s']:7.1f} s, "
            f"3 modes {r['model_s']:7.1f} s, total {r['wall_s']:7.1f} s wall / {r['cpu_s']:7.1f} s CPU, "
            f"peak {r['peak_mib']:7.0f} MiB; "
            f"x{r['gpus'] / base['gpus']:.0f} GPUs -> x{r['model_s'] / base['model_s']:.1f} model time, "
            f"x{r['peak_mib'] / base['peak_mib']:.1f} memory; "
            f"unicast/host-BIER egress {r['egress_ratio']:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
