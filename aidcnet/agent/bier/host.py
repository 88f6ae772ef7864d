"""Host BIER API for a GPU host that is its own BFIR and BFER (RFC 8279 §2: a host-resident BFR).

``send(payload, receivers)`` encapsulates with the host's BFR-id and leaves through its
dataplane to its leaf; payloads whose BitString holds the host's bit come back through
:meth:`BierHost.recv` (an in-process queue), a callback, or a UDP datagram to a local
application socket (``app_port``), in that order of configuration.
"""

from __future__ import annotations

import contextlib
import queue
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.bier.header import BierProto


class Delivery(NamedTuple):
    payload: bytes
    bfir_id: int
    proto: int


class BierHost:
    """Wraps a :class:`BierDataplane` whose ``bfr_id`` is the host's own.

    Delivery goes to ``on_payload(payload, bfir_id, proto)`` if given, else to
    ``app_addr:app_port`` over UDP if ``app_port`` is given, else into a bounded queue read
    with :meth:`recv`.  A full queue or an unreachable application drops the payload and
    counts it in :attr:`dropped` rather than stalling the dataplane.
    """

    def __init__(
        self,
        dataplane: BierDataplane,
        app_port: int | None = None,
        app_addr: str = "127.0.0.1",
        on_payload: Callable[[bytes, int, int], None] | None = None,
        proto: int = BierProto.IPV4,
        queue_size: int = 4096,
    ) -> None:
        if dataplane.bfr_id is None:
            raise ValueError("a BIER host needs a BFR-id: it is BFIR and BFER")
        self.dataplane = dataplane
        self.proto = proto
        self.delivered = 0
        self.dropped = 0
        self._on_payload = on_payload
        self._queue: queue.Queue[Delivery] = queue.Queue(queue_size)
        self._app: tuple[str, int] | None = None
        self._app_sock: socket.socket | None = None
        if on_payload is None and app_port is not None:
            self._app = (app_addr, app_port)
            self._app_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._app_sock.setblocking(False)
        dataplane.deliver = self._deliver

    @property
    def bfr_id(self) -> int:
        return self.dataplane.bfr_id  # type: ignore[return-value]

    def send(self, payload: bytes, receivers: Iterable[int], entropy: int = 0, ttl: int = 64) -> int:
        """Send ``payload`` to the BFERs ``receivers`` (BFR-ids); returns BIER packets built."""
        return self.dataplane.impose(payload, receivers, self.proto, entropy, ttl)

    def send_many(
        self, payloads: Sequence[tuple[bytes, int]], receivers: Iterable[int], ttl: int = 64
    ) -> int:
        """Send each ``(payload, entropy)`` to the same BFERs in one batch; returns BIER packets built."""
        return self.dataplane.impose_many(payloads, receivers, self.proto, ttl)

    def recv(self, timeout: float | None = None) -> Delivery | None:
        """Next delivered payload from the queue, or None after ``timeout`` seconds."""
        try:
            return self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
        except queue.Empty:
            return None

    def _deliver(self, payload: bytes, bfir_id: int, proto: int, header: bytes) -> None:
        del header
        if self._on_payload is not None:
            self._on_payload(payload, bfir_id, proto)
        elif self._app_sock is not None:
            try:
                self._app_sock.sendto(payload, self._app)  # type: ignore[arg-type]
            except OSError:
                self.dropped += 1
                return
        else:
            try:
                self._queue.put_nowait(Delivery(payload, bfir_id, proto))
            except queue.Full:
                self.dropped += 1
                return
        self.delivered += 1

    def close(self) -> None:
        if self._app_sock is not None:
            with contextlib.suppress(OSError):
                self._app_sock.close()
        self.dataplane.close()
