"""Retransmission timeout of a self-clocked sender, as RFC 6298 computes TCP's: pure state, no clock.

Every windowed transport of the testbed (INA workers, the parameter-server baseline, the ring baseline)
keeps one :class:`RtoEstimator` per peer. A fixed timer shorter than the round trip on a shaped link
resends everything in flight, every period, and the duplicates lengthen the queue further: the storm
issue 12 measured (INA 199 s, 109,533 retransmits, at 20 Mbit/s). An RTO that follows the measured
round trip, backs off on every timeout and learns nothing from a retransmitted item does not.

RFC 6298 §2 (R a round-trip sample in seconds, G the caller's clock granularity, K = 4):

* before the first sample: RTO = ``initial`` (the RFC's 1 s; the caller's own here, §2.1);
* first sample:  SRTT = R, RTTVAR = R / 2;
* later samples: RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R| (with the SRTT before this sample),
  then SRTT = 7/8 SRTT + 1/8 R;
* RTO = SRTT + max(G, K RTTVAR), clamped to [``min_rto``, ``max_rto``] (§2.4, §2.5);
* on a timeout, RTO = 2 RTO, up to ``max_rto`` (§5.5), until a new sample recomputes it (§5.7's
  "collapsing" back);
* Karn's rule (§3): a sample of an item that was retransmitted is ambiguous (which copy was answered?)
  and is ignored; the backed-off RTO then stays until an item sent once is answered.

The RFC's 1 s floor and 60 s ceiling are for the Internet; the testbed passes its own (docs/allreduce.md),
in wall time: the sender runs in the emulation, whose round trips are fabric time times the scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

ALPHA: Final = 1 / 8
BETA: Final = 1 / 4
K: Final = 4


@dataclass
class RtoEstimator:
    """RFC 6298's SRTT/RTTVAR/RTO for one path. Times in seconds (any unit works, if consistent)."""

    initial: float
    min_rto: float
    max_rto: float
    granularity: float = 0.0
    srtt: float | None = field(default=None, init=False)
    rttvar: float | None = field(default=None, init=False)
    rto: float = field(default=0.0, init=False)
    samples: int = field(default=0, init=False)
    ignored: int = field(default=0, init=False)
    """Samples refused by Karn's rule (answers to retransmitted items)."""
    backoffs: int = field(default=0, init=False)
    """Timeouts since the last sample (the RTO is ``2**backoffs`` times the computed one, capped)."""

    def __post_init__(self) -> None:
        if not 0 < self.min_rto <= self.max_rto:
            raise ValueError(f"RTO bounds: need 0 < min_rto ({self.min_rto}) <= max_rto ({self.max_rto})")
        if self.initial <= 0 or self.granularity < 0:
            raise ValueError(f"initial RTO {self.initial} must be > 0, granularity {self.granularity} >= 0")
        self.rto = self._clamp(self.initial)

    def _clamp(self, rto: float) -> float:
        return min(self.max_rto, max(self.min_rto, rto))

    def sample(self, rtt: float, retransmitted: bool = False) -> bool:
        """Take the round trip ``rtt`` of an item answered now; False (and no change) when Karn's rule
        refuses it because the item was sent more than once. A negative ``rtt`` is a caller's bug."""
        if rtt < 0:
            raise ValueError(f"negative round-trip sample {rtt}")
        if retransmitted:
            self.ignored += 1
            return False
        if self.srtt is None or self.rttvar is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = (1 - BETA) * self.rttvar + BETA * abs(self.srtt - rtt)
            self.srtt = (1 - ALPHA) * self.srtt + ALPHA * rtt
        self.rto = self._clamp(self.srtt + max(self.granularity, K * self.rttvar))
        self.samples += 1
        self.backoffs = 0
        return True

    def timeout(self) -> float:
        """The timer expired: back off (double the RTO, capped) and return the new RTO."""
        self.rto = min(self.max_rto, self.rto * 2)
        self.backoffs += 1
        return self.rto
