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
import statistics
import subprocess
import sys
import time

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.edge_policy import HOST, HostBfir, PortPolicy
from aidcnet.bier.header import BierHeader
from aidcnet.bier.routing import compute_birts, undirected

BSL = 64
SENDER = """
import socket, sys, time
n, payload, dst = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), (sys.argv[3], int(sys.argv[4]))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[5], 0))
for i in range(n):
    s.sendto(payload, dst)
    if i % 64 == 63:
        time.sleep(0.0002)  # loopback drops what the BFR has not read: offer a little below its rate
"""


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
    """Forwarded packets per CPU second of B's thread."""
    payload = BierHeader(bift_id=label, bsl=BSL, bitstring=0b100, bfir_id=1).encode()
    payload += bytes(max(0, size - len(payload)))
    before = b.counters()["forwarded"]
    sender = subprocess.Popen([sys.executable, "-c", SENDER, str(packets), payload.hex(), addrs["B"], "6635",
                               addrs["A"]])  # fmt: skip
    cpu = 0.0
    quiet_since = None
    while True:
        start = time.thread_time()
        got = b.poll_once()
        cpu += time.thread_time() - start
        while c.poll_once():
            pass
        if got:
            quiet_since = None
        elif sender.poll() is not None:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.2:
                break
    forwarded = b.counters()["forwarded"] - before
    return forwarded / cpu if cpu else 0.0


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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--packets", type=int, default=200_000, help="packets offered per line and round")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the three lines (default 5)")
    p.add_argument(
        "--size", type=int, default=256, help="UDP payload bytes, BIER header included (default 256)"
    )
    return p


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
    base = rates["policy off"]
    head = f"edge policy, Python dataplane, {args.size} B, 1->1:"
    print(f"{head} policy off {statistics.median(base) / 1e3:.1f} k pkt/CPU-s (baseline)")
    for name in LINES[1:]:
        ratio = statistics.median(x / y for x, y in zip(rates[name], base, strict=True))
        print(
            f"{head} {name} {statistics.median(rates[name]) / 1e3:.1f} k pkt/CPU-s, "
            f"{ratio:.3f}x the baseline of its round (median of {args.rounds} rounds)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
