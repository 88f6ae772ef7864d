"""The delay relay between two network namespaces (no images): a ping-sized UDP probe across a delayed,
shaped link measures the link's round trip in fabric time at two scales; TCP and ARP cross it intact; the
link holds its bandwidth-delay product in flight; and frames lost at the relay are counted.

Two namespaces joined by a veth (tests/unit/fabric_netns.py), a lab dir with the files the relay reads
(topology-data.json, fabric.json), the relay started and stopped as configure and destroy do
(:mod:`orchestrator.lab.relayctl`). Root, iproute2 and clang required.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidcnet.timescale import TimeScale
from orchestrator.lab import relayctl
from orchestrator.lab.delay import LinkDelay
from orchestrator.lab.fabric import EndShaper, Fabric, tbf_burst
from orchestrator.lab.relay import DROP_COUNTER
from orchestrator.lab.shaping import apply_shapers, write_fabric
from tests.probes import ECHO_SERVER, PROBE, PROBE_FRAME_BYTES
from tests.unit.fabric_netns import VethPair, make_veth_pair, sh

TCP_SINK = """
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7778)); s.listen(1); s.settimeout(30)
c, _ = s.accept(); c.settimeout(30)
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(65536)
    if not d:
        break
    h.update(d); n += len(d)
print(n, h.hexdigest())
"""

TCP_SOURCE = """
import hashlib, socket, sys
data = bytes(range(256)) * 4096
c = socket.create_connection((sys.argv[1], 7778), timeout=30)
c.sendall(data); c.close()
print(len(data), hashlib.sha256(data).hexdigest())
"""

BLOCKING_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(sys.argv[4]))
payload = bytes(int(sys.argv[3]))
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    s.sendto(payload, (sys.argv[1], 9))
    n += 1
print(n)
"""


def ends(pair: VethPair, bandwidth_bps: int, scale: int, delay: LinkDelay) -> dict[str, EndShaper]:
    rate = TimeScale(scale).veth_bps(bandwidth_bps)
    out = {}
    for node, iface, peer in (("a", pair.a_if, f"b:{pair.b_if}"), ("b", pair.b_if, f"a:{pair.a_if}")):
        end = EndShaper(node, iface, peer, bandwidth_bps, rate, 4 << 20, tbf_burst(rate, 1500), 1500,
                        delay.delay_s, delay.jitter_s)  # fmt: skip
        out[end.name] = end
    return out


def lateness(held: dict) -> str:
    most, mean = held["late_max_s"] * 1e3, held["late_mean_s"] * 1e3
    return f"relay late by {most:.2f} ms at most, {mean:.3f} ms on average (wall)"


class DelayedLink:
    """A veth pair as a lab: fabric.json and topology-data.json in a lab dir, shapers applied, relay
    synced."""

    def __init__(self, pair: VethPair, lab_dir: Path) -> None:
        self.pair, self.lab_dir = pair, lab_dir
        nodes = {"a": {"longname": pair.a}, "b": {"longname": pair.b}}
        (lab_dir / "topology-data.json").write_text(json.dumps({"nodes": nodes}))

    def set(self, bandwidth_bps: int, scale: int, delay: LinkDelay) -> Fabric:
        fabric = Fabric("dl", scale, ends(self.pair, bandwidth_bps, scale, delay))
        apply_shapers(self.pair.a_path, [fabric.end(f"a:{self.pair.a_if}")])
        apply_shapers(self.pair.b_path, [fabric.end(f"b:{self.pair.b_if}")])
        write_fabric(self.lab_dir, fabric)
        relayctl.sync(self.lab_dir, fabric)
        return fabric

    def probe(self, count: int, timeout_s: float) -> list[float]:
        server = self.pair.popen_in(self.pair.b, ECHO_SERVER, self.pair.b_ip, str(timeout_s * 2 + 5))
        try:
            time.sleep(0.3)
            done = self.pair.run_in(self.pair.a, PROBE, self.pair.b_ip, str(count), str(timeout_s),
                                    timeout=count * timeout_s + 30)  # fmt: skip
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)
        finally:
            server.kill()
            server.wait()


