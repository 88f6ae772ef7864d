"""Bytes on the wire per packet, per transport mode, from the codecs the nodes themselves use.

A kernel veth counter counts the Ethernet frame without preamble and FCS: 14 bytes of Ethernet header
plus the IP packet. The sizes are measured by encoding one real header with ``aidcnet`` code (the same
encoders the agents call), never restated as constants, so a header change there moves the model too.

=============  ====================================================================================
unicast        Ethernet | IPv4 | UDP (dst 4791) | BTH | replay fragment
host-BIER      Ethernet | IPv4 | UDP (dst 6635) | BIER-MPLS header (12 + BSL/8) | IPv4 | UDP | BTH |
               fragment
net-BIER       host→leaf and leaf→host: Ethernet | IPv4 | UDP | BTH | fragment; between BFRs as host-BIER
=============  ====================================================================================

A replay fragment (``aidcnet.replay.fragment_sizes``) is the trace's payload; everything around it,
the RoCEv2 BTH included, is header.
"""

from __future__ import annotations

from functools import cache

from aidcnet.bier.header import BierHeader
from aidcnet.bier.mpls import encode_bier_udp_payload
from aidcnet.ipv4 import build_udp
from aidcnet.replay import DEFAULT_MAX_DATAGRAM, build_fragments, fragment_sizes

__all__ = [
    "DEFAULT_MAX_DATAGRAM",
    "ETHERNET_HEADER",
    "bier_frame_overhead",
    "bier_header_bytes",
    "fragment_sizes",
    "replay_bier_frame_overhead",
    "replay_frame_overhead",
    "udp_frame_overhead",
]

# Ethernet II destination, source and EtherType; veth counters include it, no FCS, no VLAN tag.
ETHERNET_HEADER = 14


@cache
def udp_frame_overhead() -> int:
    """Ethernet + IPv4 + UDP around a UDP payload (42 bytes)."""
    return ETHERNET_HEADER + len(build_udp("10.0.0.1", "10.0.0.2", 1, 1, b""))


@cache
def bier_header_bytes(bsl: int) -> int:
    """The RFC 8296 header with its MPLS label entry: 12 fixed bytes plus the BitString."""
    return len(encode_bier_udp_payload(BierHeader(bift_id=16, bitstring=1, bsl=bsl).encode()))


@cache
def bier_frame_overhead(bsl: int) -> int:
    """Everything around a replay fragment in a BIER packet between BFRs: the outer Ethernet/IPv4/UDP
    (MPLS-in-UDP, RFC 7510), the BIER header, and the inner IPv4/UDP the host wraps its payload in."""
    return udp_frame_overhead() + bier_header_bytes(bsl) + len(build_udp("10.0.0.1", "232.1.0.1", 1, 1, b""))


@cache
def replay_datagram_overhead() -> int:
    """What a replay datagram carries before its fragment (the RoCEv2 BTH), from one the replay builds."""
    return len(build_fragments(0, 1, 0)[0]) - fragment_sizes(1)[0]


@cache
def replay_frame_overhead() -> int:
    """Everything around a replay fragment on a plain IPv4 hop: Ethernet, IPv4, UDP and the BTH."""
    return udp_frame_overhead() + replay_datagram_overhead()


@cache
def replay_bier_frame_overhead(bsl: int) -> int:
    """Everything around a replay fragment in a BIER packet between BFRs (the BTH inside the inner UDP)."""
    return bier_frame_overhead(bsl) + replay_datagram_overhead()
