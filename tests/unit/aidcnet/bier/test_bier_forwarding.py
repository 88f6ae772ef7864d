"""RFC 8279 §6.3–6.7 vectors (Figures 1–6, Examples 1 and 2), TTL rules of RFC 8296 §2.1.1.2.

The RFC examples use a BitStringLength of 4; we use BSL 64 with BFR-ids 1..4, which gives
the same BitString integers (bit 1 = least-significant bit), so ``0b0111`` below is the
RFC's "0111".
"""

from __future__ import annotations

import pytest

from aidcnet.bier.bift import NULL, SELF, Bift, bifts_by_label, build_bifts
from aidcnet.bier.forwarding import DROP_REASONS, ecmp_hash, forward, forward_packet, impose
from aidcnet.bier.header import BierDecodeError, BierHeader, parse_fields
from aidcnet.bier.routing import compute_birts, undirected

BSL = 64

# RFC 8279 Figure 1: ( A ) -- ( B ) -- ( C ) -- ( D ), B -- E, C -- F
FIG1_EDGES = [("A", "B"), ("B", "C"), ("C", "D"), ("B", "E"), ("C", "F")]
# Figure 6 adds the E -- F link
FIG6_EDGES = [*FIG1_EDGES, ("E", "F")]
# "4 (0:1000)" at A, "1 (0:0001)" at D, "3 (0:0100)" at E, "2 (0:0010)" at F; B and C have none
FIG1_IDS = {"A": 4, "D": 1, "E": 3, "F": 2}

# Figure 2: BIRT at BFR-B (BFR-id -> BFR-NBR)
FIG2_BIRT_B = {4: ["A"], 1: ["C"], 3: ["E"], 2: ["C"]}

# Figure 3 (= BFR-B in Figure 5): BFR-id -> [(F-BM, BFR-NBR)]
FIG3_BIFT_B = {1: [(0b0011, "C")], 2: [(0b0011, "C")], 3: [(0b0100, "E")], 4: [(0b1000, "A")]}

# Figure 5: BIFTs of A, B, C. A's own entry 4 reads "1000 A": the BFR itself.
FIG5 = {
    "A": {1: [(0b0111, "B")], 2: [(0b0111, "B")], 3: [(0b0111, "B")], 4: [(0b1000, "A")]},
    "B": FIG3_BIFT_B,
    "C": {1: [(0b0001, "D")], 2: [(0b0010, "F")], 3: [(0b1100, "B")], 4: [(0b1100, "B")]},
}

# Figure 6 (non-deterministic ECMP): B has two choices for entry 2.
FIG6 = {
    "A": FIG5["A"],
    "B": {
        1: [(0b0011, "C")],
        2: [(0b0011, "C"), (0b0110, "E")],
        3: [(0b0110, "E")],
        4: [(0b1000, "A")],
    },
    "C": FIG5["C"],
}


def rows_as_rfc(bift: Bift, node: str) -> dict[int, list[tuple[int, str]]]:
    """Our rows with SELF spelled as the node name, the way the RFC figures print it."""
    return {bid: [(fbm, node if nbr == SELF else nbr) for fbm, nbr in alts] for bid, alts in bift.rows()}


def node_bifts(edges: list[tuple[str, str]]) -> dict[str, Bift]:
    birts = compute_birts(undirected(edges), FIG1_IDS)
    return {node: build_bifts(birt, BSL)[0] for node, birt in birts.items()}


def walk(
    bifts: dict[str, Bift], bfir: str, bits: int, ttl: int = 64, entropy: int = 0
) -> tuple[list[tuple[str, str, int]], list[str]]:
    """Hop-by-hop simulation: returns the (from, to, BitString) of every copy and the deliveries."""
    hops: list[tuple[str, str, int]] = []
    delivered: list[str] = []
    res = impose(bifts[bfir], bits, ttl, entropy)
    queue = [(bfir, res)]
    while queue:
        node, res = queue.pop(0)
        if res.local:
            delivered.append(node)
        for nbr, cb, _label in res.copies:
            hops.append((node, nbr, cb))
            queue.append((nbr, forward(bifts[nbr], cb, res.ttl, entropy)))
    return hops, delivered


# --- §6.3/§6.4: BIRT and BIFT ----------------------------------------------------------


def test_figure2_birt_at_b_from_routing() -> None:
    birt_b = compute_birts(undirected(FIG1_EDGES), FIG1_IDS)["B"]
    assert {bid: list(nh) for bid, nh in birt_b.items()} == FIG2_BIRT_B


