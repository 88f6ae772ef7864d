"""Virtual Aggregation Tree bitmap logic (seed draft 002, §2.1 and Figure 1; §2.3 encoding).

Every non-leaf VAT node holds, per job, an A-BM: the BIER BitString (RFC 8279 §3, bit 1 = least
significant) of the workers below it.  Every aggregation packet carries a P-BM: the workers whose
arrays it contains.  A switch terminates a packet when ``A-BM & P-BM != 0`` and otherwise forwards it
toward the root; once the OR of the merged P-BMs equals the A-BM the slot is complete, and the
aggregate goes to the parent with ``P-BM = A-BM``; at the root it is multicast by BIER with
``BitString = A-BM``.  This module decides; the aggregator does the arithmetic and the daemon the I/O.

Rules the draft leaves open, decided here (SwitchML/ATP-style loss handling):

* a P-BM with bits both inside and outside the A-BM is dropped (``pbm-outside-abm``): it could never
  make ``OR == A-BM`` hold, so terminating it would wedge the slot;
* a P-BM whose bits are all merged already is a duplicate and is not added twice; if the slot is
  complete and the packet has the R flag, the result is sent again (``resend-result``): up to the
  parent with ``P-BM = A-BM``, or at the root by BIER to the requesting bits only;
* a P-BM overlapping the merged bits only in part (a tree changed mid-chunk) cannot be subtracted
  and is dropped (``partial-overlap``);
* at the root nothing lies further up, so a packet failing the AND test is dropped (``not-in-vat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from aidcnet.ina.header import InaHeader


class Action(StrEnum):
    FORWARD = "forward"  # not for this VAT node: continue toward the root unchanged
    ABSORB = "absorb"  # merged here; the slot waits for more P-BMs
    TO_PARENT = "to-parent"  # send the aggregate to the parent VAT node, P-BM = A-BM
    DISSEMINATE = "disseminate"  # root: BIER-multicast the result with the given BitString
    DROP = "drop"


# Counter keys (Decision.reason).  Drops are the ones an operator looks for.
FORWARDED = "forwarded"
AGGREGATED = "aggregated"
COMPLETED = "completed"
RESEND_RESULT = "resend-result"
EMPTY_PBM = "empty-pbm"
PBM_OUTSIDE_ABM = "pbm-outside-abm"
DUPLICATE = "duplicate"
PARTIAL_OVERLAP = "partial-overlap"
NOT_IN_VAT = "not-in-vat"


@dataclass(frozen=True, slots=True)
class VatNode:
    """One job's VAT node on one switch: the A-BM lives in BitString ``si`` of length ``bsl``."""

    abm: int
    si: int
    bsl: int
    root: bool
    parent: str | None = None

    def __post_init__(self) -> None:
        if self.abm <= 0 or self.abm >> self.bsl:
            raise ValueError(f"abm {self.abm:#x} must be non-empty and fit {self.bsl} bits")
        if self.root == (self.parent is not None):
            raise ValueError("a root has no parent and every other VAT node has one")


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a packet.  For DISSEMINATE the daemon wraps ``packet`` in BIER with
    ``(si, bsl, bitstring)``; for TO_PARENT it sends ``packet`` (whose P-BM is ``pbm``) to ``parent``.
    ``packet`` is filled in by the aggregator, which owns the payload; :func:`step` leaves it None."""

    action: Action
    reason: str
    parent: str | None = None
    pbm: int = 0
    si: int = 0
    bsl: int = 0
    bitstring: int = 0
    packet: InaHeader | None = None


def and_test(abm: int, pbm: int) -> bool:
    """The draft's test: does this packet carry any worker this node aggregates?"""
    return (abm & pbm) != 0


def is_complete(abm: int, merged: int) -> bool:
    """The draft's completion rule: OR of the merged P-BMs equals the A-BM."""
    return merged == abm


def completion(node: VatNode) -> Decision:
    if node.root:
        return Decision(Action.DISSEMINATE, COMPLETED, pbm=node.abm, si=node.si, bsl=node.bsl,
                        bitstring=node.abm)
    return Decision(Action.TO_PARENT, COMPLETED, parent=node.parent, pbm=node.abm, si=node.si, bsl=node.bsl)


def resend(node: VatNode, pbm: int) -> Decision:
    """Answer to a retransmit at a complete slot: the bits in ``pbm`` are still waiting for a result."""
    if node.root:
        # Only the requesters lost the result; re-multicasting to the whole A-BM would be wasteful.
        return Decision(Action.DISSEMINATE, RESEND_RESULT, pbm=node.abm, si=node.si, bsl=node.bsl,
                        bitstring=pbm & node.abm)
    return Decision(Action.TO_PARENT, RESEND_RESULT, parent=node.parent, pbm=node.abm, si=node.si,
                    bsl=node.bsl)


def step(node: VatNode, merged: int, pbm: int, si: int, retransmit: bool = False) -> tuple[Decision, int]:
    """Decide for one packet at ``node`` given the slot's merged bits; return the new merged bits.

    The caller merges the payload exactly when the action is ABSORB, TO_PARENT or DISSEMINATE with
    reason ``completed`` (the packet brought new bits).
    """
    if pbm == 0:
        return Decision(Action.DROP, EMPTY_PBM), merged
    # Bits of another SI name other BFR-ids (RFC 8279 §3), so the AND with our A-BM is empty.
    if si != node.si or not and_test(node.abm, pbm):
        if node.root:
            return Decision(Action.DROP, NOT_IN_VAT), merged
        return Decision(Action.FORWARD, FORWARDED), merged
    if pbm & ~node.abm:
        return Decision(Action.DROP, PBM_OUTSIDE_ABM), merged
    overlap = merged & pbm
    if overlap == pbm:
        if retransmit and is_complete(node.abm, merged):
            return resend(node, pbm), merged
        return Decision(Action.DROP, DUPLICATE), merged
    if overlap:
        return Decision(Action.DROP, PARTIAL_OVERLAP), merged
    merged |= pbm
    if is_complete(node.abm, merged):
        return completion(node), merged
    return Decision(Action.ABSORB, AGGREGATED), merged


def from_draft_notation(text: str) -> int:
    """Parse the draft's printed bitmaps, which list w1 first: ``"11110000"`` is bits 1..4 = 0x0F."""
    text = text.strip("[]")
    if not text or set(text) - {"0", "1"}:
        raise ValueError(f"not a bitmap of 0 and 1: {text!r}")
    return sum(1 << i for i, ch in enumerate(text) if ch == "1")


def to_draft_notation(bits: int, width: int) -> str:
    """Inverse of :func:`from_draft_notation`: character i (0-based) is bit i+1."""
    if bits < 0 or bits >> width:
        raise ValueError(f"{bits:#x} does not fit {width} bits")
    return "".join("1" if bits >> i & 1 else "0" for i in range(width))
