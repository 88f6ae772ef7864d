"""The retransmission rule our senders had before RFC 6298 (issue 12), kept as the baseline the tests
measure against in the same run: every chunk or message whose own last send is ``fixed`` seconds old is
sent again, all of them at once, and nothing restarts or backs off the timer."""

from __future__ import annotations

from collections import deque

from aidcnet.rto import RtoEstimator

OLD_TIMEOUT_S = 0.2


class FixedTimerWindow:
    """SendWindow's interface with the old rule."""

    def __init__(self, chunks: int, window: int, fixed: float = OLD_TIMEOUT_S) -> None:
        self.chunks, self.window, self.fixed = chunks, window, fixed
        self.rto = RtoEstimator(fixed, fixed, fixed)  # never sampled: only for the agent's reply
        self.lowest = self.next_new = self.retransmits = 0
        self.sent_at: dict[int, float] = {}
        self.finished: set[int] = set()

    @property
    def complete(self) -> bool:
        return len(self.finished) == self.chunks

    def next_deadline(self) -> float | None:
        return min(self.sent_at.values()) + self.fixed if self.sent_at else None

    def due(self, now: float) -> list[tuple[int, bool]]:
        out = [(chunk, True) for chunk, at in self.sent_at.items() if now >= at + self.fixed]
        for chunk, _ in out:
            self.sent_at[chunk] = now
        self.retransmits += len(out)
        while self.next_new < self.chunks and self.next_new < self.lowest + self.window:
            self.sent_at[self.next_new] = now
            out.append((self.next_new, False))
            self.next_new += 1
        return out

    def done(self, chunk: int, now: float) -> bool:
        if not 0 <= chunk < self.chunks or chunk in self.finished:
            return False
        self.finished.add(chunk)
        self.sent_at.pop(chunk, None)
        while self.lowest in self.finished:
            self.lowest += 1
        return True


class FixedTimerSender:
    """ReliableSender's interface with the old rule."""

    def __init__(self, window: int, fixed: float = OLD_TIMEOUT_S) -> None:
        self.window, self.fixed = window, fixed
        self.rto = RtoEstimator(fixed, fixed, fixed)
        self.queue: deque[tuple[tuple[int, bool], bytes]] = deque()
        self.unacked: dict[tuple[int, bool], tuple[bytes, float]] = {}
        self.retransmits = 0

    def push(self, key: tuple[int, bool], data: bytes) -> None:
        self.queue.append((key, data))

    def ack(self, key: tuple[int, bool], now: float) -> None:
        self.unacked.pop(key, None)

    @property
    def idle(self) -> bool:
        return not self.queue and not self.unacked

    def next_deadline(self) -> float | None:
        return min(at for _d, at in self.unacked.values()) + self.fixed if self.unacked else None

    def due(self, now: float) -> list[bytes]:
        out = []
        for key, (data, at) in list(self.unacked.items()):
            if now >= at + self.fixed:
                self.unacked[key] = (data, now)
                self.retransmits += 1
                out.append(data)
        while self.queue and len(self.unacked) < self.window:
            key, data = self.queue.popleft()
            self.unacked[key] = (data, now)
            out.append(data)
        return out
