"""Back-pressure from a shaped link to a UDP sender (aidcnet.udpio.enable_backpressure, send_all), on a
veth shaped by TBF in namespaces made for the test: a sender whose socket memory is below the queue limit
is paced by the link and the queue drops nothing; with IP_RECVERR a full queue's drops come back as
ENOBUFS and are sent again, so nothing is lost; without either, the queue drops silently (the baseline,
measured in the same run).

How close to the link's rate each sender gets is a speed, so it is measured by ``bench/udp_backpressure.py``
against the shaper draining a full queue in the same run, not asserted here: on a loaded machine the
sender (or the shaper's timer) runs late and the rate dips with no fault in the code under test.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.lab.fabric import EndShaper, tbf_burst
from orchestrator.lab.shaping import apply_shapers, qdisc_stats
from tests.unit.aidcnet.ebpf.test_link_fault import RECEIVER
from tests.unit.fabric_netns import VethPair

RATE = 20_000_000
QUEUE = 256 << 10
# Below what may wait in the queue, yet enough to keep the link busy while the sender is off the CPU: the
# kernel doubles SO_SNDBUF and charges a 1000-byte datagram some 2.3 KB of truesize, so 160 KiB holds about
# 140 KB of frames, 55 ms of the link's work (64 KiB held 22 ms, and CI once measured 5% below the rate).
SNDBUF = 160 << 10
COUNT = 2500  # 1000-byte payloads, 1042-byte frames: about 1.04 s at 20 Mbit/s
FRAME = 1042  # 1000 bytes + UDP 8 + IPv4 20 + Ethernet 14, as TBF counts them

SENDER = """
import json, socket, sys, time  # noqa
from aidcnet import udpio
dst, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
if mode == "sndbuf":
    udpio.enable_backpressure(s, sndbuf=int(sys.argv[4]))
else:
    udpio.set_socket_buffer(s, socket.SO_SNDBUF, 4 << 20)  # far above the queue: the queue overflows
    if mode == "recverr":
        udpio.enable_backpressure(s)
msgs = [(i.to_bytes(4, "big") + bytes(996), (dst, 9000)) for i in range(n)]
t0 = time.monotonic()
sent = udpio.send_all(s, msgs, timeout=60)
# The clock stops when the last datagram has left the queue: the socket's memory is all given back.
import array, fcntl, termios
outq = array.array("i", [0])
while fcntl.ioctl(s, termios.TIOCOUTQ, outq) == 0 and outq[0] > 0:
    time.sleep(0.001)
print(json.dumps({"sent": sent, "seconds": time.monotonic() - t0, "nobufs": udpio.batch_io(s).nobufs}))
"""


def run(pair: VethPair, mode: str) -> dict:
    before = qdisc_stats(pair.a_path)[pair.a_if]
    rx = pair.popen_in(pair.b, RECEIVER, "1.0")
    assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
    tx = pair.run_in(pair.a, SENDER, pair.b_ip, mode, str(COUNT), str(SNDBUF))
    assert tx.returncode == 0, tx.stderr
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 0, err
    after = qdisc_stats(pair.a_path)[pair.a_if]
    report = json.loads(tx.stdout)
    report["received"] = len(set(json.loads(out)))
    report["queue_drops"] = after.drops - before.drops
    report["wire_bytes"] = after.bytes - before.bytes
    report["wire_bps"] = report["wire_bytes"] * 8 / report["seconds"]
    return report


def shape(pair: VethPair) -> VethPair:
    """End a of ``pair`` sends through TBF at :data:`RATE` with a :data:`QUEUE`-byte queue."""
    end = EndShaper("a", pair.a_if, "b", RATE, RATE, QUEUE, tbf_burst(RATE, 1500), 1500)
    apply_shapers(pair.a_path, [end])
    return pair


def link_bound_s(report: dict) -> float:
    """The least time the shaper needs for what it sent: a sender done sooner was not held by the link."""
    burst = tbf_burst(RATE, 1500)
    return max(0.0, (report["wire_bytes"] - burst) * 8 / RATE)


@pytest.fixture
def shaped(veth_pair):
    return shape(veth_pair)


def test_sndbuf_below_the_queue_limit_is_paced_by_the_link_with_no_drop(shaped):
    got = run(shaped, "sndbuf")
    print(f"sndbuf {SNDBUF >> 10} KiB, queue {QUEUE >> 10} KiB, 20 Mbit/s: {got}")
    assert got["sent"] == COUNT and got["received"] == COUNT
    assert got["queue_drops"] == 0 and got["nobufs"] == 0
    # Every datagram went through the shaper, and the sender waited for it: it could not finish before
    # the link had carried its bytes (a sender that outran the link would have overflowed the queue).
    assert got["wire_bytes"] >= COUNT * FRAME
    assert got["seconds"] >= link_bound_s(got) * 0.99


def test_recverr_turns_queue_drops_into_resends_and_loses_nothing(shaped):
    plain = run(shaped, "plain")
    got = run(shaped, "recverr")
    print(f"baseline, no back-pressure: {plain}")
    print(f"IP_RECVERR + resend: {got}")
    # The baseline shows what is at stake: the queue drops most of a burst silently.
    assert plain["queue_drops"] > COUNT // 2 and plain["received"] == COUNT - plain["queue_drops"]
    # With IP_RECVERR the queue still drops, but the sender hears of it (ENOBUFS) and sends again.
    assert got["received"] == COUNT and got["sent"] == COUNT
    assert got["queue_drops"] > 0 and got["nobufs"] > 0
    assert got["seconds"] >= link_bound_s(got) * 0.99
