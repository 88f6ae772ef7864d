"""Fuzz: 100k random and mutated packets through decode + forward.

Nothing may raise except BierDecodeError with a declared reason, and every packet ends
in exactly one bucket: forwarded, delivered (locally only) or dropped by reason.  For
packets that decode, every BFER bit is conserved: it is in exactly one of the copies,
the local delivery or a drop.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from aidcnet.bier.bift import NULL, SELF, bifts_by_label, build_bifts
from aidcnet.bier.forwarding import DROP_REASONS, build_copies, forward_packet
from aidcnet.bier.header import DECODE_REASONS, BierDecodeError, BierHeader, parse_fields

N_PACKETS = 100_000


def node_tables() -> dict:
    """A BFR with BIFTs for BSL 64 (SIs 0, 1) and BSL 256 (SI 0), own id 5, a null row."""
    tables = {}
    for bsl, base in ((64, 100), (256, 200)):
        birt: dict = {5: SELF, 3: NULL}
        for bfr_id in range(1, 100):
            if bfr_id not in birt and bfr_id % 7:
                birt[bfr_id] = ["B", "C"] if bfr_id % 3 == 0 else ["B" if bfr_id % 2 else "D"]
        nbr_labels = {n: {(0, bsl, si): base + 10 * k + si for si in range(2)} for k, n in enumerate("BCD")}
        bifts = build_bifts(birt, bsl, nbr_labels, ecmp_seed=5)
        tables.update(bifts_by_label(bifts, {(0, bsl, si): base + 50 + si for si in bifts}))
    return tables


def valid_packet(rng: random.Random, labels: list[int]) -> bytes:
    label = rng.choice(labels)
    bsl = 64 if label < 200 else 256
    hdr = BierHeader(
        bift_id=label,
        bitstring=rng.getrandbits(bsl) & rng.getrandbits(bsl),
        bsl=bsl,
        ttl=rng.choice((0, 1, 2, rng.randrange(256))),
        entropy=rng.getrandbits(20),
        proto=rng.randrange(64),
        bfir_id=rng.getrandbits(16),
    )
    return hdr.encode() + rng.randbytes(rng.randrange(8))


def mutate(rng: random.Random, pkt: bytes) -> bytes:
    kind = rng.randrange(6)
    buf = bytearray(pkt)
    if kind == 0:  # flip a few bits
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del buf[rng.randrange(len(buf)) :]
    elif kind == 2:  # overwrite one header octet
        buf[rng.randrange(min(len(buf), 12))] = rng.randrange(256)
    elif kind == 3:  # zero the BitString
        buf[12:] = bytes(len(buf) - 12)
    elif kind == 4:  # random bytes
        return rng.randbytes(rng.randrange(80))
    else:  # random bytes behind a known label
        return bytes(buf[:3]) + rng.randbytes(rng.randrange(60))
    return bytes(buf)


def test_fuzz_decode_and_forward() -> None:
    rng = random.Random(0xB1E8)
    tables = node_tables()
    labels = sorted(tables)
    outcome: Counter[str] = Counter()
    start = time.monotonic()
    for i in range(N_PACKETS):
        pkt = valid_packet(rng, labels)
        if i % 4:
            pkt = mutate(rng, pkt)
        try:
            res = forward_packet(memoryview(pkt), tables)
        except BierDecodeError as err:
            assert err.reason in DECODE_REASONS
            outcome["decode:" + err.reason] += 1
            continue
        assert set(res.drops) <= DROP_REASONS
        if res.copies:
            outcome["forwarded"] += 1
        elif res.local:
            outcome["delivered"] += 1
        else:
            assert res.drops, f"packet {i} neither forwarded, delivered nor dropped"
            outcome["drop:" + min(res.drops)] += 1
        if "unknown-bift-id" in res.drops:
            continue
        # conservation of BFER bits: disjoint, and their union is the received BitString
        bits = parse_fields(pkt, 0, res.bsl)[12]
        parts = [b for _, b, _ in res.copies] + [res.local, *res.drops.values()]
        union = 0
        for part in parts:
            assert not union & part, f"packet {i}: a BFER bit went two ways"
            union |= part
        assert union == bits
        for _nbr, out in build_copies(pkt, res):
            assert parse_fields(out, 0, res.bsl)[3] == res.ttl >= 1
    elapsed = time.monotonic() - start

    assert sum(outcome.values()) == N_PACKETS
    # the generator must actually reach every bucket, or the test proves little
    buckets = ("forwarded", "delivered", "drop:ttl-expired", "drop:zero-bitstring", "drop:unknown-bift-id")
    for bucket in buckets:
        assert outcome[bucket] > 0, (bucket, outcome)
    for reason in DECODE_REASONS:
        assert outcome["decode:" + reason] > 0, (reason, outcome)
    assert elapsed < 10, f"fuzz took {elapsed:.1f}s"
