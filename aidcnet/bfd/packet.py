"""The BFD control packet's mandatory section (RFC 5880 §4.1), 24 octets, and the receive checks of
§6.8.6 that do not depend on a session. No authentication section: the links are point to point inside
the lab, and RFC 5881 §5's TTL 255 check (GTSM) keeps anything from further away out.

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |Vers |  Diag   |Sta|P|F|C|A|D|M|  Detect Mult  |    Length     |
    |                       My Discriminator                        |
    |                      Your Discriminator                       |
    |                    Desired Min TX Interval                    |
    |                   Required Min RX Interval                    |
    |                 Required Min Echo RX Interval                 |
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

# RFC 5881 §4: single-hop control packets go to this UDP port, from a source port in 49152..65535.
BFD_PORT = 3784
SOURCE_PORT = 49152
BFD_VERSION = 1
LENGTH = 24
_WIRE = struct.Struct("!BBBBIIIII")


class State(IntEnum):
    ADMIN_DOWN = 0
    DOWN = 1
    INIT = 2
    UP = 3


class Diag(IntEnum):
    """RFC 5880 §4.1's diagnostic codes this implementation sends."""

    NONE = 0
    DETECTION_TIME_EXPIRED = 1
    NEIGHBOR_SIGNALED_DOWN = 3


class BfdDecodeError(ValueError):
    """A packet RFC 5880 §6.8.6 says to discard; ``reason`` names the check."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class ControlPacket:
    state: State
    my_discriminator: int
    your_discriminator: int
    desired_min_tx_us: int
    required_min_rx_us: int
    detect_mult: int
    diag: int = Diag.NONE
    poll: bool = False
    final: bool = False

    def encode(self) -> bytes:
        flags = (self.state << 6) | (self.poll << 5) | (self.final << 4)
        return _WIRE.pack(
            (BFD_VERSION << 5) | (self.diag & 0x1F),
            flags,
            self.detect_mult,
            LENGTH,
            self.my_discriminator,
            self.your_discriminator,
            self.desired_min_tx_us,
            self.required_min_rx_us,
            0,  # no echo function
        )

    @classmethod
    def decode(cls, data: bytes | memoryview) -> ControlPacket:
        if len(data) < LENGTH:
            raise BfdDecodeError("truncated", f"{len(data)} octets, the mandatory section is {LENGTH}")
        vers_diag, flags, mult, length, my_disc, your_disc, tx, rx, _echo = _WIRE.unpack_from(data)
        state = State(flags >> 6)
        if vers_diag >> 5 != BFD_VERSION:
            raise BfdDecodeError("bad-version", f"version {vers_diag >> 5}")
        if length < LENGTH or length > len(data):
            raise BfdDecodeError("bad-length", f"length field {length} in {len(data)} octets")
        if flags & 0x04:
            raise BfdDecodeError("authenticated", "the A bit is set; no authentication is configured")
        if mult == 0:
            raise BfdDecodeError("zero-detect-mult", "Detect Mult is 0")
        if flags & 0x01:
            raise BfdDecodeError("multipoint", "the M bit is set")
        if my_disc == 0:
            raise BfdDecodeError("zero-my-discriminator", "My Discriminator is 0")
        if your_disc == 0 and state not in (State.DOWN, State.ADMIN_DOWN):
            raise BfdDecodeError("zero-your-discriminator", f"Your Discriminator is 0 in state {state.name}")
        return cls(
            state, my_disc, your_disc, tx, rx, mult, vers_diag & 0x1F, bool(flags & 0x20), bool(flags & 0x10)
        )
