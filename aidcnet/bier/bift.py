"""Bit Index Forwarding Tables built from a Bit Index Routing Table (RFC 8279 §6.3–6.4, §6.7).

The BIRT maps each BFR-id of the sub-domain to the BFR-NBR(s) on the shortest path(s)
toward that BFER (RFC 8279 §6.3).  Here it is a mapping ``{bfr_id: next_hops}`` where
``next_hops`` is

* a sequence of neighbor names (several when the routing underlay offers equal-cost
  paths, RFC 8279 §6.2), or
* :data:`SELF` for the BFR's own BFR-id, or
* :data:`NULL` (or an empty sequence) for an unreachable BFER: RFC 8279 §6.5 Figure 4
  notes that such bits map to the null BFR-NBR, whose copies are discarded.

The BIFT (RFC 8279 §6.4) is kept per SI as a list indexed by bit position ``k``
(1..BSL).  Each entry is a tuple of alternatives ``(F-BM, BFR-NBR, out_label)``: one
alternative normally, several for ECMP (RFC 8279 §6.7.1, Figure 6).  The F-BM of a
``<SI, BFR-NBR>`` pair is the OR of every BFR-id of that SI that has BFR-NBR among its
next hops, which reproduces Figure 6 (BFR-B entry 2: ``0011 C`` or ``0110 E``).

``out_label`` is the BIER-MPLS label (BIFT-id) the neighbor advertised for the same
``<sub-domain, BSL, SI>`` (RFC 8296 §2.1.1.1, §3: "swap ... with the BIER-MPLS label,
advertised by that neighbor").  Labels come from configuration as
``{neighbor: {(sd, bsl, si): label}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aidcnet.bier.bitstring import bfr_id_to_si_bit, si_bit_to_bfr_id

SELF = "<self>"
"""BIRT next hop of the BFR's own BFR-id (RFC 8279 §6.5 step 4)."""

NULL = "<null>"
"""BIRT next hop of an unreachable BFER: the null BFR-NBR (RFC 8279 §6.5 step 7)."""

LabelKey = tuple[int, int, int]
"""``(sub-domain, BSL, SI)``: what a BIER-MPLS label stands for (RFC 8296 §2.1.1.1)."""

Alternative = tuple[int, str | None, int | None]
"""``(F-BM, BFR-NBR or None for null, label to swap to or None when labels are not used)``."""

Birt = Mapping[int, Sequence[str] | str]


class Bift:
    """The BIFT of one ``<sub-domain, BSL, SI>`` at one BFR (RFC 8279 §6.4).

    ``entries[k]`` is the tuple of alternatives for bit position ``k`` or None when the
    BIFT has no row for it; ``entries[0]`` is unused so that ``k`` indexes directly.
    ``own_mask`` has the bit of this BFR's own BFR-id when it falls in this SI.
    """

    __slots__ = ("bsl", "ecmp_seed", "entries", "mask", "own_mask", "sd", "si")

    def __init__(
        self,
        sd: int,
        bsl: int,
        si: int,
        entries: list[tuple[Alternative, ...] | None],
        own_mask: int = 0,
        ecmp_seed: int = 0,
    ) -> None:
        if len(entries) != bsl + 1:
            raise ValueError(f"BIFT SI {si}: need {bsl + 1} entries (index 0 unused), got {len(entries)}")
        for k, alts in enumerate(entries):
            if alts is None:
                continue
            if k == 0 or not alts:
                raise ValueError(f"BIFT SI {si}: bad entry at bit {k}")
            for fbm, _nbr, _label in alts:
                # An F-BM without its own bit would never clear that bit and the §6.5 loop
                # would not terminate; reject the table instead of guarding every packet.
                if not (fbm >> (k - 1)) & 1 or fbm >> bsl:
                    raise ValueError(f"BIFT SI {si}: F-BM 0x{fbm:x} of bit {k} does not contain bit {k}")
        if own_mask & (own_mask - 1) or own_mask >> bsl:
            raise ValueError(f"BIFT SI {si}: own_mask 0x{own_mask:x} must be one bit within BSL")
        self.sd = sd
        self.bsl = bsl
        self.si = si
        self.entries = entries
        self.own_mask = own_mask
        self.mask = (1 << bsl) - 1
        self.ecmp_seed = ecmp_seed

    def rows(self) -> list[tuple[int, list[tuple[int, str | None]]]]:
        """``[(bfr_id, [(F-BM, BFR-NBR), ...]), ...]`` like RFC 8279 Figures 3, 5 and 6."""
        out = []
        for k in range(1, self.bsl + 1):
            bfr_id = si_bit_to_bfr_id(self.si, k, self.bsl)
            if (self.own_mask >> (k - 1)) & 1:
                out.append((bfr_id, [(self.own_mask, SELF)]))
            elif self.entries[k] is not None:
                out.append((bfr_id, [(fbm, nbr) for fbm, nbr, _ in self.entries[k]]))
        return out

    def __repr__(self) -> str:
        return f"Bift(sd={self.sd}, bsl={self.bsl}, si={self.si}, rows={self.rows()!r})"


