"""Replay payloads: fragmentation, the wire header, and receiver accounting."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.replay import (
    DATAGRAM_OVERHEAD,
    DEFAULT_MAX_DATAGRAM,
    HEADER_SIZE,
    MAGIC,
    VERSION,
    PayloadError,
    Reassembly,
    build_fragments,
    content_slice,
    datagram_sizes,
    fragment_sizes,
    parse_fragment,
    queue_pair,
)
from aidcnet.rocev2 import RC_SEND_ONLY, Bth

sizes = st.integers(min_value=1, max_value=60_000)
maxes = st.integers(min_value=2 * HEADER_SIZE, max_value=9000)


def test_header_layout_matches_the_documented_bytes() -> None:
    datagram = build_fragments(msg_id=0x0102030405060708, size=100, send_ns=0x1122334455667788)[0]
    assert (DATAGRAM_OVERHEAD, HEADER_SIZE) == (12, 40)
    # BTH: RC SEND Only, version 0, P_Key 0xFFFF, the message's QP, PSN 0 (docs/replay-payload.md)
    qp = 2 + 0x0102030405060708 % (0xFFFFFF - 2)
    assert datagram[:12] == bytes([0x04, 0x00, 0xFF, 0xFF, 0]) + qp.to_bytes(3, "big") + bytes(4)
    frag = datagram[12:]
    assert frag[:2] == b"AR" and frag[2] == 2 and frag[3] == 0
    assert frag[4:12] == bytes.fromhex("0102030405060708")
    assert struct.unpack("!II", frag[12:20]) == (0, 1)
    assert frag[20:28] == bytes.fromhex("1122334455667788")
    assert struct.unpack("!Q", frag[28:36]) == (100,)
    assert len(frag) == 100 and len(datagram) == 112


@given(size=sizes, max_dgram=maxes)
def test_every_datagram_is_its_fragment_after_a_bth(size: int, max_dgram: int) -> None:
    datagrams = build_fragments(5, size, 0, max_dgram)
    assert [len(d) for d in datagrams] == datagram_sizes(size, max_dgram)
    assert datagram_sizes(size, max_dgram) == [DATAGRAM_OVERHEAD + n for n in fragment_sizes(size, max_dgram)]
    assert [Bth.decode(d).psn for d in datagrams] == list(range(len(datagrams)))
    assert {Bth.decode(d).dest_qp for d in datagrams} == {queue_pair(5)}


@given(size=sizes, max_dgram=maxes)
def test_fragments_sum_to_the_op_bytes_and_fit(size: int, max_dgram: int) -> None:
    parts = fragment_sizes(size, max_dgram)
    assert all(HEADER_SIZE <= p <= max(max_dgram, HEADER_SIZE) for p in parts)
    assert sum(parts) == max(size, HEADER_SIZE)
    assert max(parts) - min(parts) <= 1


@settings(max_examples=50)
@given(size=sizes, max_dgram=maxes, send_ns=st.integers(0, 2**63), msg_id=st.integers(0, 2**40))
def test_roundtrip_in_any_order_completes_with_good_checksum(
    size: int, max_dgram: int, send_ns: int, msg_id: int
) -> None:
    frags = build_fragments(msg_id, size, send_ns, max_dgram)
    order = list(range(len(frags)))
    random.Random(size).shuffle(order)
    r = Reassembly(max_datagram=max_dgram)
    for t, i in enumerate(order):
        f = parse_fragment(frags[i], max_dgram)
        assert (f.msg_id, f.index, f.count, f.send_ns) == (msg_id, i, len(frags), send_ns)
        rec = r.add(frags[i], now_ns=1000 + t)
        assert rec is not None
        assert rec.complete == (t == len(frags) - 1)
    rec = r.records[msg_id]
    assert rec.checksum_ok and rec.duplicates == 0
    assert (rec.first_ns, rec.last_ns, rec.complete_ns) == (1000, 999 + len(frags), 999 + len(frags))
    assert r.complete_good() == 1


@given(size=st.integers(1, 30_000), copies=st.integers(1, 4))
def test_duplicates_count_whole_extra_copies(size: int, copies: int) -> None:
    frags = build_fragments(7, size, 0, 4000)
    r = Reassembly(max_datagram=4000)
    for _ in range(copies):
        for f in frags:
            r.add(f, 1)
    # an extra stray fragment is not a whole copy
    r.add(frags[0], 2)
    rec = r.records[7]
    assert rec.duplicates == copies - 1 + (1 if len(frags) == 1 else 0)


def test_missing_fragment_is_incomplete() -> None:
    frags = build_fragments(3, 20_000, 0)
    assert len(frags) == 3
    r = Reassembly()
    for f in frags[:2]:
        r.add(f, 5)
    rec = r.records[3]
    assert not rec.complete and not rec.checksum_ok and rec.fragments == 2
    assert r.complete_good() == 0


@given(
    pos=st.integers(DATAGRAM_OVERHEAD + HEADER_SIZE, DATAGRAM_OVERHEAD + DEFAULT_MAX_DATAGRAM - 1),
    flip=st.integers(1, 255),
)
def test_a_flipped_content_byte_fails_the_check(pos: int, flip: int) -> None:
    (frag,) = build_fragments(9, DEFAULT_MAX_DATAGRAM, 0)
    bad = bytearray(frag)
    bad[pos] ^= flip
    r = Reassembly()
    r.add(bytes(bad), 1)
    rec = r.records[9]
    assert rec.bad == 1 and not rec.checksum_ok


def test_content_differs_between_messages_and_slices_agree() -> None:
    assert content_slice(1, 0, 200) != content_slice(2, 0, 200)
    whole = content_slice(5, 0, 1000)
    assert content_slice(5, 123, 456) == whole[123:579]


SEND = Bth(opcode=RC_SEND_ONLY, dest_qp=2, psn=0).encode()
# What the replay sent before its datagrams carried a BTH: the header first (read as opcode 0x41, version 2).
BARE_V1 = struct.pack("!HBBQIIQQI", MAGIC, 1, 0, 0, 0, 1, 0, 100, 0) + bytes(60)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"x" * 10, "short"),
        (BARE_V1, "bad-bth-version"),
        (Bth(opcode=0x41, dest_qp=2, psn=0).encode() + BARE_V1, "bad-opcode"),
        (Bth(opcode=RC_SEND_ONLY, dest_qp=2, psn=0, pkey=0x8001).encode() + BARE_V1, "bad-pkey"),
        (SEND + b"\x00" * 40, "bad-magic"),
        (SEND + struct.pack("!HBB", MAGIC, 9, 0) + b"\x00" * 36, "bad-version"),
        # message 7's datagrams go to QP 9, not SEND's QP 2
        (SEND + struct.pack("!HBBQIIQQI", MAGIC, VERSION, 0, 7, 0, 1, 0, 100, 0) + bytes(60), "bad-qp"),
    ],
)
def test_foreign_datagrams_are_counted_by_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(PayloadError) as err:
        parse_fragment(payload)
    assert err.value.reason == reason
    r = Reassembly()
    assert r.add(payload, 0) is None
    assert r.errors == {reason: 1}


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(data: bytes) -> None:
    Reassembly().add(data, 0)


def test_max_datagram_below_two_headers_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 80"):
        fragment_sizes(1000, 79)


def test_truncated_fragment_is_rejected() -> None:
    frag = build_fragments(1, 5000, 0)[0]
    with pytest.raises(PayloadError, match="bad-length"):
        parse_fragment(frag[:-1])


def test_the_replay_takes_only_its_own_fragments_of_the_shared_port() -> None:
    """Host-BIER deliveries to 4791 are the replay's fragments and ``bier_send``'s payloads alike: a host
    whose replay service once ran must still leave the latter to the BIER service (its received list)."""
    from aidcnet.agent.replay.service import ReplayService
    from aidcnet.ipv4 import ROCEV2_PORT, UdpDatagram
    from aidcnet.replay import looks_like_replay

    fragment = build_fragments(3, 100, 0)[0]
    assert looks_like_replay(fragment)
    assert (
        not looks_like_replay(b"5:before:0:xxxx")
        and not looks_like_replay(b"AR")
        and not looks_like_replay(b"")
    )
    at = DATAGRAM_OVERHEAD + 2
    other_version = fragment[:at] + bytes([fragment[at] + 1]) + fragment[at + 1 :]
    assert not looks_like_replay(other_version)
    assert not looks_like_replay(fragment[DATAGRAM_OVERHEAD:])  # no BTH: the version 1 layout
    svc = ReplayService("127.0.0.1")
    assert svc.on_bier_datagram(UdpDatagram("10.0.0.1", "232.1.0.1", 49152, ROCEV2_PORT, 64, fragment), 1234)
    assert not svc.on_bier_datagram(UdpDatagram("10.0.0.1", "232.1.0.1", 49152, ROCEV2_PORT, 64, b"5:t:0:xx"))
    assert not svc.on_bier_datagram(UdpDatagram("10.0.0.1", "232.1.0.1", 49152, 4792, 64, fragment))
    assert 3 in svc.reassembly.records
    assert svc.reassembly.records[3].first_ns == 1234  # timed by the BIER dataplane's kernel stamp
