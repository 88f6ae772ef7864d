"""Shapers applied from the host into a namespace: TBF at the plan's rate, changed in place, counters read.

Runs on two namespaces joined by a veth (tests/unit/fabric_netns.py): root and iproute2 required.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import replace

import pytest
from pyroute2 import NetNS

from orchestrator.experiment.fidelity import DrainMeter
from orchestrator.lab.fabric import EndShaper, Fabric, tbf_burst
from orchestrator.lab.shaping import (
    NEIGH_REACHABLE_MS,
    FabricIOError,
    apply_shapers,
    cgroup_cpu_usec,
    container_pid,
    qdisc_stats,
    read_qdisc_stats,
)
from tests.unit.fabric_netns import VethPair, paced_run

# A blocking sender whose socket memory (SO_SNDBUF, doubled by the kernel) is below the queue limit (256
# KiB): the socket blocks while its datagrams wait in the shaper, so the queue stays busy and never
# overflows. A 1000-byte datagram is charged some 2.3 KB of truesize, so 192 KiB holds about 160 KB of
# frames, 64 ms of work at 20 Mbit/s (64 KiB held 22 ms, less than a busy machine may keep the sender off
# its CPU), and stays below the queue limit.
BLOCKING_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 192 << 10)
dst, seconds = (sys.argv[1], 9000), float(sys.argv[2])
payload = bytes(1000)
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    s.sendto(payload, dst)
    n += 1
print(n)
"""


def shaper(
    node: str, iface: str, peer: str, rate_bps: int, queue: int = 256 << 10, burst: int | None = None
) -> EndShaper:
    """An end at ``rate_bps`` with the lab's token bucket (fabric.tbf_burst) unless ``burst`` is given."""
    burst = tbf_burst(rate_bps, 1500) if burst is None else burst
    return EndShaper(node, iface, peer, rate_bps * 10000, rate_bps, queue, burst, 1500)


# The bucket of the rate test: 10 ms of tokens. The lab's bucket (two frames, 1.2 ms at 20 Mbit/s) loses
# every token that comes due while the kernel's dequeue runs late, and on a loaded CI machine that held
# the drain at 17.8-18.2 Mbit/s in three runs of three (19.98 quiet): the machine, which the fidelity
# sampler judges in a lab (test_sampler.py), not the rate that apply_shapers set, which this test is about.
# A deeper bucket cannot make the long-run drain faster than the rate: it only keeps tokens a late
# dequeue would drop, and the drain meter counts only intervals that began with a full queue.
RATE_TEST_BUCKET_S = 0.010


def drain(pair: VethPair, busy_s: float, rate_bps: int) -> tuple[float, int]:
    """Saturate a's shaper until its queue has been backlogged ``busy_s`` (at most 4x that in all); its
    drain rate (bit/s) while backlogged, and its queue drops. Only intervals whose starting queue could
    keep a ``rate_bps`` shaper busy to their end count: a sender starved of CPU lets the queue run dry
    between two samples (1.3 s of 2 with both cores busy elsewhere), and that is not the shaper's pace,
    so the sender runs on until the shaper has been measured long enough."""
    meter = DrainMeter(rate_bps)
    with NetNS(pair.a_path) as ns:
        before = read_qdisc_stats(ns, pair.a_path, [pair.a_if])[pair.a_if]
        proc = pair.popen_in(pair.a, BLOCKING_SENDER, pair.b_ip, str(4 * busy_s))
        while proc.poll() is None:
            st = read_qdisc_stats(ns, pair.a_path, [pair.a_if])[pair.a_if]
            meter.sample(st.read_at_s, st.bytes, st.backlog, st.read_within_s)
            if meter.busy_s >= busy_s:
                proc.terminate()
                break
            time.sleep(0.02)
        _out, err = proc.communicate()
        after = read_qdisc_stats(ns, pair.a_path, [pair.a_if])[pair.a_if]
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert meter.busy_s >= busy_s, f"queue was backlogged only {meter.busy_s:.2f} s of {4 * busy_s} s"
    assert meter.drain_bps is not None
    return meter.drain_bps, after.drops - before.drops


