"""What the delay relay costs per packet it holds, against what a Python receiver costs per packet it
reads, measured in the same round (docs/delay.md, "What the relay costs").

Two namespaces joined by a veth shaped to --rate (tests/unit/fabric_netns.py), a lab dir with the files
the relay reads, the relay started as configure starts it. Each round floods --packets datagrams of
--size bytes at --pps across a link delayed by --delay (fabric) at 1:--scale, into a Python receiver
that reads them all (a sink, as an agent is). The baseline is that receiver's own CPU per datagram
(getrusage): the cheapest thing our Python does with a packet. The line gives the relay's own CPU per
packet held (its getrusage over the flood: the figure the calibration of a lab's scale needs per delayed
hop; its writes carry the receiving kernel's work for the packet), its ratio to the baseline, the
relay's lateness and its drops. Run as root: python bench/delay_relay.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.timescale import TimeScale  # noqa: E402
from orchestrator.lab import relayctl  # noqa: E402
from orchestrator.lab.delay import LinkDelay, parse_duration  # noqa: E402
from orchestrator.lab.relay import DROP_COUNTER  # noqa: E402
from tests.dataplane.test_delay_relay import DelayedLink  # noqa: E402
from tests.unit.fabric_netns import make_veth_pair  # noqa: E402

PACED_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
count, pps, payload = int(sys.argv[2]), float(sys.argv[3]), bytes(int(sys.argv[4]))
start = time.monotonic()
for i in range(count):
    due = start + i / pps
    while time.monotonic() < due:
        pass
    s.sendto(payload, (sys.argv[1], 9))
print(time.monotonic() - start)
"""


SINK = """
import json, resource, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: the sink never drops
s.bind((sys.argv[1], 9))
print("ready", flush=True)
s.settimeout(10)
n = 0
before = resource.getrusage(resource.RUSAGE_SELF)
try:
    while n < int(sys.argv[2]):
        s.recv(65536)
        n += 1
        s.settimeout(1.0)
except socket.timeout:
    pass
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(json.dumps({"received": n, "cpu_s": cpu}))
"""


def one_round(link: DelayedLink, args: argparse.Namespace, delay_s: float) -> dict[str, float]:
    import json

    pair = link.pair
    link.set(args.rate, args.scale, LinkDelay(delay_s))
    before = relayctl.status(link.lab_dir)
    sink = pair.popen_in(pair.b, SINK, pair.b_ip, str(args.packets))
    assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
    done = pair.run_in(pair.a, PACED_SENDER, pair.b_ip, str(args.packets), str(args.pps), str(args.size),
                       timeout=args.packets / args.pps + 60)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the sender failed: {done.stderr.strip()}")
    got = json.loads(sink.communicate(timeout=TimeScale(args.scale).wall_s(delay_s) + 60)[0])
    after = relayctl.status(link.lab_dir)
    assert before is not None and after is not None
    held = after["ends"]["a:" + pair.a_if]
    relay_s = relayctl.cpu_per_packet_s(before, after) or 0.0
    return {
        "base_us": got["cpu_s"] / max(got["received"], 1) * 1e6,
        "relay_us": relay_s * 1e6,
        "received": got["received"],
        "late_mean_ms": held["late_mean_s"] * 1e3,
        "late_max_ms": held["late_max_s"] * 1e3,
        "dropped": after[DROP_COUNTER] - before[DROP_COUNTER],
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--packets", type=int, default=20000, help="datagrams per flood (default 20000)")
    p.add_argument("--pps", type=float, default=10000, help="datagrams per second offered (default 10000)")
    p.add_argument("--size", type=int, default=1000, help="UDP payload bytes (default 1000)")
    p.add_argument("--rate", type=float, default=400e9, help="link bandwidth, bit/s (default 400G)")
    p.add_argument("--scale", type=int, default=100, help="time scale (default 100: 400G is 4 Gbit/s)")
    p.add_argument("--delay", default="1ms", help="the link's delay, fabric time (default 1ms)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    delay_s = parse_duration(args.delay)
    rounds = []
    with make_veth_pair("bdr") as pair, tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        link = DelayedLink(pair, Path(tmp))
        try:
            for k in range(1, args.rounds + 1):
                r = one_round(link, args, delay_s)
                rounds.append(r)
                print(f"round {k}: relay {r['relay_us']:.1f} µs of CPU per packet held, receiver "
                      f"{r['base_us']:.1f} µs per packet read (baseline); "
                      f"late {r['late_mean_ms']:.2f} ms mean, "
                      f"{r['late_max_ms']:.2f} ms max (wall); {r['received']}/{args.packets} received, "
                      f"{r['dropped']} dropped at the relay", flush=True)  # fmt: skip
        finally:
            relayctl.stop(Path(tmp))
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"delay relay, {args.size} B datagrams at {args.pps:g} pps, {args.delay} at 1:{args.scale}, "
          f"median of {args.rounds}: {med['relay_us']:.1f} µs of relay CPU per packet held = "
          f"{med['relay_us'] / med['base_us']:.2f}x a Python receiver's {med['base_us']:.1f} µs per packet; "
          f"late {med['late_mean_ms']:.2f} ms mean (wall)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