def test_figure3_bift_from_figure2_birt() -> None:
    (bift,) = build_bifts(FIG2_BIRT_B, BSL).values()
    assert rows_as_rfc(bift, "B") == FIG3_BIFT_B
    assert bift.own_mask == 0  # B has no BFR-id in Figure 1


@pytest.mark.parametrize("node", ["A", "B", "C"])
def test_figure5_bifts(node: str) -> None:
    assert rows_as_rfc(node_bifts(FIG1_EDGES)[node], node) == FIG5[node]


def test_figure6_ecmp_bift_at_b() -> None:
    assert rows_as_rfc(node_bifts(FIG6_EDGES)["B"], "B") == FIG6["B"]


def test_figure6_transcribed_birt_at_c_and_our_full_ecmp() -> None:
    # Figure 6 prints C's entry 3 as "1100 B" only.  With the E-F link, C-F-E is as short
    # as C-B-E, so full shortest-path ECMP (what routing.py computes) has two choices.
    # Built from the BIRT as printed, we reproduce the figure exactly:
    (printed,) = build_bifts({1: ["D"], 2: ["F"], 3: ["B"], 4: ["B"]}, BSL).values()
    assert rows_as_rfc(printed, "C") == FIG6["C"]
    computed = rows_as_rfc(node_bifts(FIG6_EDGES)["C"], "C")
    assert computed[3] == [(0b1100, "B"), (0b0110, "F")]
    assert computed[2] == [(0b0110, "F")]


# --- §6.6 examples ---------------------------------------------------------------------


def test_example1_walk() -> None:
    bifts = node_bifts(FIG1_EDGES)
    hops, delivered = walk(bifts, "A", 0b0001)
    assert hops == [("A", "B", 0b0001), ("B", "C", 0b0001), ("C", "D", 0b0001)]
    assert delivered == ["D"]


def test_example1_step_by_step_at_a() -> None:
    res = forward(node_bifts(FIG1_EDGES)["A"], 0b0001, 64)
    # "Copy->BitString &= 0111 ... now 0001"; "Packet->BitString ... now 0000": one copy only
    assert res.copies == [("B", 0b0001, None)]
    assert res.local == 0 and res.drops == {}


def test_example1_at_bfer_d() -> None:
    res = forward(node_bifts(FIG1_EDGES)["D"], 0b0001, 62)
    assert res.local == 0b0001
    assert res.copies == []
    assert res.drops == {}


def test_example2_at_b() -> None:
    res = forward(node_bifts(FIG1_EDGES)["B"], 0b0101, 63)
    # bit 1 first: F-BM 0011 -> C gets 0001; then bit 3: F-BM 0100 -> E gets 0100
    assert res.copies == [("C", 0b0001, None), ("E", 0b0100, None)]
    assert res.ttl == 62


def test_example2_walk() -> None:
    hops, delivered = walk(node_bifts(FIG1_EDGES), "A", 0b0101)
    assert hops == [("A", "B", 0b0101), ("B", "C", 0b0001), ("B", "E", 0b0100), ("C", "D", 0b0001)]
    assert sorted(delivered) == ["D", "E"]


# --- §6.7 ECMP -------------------------------------------------------------------------


def test_ecmp_d_and_f_go_via_c() -> None:
    # §6.7.1: "any packet destined for both BFER-D and BFER-F will be sent via BFR-C"
    bift_b = node_bifts(FIG6_EDGES)["B"]
    for entropy in range(64):
        assert forward(bift_b, 0b0011, 64, entropy).copies == [("C", 0b0011, None)]


def test_ecmp_f_only_uses_both_paths_deterministically() -> None:
    bift_b = node_bifts(FIG6_EDGES)["B"]
    choice = {e: forward(bift_b, 0b0010, 64, e).copies for e in range(256)}
    assert {c[0][0] for c in choice.values()} == {"C", "E"}
    for e, copies in choice.items():
        assert forward(bift_b, 0b0010, 64, e).copies == copies  # same entropy, same path
        nbr, bits, _ = copies[0]
        assert bits == 0b0010 and len(copies) == 1
        assert nbr == ("C", "E")[ecmp_hash(e, bift_b.ecmp_seed) % 2]


