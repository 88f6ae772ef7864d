"""Fuzz: 100k random and mutated messages through the decoder.

Nothing may raise but ReliableDecodeError with a declared reason; every accepted message re-encodes to
the same octets; the generator must reach every reason and every message type, or the test proves little.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from aidcnet.reliable.header import REASONS, Ack, AggAck, Data, ReliableDecodeError, agg_acks, decode

N_INPUTS = 100_000


def valid(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    bfir, flow, seq = rng.randint(1, 0xFFFF), rng.getrandbits(32), rng.getrandbits(32)
    if kind == 0:
        return Data(
            bfir_id=bfir,
            flow_id=flow,
            seq=seq,
            payload=rng.randbytes(rng.randrange(24)),
            retransmit=rng.random() < 0.5,
            fin=rng.random() < 0.2,
        ).encode()
    if kind in (1, 2):
        ranges, at = [], 0
        for _ in range(rng.randrange(4 if kind == 1 else 1, 5)):
            at += rng.randint(2 if ranges else 0, 6)
            last = at + rng.randrange(3)
            ranges.append(((seq + at) & 0xFFFFFFFF, (seq + last) & 0xFFFFFFFF))
            at = last
        highest = (
            (seq + at + 1 + rng.randrange(4)) & 0xFFFFFFFF
            if ranges
            else (seq + rng.randrange(9)) & 0xFFFFFFFF
        )
        return Ack(
            bfir_id=bfir,
            flow_id=flow,
            cum=seq,
            reporter=rng.randint(1, 0xFFFF),
            highest=highest,
            ranges=tuple(ranges),
            nack=kind == 2,
        ).encode()
    bsl = rng.choice((64, 128, 256))
    acked = rng.getrandbits(bsl)
    missing = rng.getrandbits(bsl) & ~acked if rng.random() < 0.5 else 0
    return AggAck(
        bfir_id=bfir,
        flow_id=flow,
        cum=seq,
        reporter=rng.getrandbits(16),
        bsl=bsl,
        si=rng.getrandbits(8),
        acked=acked | (0 if acked | missing else 1),
        missing=missing,
        first=(seq - rng.randint(1, 64)) & 0xFFFFFFFF if rng.random() < 0.5 else None,
    ).encode()


def mutate(rng: random.Random, msg: bytes) -> bytes:
    buf = bytearray(msg)
    kind = rng.randrange(7)
    if kind == 6:  # zero a 16-bit identifier: BFIR-id or reporter
        i = rng.choice((2, 12))
        buf[i : i + 2] = b"\0\0"
    elif kind == 0:
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del buf[rng.randrange(len(buf)) :]
    elif kind == 2:
        buf[rng.randrange(16)] = rng.randrange(256)
    elif kind == 3:
        buf += rng.randbytes(rng.randint(1, 9))
    elif kind == 4:
        return rng.randbytes(rng.randrange(64))
    else:
        return bytes(buf[:16]) + rng.randbytes(rng.randrange(40))
    return bytes(buf)


def test_fuzz_decoder() -> None:
    rng = random.Random(0x4E11AB1E)
    outcome: Counter[str] = Counter()
    start = time.monotonic()
    for i in range(N_INPUTS):
        buf = valid(rng)
        if i % 4:
            buf = mutate(rng, buf)
        try:
            msg = decode(buf)
        except ReliableDecodeError as err:
            assert err.reason in REASONS
            outcome["drop:" + err.reason] += 1
            continue
        assert msg.encode() == buf, f"input {i} accepted but not canonical"
        kind = type(msg).__name__ + (":nack" if isinstance(msg, Ack) and msg.nack else "")
        outcome["ok:" + kind] += 1
    elapsed = time.monotonic() - start
    print(
        f"\nfuzz: {N_INPUTS} inputs in {elapsed:.1f}s: "
        + ", ".join(f"{k} {v}" for k, v in sorted(outcome.items()))
    )
    assert sum(outcome.values()) == N_INPUTS
    for reason in REASONS:
        assert outcome["drop:" + reason] > 0, (reason, outcome)
    for kind in ("Data", "Ack", "Ack:nack", "AggAck"):
        assert outcome["ok:" + kind] > 0, (kind, outcome)
    assert elapsed < 30, f"fuzz took {elapsed:.1f}s"


def test_agg_acks_helper_output_always_decodes() -> None:
    rng = random.Random(5)
    for _ in range(500):
        acked = rng.getrandbits(300)
        missing = rng.getrandbits(300) & ~acked
        for msg in agg_acks(1, 2, 3, 4, acked, missing, 128):
            assert decode(msg.encode()) == msg
