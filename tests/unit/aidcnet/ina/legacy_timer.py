"""The retransmission rule our senders had before RFC 6298 (issue 12), kept as the baseline the tests
measure against in the same run: every chunk or message whose own last send is ``fixed`` seconds old is
sent again, all of them at once, and nothing restarts or backs off the timer."""

from __future__ import annotations

from aidcnet.ina.worker import ReliableSender, SendWindow

OLD_TIMEOUT_S = 0.2


class FixedTimerWindow(SendWindow):
    def __init__(self, chunks: int, window: int, fixed: float = OLD_TIMEOUT_S) -> None:
        super().__init__(chunks, window, fixed)
        self.fixed = fixed

    def next_deadline(self) -> float | None:
        return min(self.sent_at.values()) + self.fixed if self.sent_at else None

    def due(self, now: float) -> list[tuple[int, bool]]:
        out = [(chunk, True) for chunk, at in self.sent_at.items() if now >= at + self.fixed]
        for chunk, _ in out:
            self.sent_at[chunk] = now
            self.resent.add(chunk)
        self.retransmits += len(out)
        while self.next_new < self.chunks and self.next_new < self.lowest + self.window:
            self.sent_at[self.next_new] = self.first_sent[self.next_new] = now
            out.append((self.next_new, False))
            self.next_new += 1
        return out


class FixedTimerSender(ReliableSender):
    def __init__(self, window: int, fixed: float = OLD_TIMEOUT_S) -> None:
        super().__init__(window, fixed)
        self.fixed = fixed

    def due(self, now: float) -> list[bytes]:
        out = []
        for key, (data, at) in list(self.unacked.items()):
            if now >= at + self.fixed:
                self.unacked[key] = (data, now)
                self.resent.add(key)
                self.retransmits += 1
                out.append(data)
        while self.queue and len(self.unacked) < self.window:
            key, data = self.queue.popleft()
            self.unacked[key] = (data, now)
            self.first_sent[key] = now
            out.append(data)
        return out
