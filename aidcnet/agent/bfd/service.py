"""The agent's BFD service: one session per link the node file's ``bfd`` section lists, each with a
receive socket on the link address's port 3784 and a send socket on source port 49152 (RFC 5881 §4),
both bound to the interface, sending with TTL 255 and accepting only TTL 255 (RFC 5881 §5).

Every received packet is applied at the kernel's receive stamp, and before any timer is judged the
sockets are drained, so an agent that was busy does not take a link that kept talking for a dead one.
A link whose session has been Up and is not any more is *down*: the agent hands the set to every service
(``Service.links_down``), together with the links without carrier, so a static BIFT forwards around it.
Each change is kept (``aidcnet ctl bfd``): interface, new state, reason, when (wall ns), and how late the
agent decided it after the protocol's own moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.service import Service
from aidcnet.bfd.packet import BFD_PORT, SOURCE_PORT, BfdDecodeError, ControlPacket, State
from aidcnet.bfd.session import Session, Transition
from aidcnet.netstate import link_peers
from aidcnet.udpio import STAMP_SPACE, enable_rx_stamps, received_ttl, rx_stamp_ns

if TYPE_CHECKING:
    from aidcnet.config import Bfd, NodeConfig

log = logging.getLogger("aidcnet.bfd")

SO_BINDTODEVICE = 25
IP_RECVTTL = 12
GTSM_TTL = 255
# Below this many wall seconds between packets, a Python agent's timers are not to be trusted.
MIN_WALL_INTERVAL_S = 0.005
# A send later than this share of an interval is counted late (bfd.tx.late): the peer may read it as loss.
LATE_SHARE = 0.5
EVENTS_KEPT = 1024
_TTL_SPACE = socket.CMSG_SPACE(4)


class _End:
    """One interface's session and its two sockets."""

    def __init__(self, ifname: str, own: str, peer: str, session: Session) -> None:
        self.ifname, self.own, self.peer, self.session = ifname, own, peer, session
        self.was_up = False
        self.next_tx = 0.0
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for sock, port in ((self.rx, BFD_PORT), (self.tx, SOURCE_PORT)):
                sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, ifname.encode())
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, GTSM_TTL)
                sock.bind((own, port))
                sock.setblocking(False)
            self.rx.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
            enable_rx_stamps(self.rx)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        self.rx.close()
        self.tx.close()


