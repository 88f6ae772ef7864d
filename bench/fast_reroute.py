"""What a fast-reroute bypass costs the Python dataplane, the one that pushes and pops its labels (the eBPF
program hands it every packet that needs either: docs/bier.md, "Fast reroute").

On loopback, B forwards the sender's packets to C (BFR-id 3); D is another neighbour of both. Measured in
alternating rounds, in the same run (bench/loopback.py: each dataplane's own CPU time):
  - direct (the baseline): bypass off, B forwards each packet to C;
  - bypass at the PLR: B's bypass to C is on, over D: B pushes D's adjacency label on every copy;
  - pop at a transit: in the same line, D pops that label and passes the rest to C;
  - node protection at the PLR: B sends C's bit through a next-next hop tunnel over D instead: a fresh
    copy per tunnel with that hop's label and its share of the BitString, then the label pushed (C stands
    in for the next-next hop; the work is the same whichever BFR it is).
Each line is packets per CPU second of the dataplane named; the ratio is against B's direct rate in the
same round, and the median over rounds is printed.

Run: python bench/fast_reroute.py [--packets 200000] [--rounds 5] [--size 256]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.fast_reroute import NnhTunnel, adjacency_labels
from aidcnet.bier.header import BierHeader
from aidcnet.bier.routing import compute_birts, undirected

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.loopback import cpu_under_load, loopback_parser, print_ratios

BSL = 64
EDGES = [("A", "B"), ("B", "C"), ("B", "D"), ("C", "D")]
IDS = {"A": 1, "B": 2, "C": 3}


def build(block: int) -> tuple[dict[str, BierDataplane], dict[str, str], dict[str, dict[str, int]]]:
    adj = undirected(EDGES)
    addrs = {n: f"127.2.{block}.{i + 2}" for i, n in enumerate(sorted(adj))}
    labels = {n: {(0, BSL, 0): 1000 + 100 * i} for i, n in enumerate(sorted(adj))}
    birts = compute_birts(adj, IDS)
    adjacency = adjacency_labels(adj, 5000)
    dps: dict[str, BierDataplane] = {}
    try:
        for n in ("B", "D", "C"):
            bifts = build_bifts(birts[n], BSL, {nb: labels[nb] for nb in adj[n]})
            nbrs = {nb: (addrs[nb], "lo") for nb in adj[n]}
            dps[n] = BierDataplane(IDS.get(n), BSL, 0, bifts, nbrs, labels[n], bind_addr=addrs[n])
            dps[n].set_adjacency_labels({label: nbr for nbr, label in adjacency[n].items()})
        dps["C"].deliver = lambda *_a: None
    except BaseException:
        for dp in dps.values():
            dp.close()
        raise
    return dps, addrs, adjacency


def line(block: int, reroute: str, packets: int, size: int) -> dict[str, float]:
    """Packets per CPU second of B (forwarded) and, with a bypass on (``reroute``: ``link`` or ``nnh``;
    ``off``: none), D (popped)."""
    dps, addrs, adjacency = build(block)
    try:
        c_label = 1000 + 100 * sorted(addrs).index("C")
        if reroute == "link":
            dps["B"].set_bypass({"C": ("D", [adjacency["D"]["C"]])})
        elif reroute == "nnh":
            dps["B"].set_bypass({}, {"C": [NnhTunnel("C", c_label, "D", (adjacency["D"]["C"],), (3,))]})
        label = 1000 + 100 * sorted(addrs).index("B")
        payload = BierHeader(bift_id=label, bsl=BSL, bitstring=0b100, bfir_id=1).encode()
        payload += bytes(max(0, size - len(payload)))
        cpu = cpu_under_load(dps, addrs["A"], addrs["B"], payload, packets)
        b, d = dps["B"].counters(), dps["D"].counters()
        assert b["bypass.sent"] == (b["forwarded"] if reroute != "off" else 0), "copies went the wrong way"
        assert b["bypass.nnh.sent"] == (b["forwarded"] if reroute == "nnh" else 0)
        out = {"B": b["forwarded"] / cpu["B"] if cpu["B"] else 0.0}
        if reroute != "off":
            out["D"] = d["bypass.passed"] / cpu["D"] if cpu["D"] else 0.0
        return out
    finally:
        for dp in dps.values():
            dp.close()


def free_block() -> int:
    for block in range(64):
        try:
            dps, *_ = build(block)
        except OSError:
            continue
        for dp in dps.values():
            dp.close()
        return block
    raise SystemExit("no free 127.2.x.0/24 block with port 6635 free")


def parser() -> argparse.ArgumentParser:
    return loopback_parser(__doc__)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    block = free_block()
    rates: dict[str, list[float]] = {
        "direct": [],
        "bypass at the PLR": [],
        "pop at a transit": [],
        "node protection at the PLR": [],
    }
    for r in range(args.rounds):
        direct = line(block, "off", args.packets, args.size)
        bypassed = line(block, "link", args.packets, args.size)
        to_nnh = line(block, "nnh", args.packets, args.size)
        rates["direct"].append(direct["B"])
        rates["bypass at the PLR"].append(bypassed["B"])
        rates["pop at a transit"].append(bypassed["D"])
        rates["node protection at the PLR"].append(to_nnh["B"])
        print(
            f"round {r + 1}: " + ", ".join(f"{n} {v[-1] / 1e3:.1f} k/CPU-s" for n, v in rates.items()),
            flush=True,
        )
    print_ratios(f"fast reroute, Python dataplane, {args.size} B:", rates, "direct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
