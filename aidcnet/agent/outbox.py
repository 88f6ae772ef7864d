"""A UDP socket's send path in the agent's event loop that loses nothing to a full local queue.

On a shaped link (issue 12) a burst can outrun the link: the socket's send buffer fills (EAGAIN) or,
with ``IP_RECVERR`` (:func:`aidcnet.udpio.enable_backpressure`), the shaper's queue refuses a datagram
(ENOBUFS) where it would otherwise drop it silently. Either way :class:`BatchIO` stops at that datagram
(``stopped_at``); the :class:`Outbox` keeps it and everything after it, in order, and sends them again
later without blocking the loop:

* EAGAIN (no socket memory): when the socket is writable again (``loop.add_writer``): memory comes
  back as datagrams leave the queue below it;
* ENOBUFS (the queue below is full, and nothing wakes a writer for that): after a short timer,
  doubling from ``backoff[0]`` to ``backoff[1]`` seconds while the queue stays full.

While a backlog waits, new datagrams queue behind it, so the order on the wire is the order of
:meth:`send` calls. The backlog is bounded (``limit`` datagrams); past it the newest are dropped and
counted (``overflow``), which no windowed sender of ours reaches (its window bounds what it has out).
One FIFO for all destinations: a datagram for a full link delays those behind it for other links, which
costs time but never a datagram.

``IP_RECVERR`` has a second effect: an ICMP error (port unreachable, ...) is queued on the socket and
makes its next send fail once (ECONNREFUSED), for whatever datagram comes next. A refused datagram is
therefore sent once more when the socket had such errors queued (read off and counted, ``icmp_errors``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Final

from aidcnet.udpio import BatchIO, Datagram, drain_error_queue

DEFAULT_LIMIT: Final = 4096
# A 1 MiB queue at 20 Mbit/s drains in 0.4 s and one 9000-octet frame in 3.6 ms: retry within a few
# frames' time, and not much slower than the slowest link could have freed room.
DEFAULT_BACKOFF: Final = (0.001, 0.016)
_FLUSH_BATCH: Final = 256


class Outbox:
    def __init__(
        self,
        io: BatchIO,
        *,
        limit: int = DEFAULT_LIMIT,
        backoff: tuple[float, float] = DEFAULT_BACKOFF,
    ) -> None:
        self.io = io
        self.limit = limit
        self.backoff = backoff
        self.backlog: deque[Datagram] = deque()
        self.sent = 0
        self.sent_bytes = 0
        self.refused = 0
        """Datagrams the kernel refused for good (bad destination, too big): not sent again."""
        self.deferred = 0
        """Datagrams that met a full buffer or queue and went to the backlog (each time they did)."""
        self.overflow = 0
        """Datagrams dropped because the backlog was full."""
        self.icmp_errors = 0
        """ICMP errors read off the socket's error queue after a refused send."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._writer = False
        self._pause = backoff[0]

    @property
    def nobufs(self) -> int:
        return self.io.nobufs

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def close(self) -> None:
        """Stop retrying (the socket is about to close); what waits in the backlog is dropped."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer and self._loop is not None:
            self._loop.remove_writer(self.io.sock.fileno())
        self._writer = False
        self.backlog.clear()

    @property
    def waiting(self) -> bool:
        """A retry is scheduled: a timer or a writer callback."""
        return self._timer is not None or self._writer

    def send(self, out: Sequence[Datagram]) -> None:
        if not out:
            return
        if self.backlog:
            self._queue(out)
            if not self.waiting:
                self._flush()
            return
        left = self._try(out)
        if left:
            self._queue(left)

    def _queue(self, msgs: Sequence[Datagram]) -> None:
        room = self.limit - len(self.backlog)
        if room < len(msgs):
            self.overflow += len(msgs) - max(room, 0)
            msgs = msgs[: max(room, 0)]
        self.backlog.extend(msgs)

    def _try(self, msgs: Sequence[Datagram]) -> list[Datagram]:
        """Send ``msgs``; return the tail that met a full buffer or queue (and arm its retry)."""
        failed: list[int] = []
        nobufs = self.io.nobufs
        self.io.send(msgs, failed)
        stop = self.io.stopped_at
        end = len(msgs) if stop is None else stop
        bad = {i for i in failed if i < end}
        if bad and (icmp := drain_error_queue(self.io.sock)):
            # A pending ICMP error, not these datagrams, failed the send: try them once more.
            self.icmp_errors += icmp
            again = sorted(bad)
            retry: list[int] = []
            self.io.send([msgs[i] for i in again], retry)
            bad = {again[j] for j in retry}
        self.refused += len(bad)
        for i in range(end):
            if i not in bad:
                self.sent += 1
                self.sent_bytes += len(msgs[i][0])
        if stop is None:
            return []
        left = list(msgs[stop:])
        self.deferred += len(left)
        self._arm(queue_full=self.io.nobufs > nobufs)
        return left

    def _arm(self, queue_full: bool) -> None:
        if self._loop is None or self.waiting:
            return
        if queue_full:
            self._timer = self._loop.call_later(self._pause, self._on_timer)
            self._pause = min(self._pause * 2, self.backoff[1])
        else:
            self._writer = True
            self._loop.add_writer(self.io.sock.fileno(), self._on_writable)

    def _on_timer(self) -> None:
        self._timer = None
        self._flush()

    def _on_writable(self) -> None:
        assert self._loop is not None
        self._loop.remove_writer(self.io.sock.fileno())
        self._writer = False
        self._flush()

    def _flush(self) -> None:
        while self.backlog:
            n = min(_FLUSH_BATCH, len(self.backlog))
            batch = [self.backlog.popleft() for _ in range(n)]
            # Counted again only if they fail again: deferred counts each time one waits.
            left = self._try(batch)
            if left:
                self.backlog.extendleft(reversed(left))
                return
        self._pause = self.backoff[0]
