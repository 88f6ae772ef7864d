"""The INA worker service on a shaped link (issue 12): a worker (namespace a) runs a parameter-server
AllReduce against a PS (namespace b, the same agent code) through a veth shaped by TBF at 4 Mbit/s,
where the worker's window of 32 chunks is about half a second of queue.

* With RFC 6298's timer the worker finishes with no retransmission, no queue drop, at the link's rate;
  the old fixed 0.2 s timer (tests/unit/aidcnet/ina/legacy_timer.py put in its place, measured in the
  same run) retransmits.
* With a queue smaller than the window, the queue refuses datagrams (ENOBUFS, IP_RECVERR); the
  worker's Outbox sends them again, so the result is exact and still nothing is retransmitted. Told the
  queue's size (as the node file does), the worker sizes its sockets below it: the socket fills first
  (EAGAIN), and the queue drops nothing at all.
* The ring baseline between two ranks, one per namespace, likewise: no retransmission with the RFC 6298
  timer, many with the old one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidcnet.ina.header import FIXED_HEADER_LEN, DType, Op
from aidcnet.ina.worker import digest, reference, worker_array
from orchestrator.lab.fabric import EndShaper, tbf_burst
from orchestrator.lab.shaping import apply_shapers, qdisc_stats
from tests.unit.fabric_netns import VethPair, make_veth_pair

ROOT = str(Path(__file__).resolve().parents[4])
# In a worker program: with "legacy" in the request, the agent's senders get the old fixed timer.
LEGACY = f"""
if extra.pop("legacy", False):
    sys.path.insert(0, {ROOT!r})
    import aidcnet.agent.ina.worker as agent
    from tests.unit.aidcnet.ina.legacy_timer import FixedTimerSender, FixedTimerWindow

    class Job(agent.AllreduceJob):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.window = FixedTimerWindow(self.window.chunks, self.window.window)

    agent.AllreduceJob = Job
    agent.ReliableSender = lambda window, *args, **kwargs: FixedTimerSender(window)
"""
RATE = 4_000_000
MTU = 9000
CHUNKS = 96
ELEMENTS = CHUNKS * 2048  # 768 KiB of int32, 8 KiB chunks
SEED = 5
# What crosses the shaped link: every chunk as one frame (payload, INA header with a 256-bit P-BM, UDP,
# IPv4, Ethernet), less the token bucket's depth, which leaves at once.
FRAME = 8192 + FIXED_HEADER_LEN + 256 // 8 + 8 + 20 + 14
WIRE_BYTES = CHUNKS * FRAME - tbf_burst(RATE, MTU)

PS = """
import asyncio, json, sys
from aidcnet.agent.ina.worker import InaWorkerService
from aidcnet.config import Ina
me, worker = sys.argv[1], sys.argv[2]
async def main():
    loop = asyncio.get_running_loop()
    svc = InaWorkerService(Ina(), bfr_id=9, bsl=256, loopback=me)
    svc.attach(loop)
    svc.ps_serve({"job": 1, "workers": {"3": worker}, "reduce": "sum", "dtype": "int32"})
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the test closes stdin
    print(json.dumps(svc.counters()), flush=True)
    svc.close(loop)
asyncio.run(main())
"""

WORKER = """
import asyncio, json, sys
me, ps, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
""" + LEGACY + """
from aidcnet.agent.ina.worker import InaWorkerService
from aidcnet.config import Ina, InaMember
async def main():
    loop = asyncio.get_running_loop()
    member = InaMember(job_id=1, workers=[3], next_hop=ps, root="ps", window=32, op="sum", dtype="int32")
    queue = extra.pop("queue_bytes", None)  # what the node file tells the agent of its queues
    svc = InaWorkerService(Ina(members=[member]), bfr_id=3, bsl=256, loopback=me, queue_bytes=queue)
    svc.attach(loop)
    reply = await svc.allreduce({"job": 1, "mode": "ps", "to": ps, "deadline_s": 30, **extra})
    reply["counters"] = svc.counters()
    svc.close(loop)
    print(json.dumps(reply))
asyncio.run(main())
"""


def drained(pair: VethPair) -> None:
    """Wait until the shaped queue is empty: a run must not start behind the last one's duplicates."""
    import time

    for _ in range(500):
        if qdisc_stats(pair.a_path)[pair.a_if].backlog == 0:
            return
        time.sleep(0.02)
    raise AssertionError(f"{pair.a_if}: the shaped queue did not drain in 10 s")