def test_ecmp_f_and_e_via_e_carries_both() -> None:
    # bit 2 choosing E uses E's F-BM 0110, so bit 3 rides in the same copy
    bift_b = node_bifts(FIG6_EDGES)["B"]
    e_choice = next(e for e in range(256) if forward(bift_b, 0b0010, 64, e).copies[0][0] == "E")
    c_choice = next(e for e in range(256) if forward(bift_b, 0b0010, 64, e).copies[0][0] == "C")
    assert forward(bift_b, 0b0110, 64, e_choice).copies == [("E", 0b0110, None)]
    assert forward(bift_b, 0b0110, 64, c_choice).copies == [("C", 0b0010, None), ("E", 0b0100, None)]


@pytest.mark.parametrize("entropy", range(16))
def test_ecmp_walk_delivers_once(entropy: int) -> None:
    hops, delivered = walk(node_bifts(FIG6_EDGES), "A", 0b0111, entropy=entropy)
    assert sorted(delivered) == ["D", "E", "F"]
    assert len(hops) <= 6


# --- TTL (RFC 8296 §2.1.1.2) -----------------------------------------------------------


def test_impose_sends_policy_ttl() -> None:
    res = impose(node_bifts(FIG1_EDGES)["A"], 0b0001, 255)
    assert res.ttl == 255 and res.copies == [("B", 0b0001, None)]


def test_ttl_zero_is_expired_even_for_own_bit() -> None:
    res = forward(node_bifts(FIG1_EDGES)["D"], 0b0001, 0)
    assert res.local == 0
    assert res.copies == []
    assert res.drops == {"ttl-expired": 0b0001}


def test_ttl_one_own_bit_delivered_not_forwarded() -> None:
    bift_e = build_bifts({3: SELF, 1: ["B"], 2: ["B"], 4: ["B"]}, BSL)[0]
    res = forward(bift_e, 0b0100, 1)
    assert res.local == 0b0100 and res.copies == [] and res.drops == {}
    res = forward(bift_e, 0b0101, 1)
    assert res.local == 0b0100
    assert res.copies == []
    assert res.drops == {"ttl-expired": 0b0001}


def test_ttl_one_transit_expired() -> None:
    res = forward(node_bifts(FIG1_EDGES)["B"], 0b0101, 1)
    assert res.copies == [] and res.local == 0
    assert res.drops == {"ttl-expired": 0b0101}


@pytest.mark.parametrize("ttl", [2, 64, 255])
def test_ttl_decremented_per_copy(ttl: int) -> None:
    res = forward(node_bifts(FIG1_EDGES)["B"], 0b0101, ttl)
    assert len(res.copies) == 2
    assert res.ttl == ttl - 1


def test_walk_runs_out_of_ttl() -> None:
    # The BFIR sends with the TTL it imposes: A -> B -> C -> D needs 3 (D receives 1);
    # with 2, C receives 1 with a bit for another BFR and the packet expires there.
    bifts = node_bifts(FIG1_EDGES)
    assert walk(bifts, "A", 0b0001, ttl=3)[1] == ["D"]
    assert walk(bifts, "A", 0b0001, ttl=2)[1] == []
    assert forward(bifts["C"], 0b0001, 1).drops == {"ttl-expired": 0b0001}


# --- other drops and the own bit -------------------------------------------------------


def test_zero_bitstring_dropped() -> None:
    res = forward(node_bifts(FIG1_EDGES)["B"], 0, 64)
    assert res.drops == {"zero-bitstring": 0}
    assert res.copies == [] and res.local == 0


def test_null_neighbor_discards_only_its_bits() -> None:
    bift = build_bifts({1: ["C"], 2: NULL, 3: ["E"], 4: [], 5: SELF}, BSL)[0]
    res = forward(bift, 0b11111, 64)
    assert res.local == 0b10000
    assert res.copies == [("C", 0b0001, None), ("E", 0b0100, None)]
    assert res.drops == {"null-nbr": 0b1010}


def test_unassigned_bit_dropped_as_no_entry() -> None:
    res = forward(node_bifts(FIG1_EDGES)["B"], (1 << 63) | (1 << 9) | 0b0001, 64)
    assert res.copies == [("C", 0b0001, None)]
    assert res.drops == {"no-entry": (1 << 63) | (1 << 9)}
    assert set(res.drops) <= DROP_REASONS