@pytest.fixture
def link(tmp_path) -> Iterator[DelayedLink]:
    with make_veth_pair("dl") as pair:
        lab = DelayedLink(pair, tmp_path)
        try:
            yield lab
        finally:
            relayctl.stop(tmp_path)


@pytest.mark.parametrize("scale", [100, 250])
def test_a_ping_sized_probe_measures_the_round_trip_of_a_2ms_link_in_fabric_time(link, scale):
    """400G, 2 ms one way: 4 ms of round trip plus the probe's serialisation both ways, within 5%."""
    delay = LinkDelay(0.002)
    link.set(400_000_000_000, scale, delay)
    time_scale = TimeScale(scale)
    rtts = link.probe(count=5, timeout_s=time_scale.wall_s(0.004) * 3)
    fabric_rtts = [time_scale.fabric_s(r) for r in rtts]
    serialisation = 2 * PROBE_FRAME_BYTES * 8 / 400e9
    expected = 2 * delay.delay_s + serialisation
    print(f"scale 1:{scale}: fabric RTTs {[f'{r * 1e3:.4f}' for r in fabric_rtts]} ms, expected "
          f"{expected * 1e3:.4f} ms (wall {statistics.median(rtts) * 1e3:.1f} ms)")  # fmt: skip
    for rtt in fabric_rtts:
        assert rtt == pytest.approx(expected, rel=0.05)
    status = relayctl.status(link.lab_dir)
    assert status is not None and status[DROP_COUNTER] == 0
    held = status["ends"]["a:" + link.pair.a_if]
    print(f"relay lateness {lateness(held)}")
    assert held["held_at"] == "b:" + link.pair.b_if and held["packets"] >= 5
    assert held["in_flight_packets"] == 0


def test_tcp_and_arp_cross_a_delayed_link_intact(link):
    """A TCP transfer (checksum offload and GSO on the veth) arrives byte for byte, and ARP, whose request
    and reply are held like any frame, still resolves: the first probe waits two round trips."""
    time_scale = TimeScale(100)
    link.set(400_000_000_000, 100, LinkDelay(0.0005))
    pair = link.pair
    sh("ip", "-n", pair.a, "neigh", "del", pair.b_ip, "dev", pair.a_if)
    first, second = link.probe(count=2, timeout_s=2.0)
    rtt = time_scale.wall_s(0.001)
    assert first == pytest.approx(2 * rtt, rel=0.15) and second == pytest.approx(rtt, rel=0.1)
    sink = pair.popen_in(pair.b, TCP_SINK, pair.b_ip)
    time.sleep(0.3)
    sent = pair.run_in(pair.a, TCP_SOURCE, pair.b_ip, timeout=60)
    got, err = sink.communicate(timeout=60)
    assert sent.returncode == 0 and sink.returncode == 0, (sent.stderr, err)
    assert got.split() == sent.stdout.split()
    status = relayctl.status(link.lab_dir)
    assert status is not None and status[DROP_COUNTER] == 0
    assert status["ends"]["b:" + pair.b_if]["packets"] > 0  # the ACKs came back through it too


def sample_relay(lab_dir: Path, end: str, start_s: float, stop_s: float) -> list[tuple[float, int, int]]:
    """(when, bytes taken so far, bytes in flight) for ``end``, every 20 ms from ``start_s`` to ``stop_s``
    (monotonic); ``when`` is the middle of the status call."""
    samples = []
    while (now := time.monotonic()) < stop_s:
        if now >= start_s:
            status = relayctl.status(lab_dir)
            assert status is not None
            held = status["ends"][end]
            samples.append(((now + time.monotonic()) / 2, held["bytes"], held["in_flight_bytes"]))
        time.sleep(0.02)
    return samples


