"""Network-BIER's edge (aidcnet/reliable/edge.py): a BFER leaf speaking for its hosts as one BFER, and the
BFIR leaf narrowing a retransmission. Hosts 2 and 3 sit behind leaf 6; the flow is (BFIR 1, Flow ID 7)
and starts just below the 2**32 wrap."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.reliable import serial
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig
from aidcnet.reliable.edge import EdgeAggregator, repair_bfers
from aidcnet.reliable.header import Ack, AggAck, AggNack, Data
from aidcnet.reliable.sender import id_mask
from tests.unit.aidcnet.reliable.feedback import agg_ack

ISN = 0xFFFF_FFFE
LEAF = 6
HOSTS = id_mask([2, 3])
CONFIG = AggregatorConfig(partial_after=0.1, lifetime=1.0, report_every=1)


def seq(k: int) -> int:
    return serial.add(ISN, k)


def data(k: int, retransmit: bool = False, fin: bool = False) -> Data:
    return Data(bfir_id=1, flow_id=7, seq=seq(k), payload=b"x", retransmit=retransmit, fin=fin)


def ack(
    reporter: int, cum_k: int, highest_k: int | None = None, holes: tuple = (), nack: bool = False
) -> Ack:
    return Ack(
        bfir_id=1, flow_id=7, cum=seq(cum_k), reporter=reporter, nack=nack,
        highest=seq(cum_k if highest_k is None else highest_k),
        ranges=tuple((seq(a), seq(b)) for a, b in holes),
    )  # fmt: skip


def edge_with(n: int, config: AggregatorConfig = CONFIG) -> EdgeAggregator:
    edge = EdgeAggregator(LEAF, config)
    for k in range(n):
        edge.on_data(data(k, fin=k == n - 1), HOSTS, "spine", 0.0)
    return edge


def test_the_leaf_acknowledges_as_itself_once_every_host_has() -> None:
    edge = edge_with(2)
    assert edge.on_feedback(ack(2, 2), 0.01) == []  # host 3 has not said
    ((up, msg),) = edge.on_feedback(ack(3, 2), 0.02)
    assert up == "spine"
    assert msg == agg_ack(ISN, 2, [LEAF], reporter=LEAF)
    assert edge.entries == 0


def test_a_silent_host_makes_the_leaf_missing_in_its_partial() -> None:
    edge = edge_with(1)
    edge.on_feedback(ack(2, 1), 0.01)
    ((_up, msg),) = edge.poll(0.2)
    assert isinstance(msg, AggAck) and msg.partial
    assert msg.acked_mask() == 0 and msg.missing_mask() == id_mask([LEAF])  # hosts never show above


def test_a_hosts_nack_goes_up_as_the_leafs_no_further_than_the_oldest_window_a_host_lacks() -> None:
    edge = edge_with(4, dataclasses.replace(CONFIG, merge_nacks=False))
    assert edge.on_feedback(ack(3, 1), 0.01) == []  # host 3 has only sequence 0
    ((_up, msg),) = edge.on_feedback(ack(2, 3), 0.02)  # host 2 has 0 to 2: both hold 0
    assert msg == agg_ack(ISN, 1, [LEAF], reporter=LEAF)
    # host 2 lost nothing before 3 but asks for 3; host 3 still lacks 1 and 2: the leaf as a whole
    # holds only what is before 1.
    ((_up, msg),) = edge.on_feedback(ack(2, 3, 5, holes=((3, 3),), nack=True), 0.03)
    assert isinstance(msg, Ack) and msg.nack and msg.reporter == LEAF
    assert msg.cum == seq(1) and msg.ranges == ((seq(3), seq(3)),) and msg.highest == seq(5)


def test_the_hosts_nacks_of_one_round_go_up_as_one_agg_nack_of_the_leaf() -> None:
    edge = edge_with(4)
    said = []
    for host in (2, 3):  # both hold 0 and 2, lack 1
        said += edge.on_feedback(ack(host, 1, 3, holes=((1, 1),), nack=True), 0.01 + host / 1000)
    assert not any(isinstance(m, Ack | AggNack) for _up, m in said)  # no NACK yet: the gather waits
    ((up, msg),) = edge.poll(0.05)  # the gather ended: one AGG-NACK, the leaf asking as one BFER
    assert up == "spine" and isinstance(msg, AggNack) and msg.reporter == LEAF
    assert (msg.first, msg.last, msg.askers_mask(), msg.holders) == (seq(1), seq(1), id_mask([LEAF]), 0)
    # Until the repair passes, a host's repeated NACK is absorbed.
    assert edge.on_feedback(ack(2, 1, 3, holes=((1, 1),), nack=True), 0.06) == [] and edge.poll(0.07) == []
    assert edge.counters["nack-merged"] == 2


def test_a_hosts_ack_nothing_here_accounts_for_is_not_said_for_the_leaf() -> None:
    edge = EdgeAggregator(LEAF, CONFIG)
    assert edge.on_feedback(ack(2, 5), 0.0) == []
    assert edge.counters["edge-ack-unaccounted"] == 1


def bfir_entry(k: int, bfers: list[int]) -> AckAggregator:
    bfir = AckAggregator(5, CONFIG)
    bfir.on_data(data(k), id_mask(bfers), "source", 0.0)
    return bfir


def test_a_first_transmission_goes_to_the_whole_group() -> None:
    bfir = bfir_entry(0, [5, 6, 8])
    assert repair_bfers(bfir, data(0), (5, 6, 8)) == (5, 6, 8)


def test_a_repair_goes_to_the_bfers_that_have_not_confirmed_it() -> None:
    bfir = bfir_entry(0, [5, 6, 8])
    bfir.on_feedback(agg_ack(ISN, 1, [5, 8], reporter=9), 0.01)
    assert repair_bfers(bfir, data(0, retransmit=True), (5, 6, 8)) == (6,)
    assert bfir.counters["repair-narrowed"] == 1


def test_a_repair_the_bfir_knows_nothing_of_goes_to_the_whole_group() -> None:
    bfir = bfir_entry(0, [5, 6, 8])
    assert repair_bfers(bfir, data(3, retransmit=True), (5, 6, 8)) == (5, 6, 8)
    assert bfir.counters["repair-to-group"] == 1


@given(expected=st.sets(st.integers(1, 64), min_size=1), confirmed=st.sets(st.integers(1, 64)))
def test_a_repair_never_skips_a_bfer_that_has_not_confirmed(expected: set[int], confirmed: set[int]) -> None:
    bfers = tuple(sorted(expected))
    bfir = bfir_entry(0, list(bfers))
    acked = confirmed & expected
    if acked:
        bfir.on_feedback(agg_ack(ISN, 1, acked, reporter=9), 0.01)
    out = repair_bfers(bfir, data(0, retransmit=True), bfers)
    assert set(out) >= expected - acked
    assert set(out) <= set(bfers)
