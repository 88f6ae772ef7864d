"""VAT bitmap rules of seed draft 002, with Figure 1 as the vector."""

from __future__ import annotations

import pytest

from aidcnet.bier.bitstring import bitstrings_from_ids, encode_bitstring, ids_from_bitstring
from aidcnet.ina.vat import (
    Action,
    Decision,
    VatNode,
    and_test,
    from_draft_notation,
    is_complete,
    step,
    to_draft_notation,
)

BSL = 64

# Figure 1(a), exactly as the draft prints them (leftmost character = w1).
FIG1_PRINTED = {"s1": "[11000000]", "s7": "[00110000]", "s6": "[11110000]"}
FIG1_IDS = {"s1": [1, 2], "s7": [3, 4], "s6": [1, 2, 3, 4]}
FIG1_NODES = {
    "s1": VatNode(abm=0b0011, si=0, bsl=BSL, root=False, parent="s6"),
    "s7": VatNode(abm=0b1100, si=0, bsl=BSL, root=False, parent="s6"),
    "s6": VatNode(abm=0b1111, si=0, bsl=BSL, root=True),
}
# Physical paths toward the VAT root in Figure 1(a): s5 and s2 hold no VAT node for the job, and
# s1's aggregate climbs through s7, which must forward it (its A-BM does not cover w1/w2).
FIG1_PATH_TO_ROOT = {
    "w1": ["s1"],
    "w2": ["s1"],
    "w3": ["s2", "s5", "s7"],
    "w4": ["s2", "s5", "s7"],
    "s1": ["s5", "s7", "s6"],
    "s7": ["s6"],
}


@pytest.mark.parametrize("switch", sorted(FIG1_PRINTED))
def test_figure1_printed_bitmaps_are_bier_bitstrings(switch: str) -> None:
    bits = from_draft_notation(FIG1_PRINTED[switch])
    assert bits == bitstrings_from_ids(FIG1_IDS[switch], BSL)[0] == FIG1_NODES[switch].abm
    assert to_draft_notation(bits, 8) == FIG1_PRINTED[switch].strip("[]")
    assert ids_from_bitstring(0, bits, BSL) == FIG1_IDS[switch]


def test_figure1_root_abm_on_the_wire() -> None:
    # The draft's [11110000] is bits 1..4, which RFC 8296 puts in the low nibble of the last octet.
    assert encode_bitstring(from_draft_notation("11110000"), BSL) == bytes(7) + b"\x0f"
    assert from_draft_notation("11110000") == 0x0F
    assert from_draft_notation("00000001") == 0x80


@pytest.mark.parametrize("text", ["", "[]", "1102", "abc"])
def test_draft_notation_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        from_draft_notation(text)


def test_to_draft_notation_rejects_overflow() -> None:
    with pytest.raises(ValueError):
        to_draft_notation(0x100, 8)


def test_and_test_vectors() -> None:
    s1, s7, s6 = (FIG1_NODES[n].abm for n in ("s1", "s7", "s6"))
    assert and_test(s1, 0b0001) and and_test(s1, 0b0010)
    assert not and_test(s1, 0b0100) and not and_test(s1, 0b1100)
    assert not and_test(s7, s1)  # s1's aggregate passes s7 untouched
    assert and_test(s6, s1) and and_test(s6, s7)
    assert is_complete(s6, s1 | s7) and not is_complete(s6, s1)


def test_figure1_job1_simulated() -> None:
    """w1..w4 send; s1 and s7 aggregate; s7 forwards s1's aggregate; s6 completes with BitString = A-BM."""
    merged = {name: 0 for name in FIG1_NODES}
    log: list[tuple[str, Action, int]] = []
    emitted: list[Decision] = []

    def send(origin: str, pbm: int) -> None:
        for hop in FIG1_PATH_TO_ROOT[origin]:
            node = FIG1_NODES.get(hop)
            if node is None:
                continue  # a switch without a VAT node for the job is plain transit
            decision, merged[hop] = step(node, merged[hop], pbm, si=0)
            log.append((hop, decision.action, pbm))
            if decision.action is Action.FORWARD:
                continue
            if decision.action is Action.TO_PARENT:
                assert decision.parent == node.parent
                send(hop, decision.pbm)
            elif decision.action is Action.DISSEMINATE:
                emitted.append(decision)
            return
        raise AssertionError(f"packet from {origin} fell off the path")

    for bit, worker in enumerate(["w1", "w2", "w3", "w4"]):
        send(worker, 1 << bit)

    assert log == [
        ("s1", Action.ABSORB, 0b0001),
        ("s1", Action.TO_PARENT, 0b0010),
        ("s7", Action.FORWARD, 0b0011),
        ("s6", Action.ABSORB, 0b0011),
        ("s7", Action.ABSORB, 0b0100),
        ("s7", Action.TO_PARENT, 0b1000),
        ("s6", Action.DISSEMINATE, 0b1100),
    ]
    assert merged == {"s1": 0b0011, "s7": 0b1100, "s6": 0b1111}
    (result,) = emitted
    assert result.reason == "completed"
    assert (result.si, result.bsl, result.bitstring) == (0, BSL, FIG1_NODES["s6"].abm)
    assert ids_from_bitstring(result.si, result.bitstring, result.bsl) == [1, 2, 3, 4]


