"""Time-faithful fabric on leaf-spine (issue 12): a saturated link drains at its shaped rate, `link set
bandwidth` halves it, a 5% loss link drops about 5% (binomial bounds) and counts it, down/up stops and
restores. Traffic is plain UDP from the host's interpreter run inside the nodes' namespaces, so these
checks need no agent; then replays in unicast, host-BIER, network-BIER and INA cross the same lossy link
and lose the same share, counted per link end in each run's record (INA resends and stays exact).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from orchestrator.experiment.fidelity import DrainMeter
from orchestrator.experiment.session import load_plan
from orchestrator.lab.labdir import lab_dir
from orchestrator.lab.shaping import load_fabric, node_netns, open_netns, read_link_fault, read_qdisc_stats

from .conftest import aidclab, deployed

LAB = "t-fabric"
SCALE = 20000  # 400G -> 20 Mbit/s on every veth

SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)  # below the 1 MiB queue: blocks, never drops
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    s.sendto(n.to_bytes(4, "big") + bytes(996), (sys.argv[1], 9000))
    n += 1
print(n)
"""

COUNTED = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(i.to_bytes(4, "big") + bytes(60), (sys.argv[1], 9000))
    if i % 100 == 99:
        time.sleep(0.01)  # ~7 Mbit/s: under the 20 Mbit/s shaper, so only the fault drops
