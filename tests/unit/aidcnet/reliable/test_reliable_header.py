"""The reliable-multicast header codec: byte vectors from docs/reliability.md, every reason, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.reliable import serial
from aidcnet.reliable.header import (
    REASONS,
    Ack,
    AggAck,
    AggNack,
    Data,
    ReliableDecodeError,
    agg_acks,
    agg_nacks,
    decode,
    decode_data_head,
)

# The examples of docs/reliability.md, octet for octet.
DATA_VECTOR = bytes.fromhex("11c00003 00000007 ffffffff 00000004 61626364")
ACK_VECTOR = bytes.fromhex("12000003 00000007 fffffffe 00050002 00000006 fffffffe fffffffe 00000001 00000003")
NACK_VECTOR = bytes.fromhex("13000003 00000007 fffffffe 00050001 00000006 fffffffe fffffffe")
AGG_VECTOR = bytes.fromhex("14800003 00000007 00000010 00111000 00000000 000000a6 00000000 00000010")
SACK_VECTOR = bytes.fromhex(
    "14400003 00000007 00000010 00111000 0000000c 00000000 000000a6 00000000 00000000"
)
NACK_AGG_VECTOR = bytes.fromhex(
    "15800003 00000007 ffffffff 00111000 00000001 00000000 00000012 00000000 000000a4"
)


def test_data_vector() -> None:
    msg = Data(bfir_id=3, flow_id=7, seq=0xFFFFFFFF, payload=b"abcd", retransmit=True, fin=True)
    assert msg.encode() == DATA_VECTOR
    out = decode(DATA_VECTOR)
    assert isinstance(out, Data) and bytes(out.payload) == b"abcd" and out.retransmit and out.fin


def test_ack_vector_with_gaps_across_the_wrap() -> None:
    msg = Ack(
        bfir_id=3, flow_id=7, cum=0xFFFFFFFE, reporter=5, highest=6, ranges=((0xFFFFFFFE, 0xFFFFFFFE), (1, 3))
    )
    assert msg.encode() == ACK_VECTOR
    assert decode(ACK_VECTOR) == msg
    assert msg.missing() == [0xFFFFFFFE, 1, 2, 3]


def test_nack_vector() -> None:
    msg = Ack(
        bfir_id=3,
        flow_id=7,
        cum=0xFFFFFFFE,
        reporter=5,
        highest=6,
        ranges=((0xFFFFFFFE, 0xFFFFFFFE),),
        nack=True,
    )
    assert msg.encode() == NACK_VECTOR
    assert decode(NACK_VECTOR) == msg


def test_agg_ack_vector_partial() -> None:
    # BFR 17 (0x11): BFERs 2, 3, 6 and 8 acked everything before 16, BFER 5 missing; BSL 64, SI 0.
    msg = AggAck(bfir_id=3, flow_id=7, cum=16, reporter=17, bsl=64, si=0, acked=0xA6, missing=0x10)
    assert msg.encode() == AGG_VECTOR
    assert decode(AGG_VECTOR) == msg and msg.partial
    assert msg.acked_mask() == 0xA6


def test_agg_ack_vector_selective() -> None:
    # BFR 17: BFERs 2, 3, 6 and 8 hold 12..15, whatever they lack before 12 (flag S, First 12).
    msg = AggAck(bfir_id=3, flow_id=7, cum=16, reporter=17, bsl=64, si=0, acked=0xA6, first=12)
    assert msg.encode() == SACK_VECTOR
    assert decode(SACK_VECTOR) == msg and msg.selective and not msg.partial


def test_agg_nack_vector_across_the_wrap() -> None:
    # BFR 17: BFERs 2 and 5 ask for 2**32-1, 0 and 1; BFERs 3, 6 and 8 below it hold them; the last
    # round's repair passed BFR 17 and missed the askers (flag A).
    msg = AggNack(bfir_id=3, flow_id=7, first=0xFFFFFFFF, last=1, reporter=17, bsl=64, si=0, askers=0x12,
                  holders=0xA4, again=True)  # fmt: skip
    assert msg.encode() == NACK_AGG_VECTOR
    assert decode(NACK_AGG_VECTOR) == msg and msg.sequences() == [0xFFFFFFFF, 0, 1]


def test_agg_nacks_one_per_si_with_an_asker() -> None:
    msgs = agg_nacks(3, 7, 4, 4, 17, askers=(1 << 1) | (1 << 65), holders=(1 << 2) | (1 << 200), bsl=64)
    assert [(m.si, m.askers, m.holders) for m in msgs] == [(0, 2, 4), (1, 2, 0)]  # SI 3 has no asker
    for m in msgs:
        assert decode(m.encode()) == m


def test_a_data_head_alone_decodes_as_data_without_its_payload() -> None:
    head = decode_data_head(DATA_VECTOR[:16])
    assert (head.bfir_id, head.flow_id, head.seq, head.retransmit, head.fin) == (3, 7, 0xFFFFFFFF, True, True)
    assert head.payload == b""
    with pytest.raises(ReliableDecodeError, match="bad-type"):
        decode_data_head(ACK_VECTOR)
    with pytest.raises(ReliableDecodeError, match="truncated"):
        decode_data_head(DATA_VECTOR[:15])


def test_agg_acks_split_id_masks_by_si() -> None:
    msgs = agg_acks(3, 7, 9, 17, acked=(1 << 0) | (1 << 64), missing=1 << 70, bsl=64)
    assert [(m.si, m.acked, m.missing) for m in msgs] == [(0, 1, 0), (1, 1, 1 << 6)]
    assert sum(m.acked_mask() for m in msgs) == (1 << 0) | (1 << 64)
    assert msgs[1].missing_mask() == 1 << 70
    for m in msgs:
        assert decode(m.encode()) == m


def _with(vector: bytes, index: int, value: int) -> bytes:
    buf = bytearray(vector)
    buf[index] = value
    return bytes(buf)


BAD = [
    ("truncated", DATA_VECTOR[:15]),
    ("truncated", DATA_VECTOR[:-1]),
    ("truncated", ACK_VECTOR[:-8]),
    ("truncated", AGG_VECTOR[:-1]),
    ("bad-version", _with(DATA_VECTOR, 0, 0x01)),
    ("bad-type", _with(DATA_VECTOR, 0, 0x16)),
    ("bad-type", _with(DATA_VECTOR, 0, 0x10)),
    ("bad-flags", _with(DATA_VECTOR, 1, 0xC1)),
    ("bad-flags", _with(ACK_VECTOR, 1, 0x80)),
    ("bad-flags", _with(AGG_VECTOR, 1, 0x00)),  # missing set but P clear
    ("bad-bfir", _with(_with(DATA_VECTOR, 2, 0), 3, 0)),
    ("reserved-set", _with(DATA_VECTOR, 13, 1)),
    ("reserved-set", _with(AGG_VECTOR, 14, 0x11)),
    ("bad-reporter", _with(ACK_VECTOR, 13, 0)),
    ("length-mismatch", DATA_VECTOR + b"x"),
    ("length-mismatch", ACK_VECTOR + bytes(8)),
    ("length-mismatch", AGG_VECTOR + b"\0"),
    ("bad-range", _with(ACK_VECTOR, 19, 0x00)),  # highest 0 before cumulative 0xfffffffe + ranges
    ("bad-range", NACK_VECTOR[:14] + b"\0\0" + NACK_VECTOR[16:20]),  # NACK without ranges
    ("bad-range", ACK_VECTOR[:28] + bytes.fromhex("ffffffff 00000003")),  # adjacent to the previous range
    ("bad-range", ACK_VECTOR[:28] + bytes.fromhex("00000003 00000001")),  # first after last
    ("bad-range", ACK_VECTOR[:28] + bytes.fromhex("00000001 00000006")),  # reaches highest
    ("bad-bsl", _with(AGG_VECTOR, 14, 0x80)),
    ("bad-bitstring", AGG_VECTOR[:1] + b"\x00" + AGG_VECTOR[2:16] + bytes(16)),
    ("bad-bitstring", AGG_VECTOR[:16] + bytes.fromhex("00000000 000000b6 00000000 00000010")),  # overlap
    ("truncated", SACK_VECTOR[:-4]),  # the BitStrings after First cut short
    ("length-mismatch", SACK_VECTOR + b"\0"),
    ("truncated", _with(AGG_VECTOR, 1, 0xC0)),  # S set, but no room for First
    ("bad-range", SACK_VECTOR[:16] + bytes.fromhex("00000010") + SACK_VECTOR[20:]),  # First = Cumulative
    ("bad-range", SACK_VECTOR[:16] + bytes.fromhex("00000011") + SACK_VECTOR[20:]),  # First after it
    ("truncated", NACK_AGG_VECTOR[:-1]),
    ("length-mismatch", NACK_AGG_VECTOR + b"\0"),
    ("bad-flags", _with(NACK_AGG_VECTOR, 1, 0x40)),
    ("reserved-set", _with(NACK_AGG_VECTOR, 14, 0x11)),
    (
        "bad-range",
        NACK_AGG_VECTOR[:16] + bytes.fromhex("fffffffe") + NACK_AGG_VECTOR[20:],
    ),  # Last before First
    ("bad-bitstring", NACK_AGG_VECTOR[:20] + bytes(8) + NACK_AGG_VECTOR[28:]),  # nobody asks
    ("bad-bitstring", NACK_AGG_VECTOR[:28] + bytes.fromhex("00000000 000000b6")),  # an asker holds it
]


def test_every_reason_is_exercised() -> None:
    assert {reason for reason, _ in BAD} == REASONS


@pytest.mark.parametrize(("reason", "buf"), BAD)
def test_malformed_is_refused_with_its_reason(reason: str, buf: bytes) -> None:
    with pytest.raises(ReliableDecodeError) as err:
        decode(buf)
    assert err.value.reason == reason


@pytest.mark.parametrize(
    ("msg", "match"),
    [
        (Data(bfir_id=0, flow_id=1, seq=0), "bfir_id"),
        (Data(bfir_id=1, flow_id=1 << 32, seq=0), "flow_id"),
        (Data(bfir_id=1, flow_id=1, seq=0, payload=bytes(70000)), "payload"),
        (Ack(bfir_id=1, flow_id=1, cum=0, reporter=0, highest=0), "reporter"),
        (Ack(bfir_id=1, flow_id=1, cum=5, reporter=1, highest=4), "highest"),
        (Ack(bfir_id=1, flow_id=1, cum=0, reporter=1, highest=9, ranges=((3, 4), (5, 6))), "range 1"),
        (Ack(bfir_id=1, flow_id=1, cum=0, reporter=1, highest=9, nack=True), "at least one"),
        (AggAck(bfir_id=1, flow_id=1, cum=0, reporter=0, bsl=64, si=0, acked=1, missing=1), "disjoint"),
        (AggAck(bfir_id=1, flow_id=1, cum=0, reporter=0, bsl=64, si=0, acked=1 << 64), "fit"),
        (AggAck(bfir_id=1, flow_id=1, cum=0, reporter=0, bsl=100, si=0, acked=1), "BitString length"),
        (AggAck(bfir_id=1, flow_id=1, cum=5, reporter=0, bsl=64, si=0, acked=1, first=5), "first 5"),
        (AggNack(bfir_id=1, flow_id=1, first=5, last=4, reporter=0, bsl=64, si=0, askers=1), "last 4"),
        (AggNack(bfir_id=1, flow_id=1, first=5, last=5, reporter=0, bsl=64, si=0, askers=0), "askers"),
        (
            AggNack(bfir_id=1, flow_id=1, first=5, last=5, reporter=0, bsl=64, si=0, askers=1, holders=1),
            "askers",
        ),
    ],
)
def test_encoder_refuses_what_the_decoder_would(msg: Data | Ack | AggAck | AggNack, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        msg.encode()


u32 = st.integers(0, serial.MASK)
bfr = st.integers(1, 0xFFFF)


@st.composite
def acks(draw: st.DrawFn) -> Ack:
    cum = draw(u32)
    offsets = sorted(set(draw(st.lists(st.integers(0, 500), max_size=12))))
    ranges, prev = [], -2
    for off in offsets:
        if off <= prev + 1:
            continue
        last = off + draw(st.integers(0, 3))
        ranges.append((serial.add(cum, off), serial.add(cum, last)))
        prev = last
    highest = serial.add(cum, prev + 1 + draw(st.integers(0, 5)) if ranges else draw(st.integers(0, 9)))
    nack = draw(st.booleans()) and bool(ranges)
    return Ack(
        bfir_id=draw(bfr),
        flow_id=draw(u32),
        cum=cum,
        reporter=draw(bfr),
        highest=highest,
        ranges=tuple(ranges),
        nack=nack,
    )


@st.composite
def aggs(draw: st.DrawFn) -> AggAck:
    bsl = draw(st.sampled_from([64, 128, 256, 512, 1024, 2048, 4096]))
    acked = draw(st.integers(0, (1 << bsl) - 1))
    missing = draw(st.integers(0, (1 << bsl) - 1)) & ~acked
    if not acked | missing:
        acked = 1
    cum = draw(u32)
    back = draw(st.none() | st.integers(1, serial.MAX_SPAN))
    return AggAck(
        bfir_id=draw(bfr),
        flow_id=draw(u32),
        cum=cum,
        reporter=draw(st.integers(0, 0xFFFF)),
        bsl=bsl,
        si=draw(st.integers(0, 255)),
        acked=acked,
        missing=missing,
        first=None if back is None else serial.add(cum, -back),
    )


datas = st.builds(
    Data,
    bfir_id=bfr,
    flow_id=u32,
    seq=u32,
    payload=st.binary(max_size=64),
    retransmit=st.booleans(),
    fin=st.booleans(),
)


@st.composite
def agg_nack_msgs(draw: st.DrawFn) -> AggNack:
    bsl = draw(st.sampled_from([64, 128, 256, 512, 1024, 2048, 4096]))
    askers = draw(st.integers(1, (1 << bsl) - 1))
    first = draw(u32)
    return AggNack(
        bfir_id=draw(bfr),
        flow_id=draw(u32),
        first=first,
        last=serial.add(first, draw(st.integers(0, serial.MAX_SPAN - 1))),
        reporter=draw(st.integers(0, 0xFFFF)),
        bsl=bsl,
        si=draw(st.integers(0, 255)),
        askers=askers,
        holders=draw(st.integers(0, (1 << bsl) - 1)) & ~askers,
        again=draw(st.booleans()),
    )


@given(st.one_of(datas, acks(), aggs(), agg_nack_msgs()))
def test_round_trip(msg: Data | Ack | AggAck | AggNack) -> None:
    wire = msg.encode()
    back = decode(wire)
    assert back.encode() == wire
    if isinstance(msg, Data):
        assert bytes(back.payload) == bytes(msg.payload)
    else:
        assert back == msg


@given(st.binary(max_size=80))
def test_anything_decodes_or_raises_the_one_error(buf: bytes) -> None:
    try:
        msg = decode(buf)
    except ReliableDecodeError as err:
        assert err.reason in REASONS
    else:
        assert msg.encode() == buf  # strict: what is accepted is canonical