def bytes_taken_at(samples: list[tuple[float, int, int]], when: float) -> float:
    """The relay's byte count at ``when``, interpolated between the samples around it."""
    for (t0, b0, _), (t1, b1, _) in itertools.pairwise(samples):
        if t0 <= when <= t1:
            return b0 + (b1 - b0) * (when - t0) / (t1 - t0)
    raise ValueError(f"{when} is outside the samples")


def test_a_full_link_holds_its_bandwidth_delay_product_in_flight(link):
    """1G at 1:100 (10 Mbit/s on the veth), 5 ms one way: what is in flight is what the link carried in the
    last hold, 625 KB once the link is full, at any scale (bytes are not scaled)."""
    link.set(1_000_000_000, 100, LinkDelay(0.005))
    pair = link.pair
    end = "a:" + pair.a_if
    hold_wall_s = TimeScale(100).wall_s(0.005)
    began = time.monotonic()
    sender = pair.popen_in(pair.a, BLOCKING_SENDER, pair.b_ip, "1.5", "1000", str(192 << 10))
    try:
        samples = sample_relay(link.lab_dir, end, began + 0.3, began + 1.45)
        _out, err = sender.communicate(timeout=30)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    assert sender.returncode == 0, err
    status = relayctl.status(link.lab_dir)
    assert status is not None
    held = status["ends"][end]
    bdp = 1e9 * 0.005 / 8
    frame = 1000 + 28 + 14
    # Each sample after the first hold: the flight against the bytes taken in the hold before it. A relay
    # that held frames for any other time than the hold would be off by the difference, at any rate.
    ratios = [
        flight / (taken - bytes_taken_at(samples, when - hold_wall_s))
        for when, taken, flight in samples
        if when - hold_wall_s >= samples[0][0]
    ]
    first, last = samples[0], samples[-1]
    delivered_bps = (last[1] - first[1]) * 8 / (last[0] - first[0])
    print(f"max in flight {held['max_in_flight_bytes']} B against a BDP of {bdp:.0f} B; the link delivered "
          f"{delivered_bps / 1e6:.3f} Mbit/s of its 10 (wall); in flight over the last hold's bytes, "
          f"{len(ratios)} samples: median {statistics.median(ratios):.4f}, {min(ratios):.4f} to "
          f"{max(ratios):.4f}; {lateness(held)}")  # fmt: skip
    assert len(ratios) >= 10
    # The median sample is within 2% (a late release adds its lateness' worth of frames to the flight, a
    # status call's timing a ms of bytes).
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.02)
    # The sender keeps the link full: it runs at its rate, save what a busy machine's TBF loses (its timer
    # fires late, and a two-frame bucket cannot bank the tokens), so the flight peaks near the BDP of whole
    # frames and never above it by more than what arrives while the relay is late (a few ms of wall time).
    assert delivered_bps == pytest.approx(10e6, rel=0.15)
    assert max(flight for _, _, flight in samples) <= held["max_in_flight_bytes"] <= bdp * 1.1
    assert held["max_in_flight_bytes"] % frame == 0
    assert status[DROP_COUNTER] == 0


ORDERED_SINK = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7779)); s.settimeout(10)
got = []
for _ in range(int(sys.argv[2])):
    data, _ = s.recvfrom(2048)
    got.append((int.from_bytes(data[:4], "big"), time.monotonic() - float(data[4:].decode())))
print(json.dumps(got))
"""

SPACED_SOURCE = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(i.to_bytes(4, "big") + repr(time.monotonic()).encode(), (sys.argv[1], 7779))
    time.sleep(float(sys.argv[3]))
"""


