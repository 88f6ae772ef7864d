"""The replay's sockets on a host: the replay port's receivers, each datagram timed by the moment the kernel
received it (``SO_TIMESTAMPNS``, :class:`StampedReader`), the sockets a host joins its groups on, and the
senders' wait for room."""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import struct
import time
from collections.abc import Callable

from aidcnet.udpio import DEFAULT_BUFSIZE, BatchIO, set_socket_buffer

log = logging.getLogger("aidcnet.replay")

# A burst of ops at one t from 8 senders can put megabytes into one receiver's socket at once.
RCVBUF = 32 << 20
# Not in Python 3.11's socket module (Linux 2.6.31): 0 = a socket gets only the groups it joined itself.
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
# net.ipv4.igmp_max_memberships: the per-socket join limit; containers cannot raise it (/proc/sys is
# read-only), so the groups are spread over as many sockets as they need.
IGMP_MAX_MEMBERSHIPS_FILE = "/proc/sys/net/ipv4/igmp_max_memberships"
SIOCGIFADDR = 0x8915
# Datagrams read per wake of a socket: the loop's other work (the sends) runs between batches.
READ_BATCH = 64

OnDatagram = Callable[["bytes | memoryview", str, int], None]
"""``on_datagram(payload, source address, kernel receive stamp ns)``."""


def replay_socket(port: int) -> socket.socket:
    """A non-blocking UDP socket on ``port`` that receives only the groups it joins itself
    (IP_MULTICAST_ALL 0: the replay port's sockets share it, and each datagram must reach one of them)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        set_socket_buffer(sock, socket.SO_RCVBUF, RCVBUF)
        sock.bind(("0.0.0.0", port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class StampedReader:
    """Reads one socket on the event loop and hands on each datagram with the kernel's receive stamp, so a
    receiver that reads late does not stretch the times it measures. ``batched``: recvmmsg into a ring
    allocated once (the replay port's main socket); otherwise one recvmsg per datagram (the many group
    sockets, which should not each hold a ring)."""

    def __init__(self, sock: socket.socket, on_datagram: OnDatagram, batched: bool = False) -> None:
        self.sock = sock
        self.on_datagram = on_datagram
        self.io = BatchIO(sock, READ_BATCH, DEFAULT_BUFSIZE, mmsg=None if batched else False)
        self.io.enable_stamps()
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.sock.fileno(), self.drain)

    def drain(self) -> None:
        try:
            got = self.io.recv()
        except OSError as exc:
            log.warning("replay socket receive failed: %s", exc)
            return
        if not got:
            return
        now = time.time_ns()
        for (data, addr), stamp in zip(got, self.io.stamps, strict=True):
            # No stamp (0): the kernel wrote none; the moment we read it is the best we have.
            self.on_datagram(data, addr[0], stamp or now)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._loop = None
        self.sock.close()


def interface_address(ifname: str) -> bytes:
    """The IPv4 address of ``ifname``: struct ip_mreq_source names its interface by address."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()))[20:24]
        except OSError as exc:
            raise OSError(exc.errno, f"interface {ifname} has no IPv4 address to join on") from exc


def max_memberships() -> int:
    try:
        with open(IGMP_MAX_MEMBERSHIPS_FILE) as f:
            return max(1, int(f.read().strip()))
    except (OSError, ValueError):
        return 20  # the kernel default


async def writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Until ``sock`` has room (POLLOUT: at least half its send buffer free)."""
    fd = sock.fileno()
    # Mostly it has room: one poll that does not wait, not a trip through the event loop (two epoll_ctl
    # and a wakeup per message, which a host-BIER source pays on every op it sends).
    probe = select.poll()
    probe.register(fd, select.POLLOUT)
    if probe.poll(0):
        return
    fut: asyncio.Future[None] = loop.create_future()
    loop.add_writer(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        loop.remove_writer(fd)