"""

RECEIVER = """
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# FORCE: past rmem_max, so a busy machine's receiver does not drop what the link delivered.
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (not in Python 3.11's socket)
s.bind(("0.0.0.0", 9000))
s.settimeout(float(sys.argv[1]))
print("ready", flush=True)
seqs = set()
try:
    while True:
        seqs.add(int.from_bytes(s.recv(2048)[:4], "big"))
except socket.timeout:
    pass
print(json.dumps(len(seqs)))
"""


def in_node(topo, node: str, code: str, *args: str, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["ip", "netns", "exec", topo.container_name(node), sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )


# One INA job over the whole fabric, so INA crosses the lossy link too: each leaf sums its two hosts,
# spine1 sums the leaves and disseminates the result by BIER.
HOSTS = [f"h{i}" for i in range(1, 9)]
INA_JOB = {
    "job": 1,
    "workers": HOSTS,
    "root": "spine1",
    "abm": {**{f"leaf{k}": HOSTS[2 * k - 2 : 2 * k] for k in range(1, 5)}, "spine1": HOSTS},
}


def ina_switches(doc: dict) -> None:
    """leaf-spine with INA switches for leaves and spines (they are BFRs too), for the INA job."""
    for group in ("leaf", "spine"):
        doc["topology"]["groups"][group]["image"] = "aidclab/ina-switch:latest"


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    lab_vars = {"time": {"scale": SCALE}, "ina": {"jobs": [INA_JOB]}}
    with deployed(runtime, tmp_path_factory.mktemp("fabric"), "leaf-spine", LAB, lab_vars,
                  configured=True, edit=ina_switches) as topo:
        yield topo, load_plan(topo)


def drain_rate(topo, plan, src: str, dst: str, seconds: float = 2.0) -> tuple[float, int]:
    netns = node_netns(topo.container_name(src))
    meter = DrainMeter()
    with open_netns(netns) as ns:
        before = read_qdisc_stats(ns, netns, ["eth1"])["eth1"]
        tx = in_node(topo, src, SENDER, str(plan.nodes[dst].loopback.ip), str(seconds))
        while tx.poll() is None:
            st = read_qdisc_stats(ns, netns, ["eth1"])["eth1"]
            meter.sample(st.read_at_s, st.bytes, st.backlog, st.read_within_s)
            time.sleep(0.02)
        after = read_qdisc_stats(ns, netns, ["eth1"])["eth1"]
    assert tx.returncode == 0, tx.stderr.read() if tx.stderr else ""
    assert meter.drain_bps is not None and meter.busy_s > seconds * 0.7
    return meter.drain_bps, after.drops - before.drops


def test_saturated_link_drains_at_its_rate_and_bandwidth_halves_it(lab):
    topo, plan = lab
    fabric = load_fabric(lab_dir(topo))
    assert fabric.scale == SCALE and fabric.end("h1:eth1").rate_bps == 20_000_000
    rate, drops = drain_rate(topo, plan, "h1", "h2")
    print(f"h1:eth1 at 20 Mbit/s: drained {rate / 1e6:.2f} Mbit/s, {drops} queue drops")
    assert rate == pytest.approx(20e6, rel=0.05) and drops == 0
    out = aidclab("link", "set", "--lab", LAB, "h1:eth1", "bandwidth", "200G").stdout
    assert "h1:eth1 shaped to 10 Mbit/s" in out and "leaf1:" in out
    try:
        rate, drops = drain_rate(topo, plan, "h1", "h2")
        print(f"h1:eth1 at 200G / {SCALE}: drained {rate / 1e6:.2f} Mbit/s, {drops} queue drops")
        assert rate == pytest.approx(10e6, rel=0.05) and drops == 0
    finally:
        aidclab("link", "set", "--lab", LAB, "h1:eth1", "bandwidth", "400G")


def test_five_percent_loss_drops_about_five_percent_and_counts_them(lab):
    topo, plan = lab
    n, p = 20000, 0.05
    netns = node_netns(topo.container_name("h1"))
    before = read_link_fault(netns, "eth1")[1]
    aidclab("link", "set", "--lab", LAB, "--one-way", "h1:eth1", "loss", "0.05")
    try:
        rx = in_node(topo, "h2", RECEIVER, "2.0")
        assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
        tx = in_node(topo, "h1", COUNTED, str(plan.nodes["h2"].loopback.ip), str(n))
        assert tx.wait(120) == 0
        got = json.loads(rx.communicate(timeout=60)[0])
    finally:
        aidclab("link", "set", "--lab", LAB, "h1:eth1", "loss", "0")
    lost = n - got
    injected = read_link_fault(netns, "eth1")[1].lost_packets - before.lost_packets
    sd = math.sqrt(n * p * (1 - p))
    print(f"5% loss: {lost} of {n} lost ({lost / n:.2%}), program counted {injected}")
    assert n * p - 5 * sd <= lost <= n * p + 5 * sd
    # The program may also have dropped an ARP or a stray packet of the lab's own: never fewer than ours.
    assert lost <= injected <= lost + 20


def test_down_stops_and_up_restores(lab):
    topo, plan = lab
    dst = str(plan.nodes["h2"].loopback.ip)

    def delivered(count: int = 200) -> int:
        rx = in_node(topo, "h2", RECEIVER, "1.0")
        assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
        in_node(topo, "h1", COUNTED, dst, str(count)).wait(60)
        return json.loads(rx.communicate(timeout=30)[0])

    assert delivered() == 200
    aidclab("link", "set", "--lab", LAB, "h1:eth1", "down")
    try:
        assert delivered() == 0
    finally:
        aidclab("link", "set", "--lab", LAB, "h1:eth1", "up")
    time.sleep(1.0)  # carrier back at both ends
    assert delivered() == 200


def cross_lossy_link(lab, tmp_path, mode: str, trace):
    """Run ``trace`` in ``mode`` with 5% one-way loss on h1:eth1; the run, and the link program's count of
    packets lost and offered there, checked against binomial bounds (5 sigma)."""
    from orchestrator.run.driver import run_experiment

    topo, _plan = lab
    p = 0.05
    netns = node_netns(topo.container_name("h1"))
    before = read_link_fault(netns, "eth1")[1]
    aidclab("link", "set", "--lab", LAB, "--one-way", "h1:eth1", "loss", str(p))
    try:
        run = run_experiment(topo, trace, mode, results_dir=tmp_path / "results").result
    finally:
        aidclab("link", "set", "--lab", LAB, "h1:eth1", "loss", "0")
    after = read_link_fault(netns, "eth1")[1]
    lost = after.lost_packets - before.lost_packets
    n = lost + after.passed_packets - before.passed_packets
    sd = math.sqrt(n * p * (1 - p))
    print(f"{mode}: h1:eth1 dropped {lost} of {n} packets ({lost / n:.2%})")
    assert n > 300 and n * p - 5 * sd <= lost <= n * p + 5 * sd
    t = run.timing
    assert t is not None and t.scale == SCALE
    (end,) = [e for e in t.ends if e.end == "h1:eth1"]
    # The run's record counts what the program dropped while it ran (the test's window is a little wider).
    assert lost - 5 <= end.injected_drops <= lost
    assert any(note.startswith("link h1:eth1:") and "injected fault" in note for note in t.notes), t.notes
    return run


@pytest.mark.parametrize("mode", ["unicast", "host-bier", "net-bier"])
def test_every_mode_crossing_a_lossy_link_loses_its_share_and_the_run_counts_it(lab, tmp_path, mode):
    """The fault is on the link, not in an agent: whatever h1 sends on eth1 (kernel UDP, BIER imposed
    by its BFR, IP multicast a leaf will encapsulate) meets the same 5% loss."""
    trace = tmp_path / "dist.jsonl"
    aidclab(
        "workload", "model-dist", "--hosts", ",".join(HOSTS), "--size", "3MiB",
        "--chunk-bytes", "256KiB", "-o", str(trace),
    )  # fmt: skip
    run = cross_lossy_link(lab, tmp_path, mode, trace)
    m = run.metrics
    assert m is not None and m.delivery.missing > 0, "a lossy link must cost deliveries in every mode"


def test_ina_crossing_a_lossy_link_loses_its_share_and_still_sums_exactly(lab, tmp_path):
    """INA's chunks from h1 meet the same 5% loss; its transport resends them, so the sum stays exact on
    every worker, and the resends are counted."""
    from orchestrator.workloads.trace import TraceHeader, TraceOp, TraceWriter

    trace = tmp_path / "ar.jsonl"
    header = TraceHeader(format="aidclab-trace", version=1, generator="test", hosts=HOSTS)
    with TraceWriter(trace, header) as w:
        w.write(TraceOp(t=0.0, op="allreduce", src="h1", dst=HOSTS[1:], bytes=4 << 20, id=0))
    run = cross_lossy_link(lab, tmp_path, "ina", trace)
    m = run.metrics
    assert m is not None and m.delivery.missing == 0, "INA resends what the link lost"
    (run_dir,) = [p.parent for p in (tmp_path / "results").glob("*/allreduce.json")]
    (op,) = json.loads((run_dir / "allreduce.json").read_text())["ops"]
    assert op["exact"] and op["retransmits"] > 0, op