def test_own_bit_cleared_from_every_copy() -> None:
    # Own bit 2 sits between bits 1 and 3.  Even with a (misconfigured) F-BM for C that
    # covers bit 2, no copy may carry it: RFC 8279 §6.8, no duplicates.
    entries: list = [None] * (BSL + 1)
    entries[1] = ((0b0111, "C", None),)
    entries[3] = ((0b0100, "E", None),)
    bift = Bift(0, BSL, 0, entries, own_mask=0b0010)
    res = forward(bift, 0b0111, 64)
    assert res.local == 0b0010
    assert res.copies == [("C", 0b0101, None)]
    assert all(not b & 0b0010 for _, b, _ in res.copies)


def test_bift_rejects_fbm_without_its_own_bit() -> None:
    entries: list = [None] * (BSL + 1)
    entries[1] = ((0b0110, "C", None),)
    with pytest.raises(ValueError, match="does not contain bit 1"):
        Bift(0, BSL, 0, entries)


def test_birt_with_two_selves_rejected() -> None:
    with pytest.raises(ValueError, match="two own"):
        build_bifts({1: SELF, 2: SELF}, BSL)


def test_multiple_sis() -> None:
    # BSL 64: BFR-id 65 is SI 1 bit 1; 130 is SI 2 bit 2 (own)
    bifts = build_bifts({1: ["X"], 65: ["Y"], 66: ["X"], 130: SELF}, BSL)
    assert sorted(bifts) == [0, 1, 2]
    assert bifts[2].own_mask == 0b10
    assert forward(bifts[1], 0b11, 5).copies == [("Y", 0b01, None), ("X", 0b10, None)]
    assert forward(bifts[2], 0b10, 5).local == 0b10
    assert forward(bifts[0], 0b1, 5).copies == [("X", 0b1, None)]


# --- labels: swap to the neighbor's BIFT-id (RFC 8296 §3) -----------------------------


def labelled_b() -> tuple[dict[int, Bift], dict[str, dict[tuple[int, int, int], int]]]:
    labels = {"A": 1001, "B": 1002, "C": 1003, "E": 1005}
    nbr_labels = {n: {(0, BSL, 0): lab} for n, lab in labels.items()}
    bifts = build_bifts(FIG2_BIRT_B, BSL, nbr_labels)
    return bifts_by_label(bifts, {(0, BSL, 0): labels["B"]}), nbr_labels


def test_copies_carry_neighbor_label() -> None:
    tables, _ = labelled_b()
    res = forward(tables[1002], 0b1101, 64)
    assert res.copies == [("C", 0b0001, 1003), ("E", 0b0100, 1005), ("A", 0b1000, 1001)]


def test_missing_neighbor_label_is_config_error() -> None:
    with pytest.raises(ValueError, match="'E'"):
        build_bifts(FIG2_BIRT_B, BSL, {"A": {(0, BSL, 0): 1}, "C": {(0, BSL, 0): 2}})
    with pytest.raises(ValueError, match="SI 0"):
        bifts_by_label(build_bifts(FIG2_BIRT_B, BSL), {(0, BSL, 1): 5})


def test_forward_packet_and_copies_bytes() -> None:
    from aidcnet.bier.forwarding import build_copies

    tables, _ = labelled_b()
    pkt = BierHeader(bift_id=1002, bitstring=0b0101, bsl=BSL, ttl=9, entropy=77, bfir_id=4, proto=4).encode()
    res = forward_packet(pkt + b"data", tables)
    assert res.proto == 4 and res.end == len(pkt) and res.bsl == BSL
    out = dict(build_copies(pkt + b"data", res))
    assert set(out) == {"C", "E"}
    for nbr, label, bits in (("C", 1003, 0b0001), ("E", 1005, 0b0100)):
        f = parse_fields(out[nbr], 0, BSL)
        assert (f[0], f[3], f[12], f[6], f[11]) == (label, 8, bits, 77, 4)
        assert out[nbr].endswith(b"data")


def test_forward_packet_unknown_label_and_errors() -> None:
    tables, _ = labelled_b()
    pkt = BierHeader(bift_id=999, bitstring=1, bsl=BSL).encode()
    assert forward_packet(pkt, tables).drops == {"unknown-bift-id": 0}
    wrong_bsl = BierHeader(bift_id=1002, bitstring=1, bsl=128).encode()
    with pytest.raises(BierDecodeError) as info:
        forward_packet(wrong_bsl, tables)
    assert info.value.reason == "bsl-mismatch"
    no_s = BierHeader(bift_id=1002, bitstring=1, bsl=BSL, s=0).encode()
    with pytest.raises(BierDecodeError) as info:
        forward_packet(no_s, tables)
    assert info.value.reason == "bad-s-bit"
