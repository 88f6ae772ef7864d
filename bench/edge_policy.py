"""What the RFC 8296 §6 edge policy costs the Python dataplane, now that it judges each packet's ingress
port (IP_PKTINFO, one control message per datagram) instead of its source address.

One BFR dataplane on loopback with one neighbour; a sender process offers BIER packets addressed to the
neighbour, and the BFR forwards them. Measured in alternating rounds, in the same run:
  - policy off (the baseline): no control messages, no check;
  - policy on: ``lo`` is a host port whose one BFIR is the sender, so every packet is judged and passes;
  - policy on, with receive stamps too (a BFER's replay enables them): two control messages per datagram.
Each line is the BFR's forwarded packets per second of its own thread's CPU time, so a busy machine
slows both alike; the ratio is against the baseline of the same round, and the median over rounds is
printed. No Docker, no root.

Run: python bench/edge_policy.py [--packets 200000] [--rounds 5] [--size 256]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.edge_policy import HOST, HostBfir, PortPolicy
from aidcnet.bier.header import BierHeader
from aidcnet.bier.routing import compute_birts, undirected

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.loopback import cpu_under_load, loopback_parser, print_ratios

BSL = 64


def build(block: int) -> tuple[BierDataplane, BierDataplane, dict[str, str], int]:
    """B forwards to C (BFR-id 3); the sender is A's address, as a BFIR host would be on a host port."""
    adj = undirected([("A", "B"), ("B", "C")], ["A", "B", "C"])
    ids = {"A": 1, "B": 2, "C": 3}
    addrs = {n: f"127.1.{block}.{i + 2}" for i, n in enumerate(sorted(adj))}
    labels = {n: {(0, BSL, 0): 1000 + 100 * i} for i, n in enumerate(sorted(adj))}
    birt = compute_birts(adj, ids)
    bifts_b = build_bifts(birt["B"], BSL, {nb: labels[nb] for nb in adj["B"]})
    bifts_c = build_bifts(birt["C"], BSL, {nb: labels[nb] for nb in adj["C"]})
    b = BierDataplane(2, BSL, 0, bifts_b, {nb: (addrs[nb], "lo") for nb in adj["B"]}, labels["B"],
                      bind_addr=addrs["B"])  # fmt: skip
    c = BierDataplane(3, BSL, 0, bifts_c, {"B": (addrs["B"], "lo")}, labels["C"], bind_addr=addrs["C"])
    c.deliver = lambda *_a: None
    return b, c, addrs, labels["B"][(0, BSL, 0)]


def one(
    b: BierDataplane, c: BierDataplane, addrs: dict[str, str], label: int, packets: int, size: int
) -> float:
    """Forwarded packets per CPU second of B's work."""
    payload = BierHeader(bift_id=label, bsl=BSL, bitstring=0b100, bfir_id=1).encode()
    payload += bytes(max(0, size - len(payload)))
    before = b.counters()["forwarded"]
    cpu = cpu_under_load({"B": b, "C": c}, addrs["A"], addrs["B"], payload, packets)
    forwarded = b.counters()["forwarded"] - before
    return forwarded / cpu["B"] if cpu["B"] else 0.0


def line(block: int, name: str, packets: int, size: int) -> float:
    """One measurement on fresh dataplanes, set up as the line ``name`` says."""
    b, c, addrs, label = build(block)
    try:
        if name != "policy off":
            b.set_edge_policy({"lo": PortPolicy(HOST, hosts={addrs["A"]: HostBfir(1)})})
        if name == "policy on + stamps":
            b.enable_rx_stamps()
        rate = one(b, c, addrs, label, packets, size)
        assert b.counters()["dropped-policy"] == 0, "the policy dropped the BFIR's own packets"
        return rate
    finally:
        b.close()
        c.close()


def free_block() -> int:
    for block in range(64):
        try:
            b, c, *_ = build(block)
        except OSError:
            continue
        b.close()
        c.close()
        return block
    raise SystemExit("no free 127.1.x.0/24 block with port 6635 free")


LINES = ("policy off", "policy on", "policy on + stamps")


def parser() -> argparse.ArgumentParser:
    return loopback_parser(__doc__)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    block = free_block()
    rates: dict[str, list[float]] = {name: [] for name in LINES}
    for r in range(args.rounds):
        for name in LINES:
            rates[name].append(line(block, name, args.packets, args.size))
        print(
            f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1] / 1e3:.1f} k/CPU-s" for n in LINES), flush=True
        )
    print_ratios(f"edge policy, Python dataplane, {args.size} B, 1->1:", rates, "policy off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
