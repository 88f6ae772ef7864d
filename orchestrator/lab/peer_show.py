"""What the interop peers' own CLIs say, read into our terms (docs/interop.md): no I/O here.

GoBGP (``gobgp global rib -a ipv4 -j``) decodes the link-bandwidth community itself and lists it as
``{"type": 64, "subtype": 4, "asn": AS, "bandwidth": bytes/s}``. BIRD 2 does not know it and shows the
raw extended community as ``(unknown 0xTTSS, AS, value)``, the value being the float32's bits read as an
unsigned integer. Both become :class:`aidcnet.fare.linkbw.LinkBandwidth`, so tests compare them with what
our nodes sent. The session counters read the tables ``gobgp neighbor`` and ``birdc show protocols`` print.
"""

from __future__ import annotations

import json
import re

from aidcnet.fare.linkbw import LINK_BANDWIDTH_SUBTYPE, TYPE_TRANSITIVE, LinkBandwidth

EXTENDED_COMMUNITIES_ATTR = 16  # RFC 4360 path attribute type code
_BIRD_UNKNOWN_EC = re.compile(
    r"\(unknown 0x(?P<kind>[0-9a-f]+), (?P<asn>\d+), (?P<value>\d+)\)", re.IGNORECASE
)


def gobgp_link_bandwidths(rib_json: str, prefix: str) -> list[LinkBandwidth]:
    """The link-bandwidth community of each path GoBGP holds for ``prefix``, in the order it lists them."""
    rib = json.loads(rib_json or "{}")
    got = []
    for path in rib.get(prefix, []):
        for attr in path.get("attrs", []):
            if attr.get("type") != EXTENDED_COMMUNITIES_ATTR:
                continue
            for ec in attr.get("value", []):
                if ec.get("subtype") == LINK_BANDWIDTH_SUBTYPE and "bandwidth" in ec:
                    got.append(
                        LinkBandwidth(ec["asn"], ec["bandwidth"], transitive=ec["type"] == TYPE_TRANSITIVE)
                    )
    return got


def bird_link_bandwidths(show_route_all: str) -> list[LinkBandwidth]:
    """The link-bandwidth communities in ``birdc show route for PREFIX all``, one per path that has one."""
    got = []
    for line in show_route_all.splitlines():
        if "BGP.ext_community:" not in line:
            continue
        for m in _BIRD_UNKNOWN_EC.finditer(line):
            kind = int(m["kind"], 16)
            asn, value = int(m["asn"]), int(m["value"])
            wire = kind.to_bytes(2, "big") + asn.to_bytes(2, "big") + value.to_bytes(4, "big")
            if LinkBandwidth.is_link_bandwidth(wire):
                got.append(LinkBandwidth.decode(wire))
    return got


def gobgp_established(neighbor_table: str) -> int:
    """Sessions in state Established in ``gobgp neighbor``'s table."""
    return sum(1 for line in neighbor_table.splitlines()[1:] if " Establ " in f"{line} ")


def bird_established(protocols_table: str) -> int:
    """BGP protocols in state Established in ``birdc show protocols``."""
    return sum(1 for line in protocols_table.splitlines() if " BGP " in line and "Established" in line)
