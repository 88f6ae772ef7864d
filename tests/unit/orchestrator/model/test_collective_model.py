"""The ring and parameter-server AllReduce in the model (orchestrator/model/collective.py): one chunk on
Figure 1 of the INA draft (labs/ina-fig1) worked out by hand, message by message and link by link, and
properties of the classic costs on star fabrics of any size (a ring moves 2 (N - 1) / N of the array
per worker; a parameter server takes in N arrays and sends out N results)."""

from __future__ import annotations

import tempfile
from collections import Counter
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.configure.plan import build_plan
from orchestrator.experiment.metrics import node_ingress
from orchestrator.lab.topology import load_topology, resolve_lab
from orchestrator.model.exact import ModelError, PlanModel
from orchestrator.workloads.trace import TraceOp

UDP = 14 + 20 + 8  # Ethernet, IPv4, UDP
CHUNK = 2048  # aidcnet.ina.worker.DEFAULT_CHUNK_ELEMENTS

# Host-to-host paths on Figure 1, read off the drawing in labs/ina-fig1.clab.yml.
PATHS = {
    ("w1", "w2"): "w1 s1 w2",
    ("w2", "w3"): "w2 s1 s5 s2 w3",
    ("w3", "w4"): "w3 s2 w4",
    ("w4", "w1"): "w4 s2 s5 s1 w1",
    ("w1", "w5"): "w1 s1 s5 s7 s6 s3 w5",
    ("w2", "w5"): "w2 s1 s5 s7 s6 s3 w5",
    ("w3", "w5"): "w3 s2 s5 s7 s6 s3 w5",
    ("w4", "w5"): "w4 s2 s5 s7 s6 s3 w5",
}

# One chunk of job 1 (w1..w4, BFR-ids 1..4) by the ring: chunk 0 starts at rank 0 (w1) and is summed
# w1 -> w2 -> w3 -> w4, where it is complete; w4 passes the result on w4 -> w1 -> w2 -> w3, and w3 stops
# (its next rank completed the chunk). Every message is acknowledged by its receiver.
RING_DATA = {("w1", "w2"): 2, ("w2", "w3"): 2, ("w3", "w4"): 1, ("w4", "w1"): 1}


def path(src: str, dst: str) -> list[tuple[str, str]]:
    hops = PATHS[(src, dst)].split() if (src, dst) in PATHS else PATHS[(dst, src)].split()[::-1]
    return list(pairwise(hops))


def per_direction(run) -> dict[tuple[str, str], tuple[float, float]]:
    out = {}
    for lk in run.links:
        out[(lk.a_node, lk.b_node)] = (lk.a_to_b_bytes, lk.a_to_b_packets)
        out[(lk.b_node, lk.a_node)] = (lk.b_to_a_bytes, lk.b_to_a_packets)
    return out


def expected(datagrams: list[tuple[str, str, int]]) -> dict[tuple[str, str], tuple[int, int]]:
    """(src, dst, UDP payload bytes) datagrams -> per link direction (bytes, packets)."""
    nbytes: Counter[tuple[str, str]] = Counter()
    packets: Counter[tuple[str, str]] = Counter()
    for src, dst, size in datagrams:
        for hop in path(src, dst):
            nbytes[hop] += UDP + size
            packets[hop] += 1
    return {k: (nbytes[k], packets[k]) for k in packets}


@pytest.fixture(scope="module")
def fig1() -> PlanModel:
    return PlanModel(build_plan(load_topology(resolve_lab("ina-fig1"))))


def job1(elements: int, id: int = 0) -> TraceOp:
    return TraceOp(t=0.0, op="allreduce", src="w1", dst=["w2", "w3", "w4"], bytes=4 * elements, id=id)


