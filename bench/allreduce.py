"""AllReduce of 16 MiB per worker on Figure 1 (labs/ina-fig1, job 1: w1..w4) under INA, ring and
parameter server, in one run on one deployed lab.

Per mode, from the kernel's link counters (veth rx/tx bytes, every data link, both directions):
bytes into the aggregation point (INA: the VAT root s6; PS: the parameter server host, by default w5;
ring: none, shown as the busiest worker's ingress), total fabric bytes, and completion time (first
start to last worker done). Every result is checked on every worker (bit-exact against numpy for
int32; float jobs as in docs/allreduce.md). The ratios are what to read: the machine is shared and
noisy, the modes run back to back.

Expected shape: the root receives one aggregate per child (fan-in 2 at s6) while the PS receives one
array per worker (4), so INA's root ingress should be about 1/2 of the PS's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.modes import COLLECTIVE, Mode, in_order  # noqa: E402
from bench.harness import bench_lab, bench_parser  # noqa: E402
from orchestrator.experiment.metrics import link_deltas, link_pairs, node_ingress  # noqa: E402
from orchestrator.experiment.modes.collective import find_job, run_allreduce  # noqa: E402
from orchestrator.experiment.session import LabSession  # noqa: E402

MIB = 1 << 20
# (bytes into the aggregation point, fabric bytes, completion s) of one mode's run
Row = tuple[int, int, float]


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--mib", type=float, default=16.0, help="array size per worker in MiB (default 16)")
    p.add_argument("--job", type=int, default=1, help="INA job of labs/ina-fig1.vars.yml (default 1)")
    p.add_argument("--ps-host", default="w5", help="parameter server host (default w5: not in job 1)")
    return p


def ingress(links: list, node: str) -> int:
    """Bytes that arrived at ``node`` over its data links."""
    return node_ingress(links, node)[0]


def one_mode(session: LabSession, job, mode: Mode, args: argparse.Namespace, pairs) -> Row | None:
    """One AllReduce in ``mode``, its line printed; None (and why, on stderr) when a worker's result is
    wrong."""
    elements = int(args.mib * MIB) // 4
    before = session.interface_snapshot()
    run = run_allreduce(session, args.job, mode, elements, seed=42, ps_host=args.ps_host)
    after = session.interface_snapshot()
    links = link_deltas(before, after, pairs)
    if not run.ok:
        print(f"bench allreduce: {mode}: wrong result on {run.wrong}", file=sys.stderr)
        return None
    point = {Mode.INA: job.root, Mode.PS: args.ps_host}.get(mode)
    into = ingress(links, point) if point else max(ingress(links, w) for w in job.workers)
    fabric = sum(lc.a_to_b_bytes + lc.b_to_a_bytes for lc in links)
    print(
        f"allreduce {mode:4s} {args.mib:g} MiB x {len(job.workers)} workers: {run.verdict}, "
        f"bytes into {point or 'busiest worker'} {into / MIB:.2f} MiB, "
        f"fabric {fabric / MIB:.2f} MiB, "
        f"completion {run.seconds:.3f} s (wall, at the lab's scale), retransmits {run.retransmits}"
    )
    return into, fabric, run.seconds


def ratios(rows: dict[Mode, Row], job, ps_host: str) -> None:
    ina, ring, ps = rows[Mode.INA], rows[Mode.RING], rows[Mode.PS]
    fan_in = len([n for n, v in job.vat.items() if v.parent == job.root])
    print(
        f"ratio bytes into root (INA {job.root}) / into PS ({ps_host}): {ina[0] / ps[0]:.3f} "
        f"(1/fan-in of the root = {1 / fan_in:.3f})"
    )
    print(f"ratio fabric bytes ring/INA: {ring[1] / ina[1]:.2f}, PS/INA: {ps[1] / ina[1]:.2f}")
    print(f"ratio completion time ring/INA: {ring[2] / ina[2]:.2f}, PS/INA: {ps[2] / ina[2]:.2f}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with bench_lab("ina-fig1", f"{args.name_prefix}allreduce") as lab:
        session = LabSession.open(lab.topo, lab.runtime)
        job = find_job(session.plan, args.job)
        pairs = link_pairs(lab.topo)
        rows = {}
        for mode in in_order(COLLECTIVE):
            row = one_mode(session, job, mode, args, pairs)
            if row is None:
                return 1
            rows[mode] = row
        ratios(rows, job, args.ps_host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
