"""Receiver: in-order exactly-once delivery, duplicates counted, cumulative ACKs with gaps, NACK retries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.reliable import serial
from aidcnet.reliable.header import Data
from aidcnet.reliable.receiver import Receiver, ReceiverConfig

ISN = serial.MASK - 2  # every test crosses the wrap


def data(k: int, fin: bool = False) -> Data:
    return Data(bfir_id=1, flow_id=9, seq=serial.add(ISN, k), payload=bytes([k]), fin=fin)


def test_in_order_delivery_acks_each_advance() -> None:
    rx = Receiver(5, isn=ISN)
    got, fb = rx.on_data(data(0), 0.0)
    assert [d.payload for d in got] == [b"\x00"]
    assert [(m.nack, m.cum, m.reporter) for m in fb] == [(False, serial.add(ISN, 1), 5)]


def test_gap_is_nacked_at_once_then_filled_in_order() -> None:
    rx = Receiver(5, ReceiverConfig(nack_interval=0.01, nack_max_interval=0.04), isn=ISN)
    rx.on_data(data(0), 0.0)
    got, fb = rx.on_data(data(3), 0.001)  # 1 and 2 (across the wrap) are missing
    assert got == []
    nack, ack = fb  # the NACK asks; the ACK says what is held above the hole (a BFR acks it selectively)
    assert nack.nack and nack.cum == serial.add(ISN, 1) and nack.highest == serial.add(ISN, 4)
    assert nack.missing() == [serial.add(ISN, 1), serial.add(ISN, 2)]
    assert not ack.nack and (ack.cum, ack.highest) == (nack.cum, nack.highest)
    assert ack.ranges == nack.ranges
    assert rx.poll(0.005) == []  # not yet due again
    (again,) = rx.poll(0.011)
    assert again.nack and again.missing() == nack.missing()
    assert rx.poll(0.025) == []  # interval doubled to 0.02
    got, fb = rx.on_data(data(2), 0.03)
    assert got == [] and [(m.nack, m.ranges) for m in fb] == [
        (False, ((serial.add(ISN, 1), serial.add(ISN, 1)),))
    ]
    got, fb = rx.on_data(data(1), 0.031)
    assert [d.seq for d in got] == [serial.add(ISN, k) for k in (1, 2, 3)]
    assert fb[-1].cum == serial.add(ISN, 4) and fb[-1].ranges == ()


def test_duplicates_are_counted_never_delivered_and_acked() -> None:
    rx = Receiver(5, isn=ISN)
    rx.on_data(data(0), 0.0)
    rx.on_data(data(2), 0.0)
    for pkt in (data(0), data(2)):
        got, fb = rx.on_data(pkt, 0.1)
        assert got == [] and len(fb) == 1 and not fb[0].nack
    assert rx.counters["duplicates"] == 2
    assert fb[0].ranges == ((serial.add(ISN, 1), serial.add(ISN, 1)),)  # the ACK carries the gap


def test_beyond_window_is_dropped() -> None:
    rx = Receiver(5, ReceiverConfig(window=4), isn=ISN)
    got, _ = rx.on_data(data(4), 0.0)
    assert got == [] and rx.counters["beyond-window"] == 1


def test_delayed_ack_and_fin() -> None:
    rx = Receiver(5, ReceiverConfig(ack_every=3, ack_delay=0.01), isn=ISN)
    assert rx.on_data(data(0), 0.0)[1] == []
    assert rx.next_deadline() == 0.01
    (ack,) = rx.poll(0.01)
    assert ack.cum == serial.add(ISN, 1)
    got, fb = rx.on_data(data(1, fin=True), 0.02)  # the FIN completes the flow: ACK at once
    assert len(got) == 1 and fb[0].cum == serial.add(ISN, 2) and rx.complete(1, 9)


@settings(max_examples=60)
@given(st.lists(st.integers(0, 29), min_size=1, max_size=120))
def test_any_arrival_order_delivers_each_once_in_order(arrivals: list[int]) -> None:
    rx = Receiver(5, isn=ISN)
    delivered = []
    for t, k in enumerate(arrivals + list(range(30))):
        got, _ = rx.on_data(data(k, fin=k == 29), t * 1e-3)
        delivered.extend(d.payload[0] for d in got)
    assert delivered == list(range(30))
    assert rx.counters["duplicates"] == len(arrivals)  # every arrival beyond the first of each
