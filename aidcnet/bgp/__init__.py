"""BGP wire elements we add on top of ExaBGP (which stays the BGP engine, docs/design.md §3)."""

from aidcnet.bgp.bier_attribute import (
    ATTR_TYPE_BIER,
    BierAttribute,
    BierAttributeDecodeError,
    BierTlv,
    MplsEncapsulationSubTlv,
    RawTlv,
)

__all__ = [
    "ATTR_TYPE_BIER",
    "BierAttribute",
    "BierAttributeDecodeError",
    "BierTlv",
    "MplsEncapsulationSubTlv",
    "RawTlv",
]