@pytest.mark.parametrize("elements", [1, 2048])
def test_ring_one_chunk_on_figure1_by_hand(fig1: PlanModel, elements: int) -> None:
    run = fig1.run([job1(elements)], "ring")
    header = 16 + fig1.plan.bier.bsl // 8  # docs/ina-header.md: fixed part and P-BM
    datagrams = [(s, d, header + 4 * elements) for (s, d), n in RING_DATA.items() for _ in range(n)]
    datagrams += [(d, s, header) for (s, d), n in RING_DATA.items() for _ in range(n)]  # the ACKs
    want = expected(datagrams)
    got = per_direction(run)
    assert {k: v for k, v in got.items() if v != (0, 0)} == want
    assert all(lk.a_to_b_exact and lk.b_to_a_exact for lk in run.links)  # a tree: no hash anywhere
    sent = Counter(s for s, _d, _n in datagrams)
    for w in ("w1", "w2", "w3", "w4"):
        assert run.agents[w]["ina.tx.packets"] == sent[w]
        assert run.agents[w]["ina.tx.bytes"] == sum(n for s, _d, n in datagrams if s == w)
        assert run.agents[w]["ina.allreduce.ring"] == 1
        assert run.stats["bytes_in"][w] == [sum(UDP + n for _s, d, n in datagrams if d == w), sent[w]]
    # The source egress is w1's: its two data messages and one ACK.
    assert run.source_egress_bytes == 2 * (UDP + header + 4 * elements) + UDP + header
    assert run.stats["payload_bytes"] == 4 * 4 * elements  # every worker ends with the whole array
    assert not any(k.startswith("ina.") for s in ("s1", "s2", "s5") for k in run.agents.get(s, {}))


@pytest.mark.parametrize("elements", [1, 2048])
def test_ps_one_chunk_on_figure1_by_hand(fig1: PlanModel, elements: int) -> None:
    run = fig1.run([job1(elements)], "ps")
    assert run.stats["ps_hosts"] == {"1": "w5"}  # the first gpu-host outside job 1, as the replay picks
    size = 16 + fig1.plan.bier.bsl // 8 + 4 * elements  # a chunk and its result are the same size
    workers = ["w1", "w2", "w3", "w4"]
    want = expected([(w, "w5", size) for w in workers] + [("w5", w, size) for w in workers])
    assert {k: v for k, v in per_direction(run).items() if v != (0, 0)} == want
    ps = run.agents["w5"]
    assert ps["ina.rx.udp.packets"] == 4
    assert ps["ina.ps.aggregated"] == 3 and ps["ina.ps.completed"] == 1
    assert (ps["ina.tx.packets"], ps["ina.tx.bytes"]) == (4, 4 * size)
    for w in workers:
        assert run.agents[w]["ina.results"] == run.agents[w]["ina.rx.udp.packets"] == 1
        assert (run.agents[w]["ina.tx.packets"], run.agents[w]["ina.tx.bytes"]) == (1, size)
    assert run.stats["bytes_in"]["w5"] == [4 * (UDP + size), 4]
    assert run.stats["bytes_in"]["w5"][0] == node_ingress(run.links, "w5")[0]


def test_ina_root_takes_in_half_of_what_a_parameter_server_does(fig1: PlanModel) -> None:
    # bench/allreduce.py's expected shape: the root s6 receives one aggregate per child (s1's sum and
    # s7's), the PS one chunk per worker.
    op = job1(3 * CHUNK + 5)
    ina, ps = fig1.run([op], "ina"), fig1.run([op], "ps")
    assert ina.stats["ina_root_bytes_in"]["1"] * 2 == ps.stats["bytes_in"]["w5"][0]


def test_ps_host_is_the_replays_option(fig1: PlanModel) -> None:
    run = fig1.run([job1(CHUNK)], "ps", ps_host="w8")
    assert run.stats["ps_hosts"] == {"1": "w8"}
    assert run.stats["bytes_in"]["w8"][1] == 4 and "w5" not in run.stats["bytes_in"]
    with pytest.raises(ModelError, match="no node"):
        fig1.run([job1(CHUNK)], "ps", ps_host="nowhere")


def test_each_op_restarts_the_parameter_servers_slots(fig1: PlanModel) -> None:
    run = fig1.run([job1(CHUNK, 0), job1(CHUNK, 1)], "ps")
    assert run.agents["w5"]["ina.ps.completed"] == 2
    assert not any(".dropped." in k for c in run.agents.values() for k in c)


# ---------------------------------------------------------------------------------------- star fabrics


@cache
def star(n: int, op: str = "sum") -> PlanModel:
    """One INA switch s1 with workers w1..wn and one spare gpu-host p1 (the default parameter server):
    every host-to-host datagram crosses exactly two links."""
    where = Path(tempfile.mkdtemp(prefix="model-star-"))
    hosts = [f"w{i}" for i in range(1, n + 1)] + ["p1"]
    doc = {
        "name": f"star{n}",
        "topology": {
            "defaults": {"kind": "linux"},
            "groups": {
                "switch": {"image": "aidclab/ina-switch:latest"},
                "worker": {"image": "aidclab/gpu-host:latest"},
            },
            "nodes": {"s1": {"group": "switch"}, **{h: {"group": "worker"} for h in hosts}},
            "links": [{"endpoints": [f"{h}:eth1", f"s1:eth{i}"]} for i, h in enumerate(hosts, 1)],
        },
    }
    (where / f"star{n}.clab.yml").write_text(yaml.safe_dump(doc))
    job = {"job": 1, "workers": hosts[:-1], "root": "s1", "abm": {"s1": hosts[:-1]}, "op": op}
    (where / f"star{n}.vars.yml").write_text(yaml.safe_dump({"ina": {"jobs": [job]}}))
    return PlanModel(build_plan(load_topology(where / f"star{n}.clab.yml")))