def _normalize(bfr_id: int, next_hops: Sequence[str] | str) -> tuple[str, ...] | None:
    """Return the neighbor tuple, () for null, None for self."""
    if isinstance(next_hops, str):
        next_hops = (next_hops,)
    if SELF in next_hops:
        if len(next_hops) != 1:
            raise ValueError(f"BIRT BFR-id {bfr_id}: {SELF!r} cannot be combined with other next hops")
        return None
    if NULL in next_hops:
        if len(next_hops) != 1:
            raise ValueError(f"BIRT BFR-id {bfr_id}: {NULL!r} cannot be combined with other next hops")
        return ()
    # dict.fromkeys: drop duplicates but keep the configured order, which ECMP indexes.
    return tuple(dict.fromkeys(next_hops))


def birt_around(birt: Mapping[int, Sequence[str]], unusable: set[str]) -> dict[int, list[str]]:
    """The BIRT with the neighbors in ``unusable`` (their link down) left out of every row that has another
    next hop: a static BIRT's equal-cost alternatives (RFC 8279 §6.7) take the traffic of a dead link at
    once, without waiting for a routing protocol. A row whose every next hop is unusable keeps them: there
    is no way around at this BFR, and its bits are lost there, as they were."""
    out = {}
    for bfr_id, hops in birt.items():
        alive = [hop for hop in hops if hop not in unusable]
        out[bfr_id] = alive or list(hops)
    return out


def build_bifts(
    birt: Birt,
    bsl: int,
    nbr_labels: Mapping[str, Mapping[LabelKey, int]] | None = None,
    sd: int = 0,
    ecmp_seed: int = 0,
) -> dict[int, Bift]:
    """Derive one BIFT per SI from a BIRT (RFC 8279 §6.4, ECMP as §6.7.1).

    The BFR's own BFR-id is the (single) BIRT row whose next hop is :data:`SELF`.  A BFR
    without a BFR-id (a pure transit BFR, RFC 8279 §2) simply has no such row.  The SI of
    the own BFR-id always gets a BIFT, even if it has no other rows, so that packets for
    it can be delivered.  With ``nbr_labels`` every neighbor must have a label for each
    ``(sd, bsl, si)`` it is used in; a missing one is a configuration error (ValueError).
    """
    own_id: int | None = None
    per_id: dict[int, tuple[str, ...]] = {}
    fbm: dict[tuple[int, str | None], int] = {}
    sis: set[int] = set()
    for bfr_id, next_hops in birt.items():
        si, bit = bfr_id_to_si_bit(bfr_id, bsl)
        sis.add(si)
        nbrs = _normalize(bfr_id, next_hops)
        if nbrs is None:
            if own_id is not None:
                raise ValueError(f"BIRT has two own BFR-ids ({own_id} and {bfr_id} are both {SELF!r})")
            own_id = bfr_id
            continue
        per_id[bfr_id] = nbrs
        keys: tuple[str | None, ...] = nbrs if nbrs else (None,)
        for nbr in keys:
            fbm[(si, nbr)] = fbm.get((si, nbr), 0) | (1 << (bit - 1))

    def label_for(nbr: str | None, si: int) -> int | None:
        if nbr is None or nbr_labels is None:
            return None
        try:
            return nbr_labels[nbr][(sd, bsl, si)]
        except KeyError:
            raise ValueError(
                f"no BIER-MPLS label from neighbor {nbr!r} for (sub-domain {sd}, BSL {bsl}, SI {si})"
            ) from None

    tables: dict[int, list[tuple[Alternative, ...] | None]] = {si: [None] * (bsl + 1) for si in sis}
    for bfr_id, nbrs in per_id.items():
        si, bit = bfr_id_to_si_bit(bfr_id, bsl)
        keys = nbrs if nbrs else (None,)
        tables[si][bit] = tuple((fbm[(si, nbr)], nbr, label_for(nbr, si)) for nbr in keys)

    own_si, own_bit = bfr_id_to_si_bit(own_id, bsl) if own_id is not None else (-1, 0)
    if own_id is not None and own_si not in tables:
        tables[own_si] = [None] * (bsl + 1)
    return {
        si: Bift(sd, bsl, si, entries, (1 << (own_bit - 1)) if si == own_si else 0, ecmp_seed)
        for si, entries in sorted(tables.items())
    }


def bifts_by_label(bifts: Mapping[int, Bift], local_labels: Mapping[LabelKey, int]) -> dict[int, Bift]:
    """Index BIFTs by the BIER-MPLS label this BFR advertised for their ``(sd, bsl, si)``.

    The incoming label identifies sub-domain, BSL and SI (RFC 8296 §3), so this is the
    receiver's first lookup.  Every BIFT needs a label; labels must be distinct.
    """
    out: dict[int, Bift] = {}
    for bift in bifts.values():
        key = (bift.sd, bift.bsl, bift.si)
        if key not in local_labels:
            raise ValueError(f"no local BIER-MPLS label for (sub-domain {key[0]}, BSL {key[1]}, SI {key[2]})")
        label = local_labels[key]
        if label in out:
            raise ValueError(f"BIER-MPLS label {label} assigned to two BIFTs")
        out[label] = bift
    return out
