"""aidcnet.agent.outbox.Outbox against a scripted BatchIO: what a full queue (ENOBUFS) or a full send
buffer (EAGAIN) refused is sent again later, in order, from the event loop (a timer, or writer readiness);
what the kernel refuses for good is not; a full backlog drops the newest and counts them. The real kernel
path is tests/unit/aidcnet/agent/ina/test_shaped_link.py."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

from aidcnet.agent.outbox import Outbox
from aidcnet.udpio import Datagram


class ScriptedIO:
    """Accepts datagrams as BatchIO does, but stops where ``script`` says: each call takes the next
    ``(accept, why)``: accept that many, then stop with ``why`` ("nobufs", "again") or not at all (None)."""

    def __init__(self, script: list[tuple[int, str | None]], refuse: frozenset[bytes] = frozenset()) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # always writable: a real fd to watch
        self.script = script
        self.refuse = refuse
        self.wire: list[bytes] = []
        self.nobufs = 0
        self.stopped_at: int | None = None
        self.calls = 0

    def send(self, msgs: Sequence[Datagram], failed: list[int] | None = None) -> int:
        self.calls += 1
        accept, why = self.script.pop(0) if self.script else (len(msgs), None)
        self.stopped_at = None
        sent = 0
        for i, (data, _addr) in enumerate(msgs):
            if i >= accept and why is not None:
                self.stopped_at = i
                self.nobufs += why == "nobufs"
                assert failed is not None
                failed.extend(range(i, len(msgs)))
                break
            if bytes(data) in self.refuse:
                assert failed is not None
                failed.append(i)
                continue
            self.wire.append(bytes(data))
            sent += 1
        return sent


def grams(*ns: int) -> list[Datagram]:
    return [(bytes([n]), ("10.0.0.1", 9)) for n in ns]


async def settle(box: Outbox) -> None:
    for _ in range(200):
        if not box.backlog:
            return
        await asyncio.sleep(0.002)


def test_a_full_queue_resends_in_order_after_a_timer_and_new_sends_wait_behind() -> None:
    io = ScriptedIO([(3, "nobufs"), (0, "nobufs")])

    async def go() -> Outbox:
        box = Outbox(io)  # type: ignore[arg-type]
        box.attach(asyncio.get_running_loop())
        box.send(grams(*range(10)))
        assert box._timer is not None and not box._writer  # ENOBUFS: nothing would wake a writer
        box.send(grams(10, 11))  # behind the backlog, not before it
        assert io.wire == [bytes([n]) for n in range(3)]
        await settle(box)
        return box

    box = asyncio.run(go())
    assert io.wire == [bytes([n]) for n in range(12)]
    assert box.nobufs == 2 and box.sent == 12 and box.refused == 0 and not box.backlog
    assert box.deferred == 7 + 9  # 3..9 at the first stop; 3..11 at the second


def test_a_full_send_buffer_waits_for_the_socket_to_be_writable() -> None:
    io = ScriptedIO([(2, "again")])

    async def go() -> Outbox:
        box = Outbox(io)  # type: ignore[arg-type]
        box.attach(asyncio.get_running_loop())
        box.send(grams(1, 2, 3, 4))
        assert box._writer and box._timer is None
        await settle(box)
        return box

    box = asyncio.run(go())
    assert io.wire == [bytes([n]) for n in (1, 2, 3, 4)] and box.nobufs == 0 and not box._writer


def test_a_datagram_refused_for_good_is_counted_not_resent() -> None:
    io = ScriptedIO([], refuse=frozenset({b"\x02"}))
    box = Outbox(io)  # type: ignore[arg-type]
    box.send(grams(1, 2, 3))
    assert io.wire == [b"\x01", b"\x03"] and box.refused == 1 and box.sent == 2 and io.calls == 1


def test_a_full_backlog_drops_the_newest_and_counts_them() -> None:
    io = ScriptedIO([(0, "nobufs")] * 100)
    box = Outbox(io, limit=4)  # type: ignore[arg-type]  # no loop attached: nothing retries
    box.send(grams(*range(10)))
    assert list(box.backlog) == grams(0, 1, 2, 3) and box.overflow == 6


def test_a_pending_icmp_error_does_not_cost_the_next_datagram() -> None:
    """With IP_RECVERR a port-unreachable from an earlier send fails the next send once (ECONNREFUSED);
    the Outbox reads the error off and sends the datagram again (real sockets on loopback)."""
    from aidcnet.udpio import BatchIO, enable_backpressure

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, socket.socket(
        socket.AF_INET, socket.SOCK_DGRAM
    ) as tx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gone:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(2.0)
        gone.bind(("127.0.0.1", 0))
        closed_port = gone.getsockname()[1]
        gone.close()  # nothing listens there now: sending to it draws an ICMP port unreachable
        tx.bind(("127.0.0.1", 0))
        tx.setblocking(False)
        enable_backpressure(tx)
        box = Outbox(BatchIO(tx))
        box.send([(b"to-nobody", ("127.0.0.1", closed_port))])
        import time

        time.sleep(0.05)  # the ICMP error arrives and is queued on tx
        box.send([(b"hello", rx.getsockname())])
        assert rx.recv(64) == b"hello"
        assert box.icmp_errors >= 1 and box.refused == 0 and box.sent == 2
