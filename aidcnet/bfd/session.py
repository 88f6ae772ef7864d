"""One end of a link's BFD session: RFC 5880 §6.8.6's state machine in asynchronous mode (no echo, no
demand mode), its detection time, and a loss threshold for gray failures. Times are wall-clock seconds;
the agent converts the lab's fabric-time intervals (``aidcnet.timescale``) before it builds a session.

Packets are judged at the moment the kernel received them, not when the agent read them, so an agent that
reads late does not take a live link for a dead one (the service drains its socket before it asks
:meth:`Session.expire`). What this cannot see is a peer that sends late: its lateness shows in its own
``bfd.tx.late`` counter.

The loss threshold: once a session has been Up for ``loss_window`` of the peer's intervals, fewer than
``(1 - loss_threshold) × loss_window`` packets in the last such span take it Down (reason ``loss``); so
does a detection time that runs out while the last window is that lossy. Then
it is held Down (RFC 5882 §3.2's dampening): for one window after the first such Down, doubling with each
one after it (up to 64 windows), and then until a window arrives with at most half the threshold lost,
judged once per window. So a link that drops 30% of its packets stays down instead of flapping each time
three packets in a row get through.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from aidcnet.bfd.packet import ControlPacket, Diag, State

# Why a transition happened (Transition.reason); a closed set, each counted by the agent.
REASONS = ("handshake", "detection-time", "neighbor-down", "loss", "loss-cleared")

# RFC 5880 §6.8.6: the peer's states that take a session in this state Up.
_BRINGS_UP = {State.DOWN: (State.INIT,), State.INIT: (State.INIT, State.UP)}


@dataclass(frozen=True)
class Transition:
    at: float  # wall s: when the session decided it
    state: State
    reason: str
    # wall s after the protocol's own moment (the detection time's end) that the decision came: the agent's
    # lateness, 0 when the change was decided on a packet
    late_s: float = 0.0


class Session:
    def __init__(
        self,
        my_discriminator: int,
        tx_interval_s: float,
        multiplier: int,
        loss_threshold: float | None = None,
        loss_window: int = 20,
    ) -> None:
        if my_discriminator <= 0 or tx_interval_s <= 0 or multiplier < 1 or loss_window < 2:
            raise ValueError(
                "a discriminator, an interval, a multiplier >= 1 and a loss window >= 2 are needed"
            )
        if loss_threshold is not None and not 0 < loss_threshold < 1:
            raise ValueError(f"loss_threshold {loss_threshold}: a fraction between 0 and 1")
        self.my_discriminator = my_discriminator
        self.tx_interval_s = tx_interval_s
        self.multiplier = multiplier
        self.loss_threshold = loss_threshold
        self.loss_window = loss_window
        self.state = State.DOWN
        self.diag = Diag.NONE
        self.remote_discriminator = 0
        self.remote_state = State.DOWN
        self.remote_tx_s: float | None = None
        self.remote_mult = multiplier
        self.deadline: float | None = None
        self.up_since: float | None = None
        self.held_for_loss = False
        self.hold_until = 0.0
        self.loss_downs = 0
        # two windows' worth: the oldest kept then says whether the peer was heard for a whole window
        self._arrivals: deque[float] = deque(maxlen=2 * loss_window + 2)

    # -- what goes out -------------------------------------------------------------------------------
    def packet(self) -> ControlPacket:
        interval_us = max(1, round(self.tx_interval_s * 1e6))
        return ControlPacket(
            state=self.state,
            my_discriminator=self.my_discriminator,
            your_discriminator=self.remote_discriminator,
            desired_min_tx_us=interval_us,
            required_min_rx_us=interval_us,
            detect_mult=self.multiplier,
            diag=self.diag,
        )

    def rescale(self, tx_interval_s: float, now: float) -> None:
        """Run at another interval (the lab's time scale changed) without a new handshake: the peer learns
        it from the next packet, and the detection time running now is stretched to the new one, so that a
        peer that changes before us and sends slower is not taken for gone."""
        self.tx_interval_s = tx_interval_s
        if self.deadline is not None:
            self.deadline = max(
                self.deadline, now + self.remote_mult * max(tx_interval_s, self.remote_tx_s or 0)
            )
        if self.remote_tx_s is not None:
            self.remote_tx_s = max(self.remote_tx_s, tx_interval_s)  # until its next packet says otherwise

    def detection_time_s(self) -> float:
        """RFC 5880 §6.8.4: the peer's Detect Mult times the slower of what we accept and it sends."""
        return self.remote_mult * max(self.tx_interval_s, self.remote_tx_s or 0.0)

    # -- what comes in ------------------------------------------------------------------------------
    def receive(self, pkt: ControlPacket, at: float) -> Transition | None:
        """Apply a packet the kernel received at ``at``. A packet for another session (its Your
        Discriminator is neither 0 nor ours) is ignored: False from :meth:`accepts`."""
        if not self.accepts(pkt):
            return None
        self.remote_discriminator = pkt.my_discriminator
        self.remote_state = pkt.state
        self.remote_tx_s = pkt.desired_min_tx_us / 1e6
        self.remote_mult = pkt.detect_mult
        self._arrivals.append(at)
        self.deadline = at + self.detection_time_s()
        if pkt.state == State.ADMIN_DOWN or (self.state == State.UP and pkt.state == State.DOWN):
            if self.state != State.DOWN:
                return self._go(State.DOWN, Diag.NEIGHBOR_SIGNALED_DOWN, at, "neighbor-down")
            return None
        if self.state == State.DOWN and self.held_for_loss:
            if at < self.hold_until:
                return None
            loss = self.loss(at)
            if loss is None or loss > self.loss_threshold / 2:  # type: ignore[operator]
                self.hold_until = at + self._window_s()  # judged again one window on
                return None
            self.held_for_loss = False
            return self._go(State.DOWN, Diag.NONE, at, "loss-cleared")
        if self.state == State.DOWN and pkt.state == State.DOWN:
            return self._go(State.INIT, Diag.NONE, at, "handshake")
        if pkt.state in _BRINGS_UP.get(self.state, ()):
            return self._go(State.UP, Diag.NONE, at, "handshake")
        return None

    def accepts(self, pkt: ControlPacket) -> bool:
        return pkt.your_discriminator in (0, self.my_discriminator)

    def expire(self, now: float) -> Transition | None:
        """The session's timers at ``now``: the detection time, then the loss threshold."""
        if self.state in (State.INIT, State.UP) and self.deadline is not None and now >= self.deadline:
            self.remote_discriminator = 0
            late = now - self.deadline
            if self._lossy(now):  # a gray link that also lost a run of packets: held down as for loss
                return self._hold(now, late)
            return self._go(State.DOWN, Diag.DETECTION_TIME_EXPIRED, now, "detection-time", late)
        up_a_window = self.up_since is not None and now - self.up_since >= self._window_s()
        if self.state == State.UP and up_a_window and self._lossy(now):
            return self._hold(now)
        return None

    def _lossy(self, now: float) -> bool:
        loss = self.loss(now) if self.loss_threshold is not None else None
        return loss is not None and loss > self.loss_threshold  # type: ignore[operator]

    def _hold(self, now: float, late_s: float = 0.0) -> Transition:
        self.held_for_loss = True
        self.hold_until = now + self._window_s() * 2 ** min(self.loss_downs, 6)
        self.loss_downs += 1
        return self._go(State.DOWN, Diag.DETECTION_TIME_EXPIRED, now, "loss", late_s)

    def _window_s(self) -> float:
        return self.loss_window * (self.remote_tx_s or self.tx_interval_s)

    def loss(self, now: float) -> float | None:
        """The share of the peer's packets missing from the last loss window before ``now``; None before
        the peer said how often it sends, or before it has been heard for a whole window (a session that
        just came up has no window to judge by)."""
        if self.remote_tx_s is None or not self._arrivals:
            return None
        start = now - self._window_s()
        if self._arrivals[0] > start:
            return None
        heard = sum(1 for t in self._arrivals if start < t <= now)
        return max(0.0, 1.0 - heard / self.loss_window)

    def _go(self, state: State, diag: Diag, at: float, reason: str, late_s: float = 0.0) -> Transition:
        self.state, self.diag = state, diag
        self.up_since = at if state == State.UP else None
        if state == State.DOWN and reason != "loss-cleared":
            self.deadline = None
        return Transition(at, state, reason, max(0.0, late_s))
