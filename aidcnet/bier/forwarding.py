"""The BIER forwarding decision (RFC 8279 §6.5, §6.7.1; TTL per RFC 8296 §2.1.1.2).

:func:`forward` works on ints only: it takes a BIFT, the BitString, the incoming TTL
and the entropy, and returns which bit is delivered locally, which copies go to which
BFR-NBR with which BitString and label, and which bits were dropped and why.
:func:`forward_packet` adds the header parse and the label lookup for a daemon, and
:func:`build_copies` turns a decision into rewritten packets.

RFC 8279 §6.5, with the loop on the lowest set bit::

    2. BitString == 0         -> done (discard if it arrived that way)
    3. k = lowest set bit
    4. k is our own BFR-id    -> copy to the multicast flow overlay, clear k, goto 2
    5-7. (F-BM, BFR-NBR) = BIFT[k]; copy with BitString & F-BM to BFR-NBR (null: discard)
    8. BitString &= ~F-BM, goto 2

Step 4 is applied before the loop: the own bit is lower or higher than other bits, but
either way it is cleared before any copy is made from the remaining BitString, so no
copy carries it (RFC 8279 §6.8) even if a neighbor's F-BM wrongly contains it.
"""

from __future__ import annotations

from collections.abc import Mapping

from aidcnet.bier.bift import Bift
from aidcnet.bier.header import BierDecodeError, make_copy, parse_fields, peek_bift_id

DROP_REASONS: frozenset[str] = frozenset(
    {
        "zero-bitstring",  # RFC 8279 §6.5 step 2: BitString all zero on arrival
        "ttl-expired",  # RFC 8296 §2.1.1.2: incoming TTL 0, or TTL 1 with bits for other BFERs
        "null-nbr",  # RFC 8279 §6.5 step 7: bits whose BFR-NBR is null (unreachable BFER)
        "no-entry",  # bit with no BIFT row at all (unassigned BFR-id): treated as null
        "unknown-bift-id",  # label not advertised by this BFR (forward_packet only)
    }
)

_GOLDEN = 0x9E3779B1


class ForwardResult:
    """Outcome of one forwarding decision.

    ``local``: the own bit if the packet is delivered to the multicast flow overlay, else 0.
    ``copies``: ``[(BFR-NBR, BitString, out_label), ...]``, at most one per neighbor.
    ``drops``: ``{reason: BitString of the BFERs dropped for that reason}`` (the BitString
    is 0 for reasons that concern the whole packet, e.g. ``zero-bitstring``).
    ``ttl``: the TTL every copy carries (incoming TTL - 1).
    ``proto``/``end``/``bsl`` are filled by :func:`forward_packet` for local delivery:
    the Proto field, the payload offset and the BitString length.
    """

    __slots__ = ("bsl", "copies", "drops", "end", "local", "proto", "ttl")

    def __init__(self) -> None:
        self.local = 0
        self.copies: list[tuple[str, int, int | None]] = []
        self.drops: dict[str, int] = {}
        self.ttl = 0
        self.proto = 0
        self.end = 0
        self.bsl = 0

    def __repr__(self) -> str:
        return (
            f"ForwardResult(local={self.local:#x}, copies={self.copies!r}, "
            f"drops={self.drops!r}, ttl={self.ttl})"
        )


def ecmp_hash(entropy: int, seed: int = 0) -> int:
    """Hash used to pick among ECMP alternatives (RFC 8279 §6.7, RFC 8296 §2.1.2 Entropy).

    Same entropy (and seed) gives the same choice, as RFC 8296 requires.  The per-BFR
    seed keeps consecutive BFRs from making correlated choices (hash polarization).
    """
    return (((entropy ^ seed) * _GOLDEN) & 0xFFFFFFFF) >> 8


def forward(bift: Bift, bits: int, ttl: int, entropy: int = 0) -> ForwardResult:
    """RFC 8279 §6.5 forwarding of one packet with BitString ``bits`` through ``bift``.

    TTL (RFC 8296 §2.1.1.2): incoming TTL 0 is expired (nothing delivered or sent).
    With incoming TTL >= 1 the own bit is delivered; with TTL 1 every other bit is
    expired and nothing is forwarded.  Copies carry incoming TTL - 1.
    """
    res = ForwardResult()
    drops = res.drops
    # Bits beyond the BSL cannot come from a decoded header; mask instead of trusting callers.
    bits &= bift.mask
    if ttl <= 0:
        drops["ttl-expired"] = bits
        return res
    if not bits:
        drops["zero-bitstring"] = 0
        return res
    own = bits & bift.own_mask
    if own:
        res.local = own
        bits ^= own
        if not bits:
            return res
    if ttl == 1:
        drops["ttl-expired"] = bits
        return res
    res.ttl = ttl - 1
    entries = bift.entries
    copies = res.copies
    h = -1
    while bits:
        low = bits & -bits
        alts = entries[low.bit_length()]
        if alts is None:
            drops["no-entry"] = drops.get("no-entry", 0) | low
            bits ^= low
            continue
        if len(alts) == 1:
            fbm, nbr, label = alts[0]
        else:
            if h < 0:
                h = ecmp_hash(entropy, bift.ecmp_seed)
            fbm, nbr, label = alts[h % len(alts)]
        if nbr is None:
            drops["null-nbr"] = drops.get("null-nbr", 0) | (bits & fbm)
        else:
            copies.append((nbr, bits & fbm, label))
        bits &= ~fbm
    return res


def impose(bift: Bift, bits: int, ttl: int, entropy: int = 0) -> ForwardResult:
    """Forwarding at the BFIR for a packet it encapsulates (RFC 8296 §3 step 6).

    The BFIR sets the TTL of the copies "according to policy" instead of decrementing
    an incoming one, so the copies carry ``ttl`` itself.  Its own bit, if present, is
    delivered locally as at any BFER.
    """
    return forward(bift, bits, ttl + 1, entropy)


def forward_packet(
    buf: bytes | bytearray | memoryview, tables: Mapping[int, Bift], offset: int = 0
) -> ForwardResult:
    """Parse the MPLS-BIER packet at ``offset``, look up its BIFT by label, forward it.

    Raises :class:`aidcnet.bier.header.BierDecodeError` for malformed headers, including
    S=0 (our links carry exactly one label entry, RFC 8296 §2.1.1.2).  A label this BFR
    did not advertise is the drop reason ``unknown-bift-id``: the bytes are well formed.
    """
    bift = tables.get(peek_bift_id(buf, offset))
    if bift is None:
        res = ForwardResult()
        res.drops["unknown-bift-id"] = 0
        return res
    fields = parse_fields(buf, offset, bift.bsl)
    if not fields[2]:
        raise BierDecodeError("bad-s-bit", "BIER label entry has S=0")
    res = forward(bift, fields[12], fields[3], fields[6])
    res.proto = fields[10]
    res.end = fields[13]
    res.bsl = bift.bsl
    return res


def build_copies(
    pkt: bytes | bytearray | memoryview, res: ForwardResult, offset: int = 0
) -> list[tuple[str, bytearray]]:
    """Rewritten packets for the copies of ``res`` (label swapped, TTL, BitString; RFC 8296 §3).

    Needs ``res`` from :func:`forward_packet` (for the BSL) and labels in the BIFT.
    """
    out = []
    for nbr, bits, label in res.copies:
        if label is None:
            raise ValueError(f"no out label for neighbor {nbr!r}: build the BIFT with nbr_labels")
        out.append((nbr, make_copy(pkt, offset, label, res.ttl, bits, res.bsl)))
    return out
