"""Fuzz: 100k random and mutated IGMP messages through the decoder and our extension reader.

Nothing may raise except IgmpDecodeError with a declared reason; every input ends in exactly one bucket
(decoded, or dropped by reason).  Most mutations get their checksum fixed again, or the decoder would stop
at bad-checksum every time and the parser behind it would go untested.  Decoded messages must also
encode back to what was decoded."""

from __future__ import annotations

import random
import time
from collections import Counter
from ipaddress import IPv4Address

from aidcnet.igmp.codec import REASONS, GroupRecord, IgmpDecodeError, Query, Report, Tlv, decode, encode
from aidcnet.igmp.extensions import (
    BFR_ID_TYPE,
    RECEIVER_LIST_TYPE,
    ProxyReport,
    bfr_id_tlv,
    interpret,
    proxy_report,
)
from aidcnet.ipv4 import checksum16

N_MESSAGES = 100_000


def addr(rng: random.Random, first: int) -> IPv4Address:
    return IPv4Address((first << 24) | rng.getrandbits(24) | 1)


def valid(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    group = addr(rng, rng.choice((224, 232, 239)))
    if kind == 0:
        return encode(Query(group=group, sources=tuple(addr(rng, 10) for _ in range(rng.randrange(4)))))
    if kind == 1:
        p = ProxyReport(group, addr(rng, 10), tuple(sorted({addr(rng, 10) for _ in range(rng.randrange(4))})))
        return encode(p.to_report())
    records = tuple(
        GroupRecord(rng.randint(1, 6), group, tuple(addr(rng, 10) for _ in range(rng.randrange(3))))
        for _ in range(rng.randrange(1, 4))
    )
    tlvs = (
        bfr_id_tlv(rng.randint(1, 0xFFFF)),
        Tlv(rng.randrange(1, 0xFFFF), rng.randbytes(rng.randrange(6))),
    )
    return encode(Report(records, tlvs if kind == 2 else None))


def mutate(rng: random.Random, msg: bytes) -> bytes:
    buf = bytearray(msg)
    kind = rng.randrange(7)
    if kind == 0:  # flip a few bits
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del buf[rng.randrange(len(buf)) :]
    elif kind == 2:  # a count or length field (octets 6..7 of a report, 10..11 of a query, TLV lengths)
        i = rng.choice((1, 6, 7, 8, 10, 11, 13, 14, len(buf) - 1, len(buf) - 3))
        buf[min(i, len(buf) - 1)] = rng.randrange(256)
    elif kind == 3:  # append junk
        buf += rng.randbytes(rng.randrange(1, 9))
    elif kind == 4:  # an extension TLV of one of our types with a random value
        buf[4] |= 0x80 if buf[0] == 0x22 else 0
        t = rng.choice((RECEIVER_LIST_TYPE, BFR_ID_TYPE, 0, rng.randrange(0x10000)))
        value = rng.randbytes(rng.randrange(10))
        buf += t.to_bytes(2, "big") + len(value).to_bytes(2, "big") + value
    elif kind == 5:  # random bytes behind a random IGMP type
        return bytes([rng.choice((0x11, 0x12, 0x16, 0x17, 0x22, rng.randrange(256)))]) + rng.randbytes(
            rng.randrange(40)
        )
    else:  # random bytes
        return rng.randbytes(rng.randrange(48))
    return bytes(buf)


def fix_checksum(msg: bytes) -> bytes:
    if len(msg) < 4:
        return msg
    msg = msg[:2] + b"\0\0" + msg[4:]
    return msg[:2] + checksum16(msg).to_bytes(2, "big") + msg[4:]


def test_fuzz_decode() -> None:
    rng = random.Random(0x16D3)
    outcome: Counter[str] = Counter()
    start = time.monotonic()
    for i in range(N_MESSAGES):
        msg = valid(rng)
        if i % 8:
            msg = mutate(rng, msg)
            if rng.random() < 0.85:
                msg = fix_checksum(msg)
        try:
            decoded = decode(msg)
            if isinstance(decoded, Report):
                interpret(decoded.extensions)
                proxy_report(decoded)
        except IgmpDecodeError as exc:
            assert exc.reason in REASONS, exc.reason
            outcome[exc.reason] += 1
            continue
        outcome["decoded"] += 1
        assert decode(encode(decoded)) == decoded
    elapsed = time.monotonic() - start
    print(f"igmp fuzz: {N_MESSAGES} messages in {elapsed:.1f} s: {dict(sorted(outcome.items()))}")
    assert sum(outcome.values()) == N_MESSAGES
    # The mutations reach every check behind the checksum, not just the first one.
    assert set(outcome) == REASONS | {"decoded"}, set(REASONS) - set(outcome)