def allreduce(n: int, elements: int) -> TraceOp:
    return TraceOp(
        t=0.0, op="allreduce", src="w1", dst=[f"w{i}" for i in range(2, n + 1)], bytes=4 * elements, id=0
    )


def uplinks(run, hosts: list[str]) -> tuple[int, int]:
    """Bytes and packets the hosts put on their links to s1."""
    got = per_direction(run)
    return (
        sum(got[(h, "s1")][0] for h in hosts),
        sum(got[(h, "s1")][1] for h in hosts),
    )


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 7), elements=st.integers(1, 5 * CHUNK + 7))
def test_ring_moves_2_n_minus_1_over_n_of_the_array_per_worker(n: int, elements: int) -> None:
    model = star(n)
    run = model.run([allreduce(n, elements)], "ring")
    size, chunks = 4 * elements, -(-elements // CHUNK)
    header = UDP + 16 + model.plan.bier.bsl // 8
    workers = [f"w{i}" for i in range(1, n + 1)]
    # 2 (n - 1) messages per chunk carry its elements, each answered by an ACK: in all, the workers send
    # 2 (n - 1) / n x size x n bytes of elements.
    nbytes, packets = uplinks(run, workers)
    assert packets == 4 * (n - 1) * chunks
    assert nbytes == 2 * (n - 1) * size + 4 * (n - 1) * chunks * header
    assert run.total_fabric_bytes == 2 * nbytes  # up to s1 and down to the next rank
    assert run.stats["payload_bytes"] == n * size
    assert sum(run.agents[w]["ina.tx.bytes"] for w in workers) == nbytes - packets * UDP
    assert "p1" not in run.agents


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_per_worker_share_when_the_chunks_divide_evenly(n: int) -> None:
    model = star(n)
    run = model.run([allreduce(n, 2 * n * CHUNK)], "ring")  # every rank starts 2 chunks of equal size
    size = 4 * 2 * n * CHUNK
    header = UDP + 16 + model.plan.bier.bsl // 8
    for i in range(1, n + 1):
        nbytes, packets = uplinks(run, [f"w{i}"])
        # 2 (n - 1) / n of the array, and as many ACKs as messages
        assert packets == 2 * 2 * 2 * (n - 1)
        assert nbytes == 2 * (n - 1) * size // n + packets * header


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 7), elements=st.integers(1, 5 * CHUNK + 7))
def test_parameter_server_takes_in_n_arrays_and_sends_n_results(n: int, elements: int) -> None:
    model = star(n)
    run = model.run([allreduce(n, elements)], "ps")
    chunks = -(-elements // CHUNK)
    header = UDP + 16 + model.plan.bier.bsl // 8
    frames = [header + 4 * min(CHUNK, elements - c * CHUNK) for c in range(chunks)]
    workers = [f"w{i}" for i in range(1, n + 1)]
    assert run.stats["bytes_in"]["p1"] == [n * sum(frames), n * chunks]
    assert uplinks(run, ["p1"]) == (n * sum(frames), n * chunks)  # the results, one copy per worker
    assert uplinks(run, workers) == (n * sum(frames), n * chunks)
    assert run.agents["p1"].get("ina.ps.aggregated", 0) == (n - 1) * chunks
    assert run.agents["p1"]["ina.ps.completed"] == chunks
    assert all(run.agents[w]["ina.results"] == chunks for w in workers)


def test_ring_refuses_what_the_ring_mode_refuses() -> None:
    with pytest.raises(ModelError, match="sums only"):
        star(3, "max").run([allreduce(3, 10)], "ring")
    star(3, "max").run([allreduce(3, 10)], "ps")  # the parameter server reduces any op


def test_collective_modes_model_allreduce_ops_only(fig1: PlanModel) -> None:
    op = TraceOp(t=0.0, op="multicast", src="w1", dst=["w2", "w3"], bytes=100, id=0)
    for mode in ("ring", "ps"):
        with pytest.raises(ModelError, match="allreduce ops only"):
            fig1.run([op], mode)
