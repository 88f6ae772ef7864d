"""BIRT from BGP (RFC 9793 §4 with RFC 8279 §6.3): BIER follows the BGP best paths to BFR prefixes.

Every BFR originates its loopback (the BFR-prefix) with the BIER path attribute: one BIER TLV for its
sub-domain carrying its BFR-ID, and an MPLS Encapsulation sub-TLV with the label range of its BIFT-ids
(one label per SI, ``label_base + SI``; RFC 8296 §2.1.1.1). A BFR that learns such a route maps the
advertised BFR-ID to the route's BGP next hops: those are the BFR-NBRs toward that BFER (several with
multipath, which the BIFT spreads as ECMP, RFC 8279 §6.7.1). When the best paths change (a link or a
spine fails) the BIRT is recomputed from the new paths and so re-converges with unicast.

What this module does *not* take from the attribute: the label to swap to. Our labels are allocated by
the lab plan and every BFR's node file lists each neighbour's ``label_base``; the received label range is
that of the *originator*, which is only the right one when the originator is the BFR-NBR itself. A BGP
next hop that is not a BFR neighbour (no entry in ``bier.neighbors``) cannot be a BFR-NBR: that route
gives no BIRT row (RFC 9793 would tunnel through such a hop; our labs have none).

Pure: the agent turns its RIB into ``{prefix: BgpPath}`` (:func:`bgp_paths`) and builds the BIFTs with
:func:`aidcnet.bier.bift.build_bifts` from the BIRT returned here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aidcnet.bgp.bier_attribute import BierAttribute, BierTlv, MplsEncapsulationSubTlv
from aidcnet.bgp.rib import prefix_key

if TYPE_CHECKING:
    from aidcnet.config import Bier

__all__ = ["BgpBirt", "BgpPath", "bgp_paths", "birt_from_bgp", "loopback_attribute"]


def loopback_attribute(bier: Bier) -> BierAttribute:
    """The BIER attribute a BFR attaches to its own loopback route (RFC 9793 §2): its BFR-ID in its
    sub-domain and its label range, one label per SI of the sub-domain."""
    return BierAttribute(
        (
            BierTlv(
                sub_domain_id=bier.sub_domain,
                bfr_id=bier.bfr_id,
                sub_tlvs=(MplsEncapsulationSubTlv(bier.si_count, bier.bsl, bier.label_base),),
            ),
        )
    )


@dataclass(frozen=True)
class BgpPath:
    """The best path(s) to one prefix: BGP next-hop addresses (multipath) and the BIER attribute."""

    nexthops: tuple[str, ...]
    bier: BierAttribute | None = None


def bgp_paths(
    view: Mapping[str, BgpPath | tuple[Sequence[str], str | None]],
) -> tuple[dict[str, BgpPath], list[str]]:
    """Normalize the agent's RIB view (:func:`aidcnet.bgp.rib.bier_view`: ``{prefix: (next hops,
    attribute-41 value hex or None)}``) into :class:`BgpPath`; BgpPath values pass through.

    A malformed attribute spoils only its own route (RFC 7606's spirit: the route is kept, as plain unicast,
    without a BIER row) and is reported in the second element."""
    out: dict[str, BgpPath] = {}
    problems: list[str] = []
    for prefix, item in view.items():
        if isinstance(item, BgpPath):
            out[prefix] = item
            continue
        nexthops, attr_hex = item
        text = attr_hex[2:] if attr_hex and attr_hex.lower().startswith("0x") else attr_hex
        attr = None
        if text:
            try:
                attr = BierAttribute.decode(bytes.fromhex(text))
            except ValueError as exc:  # BierAttributeDecodeError or bad hex
                problems.append(f"{prefix}: malformed BIER attribute ignored: {exc}")
        out[prefix] = BgpPath(tuple(nexthops), attr)
    return out, problems


@dataclass
class BgpBirt:
    """``birt``: ``{BFR-id: sorted BFR-NBR names}``; ``prefixes``: the BFR-prefix each BFR-id came from;
    ``problems``: what was ignored and why (duplicate BFR-IDs, next hops that are not BFR neighbours)."""

    birt: dict[int, list[str]] = field(default_factory=dict)
    prefixes: dict[int, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def birt_from_bgp(
    bfr_id: int,
    sub_domain: int,
    routes: Mapping[str, BgpPath],
    neighbor_addresses: Mapping[str, str],
) -> BgpBirt:
    """Derive the BIRT of BFR ``bfr_id`` in ``sub_domain`` from its BGP best paths.

    ``neighbor_addresses`` maps a BFR neighbour's link address (what BGP has as next hop) to its name.
    Routes without a BIER TLV for ``sub_domain``, or with BFR-ID 0 ("none configured", RFC 9793), give no
    row. Two prefixes claiming one BFR-ID is a misconfiguration (RFC 8279 §2): the numerically lowest
    prefix wins, deterministically, and the other is reported. A route advertising our own BFR-ID from
    elsewhere is reported and ignored: our own bit is always delivered locally.
    """
    out = BgpBirt()
    for prefix in sorted(routes, key=prefix_key):
        path = routes[prefix]
        tlv = path.bier.bier_tlv(sub_domain) if path.bier is not None else None
        if tlv is None or tlv.bfr_id == 0:
            continue
        if tlv.bfr_id == bfr_id:
            out.problems.append(f"{prefix} advertises BFR-ID {bfr_id}, which is this BFR's own: ignored")
            continue
        if tlv.bfr_id in out.prefixes:
            out.problems.append(
                f"{prefix} advertises BFR-ID {tlv.bfr_id}, already advertised by "
                f"{out.prefixes[tlv.bfr_id]}: ignored"
            )
            continue
        names = sorted({neighbor_addresses[nh] for nh in path.nexthops if nh in neighbor_addresses})
        foreign = sorted(nh for nh in path.nexthops if nh not in neighbor_addresses)
        if foreign:
            out.problems.append(
                f"{prefix} (BFR-ID {tlv.bfr_id}): next hop {', '.join(foreign)} is not a BFR neighbour"
            )
        out.prefixes[tlv.bfr_id] = prefix
        if names:
            out.birt[tlv.bfr_id] = names
    out.birt = dict(sorted(out.birt.items()))
    return out
