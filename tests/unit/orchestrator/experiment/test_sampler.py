"""The fabric sampler during a run: shaper counters and cgroup CPU into the fidelity verdict, on two
namespaces joined by a shaped veth (tests/unit/fabric_netns.py): root and iproute2 required."""

from __future__ import annotations

import os
import time
from typing import Any

from pyroute2 import IPRoute

from orchestrator.experiment import sampler
from orchestrator.experiment.fidelity import MIN_BUSY_S, verdict
from orchestrator.experiment.sampler import FabricSampler
from orchestrator.experiment.watch import QuietWait
from orchestrator.lab.fabric import Fabric
from orchestrator.lab.shaping import apply_shapers, open_netns
from tests.unit.fabric_netns import VethPair
from tests.unit.orchestrator.lab.test_shaping import BLOCKING_SENDER, shaper

# The drain check counts only intervals whose starting backlog could keep the shaper busy to their end
# (rate x period = 125 KB here): test_shaping's 192 KiB socket holds only about that much, a 512 KiB one
# (about 1 MiB charged, some 450 KB of frames) holds far more, under a queue deep enough to take it.
DEEP_SENDER = BLOCKING_SENDER.replace("SO_SNDBUF, 192 << 10", "SO_SNDBUF, 512 << 10")
assert DEEP_SENDER != BLOCKING_SENDER, "test_shaping's sender changed its SO_SNDBUF: update DEEP_SENDER"
DEEP_QUEUE = 2 << 20

FLOOD = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
for _ in range(int(sys.argv[2])):
    s.sendto(bytes(1000), (sys.argv[1], 9000))
"""


RATE = 20_000_000


def _deep_run(pair: VethPair) -> tuple[FabricSampler, float, int]:
    """Both ends shaped at RATE with deep queues; a's sender blocks on its socket for 1.5 s, sampled
    every 50 ms. The sampler, the sender's average (bit/s) and the frames it sent."""
    a = shaper("a", pair.a_if, "b:fab1", RATE, DEEP_QUEUE)
    b = shaper("b", pair.b_if, "a:fab0", RATE, DEEP_QUEUE)
    apply_shapers(pair.a_path, [a])
    apply_shapers(pair.b_path, [b])
    fabric = Fabric("fab", 1000, {a.name: a, b.name: b})
    containers = {"a": pair.a, "b": pair.b}
    with FabricSampler(fabric, containers.__getitem__, period_s=0.05, pid_of=lambda _n: os.getpid()) as s:
        started = time.monotonic()
        sent = pair.run_in(pair.a, DEEP_SENDER, pair.b_ip, "1.5")
        elapsed = time.monotonic() - started
        time.sleep(0.5)  # what the deep queue still holds (~450 KB, 0.2 s at the rate) drains meanwhile
    # What the sender got through on average (1042-byte frames), sampler or not.
    return s, int(sent.stdout) * 1042 * 8 / elapsed, int(sent.stdout)


def test_sampler_feeds_the_verdict_faithful_then_not(veth_pair):
    pair = veth_pair
    s, average, frames = _deep_run(pair)
    links = s.link_counters()
    v = verdict(links, s.node_counters())
    a_end = {x.name: x for x in links}["a:fab0"]
    assert a_end.busy_s > 0, f"the deep queue never stood between two kept reads ({a_end}): machine too busy?"
    drain = a_end.busy_bytes * 8 / a_end.busy_s
    print(
        f"sampler: {s.samples} samples, a:fab0 busy {a_end.busy_s:.2f} s at {drain / 1e6:.2f} Mbit/s "
        f"(sender's average {average / 1e6:.2f} Mbit/s); reasons: {v.reasons}"
    )
    assert a_end.busy_s > 1.0 and {x.name: x for x in links}["b:fab1"].busy_s == 0
    assert a_end.queue_drops == 0 and a_end.tx_bytes >= frames * 1042 * 0.95
    # Never beyond the shaper (the sender's average runs above it: it stops with ~450 KB still queued).
    # Whether the drain is within 5% of the rate depends on this shared machine's load (a starved softirq
    # slows the shaper itself): the verdict must say so exactly when it is not.
    assert drain <= RATE * 1.05 and average > RATE * 0.9
    off = abs(drain / RATE - 1) > 0.05
    assert off == any(r.startswith("link a:fab0: drained at") for r in v.reasons), v.reasons

    small = shaper("a", pair.a_if, "b:fab1", RATE)  # 256 KiB
    apply_shapers(pair.a_path, [small])
    fabric = Fabric("fab", 1000, {small.name: small})
    with FabricSampler(fabric, {"a": pair.a}.__getitem__, period_s=0.05, pid_of=lambda _n: os.getpid()) as s:
        pair.run_in(pair.a, FLOOD, pair.b_ip, "3000")  # no back-pressure: the 256 KiB queue overflows
    v = verdict(s.link_counters(), s.node_counters())
    assert any(r.startswith("queue a:fab0: the shaper dropped") for r in v.reasons), v.reasons
    assert not v.faithful