def allreduce(pair: VethPair, **extra: object) -> dict:
    """One PS AllReduce from a to b; the reply, the PS's counters and the shaped queue's drops."""
    drained(pair)
    before = qdisc_stats(pair.a_path)[pair.a_if]
    ps = subprocess.Popen(
        ["ip", "netns", "exec", pair.b, sys.executable, "-c", PS, pair.b_ip, pair.a_ip],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert ps.stdout is not None and ps.stdout.readline().strip() == "ready", ps.stderr
        args = {"elements": ELEMENTS, "seed": SEED, **extra}
        worker = pair.run_in(pair.a, WORKER, pair.a_ip, pair.b_ip, json.dumps(args), timeout=40)
        assert worker.returncode == 0, worker.stderr
        ps_out, ps_err = ps.communicate("", timeout=10)
    finally:
        if ps.poll() is None:
            ps.kill()
            ps.wait()
    assert ps.returncode == 0, ps_err
    after = qdisc_stats(pair.a_path)[pair.a_if]
    reply = json.loads(worker.stdout)
    reply["ps"] = json.loads(ps_out)
    reply["queue_drops"] = after.drops - before.drops
    return reply


@pytest.fixture
def shaped(request: pytest.FixtureRequest) -> Iterator[VethPair]:
    queue = request.param
    with make_veth_pair("tr", mtu=MTU) as pair:
        end = EndShaper("a", pair.a_if, "b", RATE, RATE, queue, tbf_burst(RATE, MTU), MTU)
        apply_shapers(pair.a_path, [end])
        yield pair


EXPECTED = digest(reference([worker_array(SEED, 3, ELEMENTS, DType.INT32)], Op.SUM))
BOUND_S = WIRE_BYTES * 8 / RATE  # the shaped uplink's time for the worker's bytes


def summary(reply: dict) -> str:
    c = reply["counters"]
    return (f"{reply['seconds']:.2f} s, retransmits {reply['retransmits']}, "
            f"queue drops {reply['queue_drops']}, ENOBUFS {c['ina.tx.nobufs']}, "
            f"deferred {c['ina.tx.deferred']}, PS resend-result {reply['ps'].get('ina.ps.resend-result', 0)}")


@pytest.mark.parametrize("shaped", [1 << 20], indirect=True)
def test_an_adaptive_timer_never_retransmits_where_a_fixed_one_does(shaped: VethPair) -> None:
    adaptive = allreduce(shaped, timeout_s=0.2)
    fixed = allreduce(shaped, legacy=True)
    print(f"\nbound {BOUND_S:.2f} s\nfixed 0.2 s timer: {summary(fixed)}\n"
          f"RFC 6298 timer:    {summary(adaptive)}")
    for reply in (fixed, adaptive):
        assert reply["digest"] == EXPECTED
    # The window's queue (~0.5 s) outlasts a 0.2 s timer: it resends chunks whose results are on the way.
    assert fixed["retransmits"] > 0
    assert adaptive["retransmits"] == 0 and adaptive["queue_drops"] == 0
    assert adaptive["counters"]["ina.tx.nobufs"] == 0
    # Self-clocked at the link's rate: within 20% of the uplink's bound (shared 2-core host).
    assert adaptive["seconds"] < BOUND_S * 1.2


@pytest.mark.parametrize("shaped", [64 << 10], indirect=True)
def test_a_queue_smaller_than_the_window_pushes_back_and_loses_nothing(shaped: VethPair) -> None:
    reply = allreduce(shaped, timeout_s=0.2)
    print(f"\nbound {BOUND_S:.2f} s, 64 KiB queue, window ~266 KB: {summary(reply)}")
    assert reply["digest"] == EXPECTED
    # The queue refused datagrams (ENOBUFS, each one a drop the qdisc counts) ...
    assert reply["counters"]["ina.tx.nobufs"] > 0 and reply["queue_drops"] > 0
    # ... and the Outbox sent every one of them again: no timer had to recover a chunk.
    assert reply["retransmits"] == 0
    assert reply["counters"]["ina.tx.backlog"] == 0 and "ina.dropped.backlog-full" not in reply["counters"]
    assert reply["seconds"] < BOUND_S * 1.2


RING = """
import asyncio, json, sys
me, bfr_id, addresses, extra = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
""" + LEGACY + """
from aidcnet.agent.ina.worker import InaWorkerService
from aidcnet.config import Ina, InaMember
async def main():
    loop = asyncio.get_running_loop()
    member = InaMember(job_id=2, workers=[1, 2], next_hop=me, root="ring", window=32, op="sum", dtype="int32")
    svc = InaWorkerService(Ina(members=[member]), bfr_id=bfr_id, bsl=256, loopback=me)
    svc.attach(loop)
    reply = await svc.allreduce({"job": 2, "mode": "ring", "addresses": addresses, "deadline_s": 30, **extra})
    reply["counters"] = svc.counters()
    print(json.dumps(reply), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # keep acknowledging until the other rank is done
    svc.close(loop)
asyncio.run(main())
"""


def ring(pair: VethPair, **extra: object) -> list[dict]:
    import time

    drained(pair)
    before = qdisc_stats(pair.a_path)[pair.a_if]
    addresses = json.dumps({"1": pair.a_ip, "2": pair.b_ip})
    args = json.dumps({"elements": RING_ELEMENTS, "seed": SEED, "start_at": time.time() + 1.5, **extra})
    procs = [
        subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", RING, ip, str(rank), addresses, args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for rank, ns, ip in ((1, pair.a, pair.a_ip), (2, pair.b, pair.b_ip))
    ]  # fmt: skip
    try:
        lines = [p.stdout.readline() if p.stdout else "" for p in procs]
        outs = [p.communicate("", timeout=10) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    replies = []
    for p, line, (_out, err) in zip(procs, lines, outs, strict=True):
        assert p.returncode == 0 and line, err
        replies.append(json.loads(line))
    drops = qdisc_stats(pair.a_path)[pair.a_if].drops - before.drops
    for reply in replies:
        reply["queue_drops"] = drops
        reply["ps"] = {}
    return replies


RING_CHUNKS = 64
RING_ELEMENTS = RING_CHUNKS * 2048
RING_EXPECTED = digest(reference([worker_array(SEED, r, RING_ELEMENTS, DType.INT32) for r in (1, 2)], Op.SUM))
# Rank 1 sends the chunks it starts and the results it completes, one of the two for every chunk.
RING_BOUND_S = (RING_CHUNKS * FRAME - tbf_burst(RATE, MTU)) * 8 / RATE


@pytest.mark.parametrize("shaped", [1 << 20], indirect=True)
def test_the_ring_over_a_shaped_link_never_retransmits_with_an_adaptive_timer(shaped: VethPair) -> None:
    adaptive = ring(shaped)  # the initial RTO is RFC 6298's 1 s
    fixed = ring(shaped, legacy=True)
    print(f"\nring (bound {RING_BOUND_S:.2f} s), fixed 0.2 s timer: {[summary(r) for r in fixed]}\n"
          f"ring, RFC 6298 timer: {[summary(r) for r in adaptive]}")
    for reply in fixed + adaptive:
        assert reply["digest"] == RING_EXPECTED
    assert sum(r["retransmits"] for r in fixed) > 0
    assert sum(r["retransmits"] for r in adaptive) == 0 and adaptive[0]["queue_drops"] == 0
    # The ring takes longer than the shaped link's bound because rank 1's ACKs of rank 2's messages wait
    # in the same queue, which holds rank 2's window back; the pinned timer's duplicates cost more.
    slowest = max(r["seconds"] for r in adaptive)
    assert slowest < RING_BOUND_S * 1.3 and slowest < min(r["seconds"] for r in fixed)


@pytest.mark.parametrize("shaped", [64 << 10], indirect=True)
def test_a_worker_told_its_queue_size_never_fills_the_queue(shaped: VethPair) -> None:
    reply = allreduce(shaped, timeout_s=0.2, queue_bytes=64 << 10)
    print(f"\nbound {BOUND_S:.2f} s, 64 KiB queue, sockets sized below it: {summary(reply)}")
    assert reply["digest"] == EXPECTED
    assert reply["queue_drops"] == 0 and reply["counters"]["ina.tx.nobufs"] == 0
    assert reply["counters"]["ina.tx.deferred"] > 0  # the socket was full: the Outbox waited for room
    assert reply["retransmits"] == 0
    assert reply["seconds"] < BOUND_S * 1.2