def test_completion_sends_abm_as_pbm_to_parent() -> None:
    decision, merged = step(FIG1_NODES["s7"], 0b0100, 0b1000, si=0)
    assert decision.action is Action.TO_PARENT
    assert (decision.parent, decision.pbm, decision.reason) == ("s6", 0b1100, "completed")
    assert merged == 0b1100


def test_single_worker_job_completes_on_first_packet() -> None:
    node = VatNode(abm=0b100, si=0, bsl=BSL, root=True)
    decision, merged = step(node, 0, 0b100, si=0)
    assert decision.action is Action.DISSEMINATE and decision.bitstring == 0b100 and merged == 0b100


# --- rules the draft leaves open ----------------------------------------------------------------------


def test_empty_pbm_is_dropped() -> None:
    decision, merged = step(FIG1_NODES["s1"], 0, 0, si=0)
    assert (decision.action, decision.reason, merged) == (Action.DROP, "empty-pbm", 0)


def test_pbm_straddling_the_abm_is_dropped() -> None:
    decision, merged = step(FIG1_NODES["s1"], 0, 0b0110, si=0)
    assert (decision.action, decision.reason, merged) == (Action.DROP, "pbm-outside-abm", 0)


def test_other_si_is_forwarded_even_with_matching_bits() -> None:
    # Bit 1 of SI 1 is BFR-id 65, not w1.
    decision, merged = step(FIG1_NODES["s1"], 0, 0b0001, si=1)
    assert (decision.action, decision.reason, merged) == (Action.FORWARD, "forwarded", 0)


def test_root_drops_what_it_does_not_aggregate() -> None:
    decision, _ = step(FIG1_NODES["s6"], 0, 0b1_0000, si=0)
    assert (decision.action, decision.reason) == (Action.DROP, "not-in-vat")
    decision, _ = step(FIG1_NODES["s6"], 0, 0b0001, si=3)
    assert (decision.action, decision.reason) == (Action.DROP, "not-in-vat")


def test_duplicate_is_not_merged_twice() -> None:
    decision, merged = step(FIG1_NODES["s6"], 0b0011, 0b0011, si=0)
    assert (decision.action, decision.reason, merged) == (Action.DROP, "duplicate", 0b0011)
    # A retransmit of bits already merged into an unfinished slot is still only a duplicate.
    decision, merged = step(FIG1_NODES["s6"], 0b0011, 0b0001, si=0, retransmit=True)
    assert (decision.action, decision.reason, merged) == (Action.DROP, "duplicate", 0b0011)


def test_partial_overlap_is_dropped() -> None:
    decision, merged = step(FIG1_NODES["s6"], 0b0001, 0b0011, si=0)
    assert (decision.action, decision.reason, merged) == (Action.DROP, "partial-overlap", 0b0001)


def test_duplicate_at_complete_slot_without_retransmit_flag_is_dropped() -> None:
    decision, _ = step(FIG1_NODES["s1"], 0b0011, 0b0001, si=0)
    assert (decision.action, decision.reason) == (Action.DROP, "duplicate")


def test_retransmit_at_complete_leaf_switch_resends_to_parent() -> None:
    decision, merged = step(FIG1_NODES["s1"], 0b0011, 0b0001, si=0, retransmit=True)
    assert decision.action is Action.TO_PARENT
    assert (decision.reason, decision.parent, decision.pbm, merged) == ("resend-result", "s6", 0b0011, 0b0011)


def test_retransmit_at_complete_root_resends_to_requesters_only() -> None:
    decision, merged = step(FIG1_NODES["s6"], 0b1111, 0b1100, si=0, retransmit=True)
    assert decision.action is Action.DISSEMINATE
    assert decision.reason == "resend-result"
    assert (decision.bitstring, decision.pbm, merged) == (0b1100, 0b1111, 0b1111)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"abm": 0, "si": 0, "bsl": 64, "root": True},
        {"abm": 1 << 64, "si": 0, "bsl": 64, "root": True},
        {"abm": 1, "si": 0, "bsl": 64, "root": True, "parent": "s9"},
        {"abm": 1, "si": 0, "bsl": 64, "root": False},
    ],
)
def test_vat_node_rejects_inconsistent_roles(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        VatNode(**kwargs)  # type: ignore[arg-type]
