"""Dataplanes on loopback under an offered load, for the benches that time the Python dataplane's own
work per packet (bench/edge_policy.py, bench/fast_reroute.py): a sender process offers UDP datagrams a
little below what the first dataplane reads, and each dataplane's receive-and-forward calls are timed on
this thread's CPU clock, so a busy machine slows every line of a round alike. No Docker, no root."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping

from aidcnet.agent.bier.dataplane import BierDataplane

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


def cpu_under_load(
    dataplanes: Mapping[str, BierDataplane], src: str, dst: str, payload: bytes, packets: int
) -> dict[str, float]:
    """Offer ``packets`` copies of ``payload`` from ``src`` to ``dst``:6635 and poll every dataplane (the
    first one is the one the sender feeds) until the sender is done and 0.2 s pass with nothing received;
    returns each dataplane's CPU seconds spent receiving and forwarding."""
    sender = subprocess.Popen([sys.executable, "-c", SENDER, str(packets), payload.hex(), dst, "6635", src])
    cpu = dict.fromkeys(dataplanes, 0.0)
    quiet_since = None
    while True:
        got = 0
        for name, dp in dataplanes.items():
            start = time.thread_time()
            n = dp.poll_once()
            cpu[name] += time.thread_time() - start
            got += n
        if got:
            quiet_since = None
        elif sender.poll() is not None:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.2:
                return cpu


def loopback_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every loopback bench takes: packets per line and round, rounds, packet size."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--packets", type=int, default=200_000, help="packets offered per line and round")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every line (default 5)")
    p.add_argument(
        "--size", type=int, default=256, help="UDP payload bytes, BIER header included (default 256)"
    )
    return p


def print_ratios(head: str, rates: Mapping[str, list[float]], baseline: str) -> None:
    """The bench's lines: the baseline's median rate, then every other line's median rate and its median
    ratio to the baseline of the same round."""
    base = rates[baseline]
    print(f"{head} {baseline} {statistics.median(base) / 1e3:.1f} k pkt/CPU-s (baseline)")
    for name, values in rates.items():
        if name == baseline:
            continue
        ratio = statistics.median(x / y for x, y in zip(values, base, strict=True))
        print(
            f"{head} {name} {statistics.median(values) / 1e3:.1f} k pkt/CPU-s, "
            f"{ratio:.3f}x the baseline of its round (median of {len(base)} rounds)"
        )
