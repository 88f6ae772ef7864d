"""The reliable transport's timers, in one place, in the clock its agents run on (docs/reliability.md,
"Timers in fabric time").

On a shaped lab the agents' reliable service runs on fabric time (its clock is the wall clock divided by
the lab's time scale, :class:`aidcnet.timescale.TimeScale`), so every timer here is in fabric seconds and a
run behaves the same at any scale: the links, the queues and the timers all stretch together, which is what
``aidclab replay --confirm`` checks (the same fabric completion within 5 % at twice the scale). Before, the
timers were wall-clock constants: at 1:200000 a 1 s first RTO was 5 µs of fabric time, at 1:20000 50 µs.

The values were chosen as wall times on the shipped leaf-spine at its 1:20000 (:data:`TUNED_AT`), where a
round trip of a window's DATA behind the send budget is some 30 ms of wall time; here they are that lab's
fabric times. On an unshaped lab (``time.scale: off``) there is no fabric clock: the agents run on the wall
clock and the same numbers are wall seconds. They are first guesses and bounds: the round trips the senders
and BFRs measure (RFC 6298 estimators, one per branch) set the timers in between.

The tuned lab's links have no propagation delay, so the values hold none: a lab whose links are long (a
DCI, a WAN: docs/delay.md) adds its round trip to every timer that waits for an answer across the path
(:meth:`Timers.over`). Without it, over a 26 ms WAN round trip the RTO ceiling was 100 µs and the send
budget 5 µs of the link: a source resent every window hundreds of times per round trip and had 0.02% of
its link in flight.

Pure: no clock is read here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from aidcnet.timescale import TimeScale

TUNED_AT = TimeScale(20000)


@dataclass(frozen=True)
class Timers:
    """Seconds on the agents' clock (fabric seconds on a shaped lab)."""

    # The senders (RFC 6298): first RTO before a branch has a sample, floor and ceiling.
    initial_rto: float = 1.0
    # A round trip may carry the whole send budget's queueing, and an estimator lags a queue that fills
    # within a round trip: the floor is 2.5 budget times (with 20 ms of wall time timers fired without loss).
    min_rto: float = 0.25
    max_rto: float = 2.0
    # A receiver silent this long (owing something) is declared failed.
    fail_after: float = 30.0
    # What a source's flows may have in flight, as time of its slowest link (SendBudget): without a bound
    # eight flows put 4 MiB behind a 20 Mbit/s veth and every timer fired for queued data.
    inflight: float = 0.1
    # The receivers: ACK delay, NACK interval (doubling up to its maximum).
    ack_delay: float = 0.002
    nack_interval: float = 0.01
    nack_max_interval: float = 0.2
    # The BFRs (AggregatorConfig): the first partial wait before a flow's windows were measured, the least
    # a learned one may be (below the senders' RTO floor, so a partial says who is missing before the
    # source's timer resends to everyone), how long an entry outlives its flow's last packet, and the
    # least an AGG-ACK waits for the next window's.
    partial_after: float = 1.0
    partial_floor: float = 1.0
    lifetime: float = 10.0
    report_delay: float = 0.002
    # The most a BFR holds an AGG-ACK for the next window's: three BFRs on leaf-spine's way back (the
    # receivers' leaf, a spine, the BFIR's leaf) hold at most 0.075 together, which with a full send
    # budget's queue (inflight) stays below the senders' RTO floor.
    report_max: float = 0.025

    def over(self, round_trip_s: float) -> Timers:
        """These timers over a path whose propagation round trip is ``round_trip_s`` (on the same clock).

        The send budget (time of the slowest link) grows by one round trip, the path's bandwidth-delay
        product. A source that fills it at once has a round trip of data queued behind its link, so the
        first answers take up to two round trips: the RTO floor and a BFR's partial wait grow by two, the
        first RTO by three (RFC 6298's first sample, R + 4 R/2), the ceiling by six (room to back off), and
        a receiver is declared failed, or an aggregation entry forgotten, only after 60. A NACK is repeated
        once a repair could have come back (one). A receiver's ACK delay and a BFR's AGG-ACK hold are
        local and stay."""
        if round_trip_s <= 0:
            return self
        rtt = round_trip_s
        return replace(
            self,
            initial_rto=self.initial_rto + 3 * rtt,
            min_rto=self.min_rto + 2 * rtt,
            max_rto=self.max_rto + 6 * rtt,
            fail_after=self.fail_after + 60 * rtt,
            inflight=self.inflight + rtt,
            nack_interval=self.nack_interval + rtt,
            nack_max_interval=self.nack_max_interval + rtt,
            partial_after=self.partial_after + 2 * rtt,
            partial_floor=self.partial_floor + 2 * rtt,
            lifetime=self.lifetime + 60 * rtt,
        )

    def scaled(self, scale: TimeScale) -> Timers:
        """These timers (wall seconds at :data:`TUNED_AT`) on the clock of the agents at ``scale``: fabric
        seconds when the lab is shaped, whatever the factor; as they are when it is not."""
        if not scale.shaped:
            return self
        return Timers(**{f.name: TUNED_AT.fabric_s(getattr(self, f.name)) for f in fields(self)})


WALL = Timers()
"""As tuned: wall seconds on the shipped leaf-spine at :data:`TUNED_AT`."""


def timers(scale: TimeScale, round_trip_s: float = 0.0) -> Timers:
    """The reliable transport's timers on the clock its agents run on at ``scale``, over paths whose longest
    propagation round trip is ``round_trip_s`` fabric seconds (0: the links have no delay)."""
    return WALL.scaled(scale).over(round_trip_s)
