"""The InfiniBand Base Transport Header that opens every RoCEv2 datagram (UDP destination port 4791).

InfiniBand Architecture Specification Vol. 1, §9.2 (BTH), and its RoCEv2 annex (A17: the BTH follows
the UDP header directly; bits 0-1 of byte 4, reserved in InfiniBand, carry FECN and BECN)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |    OpCode     |S|M|Pad|  TVer |         Partition Key         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |F|B|   Resv6   |          Destination Queue Pair (24)          |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |A|    Resv7    |            Packet Sequence Number (24)        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

S solicited event, M migration request, Pad the pad count (bytes added to align the payload), TVer the
transport header version (0), F/B the ECN notifications, A the acknowledge request. The OpCode's top 3
bits name the transport service (RC 000, UC 001, RD 010, UD 011), the low 5 the operation. Pure codec:
``decode(encode(h)) == h`` for every header, reserved bits kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

BTH_SIZE: Final = 12
# §9.2: the only transport header version defined.
BTH_VERSION: Final = 0
# The default partition's full-membership key (§10.9.1.1): what every port is a member of.
DEFAULT_PKEY: Final = 0xFFFF
# Reliable Connection SEND Only: one whole message in one packet (§9.2.1, Table 38).
RC_SEND_ONLY: Final = 0x04
# Unreliable Datagram SEND Only; a UD packet carries a DETH (8 bytes) after the BTH.
UD_SEND_ONLY: Final = 0x64
QPN_BITS: Final = 24
PSN_MODULO: Final = 1 << 24
# QP 0 and 1 are the subnet management and general service QPs; 0xFFFFFF addresses a multicast group.
FIRST_DATA_QP: Final = 2
MULTICAST_QP: Final = 0xFFFFFF

_BTH = struct.Struct("!BBHII")
assert _BTH.size == BTH_SIZE


class BthError(ValueError):
    """Bytes that are no Base Transport Header; ``reason`` is a short counter name."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


# (field, bits) of every field with a width narrower than its Python int: what encode checks.
_WIDTHS = (
    ("opcode", 8), ("pad_count", 2), ("version", 4), ("pkey", 16), ("dest_qp", QPN_BITS), ("psn", 24),
    ("resv6", 6), ("resv7", 7),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Bth:
    opcode: int
    dest_qp: int
    psn: int
    pkey: int = DEFAULT_PKEY
    version: int = BTH_VERSION
    solicited: bool = False
    migreq: bool = False
    pad_count: int = 0
    fecn: bool = False
    becn: bool = False
    ack_req: bool = False
    resv6: int = 0
    resv7: int = 0

    def encode(self) -> bytes:
        if not (
            0 <= self.opcode < 0x100 and 0 <= self.pad_count < 4 and 0 <= self.version < 0x10
            and 0 <= self.pkey < 0x10000 and 0 <= self.dest_qp < PSN_MODULO and 0 <= self.psn < PSN_MODULO
            and 0 <= self.resv6 < 0x40 and 0 <= self.resv7 < 0x80
        ):  # fmt: skip
            name, bits = next((n, b) for n, b in _WIDTHS if not 0 <= getattr(self, n) < 1 << b)
            raise ValueError(f"BTH {name} {getattr(self, name)} does not fit {bits} bits")
        flags = self.solicited << 7 | self.migreq << 6 | self.pad_count << 4 | self.version
        word1 = (self.fecn << 31 | self.becn << 30 | self.resv6 << 24) | self.dest_qp
        word2 = (self.ack_req << 31 | self.resv7 << 24) | self.psn
        return _BTH.pack(self.opcode, flags, self.pkey, word1, word2)

    @classmethod
    def decode(cls, data: bytes) -> Bth:
        """The BTH at the start of ``data`` (a RoCEv2 UDP payload); raises BthError if it is too short or
        not of the one version defined."""
        if len(data) < BTH_SIZE:
            raise BthError("short", f"{len(data)} bytes < the {BTH_SIZE}-byte BTH")
        opcode, flags, pkey, word1, word2 = _BTH.unpack_from(data)
        if flags & 0x0F != BTH_VERSION:
            raise BthError("bad-bth-version", f"transport header version {flags & 0x0F}, not {BTH_VERSION}")
        # positional, in field order: the receive path decodes one per datagram
        return cls(
            opcode, word1 & 0xFFFFFF, word2 & 0xFFFFFF, pkey, flags & 0x0F, bool(flags & 0x80),
            bool(flags & 0x40), (flags >> 4) & 0x3, bool(word1 >> 31), bool(word1 >> 30 & 1),
            bool(word2 >> 31), word1 >> 24 & 0x3F, word2 >> 24 & 0x7F,
        )  # fmt: skip


def data_qp(n: int) -> int:
    """The ``n``-th queue pair a sender uses for data, counted from the first data QP, wrapping before
    the multicast QP: never QP 0 or 1 and never 0xFFFFFF, whatever ``n``."""
    return FIRST_DATA_QP + n % (MULTICAST_QP - FIRST_DATA_QP)


def send_only(dest_qp: int, psn: int, size: int) -> bytes:
    """A UDP payload of ``size`` bytes (at least the BTH) for test traffic with nothing of its own to
    say: an RC SEND Only BTH to ``dest_qp`` with ``psn``, then zeros."""
    head = Bth(opcode=RC_SEND_ONLY, dest_qp=dest_qp, psn=psn % PSN_MODULO).encode()
    return head + bytes(max(0, size - BTH_SIZE))
