"""The host agent's side of a trace replay: a schedule of this host's ops, sent from a background task
at ``start + t``, and the receiver accounting of every replay message that reaches this host.

Unicast: one datagram stream per receiver, from the host's loopback to the receiver's loopback, UDP
destination port 4791 (RoCEv2), source port = QP. Host-BIER: each fragment once through the BIER
service with the receivers' BFR-ids. Both modes land in the same :class:`~aidcnet.replay.Reassembly`.
The payload format is ``docs/replay-payload.md``; the orchestrator side is ``orchestrator/replay.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from aidcnet.ipv4 import ROCEV2_PORT
from aidcnet.replay import DEFAULT_MAX_DATAGRAM, Reassembly, build_fragments

if TYPE_CHECKING:
    from aidcnet.agent.bier_service import BierService
    from aidcnet.ipv4 import UdpDatagram

log = logging.getLogger("aidcnet.replay")

MODES = ("unicast", "host-bier")
QP_PORT_BASE = 49152
DEFAULT_QPS = 8
# A burst of ops at one t from 8 senders can put megabytes into one receiver's socket at once.
RCVBUF = 32 << 20
SNDBUF = 8 << 20


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, service: ReplayService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.service.reassembly.add(data, time.time_ns(), src=addr[0])


class ReplayService:
    def __init__(self, loopback: str, bier: BierService | None = None) -> None:
        self.loopback = loopback
        self.bier = bier
        self.mode = "unicast"
        self.ops: list[list[Any]] = []
        self.receivers: dict[str, tuple[str, int | None]] = {}
        self.max_datagram = DEFAULT_MAX_DATAGRAM
        self.qps = DEFAULT_QPS
        self.gap_us = 0.0
        self.reassembly = Reassembly()
        self.sent_ops = 0
        self.sent_datagrams = 0
        self.send_errors: dict[str, int] = {}
        self.start_ns: int | None = None
        self.finished_ns: int | None = None
        self.task: asyncio.Task[None] | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._send_socks: list[socket.socket] = []

    # -- receiving -------------------------------------------------------------------------------------
    async def listen(self) -> None:
        if self._transport is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _big_buffer(sock, socket.SO_RCVBUF, RCVBUF)
        sock.bind(("0.0.0.0", ROCEV2_PORT))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Receiver(self), sock=sock)
        self._transport = transport  # type: ignore[assignment]

    def on_bier_datagram(self, datagram: UdpDatagram) -> bool:
        """BIER service hook: take host-BIER deliveries to the replay port; others stay with the service."""
        if datagram.dport != ROCEV2_PORT:
            return False
        self.reassembly.add(datagram.payload, time.time_ns(), src=datagram.src)
        return True

    # -- control ops -----------------------------------------------------------------------------------
    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            raise ValueError("a replay is running on this host; wait for replay_status done")
        mode = str(request.get("mode", "unicast"))
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "host-bier" and (self.bier is None or self.bier.host is None):
            raise ValueError("host-bier replay needs this host's BIER service (no bier section applied)")
        receivers = {
            name: (str(addr), None if bfr_id is None else int(bfr_id))
            for name, (addr, bfr_id) in request.get("receivers", {}).items()
        }
        ops = [
            [int(i), float(t), int(size), [str(d) for d in dst]] for i, t, size, dst in request.get("ops", [])
        ]
        for _i, _t, _size, dst in ops:
            for d in dst:
                if d not in receivers:
                    raise ValueError(f"op receiver {d!r} is not in the request's receivers")
                if mode == "host-bier" and receivers[d][1] is None:
                    raise ValueError(f"receiver {d!r} has no BFR-id: host-bier needs one")
        if request.get("append"):
            if mode != self.mode:
                raise ValueError(f"append in mode {mode} to a schedule loaded in mode {self.mode}")
            self.receivers.update(receivers)
            self.ops.extend(ops)
        else:
            self.mode, self.receivers, self.ops = mode, receivers, ops
            self.max_datagram = int(request.get("max_datagram", DEFAULT_MAX_DATAGRAM))
            self.qps = max(1, int(request.get("qps", DEFAULT_QPS)))
            self.gap_us = float(request.get("gap_us", 0.0))
            # A new load is a new run: forget what was received and sent before.
            self.reassembly = Reassembly(max_datagram=self.max_datagram)
            self.sent_ops = self.sent_datagrams = 0
            self.send_errors = {}
            self.start_ns = self.finished_ns = None
        self.ops.sort(key=lambda op: (op[1], op[0]))
        return {"ok": True, "ops": len(self.ops), "mode": self.mode}

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            raise ValueError("a replay is already running on this host")
        self.start_ns = int(request["start_ns"])
        self.finished_ns = None
        self.task = asyncio.get_running_loop().create_task(self._run())
        return {"ok": True, "ops": len(self.ops), "starts_in_s": (self.start_ns - time.time_ns()) / 1e9}

    def status(self) -> dict[str, Any]:
        return {
            "ok": True,
            "mode": self.mode,
            "ops": len(self.ops),
            "sent_ops": self.sent_ops,
            "sent_datagrams": self.sent_datagrams,
            "send_errors": dict(self.send_errors),
            "done": self.finished_ns is not None,
            "finished_ns": self.finished_ns,
            "received_messages": len(self.reassembly.records),
            "received_complete": self.reassembly.complete_good(),
        }

    def results(self) -> dict[str, Any]:
        return {"ok": True, **self.reassembly.to_dict()}

    # -- sending ---------------------------------------------------------------------------------------
    def _open_send_sockets(self) -> None:
        self._close_send_sockets()
        for k in range(self.qps):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            _big_buffer(sock, socket.SO_SNDBUF, SNDBUF)
            sock.bind((self.loopback, QP_PORT_BASE + k))
            sock.setblocking(False)
            self._send_socks.append(sock)

    def _close_send_sockets(self) -> None:
        for sock in self._send_socks:
            sock.close()
        self._send_socks = []

    def _error(self, reason: str) -> None:
        self.send_errors[reason] = self.send_errors.get(reason, 0) + 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.start_ns is not None
        try:
            if self.mode == "unicast":
                self._open_send_sockets()
            for msg_id, t, size, dst in self.ops:
                due = self.start_ns + int(t * 1e9)
                delay = (due - time.time_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                # The scheduled time, not the actual one: a late sender shows up as latency.
                send_ns = max(due, 0)
                frags = build_fragments(msg_id, size, send_ns, self.max_datagram)
                if self.mode == "unicast":
                    for j, name in enumerate(dst):
                        sock = self._send_socks[(msg_id + j) % len(self._send_socks)]
                        addr = (self.receivers[name][0], ROCEV2_PORT)
                        for frag in frags:
                            await self._sendto(loop, sock, frag, addr)
                else:
                    bits = [self.receivers[name][1] for name in dst]
                    assert self.bier is not None
                    for frag in frags:
                        try:
                            self.bier.send([frag], bits, entropy=msg_id)  # type: ignore[list-item]
                            self.sent_datagrams += 1
                        except OSError as exc:
                            self._error(type(exc).__name__)
                        await self._pace()
                self.sent_ops += 1
                # Let the receive side run between ops so a burst does not starve it.
                await asyncio.sleep(0)
        except Exception:  # the task's failure must show in replay_status, not vanish
            log.exception("replay failed")
            self._error("exception")
        finally:
            self._close_send_sockets()
            self.finished_ns = time.time_ns()

    async def _sendto(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes, addr: tuple[str, int]
    ) -> None:
        try:
            await loop.sock_sendto(sock, data, addr)
            self.sent_datagrams += 1
        except OSError as exc:
            self._error(exc.strerror or type(exc).__name__)
        await self._pace()

    async def _pace(self) -> None:
        if self.gap_us > 0:
            await asyncio.sleep(self.gap_us / 1e6)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self._close_send_sockets()
        if self._transport is not None:
            self._transport.close()
            self._transport = None


def _big_buffer(sock: socket.socket, opt: int, size: int) -> None:
    # SO_*BUFFORCE passes the netns's rmem_max/wmem_max with CAP_NET_ADMIN; fall back to the capped one.
    force = {socket.SO_RCVBUF: 33, socket.SO_SNDBUF: 32}[opt]
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)
    except OSError:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