class BfdService:
    def __init__(self, bfd: Bfd, config: NodeConfig, on_change: Callable[[frozenset[str]], None]) -> None:
        self.bfd = bfd
        self.interval_s = config.clock.wall_s(bfd.interval_us * 1e-6)
        self.on_change = on_change
        self.c: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []
        self.down: frozenset[str] = frozenset()
        if self.interval_s < MIN_WALL_INTERVAL_S:
            log.warning(
                "bfd: %.1f us of fabric time is %.2f ms on the wall at scale %s: below %.0f ms, this agent's "
                "timers are not to be trusted; raise bfd.interval_us or the time scale",
                bfd.interval_us, self.interval_s * 1e3, config.time_scale, MIN_WALL_INTERVAL_S * 1e3,
            )  # fmt: skip
        peers = {ifname: (own, peer) for ifname, own, peer in link_peers(config) if ifname in bfd.interfaces}
        self.ends: dict[str, _End] = {}
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            for k, ifname in enumerate(bfd.interfaces):
                own, peer = peers[ifname]
                session = Session(k + 1, self.interval_s, bfd.multiplier, bfd.loss_threshold, bfd.loss_window)
                self.ends[ifname] = _End(ifname, own, peer, session)
        except BaseException:
            self.close()
            raise

    def rescale(self, config: NodeConfig) -> None:
        """The lab's time scale changed (a replay's automatic scale, a confirmation): the sessions stay Up
        and send at the new wall interval (a rebuilt one would be down for a handshake at the run's start)."""
        self.interval_s = config.clock.wall_s(self.bfd.interval_us * 1e-6)
        now = time.time()
        for end in self.ends.values():
            end.session.rescale(self.interval_s, now)
            end.next_tx = min(end.next_tx, now + self.interval_s)
        self.c["rescaled"] += 1

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        now = time.time()
        for k, end in enumerate(self.ends.values()):
            # spread the first sends over an interval, so a node's sessions do not all send at once
            end.next_tx = now + self.interval_s * k / max(1, len(self.ends))
            loop.add_reader(end.rx.fileno(), self._read, end)
        self._task = loop.create_task(self._timers())

    # -- receive ------------------------------------------------------------------------------------
    def _read(self, end: _End) -> None:
        while True:
            try:
                data, anc, _flags, addr = end.rx.recvmsg(64, STAMP_SPACE + _TTL_SPACE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.c["rx.errors"] += 1
                log.warning("bfd %s: receive failed: %s", end.ifname, exc)
                return
            stamp_ns = rx_stamp_ns(anc)
            at = stamp_ns / 1e9 if stamp_ns else time.time()
            ttl = received_ttl(anc)
            if ttl is not None and ttl != GTSM_TTL:
                self.c["rx.dropped.ttl"] += 1  # RFC 5881 §5: not from the other end of this link
                continue
            if addr[0] != end.peer:
                self.c["rx.dropped.source"] += 1
                continue
            try:
                pkt = ControlPacket.decode(data)
            except (BfdDecodeError, ValueError) as exc:
                self.c[f"rx.dropped.{getattr(exc, 'reason', 'malformed')}"] += 1
                continue
            if not end.session.accepts(pkt):
                self.c["rx.dropped.discriminator"] += 1
                continue
            self.c["rx"] += 1
            self._changed(end, end.session.receive(pkt, at))

    # -- timers -------------------------------------------------------------------------------------
    async def _timers(self) -> None:
        while True:
            now = time.time()
            for end in self.ends.values():
                if end.next_tx <= now:
                    if now - end.next_tx > self.interval_s * LATE_SHARE:
                        self.c["tx.late"] += 1
                    self._send(end)
                    # the next slot after now: a late agent sends no burst that would hide its lateness
                    missed = int((now - end.next_tx) // self.interval_s)
                    end.next_tx += (missed + 1) * self.interval_s
            for end in self.ends.values():
                self._read(end)  # what the kernel holds counts at its receive time, before any verdict
            now = time.time()
            for end in self.ends.values():
                self._changed(end, end.session.expire(now))
            wake = min((e.next_tx for e in self.ends.values()), default=now + 1.0)
            deadlines = [e.session.deadline for e in self.ends.values() if e.session.deadline is not None]
            wake = min([wake, *deadlines])
            await asyncio.sleep(max(0.0, wake - time.time()))

    def _send(self, end: _End) -> None:
        try:
            end.tx.sendto(end.session.packet().encode(), (end.peer, BFD_PORT))
            self.c["tx"] += 1
        except OSError as exc:  # a link without carrier refuses: that is what the peer is to notice
            self.c["tx.errors"] += 1
            log.debug("bfd %s: send failed: %s", end.ifname, exc)

    def _changed(self, end: _End, change: Transition | None) -> None:
        if change is None:
            return
        self.c[f"{change.state.name.lower().replace('_', '-')}"] += 1
        self.c[f"reason.{change.reason}"] += 1
        if change.state == State.UP:
            end.was_up = True
        self.events.append({
            "interface": end.ifname,
            "peer": end.peer,
            "state": change.state.name.lower(),
            "reason": change.reason,
            "at_ns": round(change.at * 1e9),
            "late_s": change.late_s,
        })  # fmt: skip
        del self.events[:-EVENTS_KEPT]
        log.info("bfd %s (%s): %s, %s", end.ifname, end.peer, change.state.name, change.reason)
        down = frozenset(e.ifname for e in self.ends.values() if e.was_up and e.session.state != State.UP)
        if down != self.down:
            self.down = down
            self.on_change(down)

    def status(self) -> dict[str, Any]:
        now = time.time()
        return {
            "interval_us": self.bfd.interval_us,
            "wall_interval_s": self.interval_s,
            "multiplier": self.bfd.multiplier,
            "loss_threshold": self.bfd.loss_threshold,
            "sessions": [
                {
                    "interface": e.ifname,
                    "peer": e.peer,
                    "state": e.session.state.name.lower(),
                    "remote_state": e.session.remote_state.name.lower(),
                    "loss": e.session.loss(now),
                }
                for e in self.ends.values()
            ],
            "down": sorted(self.down),
            "events": list(self.events),
        }

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for end in self.ends.values():
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(end.rx.fileno())
            end.close()


class BfdPart(Service):
    """Rebuilt when the node file's ``bfd`` section, the interfaces or the time scale change; tells the
    agent (``on_change``) which links its sessions take down."""

    def __init__(self, on_change: Callable[[frozenset[str]], None]) -> None:
        self.on_change = on_change
        self.current: BfdService | None = None
        self._key: tuple[Any, ...] | None = None

    async def reload(self, config: NodeConfig | None) -> None:
        bfd = config.bfd if config else None
        key = (bfd, tuple(config.interfaces) if config else (), config.time_scale if config else None)
        if key == self._key:
            return
        if (
            self.current is not None
            and config is not None
            and self._key is not None
            and key[:2] == self._key[:2]
        ):
            self.current.rescale(config)  # only the time scale changed
            self._key = key
            return
        await self.stop()
        if bfd is None or config is None or not bfd.interfaces:
            return
        service = BfdService(bfd, config, self.on_change)
        service.attach(asyncio.get_running_loop())
        self.current, self._key = service, key

    async def stop(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None
            self.on_change(frozenset())  # nothing is known to be down without sessions
        self._key = None

    async def show(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.current is None:
            raise ValueError(
                "this node runs no BFD (no bfd section applied; the lab's vars: bfd: {enabled: true})"
            )
        return {"ok": True, **self.current.status()}

    def handlers(self) -> dict[Op, Handler]:
        return {Op.BFD: self.show}

    def counters(self) -> dict[str, int]:
        if self.current is None:
            return {}
        return {f"bfd.{k}": v for k, v in self.current.c.items()}
