"""In-network ACK aggregation at a BFR (seed 000, draft-zzhang-bier-optimized-use-in-aidc; ours).

A BFR that forwards DATA of a flow remembers, per (BFIR-id, Flow ID, sequence window), the id-mask of
the downstream BFERs it sent that window to (the BitStrings of its copies, i.e. BitString AND F-BM for
each BFR-NBR, RFC 8279 §6.5, plus its own bit when it delivered locally) and which of them have
acknowledged the whole window.  Feedback travels toward the BFIR on the reverse of the DATA's path,
so every ACK and AGG-ACK from below passes this BFR:

* when every expected BFER has acknowledged a window, one AGG-ACK (cumulative = the window's end,
  acked = the expected set) goes upstream and the entry is freed;
* ``partial_after`` seconds after the entry was made (and again after 2, 4, ... times that, capped
  at ``2**max_backoff``), a partial AGG-ACK names who acknowledged and who is missing, so the BFIR
  can retransmit to the missing BFERs only, before its own timer would resend to everyone; a partial
  from below whose missing BFERs are all that is left here is passed on at once instead of waiting
  for this BFR's own timer;
* with ``adaptive`` (the default) ``partial_after`` is only the floor and the first guess: each flow's
  timer then follows the time its windows take from first DATA to last ACK here, as RFC 6298 makes an
  RTO follow round trips (SRTT + 4 RTTVAR, at most ``lifetime`` / 2). A fixed timer shorter than a
  queue's delay sends a partial for windows that are only queued, and the BFIR answers it with
  retransmissions and its own extra ACK (the lab's 1.038 ACKs per packet for 1 branch). Karn's rule:
  a window that got DATA again after its first partial (a repair) gives no sample;
* an ACK this BFR cannot account for (no entry of its flow expects the reporter at that point: the
  entry was never made because the budget was full, expired, or the ACK is stale) is passed upstream
  unchanged: end-to-end acknowledgment is the fallback, so losing state here never loses data;
* NACKs are passed upstream unchanged (they ask for data now; holding them would delay repair);
  their cumulative point is still used like an ACK's;
* entries expire ``lifetime`` seconds after they were made; at most ``budget`` entries exist, and
  DATA that would need one more is counted ``over-budget`` and forwarded without state.

``window`` sequences share one entry (a power of two, so windows line up across the 2**32 wrap).
Every decision bumps one counter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

from aidcnet.bier.bitstring import BSL_CODES
from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, AggAck, Data, agg_acks
from aidcnet.rto import RtoEstimator

FlowKey = tuple[int, int]
Out = tuple[Hashable | None, Ack | AggAck]
"""Feedback to send: (upstream neighbor, message); neighbor None = route toward the BFIR by unicast."""


@dataclass(frozen=True)
class AggregatorConfig:
    window: int = 1  # sequences per entry
    partial_after: float = 0.004
    lifetime: float = 1.0
    budget: int = 4096  # entries
    max_backoff: int = 5  # partials of one entry come after partial_after × 2**k, k capped here
    bsl: int = 64  # BitString length of the AGG-ACKs it sends
    adaptive: bool = True  # per-flow partial timer from window completion times (floor partial_after)

    def __post_init__(self) -> None:
        if self.window < 1 or self.window & (self.window - 1) or self.window > 1 << 16:
            raise ValueError(f"window {self.window} must be a power of two, 1..65536")
        if not 0 < self.partial_after < self.lifetime:
            raise ValueError("need 0 < partial_after < lifetime")
        if self.budget < 0:
            raise ValueError("budget must be >= 0")
        if self.bsl not in BSL_CODES:
            raise ValueError(f"bsl {self.bsl} must be one of {sorted(BSL_CODES)}")


class _Entry:
    __slots__ = (
        "acked",
        "born",
        "deadline",
        "end",
        "expected",
        "expires",
        "partials",
        "repaired",
        "reported_missing",
        "start",
        "upstream",
    )

    def __init__(
        self, start: int, end: int, upstream: Hashable | None, now: float, cfg: AggregatorConfig, wait: float
    ):
        self.start = start
        self.born = now
        self.repaired = False
        self.end = end
        self.expected = 0
        self.acked = 0
        self.reported_missing = 0
        self.partials = 0
        self.upstream = upstream
        self.deadline = now + wait
        self.expires = now + cfg.lifetime

    def covers(self, cum: int) -> bool:
        """The receiver with cumulative point ``cum`` is inside this window."""
        return serial.le(self.start, cum) and serial.lt(cum, self.end)


class AckAggregator:
    """The aggregation state of one BFR (``bfr_id``: its BFR-id, or 0 for a BFR without one)."""

    def __init__(self, bfr_id: int = 0, config: AggregatorConfig | None = None) -> None:
        self.bfr_id = bfr_id
        self.config = config or AggregatorConfig()
        self.flows: dict[FlowKey, dict[int, _Entry]] = {}
        self.entries = 0
        self.counters: Counter[str] = Counter()
        self.timers: dict[FlowKey, RtoEstimator] = {}

    def partial_wait(self, key: FlowKey) -> float:
        """How long a new window of flow ``key`` waits before its first partial AGG-ACK."""
        timer = self.timers.get(key)
        return timer.current() if timer is not None else self.config.partial_after

    def forget(self) -> int:
        """Drop every entry and every learned timer, keeping the counters; returns the entries dropped.
        Before a new run: a window the last run left open would otherwise go on sending partial
        AGG-ACKs toward its BFIR for the aggregator's lifetime."""
        dropped = self.entries
        self.flows.clear()
        self.timers.clear()
        self.entries = 0
        self.counters["forgotten"] += dropped
        return dropped

    def _timer(self, key: FlowKey) -> RtoEstimator:
        timer = self.timers.get(key)
        if timer is None:
            cfg = self.config
            timer = RtoEstimator(
                initial=cfg.partial_after,
                min_rto=cfg.partial_after,
                max_rto=max(cfg.partial_after, cfg.lifetime / 2),
            )
            self.timers[key] = timer
            if len(self.timers) > max(1, self.config.budget):
                # Every op is a flow in the lab: forget the flow heard of longest ago, not grow forever.
                del self.timers[next(iter(self.timers))]
        return timer

    def on_data(self, data: Data, downstream: int, upstream: Hashable | None, now: float) -> None:
        """DATA this BFR forwarded (or delivered) to the BFERs of id-mask ``downstream``.

        ``upstream`` is where the DATA came from: the neighbor feedback for this flow goes back to.
        """
        if not downstream:
            return
        key = (data.bfir_id, data.flow_id)
        start = data.seq & ~(self.config.window - 1)
        flow = self.flows.get(key)
        entry = flow.get(start) if flow else None
        if entry is None:
            if self.entries >= self.config.budget:
                self.counters["over-budget"] += 1
                return
            end = serial.add(data.seq, 1) if data.fin else serial.add(start, self.config.window)
            entry = _Entry(start, end, upstream, now, self.config, self.partial_wait(key))
            self.flows.setdefault(key, {})[start] = entry
            self.entries += 1
            self.counters["entries-made"] += 1
        else:
            if entry.partials:
                entry.repaired = True
            if data.fin:
                entry.end = serial.add(data.seq, 1)
        entry.expected |= downstream
        entry.upstream = upstream

    def on_feedback(self, msg: Ack | AggAck, now: float) -> list[Out]:
        """An ACK, NACK or AGG-ACK from below: absorbed, aggregated, or passed upstream."""
        key = (msg.bfir_id, msg.flow_id)
        flow = self.flows.get(key, {})
        if isinstance(msg, AggAck):
            reporters, missing = msg.acked_mask(), msg.missing_mask()
        else:
            reporters, missing = 1 << (msg.reporter - 1), 0
        claimed = self._apply(flow, msg.cum, reporters, missing)
        out = self._finished(key, flow, now)
        if isinstance(msg, Ack) and msg.nack:
            self.counters["nack-passed"] += 1
            out.append((self._upstream(flow), msg))
        elif claimed == reporters | missing:
            self.counters["absorbed"] += 1
        else:
            self.counters["passed-no-entry"] += 1
            out.append((self._upstream(flow), msg))
        return out

    def poll(self, now: float) -> list[Out]:
        """Partial AGG-ACKs and expiries due at ``now``."""
        out: list[Out] = []
        for key, flow in list(self.flows.items()):
            due = []
            for start, entry in list(flow.items()):
                if now >= entry.expires:
                    del flow[start]
                    self.entries -= 1
                    self.counters["expired"] += 1
                elif now >= entry.deadline:
                    entry.partials += 1
                    backoff = 1 << min(entry.partials, self.config.max_backoff)
                    entry.deadline = now + self.partial_wait(key) * backoff
                    due.append(entry)
            for entry in due:
                # The latest due window's partial speaks for the earlier ones with no other BFERs: its
                # acked BFERs hold those windows too, and its missing ones are the earlier ones' (or
                # ahead of them), which the BFIR resends from the oldest sequence they owe.
                if any(serial.lt(entry.end, o.end) and entry.expected & ~o.expected == 0 for o in due):
                    self.counters["partial-coalesced"] += 1
                    continue
                out.extend(self._agg(key, entry, entry.expected & ~entry.acked, "partial-sent"))
            if not flow:
                del self.flows[key]
        return out

    def next_deadline(self) -> float | None:
        times = [min(e.deadline, e.expires) for flow in self.flows.values() for e in flow.values()]
        return min(times) if times else None

    # -- internals ---------------------------------------------------------------------------------

    def _apply(self, flow: dict[int, _Entry], cum: int, reporters: int, missing: int) -> int:
        """Record ``reporters`` as holding everything before ``cum``; return the bits accounted for."""
        claimed = 0
        for entry in flow.values():
            mine = reporters & entry.expected
            if serial.le(entry.end, cum):
                entry.acked |= mine
                entry.reported_missing &= ~entry.acked
                claimed |= mine
                if entry.end == cum:
                    # A partial from below speaks for its own window only: marking older windows too
                    # would re-send a partial for each of them on every partial from below.
                    entry.reported_missing = (
                        entry.reported_missing | (missing & entry.expected)
                    ) & ~entry.acked
                    claimed |= missing & entry.expected
            elif entry.covers(cum):
                claimed |= mine
        return claimed

    def _finished(self, key: FlowKey, flow: dict[int, _Entry], now: float) -> list[Out]:
        out: list[Out] = []
        done = [(start, e) for start, e in flow.items() if e.acked == e.expected]
        for start, entry in done:
            del flow[start]
            self.entries -= 1
            if self.config.adaptive:
                self._timer(key).sample(now - entry.born, retransmitted=entry.repaired)
            # One AGG-ACK with a later cumulative point for a superset of BFERs says all this one says.
            if any(serial.lt(entry.end, o.end) and entry.expected & ~o.expected == 0 for _, o in done):
                self.counters["agg-coalesced"] += 1
                continue
            out.extend(self._agg(key, entry, 0, "agg-sent"))
        for entry in flow.values():
            if entry.reported_missing and entry.acked | entry.reported_missing == entry.expected:
                # Everyone below has answered or been reported missing by a BFR below: no point waiting.
                out.extend(self._agg(key, entry, entry.reported_missing, "partial-sent"))
                entry.reported_missing = 0
                entry.deadline = now + self.partial_wait(key)
        if not flow:
            self.flows.pop(key, None)
        return out

    def _agg(self, key: FlowKey, entry: _Entry, missing: int, counter: str) -> list[Out]:
        msgs = agg_acks(key[0], key[1], entry.end, self.bfr_id, entry.acked, missing, self.config.bsl)
        self.counters[counter] += len(msgs)
        return [(entry.upstream, m) for m in msgs]

    @staticmethod
    def _upstream(flow: dict[int, _Entry]) -> Hashable | None:
        for entry in flow.values():
            return entry.upstream
        return None