def test_jitter_spreads_the_delay_and_never_reorders(link):
    """1 ms ± 0.4 ms at 1:100 (100 ± 40 ms of wall time), a datagram every 10 ms: every one-way delay lies
    within the jitter (plus the relay's lateness), they spread, and they arrive in the order sent."""
    time_scale = TimeScale(100)
    link.set(400_000_000_000, 100, LinkDelay(0.001, 0.0004))
    pair, count = link.pair, 60
    sink = pair.popen_in(pair.b, ORDERED_SINK, pair.b_ip, str(count))
    time.sleep(0.3)
    sent = pair.run_in(pair.a, SPACED_SOURCE, pair.b_ip, str(count), "0.01", timeout=30)
    out, err = sink.communicate(timeout=30)
    assert sent.returncode == 0 and sink.returncode == 0, (sent.stderr, err)
    got = json.loads(out)
    assert [seq for seq, _ in got] == list(range(count))
    delays = [time_scale.fabric_s(wall) for _, wall in got]
    print(f"one-way delays {min(delays) * 1e3:.3f}..{max(delays) * 1e3:.3f} ms, mean "
          f"{statistics.mean(delays) * 1e3:.3f} ms (fabric)")  # fmt: skip
    assert min(delays) >= 0.0006 and max(delays) <= 0.0014 + time_scale.fabric_s(0.01)
    assert max(delays) - min(delays) > 0.0004


def test_frames_lost_at_a_stalled_relay_are_counted(link):
    """A relay off the CPU while frames arrive loses what its taps' rings cannot hold, and says so."""
    link.set(400_000_000_000, 100, LinkDelay(0.0001))
    pid = relayctl.running_pid(link.lab_dir)
    assert pid is not None
    pair = link.pair
    os.kill(pid, signal.SIGSTOP)
    try:
        done = pair.run_in(pair.a, BLOCKING_SENDER, pair.b_ip, "1.0", "64", str(4 << 20), timeout=30)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    sent = int(done.stdout)
    status = relayctl.status(link.lab_dir)
    assert status is not None
    print(f"sent {sent} while the relay was stopped: {status[DROP_COUNTER]} lost at the relay")
    if sent <= 20000:
        pytest.fail(f"the sender offered only {sent} frames in 1 s, not enough to fill a 20000-frame ring")
    assert status[DROP_COUNTER] >= sent - 20000 - status["ends"]["a:" + pair.a_if]["packets"]
    assert status[DROP_COUNTER] > 0


def retrans_ms(pair: VethPair) -> list[int]:
    return [
        int(sh("ip", "netns", "exec", ns, "sysctl", "-n", f"net.ipv4.neigh.{iface}.retrans_time_ms").stdout)
        for ns, iface in ((pair.a, pair.a_if), (pair.b, pair.b_if))
    ]


def test_arp_resolves_across_a_link_longer_than_the_kernels_three_tries(link):
    """A 20 ms link at 1:100 has a 4 s round trip of wall time, beyond the kernel's 3 s of ARP tries:
    the relay stretches both ends' retransmit time to twice the round trip, and back when it is gone."""
    pair = link.pair
    before = retrans_ms(pair)
    link.set(400_000_000_000, 100, LinkDelay(0.02))
    assert retrans_ms(pair) == [8000, 8000]
    sh("ip", "-n", pair.a, "neigh", "del", pair.b_ip, "dev", pair.a_if)
    first, second = link.probe(count=2, timeout_s=15.0)
    assert first == pytest.approx(8.0, rel=0.05) and second == pytest.approx(4.0, rel=0.05)
    link.set(400_000_000_000, 100, LinkDelay())
    assert retrans_ms(pair) == before


def test_removing_the_delay_stops_the_relay_and_the_link_carries_on(link):
    link.set(400_000_000_000, 100, LinkDelay(0.001))
    assert relayctl.running_pid(link.lab_dir) is not None
    link.set(400_000_000_000, 100, LinkDelay())
    assert relayctl.running_pid(link.lab_dir) is None
    (rtt,) = link.probe(count=1, timeout_s=1.0)
    assert rtt < 0.05
