"""An RFC 8296 BIER layer for scapy, written for the tests.

scapy's own contrib.bier predates the RFC's codepoints (its BSL 2 means 256 bits, its Proto 5 means
IPv6), so it would decode our packets wrongly (docs/design.md §3). With MPLS encapsulation the first 32-bit
word of the BIER header is the MPLS label stack entry (RFC 8296 §2.1.1.1), so the layer starts there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scapy.fields import BitField, ShortField, StrLenField
from scapy.layers.inet import IP, UDP
from scapy.packet import Packet, Raw, bind_layers
from scapy.utils import rdpcap

MPLS_IN_UDP_PORT = 6635


def bitstring_bytes(pkt: Packet) -> int:
    return (1 << (pkt.bsl + 5)) // 8 if 1 <= pkt.bsl <= 7 else 0


class Rfc8296Bier(Packet):
    name = "MPLS-BIER (RFC 8296)"
    fields_desc = [  # noqa: RUF012  (scapy's declarative field list)
        BitField("label", 0, 20),  # BIFT-id
        BitField("tc", 0, 3),
        BitField("s", 1, 1),
        BitField("ttl", 64, 8),
        BitField("nibble", 0b0101, 4),
        BitField("ver", 0, 4),
        BitField("bsl", 3, 4),
        BitField("entropy", 0, 20),
        BitField("oam", 0, 2),
        BitField("rsv", 0, 2),
        BitField("dscp", 0, 6),
        BitField("proto", 0, 6),
        ShortField("bfir_id", 0),
        StrLenField("bitstring", b"", length_from=bitstring_bytes),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return IP if self.proto == 4 else Raw


bind_layers(UDP, Rfc8296Bier, dport=MPLS_IN_UDP_PORT)


def decode_bier_capture(path: str | Path) -> list[dict[str, Any]]:
    """Every BIER packet of a pcap as a flat dict of the fields the tests check."""
    out = []
    for frame in rdpcap(str(path)):
        if Rfc8296Bier not in frame:
            continue
        bier = frame[Rfc8296Bier]
        inner = bier.payload
        row = {
            "udp.dport": frame[UDP].dport,
            "udp.sport": frame[UDP].sport,
            **{f"bier.{f.name}": getattr(bier, f.name) for f in bier.fields_desc if f.name != "bitstring"},
            "bier.bitstring": int.from_bytes(bier.bitstring, "big"),
        }
        if isinstance(inner, IP):
            row.update({"inner.proto": inner.proto, "inner.src": inner.src, "inner.dst": inner.dst})
            if UDP in inner:
                row.update({"inner.dport": inner[UDP].dport, "inner.payload": bytes(inner[UDP].payload)})
        out.append(row)
    return out
