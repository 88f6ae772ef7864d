"""How close to its link's rate a back-pressured UDP sender gets (aidcnet.udpio), against the shaper
draining a full queue in the same round.

On a veth shaped by TBF (20 Mbit/s, 256 KiB queue; tests/unit/aidcnet/test_udpio_backpressure.py's
setup), each round measures:
  - the baseline: a sender with no back-pressure fills the queue at once (dropping the rest), and the
    shaper drains it; its rate while backlogged (orchestrator.experiment.fidelity.DrainMeter over qdisc
    samples every 10 ms) is what the link can do on this machine right now;
  - SO_SNDBUF 160 KiB, below the queue: the agents' setting; 2500 x 1000-byte datagrams;
  - SO_SNDBUF 4 MiB with IP_RECVERR: the queue overflows, ENOBUFS comes back, the datagram is resent.
The senders' rate is wire bytes over the time from first send to an empty socket. The ratio against the
baseline says whether the sender kept the link busy: below 1 the link idled while the sender was off
the CPU (a machine that is busy elsewhere shows that too: compare rounds).
Run as root: python bench/udp_backpressure.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.experiment.fidelity import DrainMeter  # noqa: E402
from orchestrator.lab.shaping import open_netns, read_qdisc_stats  # noqa: E402
from tests.unit.aidcnet.test_udpio_backpressure import QUEUE, RATE, SNDBUF, run, shape  # noqa: E402
from tests.unit.fabric_netns import VethPair, make_veth_pair  # noqa: E402

SAMPLE_S = 0.01
SENDERS = (("sndbuf", f"SO_SNDBUF {SNDBUF >> 10} KiB"), ("recverr", "4 MiB + IP_RECVERR"))


def full_queue_drain_bps(pair: VethPair) -> float:
    """The shaper's rate while its queue held at least a sample's worth, over one no-back-pressure burst."""
    meter = DrainMeter(RATE)
    stop = threading.Event()

    def sample() -> None:
        with open_netns(pair.a_path) as ns:
            while not stop.is_set():
                stats = read_qdisc_stats(ns, pair.a_path, [pair.a_if])[pair.a_if]
                meter.sample(stats.read_at_s, stats.bytes, stats.backlog, stats.read_within_s)
                time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run(pair, "plain")
    finally:
        stop.set()
        sampler.join()
    if meter.drain_bps is None:
        raise SystemExit("the baseline's queue was never backlogged for a whole sample: nothing to compare")
    return meter.drain_bps


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three measurements (default 3)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    ratios: dict[str, list[float]] = {"sndbuf": [], "recverr": []}
    with make_veth_pair("bpq") as pair:
        shape(pair)
        for k in range(1, args.rounds + 1):
            base = full_queue_drain_bps(pair)
            line = [f"round {k}: full queue drained at {base / 1e6:.2f} Mbit/s (baseline)"]
            for mode, label in SENDERS:
                got = run(pair, mode)
                lost = got["sent"] - got["received"]
                ratios[mode].append(got["wire_bps"] / base)
                line.append(
                    f"{label} {got['wire_bps'] / 1e6:.2f} Mbit/s = {got['wire_bps'] / base:.2f}x "
                    f"({got['queue_drops']} queue drops, {got['nobufs']} ENOBUFS, {lost} lost)"
                )
            print("; ".join(line), flush=True)
    median = {mode: statistics.median(r) for mode, r in ratios.items()}
    print(
        f"udp back-pressure at {RATE / 1e6:g} Mbit/s, {QUEUE >> 10} KiB queue, median of {args.rounds} "
        f"rounds: SO_SNDBUF {SNDBUF >> 10} KiB {median['sndbuf']:.2f}x the full queue's drain rate, "
        f"4 MiB + IP_RECVERR {median['recverr']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
