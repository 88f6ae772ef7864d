"""The link-fault program's parameters and counters (``link_fault.c``): Gilbert-Elliott loss per link end.

Pure logic: the byte layouts of the program's maps, and the ways a user states a loss.

The chain (Gilbert 1960, Elliott 1963; netem's ``gemodel`` order): each packet is lost with the loss
probability of the state it finds, Good (``loss_good`` = 1 - k) or Bad (``loss_bad`` = 1 - h), then the
chain moves Good -> Bad with probability ``p`` and Bad -> Good with ``r``. So a share p / (p + r) of
packets find the chain in Bad, the mean loss is (r * loss_good + p * loss_bad) / (p + r), and a stay in
Bad lasts 1 / r packets on average.

Three ways to say it (``aidclab link set NODE:IF loss ...``):

* independent: ``loss P``, every packet lost with probability P (the chain stays in Good);
* bursty: ``loss P burst B``, mean loss P in bursts of B packets on average (simple Gilbert: everything
  in Bad is lost, nothing in Good): r = 1 / B, p = P * r / (1 - P);
* the whole chain: ``loss gilbert p r [loss_bad [loss_good]]`` (defaults 1 and 0).

Map values are native-endian C structs (the program runs on the host's CPU); every probability is a
fraction of 2^32 in a u64, so 0 never happens and 2^32 always does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# struct lf_config: enter_bad, leave_bad, loss_good, loss_bad (u64 each, x 2^32)
CONFIG = struct.Struct("=4Q")
# struct lf_stats: passed pkts/bytes, lost in Good pkts/bytes, lost in Bad pkts/bytes, bad_entries, then
# the reliable feedback among the passed: ACK, NACK and AGG-ACK packets and their bytes
STATS = struct.Struct("=11Q")
ONE = 1 << 32

PROGRAM = "link_fault"  # the function name, what the kernel shows for the loaded program
MAPS = ("lf_config", "lf_stats", "lf_state")


class FaultError(ValueError):
    pass


def _fixed(p: float, what: str) -> int:
    if not 0.0 <= p <= 1.0:
        raise FaultError(f"{what} {p} must be a probability between 0 and 1")
    return round(p * ONE)


@dataclass(frozen=True)
class LinkFault:
    """A Gilbert-Elliott chain; the default loses nothing."""

    p: float = 0.0  # Good -> Bad per packet
    r: float = 1.0  # Bad -> Good per packet
    loss_bad: float = 1.0  # 1 - h
    loss_good: float = 0.0  # 1 - k

    def __post_init__(self) -> None:
        for name in ("p", "r", "loss_bad", "loss_good"):
            _fixed(getattr(self, name), name)
        if self.p > 0 and self.r == 0:
            raise FaultError("r = 0 with p > 0 would stay in Bad for good: use 'down' for a dead link")

    @classmethod
    def independent(cls, loss: float) -> LinkFault:
        _fixed(loss, "loss")
        return cls(loss_good=loss)

    @classmethod
    def bursty(cls, loss: float, mean_burst: float) -> LinkFault:
        """Mean loss ``loss`` in bursts of ``mean_burst`` packets on average (simple Gilbert)."""
        _fixed(loss, "loss")
        if not 0.0 <= loss < 1.0:
            raise FaultError(f"bursty loss {loss} must be below 1 (a link that loses all is 'down')")
        if mean_burst < 1.0:
            raise FaultError(f"mean burst {mean_burst} must be at least 1 packet")
        r = 1.0 / mean_burst
        if loss * r > 1.0 - loss:
            # p = loss * r / (1 - loss) would exceed 1: Good could not be left often enough.
            raise FaultError(
                f"a mean loss of {loss:.2%} needs bursts of at least {loss / (1.0 - loss):.3g} packets "
                f"on average (got {mean_burst:g})"
            )
        return cls(p=loss * r / (1.0 - loss), r=r, loss_bad=1.0, loss_good=0.0)

    @property
    def bad_share(self) -> float:
        """Share of packets that find the chain in Bad."""
        return self.p / (self.p + self.r) if self.p > 0 else 0.0

    @property
    def mean_loss(self) -> float:
        bad = self.bad_share
        return bad * self.loss_bad + (1.0 - bad) * self.loss_good

    @property
    def mean_burst(self) -> float | None:
        """Mean stay in Bad, packets; None when the chain never leaves Good."""
        return 1.0 / self.r if self.p > 0 else None

    @property
    def is_none(self) -> bool:
        return self.mean_loss == 0.0

    def encode(self) -> bytes:
        """The ``lf_config`` map value."""
        return CONFIG.pack(
            _fixed(self.p, "p"),
            _fixed(self.r, "r"),
            _fixed(self.loss_good, "loss_good"),
            _fixed(self.loss_bad, "loss_bad"),
        )

    @classmethod
    def decode(cls, value: bytes) -> LinkFault:
        p, r, loss_good, loss_bad = (x / ONE for x in CONFIG.unpack(value))
        return cls(p=p, r=r, loss_bad=loss_bad, loss_good=loss_good)

    def describe(self) -> str:
        if self.is_none:
            return "no loss"
        if self.p == 0:
            return f"{self.loss_good:.2%} independent loss"
        return (
            f"{self.mean_loss:.2%} loss in bursts of {self.mean_burst:.3g} packets on average "
            f"(Gilbert-Elliott p={self.p:.4g} r={self.r:.4g} loss_bad={self.loss_bad:g} "
            f"loss_good={self.loss_good:g})"
        )

    def to_dict(self) -> dict[str, float]:
        return {"p": self.p, "r": self.r, "loss_bad": self.loss_bad, "loss_good": self.loss_good}


@dataclass(frozen=True)
class FaultStats:
    """The ``lf_stats`` counters of one link end."""

    passed_packets: int = 0
    passed_bytes: int = 0
    lost_good_packets: int = 0
    lost_good_bytes: int = 0
    lost_bad_packets: int = 0
    lost_bad_bytes: int = 0
    bad_entries: int = 0
    ack_packets: int = 0
    nack_packets: int = 0
    agg_ack_packets: int = 0
    feedback_bytes: int = 0

    @classmethod
    def decode(cls, value: bytes) -> FaultStats:
        """A program attached before the feedback counters existed (a lab configured by an older
        aidclab, whose program is kept) has the first seven only: the rest read 0."""
        if len(value) < STATS.size and len(value) % 8 == 0:
            value = value + bytes(STATS.size - len(value))
        return cls(*STATS.unpack(value))

    @property
    def lost_packets(self) -> int:
        return self.lost_good_packets + self.lost_bad_packets

    @property
    def lost_bytes(self) -> int:
        return self.lost_good_bytes + self.lost_bad_bytes

    @property
    def feedback_packets(self) -> int:
        return self.ack_packets + self.nack_packets + self.agg_ack_packets

    def minus(self, before: FaultStats) -> FaultStats:
        """The counts since ``before`` (a run's share of these ever-growing counters)."""
        return FaultStats(*(getattr(self, k) - getattr(before, k) for k in self.__dataclass_fields__))

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def parse_loss_words(words: list[str]) -> LinkFault:
    """``["0.05"]``, ``["0.05", "burst", "4"]`` or ``["gilbert", p, r, [loss_bad, [loss_good]]]``."""

    def number(text: str, what: str) -> float:
        try:
            return float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
        except ValueError:
            raise FaultError(f"{what} {text!r} is not a number (e.g. 0.05 or 5%)") from None

    if not words:
        raise FaultError("loss needs a value: loss 0.05 | loss 0.05 burst 4 | loss gilbert P R [LB [LG]]")
    if words[0] == "gilbert":
        args = words[1:]
        if not 2 <= len(args) <= 4:
            raise FaultError("loss gilbert P R [LOSS_BAD [LOSS_GOOD]]: two to four numbers")
        names = ("p", "r", "loss_bad", "loss_good")
        values = {n: number(a, n) for n, a in zip(names, args, strict=False)}
        return LinkFault(**values)
    loss = number(words[0], "loss")
    if len(words) == 1:
        return LinkFault.independent(loss)
    if len(words) == 3 and words[1] == "burst":
        return LinkFault.bursty(loss, number(words[2], "burst"))
    raise FaultError(
        f"loss {' '.join(words)!r}: expected loss P, loss P burst B or loss gilbert P R [LB [LG]]"
    )