class _StallingHandle:
    """A namespace handle whose every fourth qdisc dump first stalls 120 ms, as a garbage collection or a
    busy scheduler makes a read on a loaded machine."""

    def __init__(self, handle: IPRoute) -> None:
        self.handle = handle
        self.dumps = 0

    def get_qdiscs(self) -> Any:
        self.dumps += 1
        if self.dumps % 4 == 0:
            time.sleep(0.12)
        return self.handle.get_qdiscs()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def test_reads_that_stall_do_not_make_the_shaper_look_fast(veth_pair, monkeypatch):
    """Stamped where it asked rather than where the kernel answered, this sampler read the 20 Mbit/s
    shaper at 35 Mbit/s: the verdict blamed a link that was fine."""
    handles: list[_StallingHandle] = []

    def stalling(netns: str) -> _StallingHandle:
        handles.append(_StallingHandle(open_netns(netns)))
        return handles[-1]

    monkeypatch.setattr(sampler, "open_netns", stalling)
    # The stalls stand for reads the kernel answered late, not for a slow sweep: the samples keep their
    # period (with the sampler's share, every stalled sweep would space the next out).
    monkeypatch.setattr(sampler, "SAMPLER_SHARE", 1.0)
    s, _average, _frames = _deep_run(veth_pair)
    links = s.link_counters()
    a_end = {x.name: x for x in links}["a:fab0"]
    assert a_end.busy_s > 0, f"the deep queue never stood between two kept reads ({a_end}): machine too busy?"
    drain = a_end.busy_bytes * 8 / a_end.busy_s
    v = verdict(links, s.node_counters())
    print(f"stalled reads: a:fab0 busy {a_end.busy_s:.2f} s at {drain / 1e6:.2f} Mbit/s; {v.notes}")
    # How many reads a run makes depends on the machine's load (every fourth one stalls): the stalls
    # must have happened and been seen as skipped readings, not read as a fast shaper.
    stalls = sum(h.dumps // 4 for h in handles)
    assert stalls >= 2, "the sampler did not read through open_netns"
    assert a_end.skipped_readings >= 1, "the stalls were not seen"
    assert any("stalled" in n and "a:fab0" in n for n in v.notes), v.notes
    # A skipped read leaves an interval too long for the backlog to cover: less busy time, still judged.
    assert a_end.busy_s >= MIN_BUSY_S and drain <= RATE * 1.05


def test_backlog_shows_what_an_earlier_burst_left_until_the_queue_drains(veth_pair):
    """What the driver's wait for a quiet fabric reads (FabricWatch.wait_quiet): a burst larger than the
    queue leaves it full; the sweep names the end and its bytes until the shaper has sent them."""
    pair = veth_pair
    rate = 2_000_000  # the 256 KiB queue takes about a second to drain
    a = shaper("a", pair.a_if, "b:fab1", rate)
    apply_shapers(pair.a_path, [a])
    sampler = FabricSampler(
        Fabric("fab", 1000, {a.name: a}), {"a": pair.a}.__getitem__, pid_of=lambda _n: os.getpid()
    )
    try:
        assert sampler.backlog() == {}
        pair.run_in(pair.a, FLOOD, pair.b_ip, "3000")
        started = time.monotonic()
        left = sampler.backlog()
        assert set(left) == {"a:fab0"} and left["a:fab0"] > 100_000, left
        while sampler.backlog() and time.monotonic() - started < 5.0:
            time.sleep(0.05)
        drained = time.monotonic() - started
        print(f"{left['a:fab0']} B queued after the burst, drained in {drained:.2f} s at 2 Mbit/s")
        assert sampler.backlog() == {} and drained > left["a:fab0"] * 8 / rate * 0.5
    finally:
        sampler.close()


def test_the_quiet_wait_speaks_only_when_there_was_something_to_wait_for() -> None:
    assert QuietWait({}, 0.0, {}).describe() is None
    line = QuietWait({"h1:eth1": 9000, "leaf1:eth3": 1000}, 0.4, {}).describe()
    assert line == "waited 0.40 s for 10000 B of earlier traffic to drain from 2 shaper queue(s)"
    stuck = QuietWait({"h1:eth1": 9000}, 10.0, {"h1:eth1": 4000}).describe()
    assert stuck is not None and "h1:eth1 4000 B" in stuck and "starts anyway" in stuck


def test_a_slow_sweep_spaces_the_samples_out_to_keep_the_sampler_within_its_share() -> None:
    assert sampler.sample_pause_s(0.1, 0.005) == 0.1  # a small lab: every 0.1 s
    # 280 nodes at 150 ms a sweep: a 0.6 s pause, so sweeping takes a fifth of the time.
    pause = sampler.sample_pause_s(0.1, 0.15)
    assert abs(0.15 / (0.15 + pause) - sampler.SAMPLER_SHARE) < 1e-12


def test_the_sampler_says_when_it_spaced_its_samples_out(veth_pair, monkeypatch) -> None:
    monkeypatch.setattr(sampler, "SAMPLER_SHARE", 0.001)  # any sweep is too slow for this share
    a = shaper("a", veth_pair.a_if, "b:fab1", RATE, DEEP_QUEUE)
    b = shaper("b", veth_pair.b_if, "a:fab0", RATE, DEEP_QUEUE)
    fabric = Fabric("fab", 1000, {a.name: a, b.name: b})
    containers = {"a": veth_pair.a, "b": veth_pair.b}
    with FabricSampler(fabric, containers.__getitem__, period_s=0.01, pid_of=lambda _n: os.getpid()) as s:
        time.sleep(0.3)
    note = s.describe_pace()
    assert note is not None and note.startswith("sampler: a sweep of 2 nodes took"), note
    assert s.longest_pause_s > 0.01
