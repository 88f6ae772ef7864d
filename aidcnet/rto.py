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

:class:`InFlight` is what a windowed sender keeps about the items it has out: the estimator, one timer
run the way TCP runs its own (RFC 6298 §5), and loss detection by send order (RACK, RFC 8985), so that
several items lost in one window are resent together within about a round trip, not one per timeout.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

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

    # aidcnet.reliable.sender.RtoPolicy: that sender applies its own backoff and Karn's rule, so it asks
    # only for the computed RTO and hands over samples of sequences sent once.
    def current(self) -> float:
        return self.rto

    def observe(self, rtt: float) -> None:
        self.sample(rtt)

    def timeout(self) -> float:
        """The timer expired: back off (double the RTO, capped) and return the new RTO."""
        self.rto = min(self.max_rto, self.rto * 2)
        self.backoffs += 1
        return self.rto


Item = TypeVar("Item", bound=Hashable)


class InFlight(Generic[Item]):
    """Items sent and not yet answered (chunks, messages), and which of them to send again when.

    * **Timer** (RFC 6298 §5): it runs from the later of the oldest item's last send and the last restart;
      an answer to an item not yet answered restarts it (§5.3). On expiry only the oldest item is resent
      and the RTO doubles (§5.4-5.6). While answers keep coming nothing times out, so a round trip that
      grows past the RTO (a queue filling) costs no duplicates, and one that jumps costs one per RTO.
    * **Loss by send order** (RACK, RFC 8985 §6): our paths keep order (one queue per link, per-flow ECMP),
      so an item still unanswered when one sent after it has been answered, and older than a smoothed round
      trip plus a quarter (the reordering window), is lost: it is resent at once, without backoff. A
      queue's delay alone never triggers this (answers come in send order), and k losses in one window
      cost one round trip, not k timeouts. An answer to a resent item orders by the resend only if it came
      at least half a round trip after it (else it answered the first copy).
    * **Karn** (§3): an answer to an item sent more than once gives no round-trip sample.
    """

    def __init__(self, rto: RtoEstimator) -> None:
        self.rto = rto
        self.sent_at: dict[Item, float] = {}  # item -> its last send, in sending order (oldest first)
        self.first_sent: dict[Item, float] = {}
        self.resent: set[Item] = set()
        self.restarted = -math.inf
        self.answered_sent = -math.inf  # send time of the latest-sent item answered (RACK.xmit_ts)
        self.retransmits = 0
        self.timeouts = 0
        self.lost = 0  # items found lost by send order

    def __len__(self) -> int:
        return len(self.sent_at)

    def __contains__(self, key: object) -> bool:
        return key in self.sent_at

    def sent(self, key: Item, now: float) -> None:
        """``key`` went out for the first time."""
        self.sent_at[key] = self.first_sent[key] = now

    def answered(self, key: Item, now: float) -> bool:
        """``key``'s answer came; False when it was not outstanding (a duplicate answer)."""
        at = self.sent_at.pop(key, None)
        if at is None:
            return False
        first = self.first_sent.pop(key)
        resent = key in self.resent
        self.resent.discard(key)
        self.rto.sample(now - first, retransmitted=resent)
        self.restarted = now
        # Which copy was answered is unknown after a resend. An answer within half a round trip of the
        # resend cannot be the resend's: the first copy was only late (a spurious timeout), so only its
        # send time orders anything. Later, it counts as the resend's: every item sent before that resend
        # and still unanswered is then lost, and goes again at once, not one per (doubled) timeout.
        srtt = self.rto.srtt
        late_enough = srtt is not None and now - at >= srtt / 2
        self.answered_sent = max(self.answered_sent, at if not resent or late_enough else first)
        return True

    def next_deadline(self) -> float | None:
        """When the retransmission timer expires (None with nothing outstanding)."""
        for at in self.sent_at.values():
            return max(at, self.restarted) + self.rto.rto
        return None

    def _lost(self, now: float) -> list[Item]:
        srtt = self.rto.srtt
        if srtt is None:
            return []
        wait = srtt * 1.25  # RFC 8985 §6.2: RACK.rtt + reo_wnd, reo_wnd = RTT / 4
        out = []
        for key, at in self.sent_at.items():
            if at >= self.answered_sent:
                break  # sending order: every item after this one was sent later still
            if now >= at + wait:
                out.append(key)
        return out

    def due(self, now: float) -> list[Item]:
        """Items to send again at ``now`` (marked sent again): those lost by send order, else the oldest
        one if the timer expired."""
        out = self._lost(now)
        self.lost += len(out)
        if not out:
            deadline = self.next_deadline()
            if deadline is None or now < deadline:
                return []
            out = [next(iter(self.sent_at))]
            self.rto.timeout()
            self.restarted = now
            self.timeouts += 1
        for key in out:
            del self.sent_at[key]
            self.sent_at[key] = now  # to the end: sending order
            self.resent.add(key)
        self.retransmits += len(out)
        return out
