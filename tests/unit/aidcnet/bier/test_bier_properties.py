"""End-to-end property: routing + BIFT + forwarding deliver exactly once to exactly the BitString.

Random connected topologies, random BFR-ids (BSL 64, ids up to 200, so up to 4 SIs),
some transit BFRs without a BFR-id, random BitStrings at a random BFIR.  Packets travel
as bytes (encode, forward_packet with label lookup, build_copies with label swap) so the
codec and the label plumbing are exercised as the daemon will use them.
"""

from __future__ import annotations

import zlib
from collections import Counter, deque

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.bier.bift import Bift, bifts_by_label, build_bifts
from aidcnet.bier.bitstring import bfr_id_to_si_bit, bitstrings_from_ids, ids_from_bitstring
from aidcnet.bier.forwarding import build_copies, forward_packet
from aidcnet.bier.header import BierHeader
from aidcnet.bier.routing import compute_birts, distances_to, undirected

BSL = 64
TTL = 64

Lab = tuple[dict[str, list[str]], dict[str, int]]


@st.composite
def labs(draw: st.DrawFn) -> Lab:
    n = draw(st.integers(1, 24))
    nodes = [f"n{i}" for i in range(n)]
    # random spanning tree keeps the graph connected; extra edges create ECMP and cycles
    edges = [(nodes[i], nodes[draw(st.integers(0, i - 1))]) for i in range(1, n)]
    if n > 2:
        pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1])
        edges += [(nodes[a], nodes[b]) for a, b in draw(st.lists(pairs, max_size=2 * n))]
    adj = undirected(edges, nodes)
    with_id = draw(st.lists(st.sampled_from(nodes), unique=True, min_size=1, max_size=n))
    ids = draw(st.lists(st.integers(1, 200), unique=True, min_size=len(with_id), max_size=len(with_id)))
    return adj, dict(zip(with_id, ids, strict=True))


def build_network(
    adj: dict[str, list[str]], ids: dict[str, int]
) -> tuple[dict[str, dict[int, Bift]], dict[tuple[str, int], int]]:
    """Per node: label -> BIFT.  Labels are distinct per (node, SI) so a wrong swap shows."""
    sis = sorted({bfr_id_to_si_bit(i, BSL)[0] for i in ids.values()})
    local = {(node, si): 1000 + 16 * k + si for k, node in enumerate(sorted(adj)) for si in sis}
    birts = compute_birts(adj, ids)
    tables = {}
    for node in adj:
        nbr_labels = {nbr: {(0, BSL, si): local[(nbr, si)] for si in sis} for nbr in adj[node]}
        bifts = build_bifts(birts[node], BSL, nbr_labels, ecmp_seed=zlib.crc32(node.encode()) & 0xFFFF)
        tables[node] = bifts_by_label(bifts, {(0, BSL, si): local[(node, si)] for si in bifts})
    return tables, local


@settings(max_examples=150, deadline=None)
@given(labs(), st.data())
def test_exactly_once_delivery(lab: Lab, data: st.DataObject) -> None:
    adj, ids = lab
    tables, local = build_network(adj, ids)
    node_of = {bid: node for node, bid in ids.items()}
    bfir = data.draw(st.sampled_from(sorted(adj)))
    targets = data.draw(st.frozensets(st.sampled_from(sorted(ids.values()))))
    entropy = data.draw(st.integers(0, (1 << 20) - 1))
    received: Counter[str] = Counter()
    max_hops = len(adj)
    dist_cache = {node: distances_to(adj, node) for node in ids}

    for si, bits in bitstrings_from_ids(targets, BSL).items():
        # RFC 8296 §3: one packet per SI, processed by the BFIR like a received packet
        hdr = BierHeader(bift_id=local[(bfir, si)], bitstring=bits, bsl=BSL, ttl=TTL, entropy=entropy)
        queue = deque([(bfir, hdr.encode() + b"payload", 0)])
        while queue:
            node, pkt, hops = queue.popleft()
            assert hops <= max_hops, "loop"
            res = forward_packet(pkt, tables[node])
            assert not res.drops, res.drops  # connected graph, assigned ids, enough TTL
            if res.local:
                received[node] += 1
                assert pkt[res.end :] == b"payload"
            for nbr, out in build_copies(pkt, res):
                assert nbr in adj[node]
                copy = BierHeader.decode(out)[0]
                # every BFER in the copy is strictly closer via this neighbor: loop-free
                for bid in ids_from_bitstring(si, copy.bitstring, BSL):
                    d = dist_cache[node_of[bid]]
                    assert d[nbr] == d[node] - 1
                assert copy.ttl == TTL - hops - 1
                queue.append((nbr, out, hops + 1))

    assert received == Counter({node_of[bid]: 1 for bid in targets})


@settings(max_examples=60, deadline=None)
@given(labs(), st.data())
def test_same_entropy_same_path(lab: Lab, data: st.DataObject) -> None:
    adj, ids = lab
    tables, local = build_network(adj, ids)
    node = data.draw(st.sampled_from(sorted(adj)))
    (si, bits), *_ = bitstrings_from_ids(ids.values(), BSL).items()
    entropy = data.draw(st.integers(0, (1 << 20) - 1))
    pkt = BierHeader(bift_id=local[(node, si)], bitstring=bits, bsl=BSL, entropy=entropy).encode()
    first = forward_packet(pkt, tables[node])
    again = forward_packet(bytes(pkt), tables[node])
    assert first.copies == again.copies
    assert first.local == again.local
