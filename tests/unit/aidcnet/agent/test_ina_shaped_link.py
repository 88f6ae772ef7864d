"""The INA worker service on a shaped link (issue 12): a worker (namespace a) runs a parameter-server
AllReduce against a PS (namespace b, the same agent code) through a veth shaped by TBF at 4 Mbit/s,
where the worker's window of 32 chunks is about half a second of queue.

* With RFC 6298's timer the worker finishes with no retransmission, no queue drop, at the link's rate;
  a timer pinned at the old fixed 0.2 s (min = max RTO, measured in the same run) retransmits.
* With a queue smaller than the window, the queue refuses datagrams (ENOBUFS, IP_RECVERR); the
  worker's Outbox sends them again, so the result is exact and still nothing is retransmitted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from aidcnet.ina.header import FIXED_HEADER_LEN, DType, Op
from aidcnet.ina.worker import digest, reference, worker_array
from orchestrator.lab.fabric import EndShaper, tbf_burst
from orchestrator.lab.shaping import apply_shapers, qdisc_stats
from tests.unit.fabric_netns import VethPair, make_veth_pair

RATE = 4_000_000
MTU = 9000
CHUNKS = 128
ELEMENTS = CHUNKS * 2048  # 1 MiB of int32, 8 KiB chunks
SEED = 5
# What crosses the shaped link: every chunk as one frame (payload, INA header with a 256-bit P-BM, UDP,
# IPv4, Ethernet), less the token bucket's depth, which leaves at once.
WIRE_BYTES = CHUNKS * (8192 + FIXED_HEADER_LEN + 256 // 8 + 8 + 20 + 14) - tbf_burst(RATE, MTU)

PS = """
import asyncio, json, sys
from aidcnet.agent.ina_worker import InaWorkerService
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
from aidcnet.agent.ina_worker import InaWorkerService
from aidcnet.config import Ina, InaMember
me, ps, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
async def main():
    loop = asyncio.get_running_loop()
    member = InaMember(job_id=1, workers=[3], next_hop=ps, root="ps", window=32)
    svc = InaWorkerService(Ina(members=[member]), bfr_id=3, bsl=256, loopback=me)
    svc.attach(loop)
    reply = await svc.allreduce({"job": 1, "mode": "ps", "ps": ps, "deadline_s": 30, **extra})
    reply["counters"] = svc.counters()
    svc.close(loop)
    print(json.dumps(reply))
asyncio.run(main())
"""


def allreduce(pair: VethPair, **extra: object) -> dict:
    """One PS AllReduce from a to b; the reply, the PS's counters and the shaped queue's drops."""
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
    return (f"{reply['seconds']:.2f} s (bound {BOUND_S:.2f} s), retransmits {reply['retransmits']}, "
            f"queue drops {reply['queue_drops']}, ENOBUFS {c['ina.tx.nobufs']}, "
            f"deferred {c['ina.tx.deferred']}, PS resend-result {reply['ps'].get('ina.ps.resend-result', 0)}")


@pytest.mark.parametrize("shaped", [1 << 20], indirect=True)
def test_an_adaptive_timer_never_retransmits_where_a_fixed_one_does(shaped: VethPair) -> None:
    fixed = allreduce(shaped, timeout_s=0.2, min_rto_s=0.2, max_rto_s=0.2)
    adaptive = allreduce(shaped, timeout_s=0.2)
    print(f"\nfixed 0.2 s timer: {summary(fixed)}\nRFC 6298 timer:    {summary(adaptive)}")
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
    print(f"\n64 KiB queue, window ~266 KB: {summary(reply)}")
    assert reply["digest"] == EXPECTED
    # The queue refused datagrams (ENOBUFS, each one a drop the qdisc counts) ...
    assert reply["counters"]["ina.tx.nobufs"] > 0 and reply["queue_drops"] > 0
    # ... and the Outbox sent every one of them again: no timer had to recover a chunk.
    assert reply["retransmits"] == 0
    assert reply["counters"]["ina.tx.backlog"] == 0 and "ina.dropped.backlog-full" not in reply["counters"]
    assert reply["seconds"] < BOUND_S * 1.2