def test_tbf_drains_at_its_rate_and_a_bandwidth_change_halves_it(veth_pair):
    pair = veth_pair
    bucket = int(20_000_000 * RATE_TEST_BUCKET_S / 8)
    a = shaper(pair.a, pair.a_if, f"{pair.b}:{pair.b_if}", 20_000_000, burst=bucket)
    b = shaper(pair.b, pair.b_if, f"{pair.a}:{pair.a_if}", 20_000_000, burst=bucket)
    assert apply_shapers(pair.a_path, [a]) == 1
    assert apply_shapers(pair.b_path, [b]) == 1
    st = qdisc_stats(pair.a_path, [pair.a_if])[pair.a_if]
    assert (st.kind, st.rate_bps) == ("tbf", 20_000_000)

    rate, drops = paced_run(lambda: drain(pair, 1.5, 20_000_000), lambda r: r[0], 20_000_000)
    print(f"shaper 20 Mbit/s: drained at {rate / 1e6:.2f} Mbit/s, {drops} queue drops")
    assert rate == pytest.approx(20e6, rel=0.05)
    assert drops == 0

    fabric = Fabric("fab", 10000, {a.name: a, b.name: b})
    fabric, changed = fabric.with_bandwidth(a.name, a.bandwidth_bps // 2)
    assert {c.name: c.rate_bps for c in changed} == {a.name: 10_000_000, b.name: 10_000_000}
    halved_bucket = int(10_000_000 * RATE_TEST_BUCKET_S / 8)
    apply_shapers(pair.a_path, [replace(fabric.end(a.name), burst_bytes=halved_bucket)])
    apply_shapers(pair.b_path, [replace(fabric.end(b.name), burst_bytes=halved_bucket)])
    assert qdisc_stats(pair.b_path)[pair.b_if].rate_bps == 10_000_000

    rate, drops = paced_run(lambda: drain(pair, 1.5, 10_000_000), lambda r: r[0], 10_000_000)
    print(f"after halving: drained at {rate / 1e6:.2f} Mbit/s, {drops} queue drops")
    assert rate == pytest.approx(10e6, rel=0.05)
    assert drops == 0


def test_replace_keeps_the_counters_of_the_running_shaper(veth_pair):
    pair = veth_pair
    end = shaper(pair.a, pair.a_if, "x:y", 50_000_000)
    apply_shapers(pair.a_path, [end])
    pair.run_in(pair.a, BLOCKING_SENDER, pair.b_ip, "0.3")
    sent = qdisc_stats(pair.a_path)[pair.a_if].bytes
    assert sent > 0
    apply_shapers(pair.a_path, [shaper(pair.a, pair.a_if, "x:y", 25_000_000)])
    st = qdisc_stats(pair.a_path)[pair.a_if]
    # A changed shaper, not a new one: what it sent so far is still counted.
    assert st.rate_bps == 25_000_000 and st.bytes >= sent


def test_a_shaped_end_holds_its_peers_arp_entry_reachable_for_a_day(veth_pair):
    """On a big scale a probe for a stale entry waits in the shaper's queue past the kernel's 3 s
    (shaping.NEIGH_REACHABLE_MS); an unshaped end keeps the kernel's 30 s."""
    pair = veth_pair

    def reachable_ms(ns: str, iface: str) -> int:
        path = f"net.ipv4.neigh.{iface}.base_reachable_time_ms"
        out = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", path], capture_output=True)
        return int(out.stdout)

    assert reachable_ms(pair.a, pair.a_if) == 30_000
    apply_shapers(pair.a_path, [shaper(pair.a, pair.a_if, "x:y", 50_000_000)])
    apply_shapers(pair.b_path, [shaper(pair.b, pair.b_if, "x:y", 0)])
    assert reachable_ms(pair.a, pair.a_if) == NEIGH_REACHABLE_MS
    assert reachable_ms(pair.b, pair.b_if) == 30_000


def test_a_missing_interface_is_named(veth_pair):
    with pytest.raises(FabricIOError, match="no interface eth9"):
        apply_shapers(veth_pair.a_path, [shaper(veth_pair.a, "eth9", "x:y", 1_000_000)])
    with pytest.raises(FabricIOError, match="no interface eth9"):
        qdisc_stats(veth_pair.a_path, ["eth9"])


def test_container_pid_reads_the_netns_link(tmp_path):
    link = tmp_path / "clab-x-h1"
    link.symlink_to(f"/proc/{os.getpid()}/ns/net")
    assert container_pid(str(link)) == os.getpid()
    bad = tmp_path / "other"
    bad.symlink_to("/var/run/netns/elsewhere")
    with pytest.raises(FabricIOError, match="redeploy"):
        container_pid(str(bad))


def test_cgroup_cpu_time_grows_while_this_process_works():
    before = cgroup_cpu_usec(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = cgroup_cpu_usec(os.getpid())
    # Our cgroup holds at least this process, which just used 0.2 s of CPU.
    assert after - before >= 150_000


def test_cgroup_v2_layout_is_read_too(tmp_path):
    proc = tmp_path / "proc" / "42"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    stat = tmp_path / "cg" / "system.slice" / "docker-abc.scope"
    stat.mkdir(parents=True)
    (stat / "cpu.stat").write_text("usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n")
    assert cgroup_cpu_usec(42, proc=tmp_path / "proc", cgroup_root=tmp_path / "cg") == 1234567
    with pytest.raises(FabricIOError, match="pid 43"):
        cgroup_cpu_usec(43, proc=tmp_path / "proc", cgroup_root=tmp_path / "cg")
