"""Batched, non-blocking UDP datagram I/O for Linux: recvmmsg(2)/sendmmsg(2) through ctypes.

One system call moves a whole batch, which is what lifts a Python forwarder from ~200k to
~260k packets/s per core (docs/design.md §5).  Where libc lacks the calls (not
Linux, or a libc without them) or the socket is not IPv4, a plain ``recvmsg``/``sendto``
loop with the same semantics is used instead, chosen automatically.

Semantics shared by both paths:

* never block: ``MSG_DONTWAIT`` on every call, whatever the socket's blocking mode; an empty
  socket gives ``[]`` and a full send buffer (EAGAIN) ends a send early;
* :func:`recv_batch` returns ``[(data, (addr, port)), ...]``.  On the ctypes path ``data`` is a
  ``memoryview`` into a buffer that is reused: it stays valid only until the next receive on
  the same socket (copy it with ``bytes(data)`` to keep it);
* :func:`send_batch` returns how many datagrams were handed to the kernel.  A datagram the
  kernel refuses for its own reason (bad destination, too big), or one longer than ``bufsize``,
  is skipped and the rest are still sent; pass ``failed=[]`` to learn the indexes of the
  datagrams that were not sent.  A full local queue ends a send early like a full send buffer:
  ENOBUFS (only with ``IP_RECVERR``, see :func:`enable_backpressure`) means the shaper's queue
  dropped that datagram, so it and the rest are reported failed, to be sent again.

Back-pressure from a shaped link (docs/design.md §5): a socket whose SO_SNDBUF is below the shaper's queue
limit cannot overrun it, because a datagram's memory stays charged to the socket until it leaves the
queue; the send buffer fills (EAGAIN) first, and :func:`send_all` waits for room. Where several
sockets share a queue, IP_RECVERR turns a queue drop into ENOBUFS instead of a silent loss, and
:func:`send_all` backs off and sends the datagram again.

Buffers (datagram slots, ``iovec`` and ``mmsghdr`` arrays, address slots) are allocated once
per socket and per direction by :class:`BatchIO`; the module functions keep one per socket.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import socket
import struct
import sys
import weakref
from collections.abc import Sequence

Address = tuple[str, int]
Datagram = tuple["bytes | bytearray | memoryview", Address]

DEFAULT_BATCH = 64
# Largest UDP payload over IPv4; slots this big never truncate, and only touched pages cost RAM.
DEFAULT_BUFSIZE = 65536

# int(): socket exposes these as IntFlag members, whose ``&`` costs a Python-level call per datagram.
_MSG_DONTWAIT = int(getattr(socket, "MSG_DONTWAIT", 0x40))
_MSG_TRUNC = int(getattr(socket, "MSG_TRUNC", 0x20))
_AF_INET = int(socket.AF_INET)
_AGAIN = frozenset({errno.EAGAIN, errno.EWOULDBLOCK})
# A full send buffer, or (with IP_RECVERR) a full queue below the socket: try again later.
_FULL = _AGAIN | {errno.ENOBUFS}


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.c_void_p),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


_SOCKADDR_IN_LEN = 16
_MMSG_SIZE = ctypes.sizeof(_MMsgHdr)
_IOV_SIZE = ctypes.sizeof(_IOVec)
_FLAGS_OFF = _MsgHdr.msg_flags.offset
_CONTROLLEN_OFF = _MsgHdr.msg_controllen.offset
_LEN_OFF = _MMsgHdr.msg_len.offset
_SIZE_T = struct.Struct("@N")  # iov_len, msg_controllen
_IOV_LEN_OFF = _IOVec.iov_len.offset
# sockaddr_in: family in host order, then port and address in network order, then 8 zero octets.
_SOCKADDR_IN = struct.Struct("=H2s4s8x")
# (msg_hdr.msg_flags, msg_len) of one mmsghdr, for iter_unpack over the received ones.
_FLAGS_LEN = struct.Struct(f"={_FLAGS_OFF}xi{_LEN_OFF - _FLAGS_OFF - 4}xI{_MMSG_SIZE - _LEN_OFF - 4}x")


def _load_mmsg() -> tuple[object, object] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The interpreter's own symbols include libc's; find_library("c") would run ldconfig at import.
        libc = ctypes.CDLL(None, use_errno=True)
        recvmmsg = libc.recvmmsg
        sendmmsg = libc.sendmmsg
    except (OSError, AttributeError):
        return None
    recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    recvmmsg.restype = ctypes.c_int
    sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    sendmmsg.restype = ctypes.c_int
    return recvmmsg, sendmmsg


_MMSG = _load_mmsg()
MMSG_AVAILABLE: bool = _MMSG is not None
"""True when libc offers recvmmsg/sendmmsg; tests set it False to force the fallback."""


class BatchIO:
    """Batched receive/send state of one UDP socket (buffers allocated once, then reused).

    ``mmsg=None`` picks recvmmsg/sendmmsg when available and the socket is AF_INET, else the
    ``recvmsg``/``sendto`` loop; ``mmsg=False`` forces the loop.  Not thread-safe: callers
    that send from several threads serialize the calls themselves.
    """

    def __init__(
        self,
        sock: socket.socket,
        max_msgs: int = DEFAULT_BATCH,
        bufsize: int = DEFAULT_BUFSIZE,
        mmsg: bool | None = None,
    ) -> None:
        if max_msgs < 1 or bufsize < 1:
            raise ValueError(f"max_msgs ({max_msgs}) and bufsize ({bufsize}) must be positive")
        if mmsg is None:
            mmsg = MMSG_AVAILABLE and sock.family == socket.AF_INET
        elif mmsg and (_MMSG is None or sock.family != socket.AF_INET):
            raise ValueError("recvmmsg/sendmmsg need Linux libc and an AF_INET socket")
        self.sock = sock
        self.max_msgs = max_msgs
        self.bufsize = bufsize
        self.mmsg = bool(mmsg)
        self.truncated = 0
        """Datagrams dropped on receive because they did not fit in ``bufsize``."""
        self.nobufs = 0
        """Sends that stopped on a full queue below the socket (ENOBUFS, with IP_RECVERR); the dropped
        datagram and the rest were reported failed, to be sent again. Not a drop count: sendmmsg reports
        a drop in mid-batch only by sending less, and the error itself on the next call."""
        self.stopped_at: int | None = None
        """Index of the datagram at which the last :meth:`send` stopped on a full buffer or queue (it
        and all after it were not sent); None when it went through to the end."""
        self._fd = sock.fileno()
        # Why a cache: building "a.b.c.d" and the sockaddr per datagram costs more than a dict hit.
        self._addr_cache: dict[bytes, Address] = {}
        self._sockaddr_cache: dict[Address, bytes] = {}
        self._rx: _Ring | None = None
        self._tx: _Ring | None = None
        self.stamping = False
        self.stamps: list[int] = []
        """With :meth:`enable_stamps`, the kernel's receive stamp (wall-clock ns, 0 if missing) of each
        datagram the last :meth:`recv` returned, in the same order."""
        self.ingress = False
        self.ifindexes: list[int] = []
        """With :meth:`enable_ingress`, the index of the interface each datagram the last :meth:`recv`
        returned came in on (0 if the kernel said none), in the same order."""

    def enable_stamps(self) -> None:
        """Stamp received datagrams with the moment the kernel received them (:attr:`stamps`)."""
        enable_rx_stamps(self.sock)
        self.stamping = True
        self._rx = None  # the receive ring needs room for the control messages

    def enable_ingress(self) -> None:
        """Report the interface each received datagram came in on (:attr:`ifindexes`): one socket bound to
        every address cannot tell its ports apart by the source address, which a sender chooses."""
        self.sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        self.ingress = True
        self._rx = None

    def _control_space(self) -> int:
        return (STAMP_SPACE if self.stamping else 0) + (PKTINFO_SPACE if self.ingress else 0)

    # -- receive ----------------------------------------------------------------------------------
    def recv(self, max_msgs: int | None = None) -> list[Datagram]:
        """Up to ``max_msgs`` (capped at the constructor's) waiting datagrams; ``[]`` if none."""
        n = self.max_msgs if max_msgs is None else min(max_msgs, self.max_msgs)
        if n <= 0:
            return []
        if not self.mmsg:
            return self._recv_loop(n)
        ring = self._rx
        if ring is None:
            ring = self._rx = _Ring(self.max_msgs, self.bufsize, self._control_space())
        if ring.control:
            ring.reset_control(n)
        got = _MMSG[0](self._fd, ring.msgs_addr, n, _MSG_DONTWAIT, None)  # type: ignore[index,operator]
        if got < 0:
            err = ctypes.get_errno()
            if err in _AGAIN or err == errno.EINTR:
                return []
            raise OSError(err, f"recvmmsg: {errno.errorcode.get(err, err)}")
        out: list[Datagram] = []
        hdrs = ring.hdrs_mv
        names = ring.names_mv
        data = ring.data_mv
        cache = self._addr_cache
        bufsize = self.bufsize
        stamps: list[int] | None = None
        if self.stamping:
            stamps = self.stamps = []
        ifindexes: list[int] | None = None
        if self.ingress:
            ifindexes = self.ifindexes = []
        for i, (flags, length) in enumerate(_FLAGS_LEN.iter_unpack(hdrs[: got * _MMSG_SIZE])):
            if flags & _MSG_TRUNC:
                self.truncated += 1
                continue
            if ifindexes is not None:
                if stamps is None:
                    ifindexes.append(ring.ingress(i))
                else:
                    stamp, ifindex = ring.ancillary(i)
                    ifindexes.append(ifindex)
                    stamps.append(stamp)
            elif stamps is not None:
                stamps.append(ring.stamp(i))
            key = bytes(names[i * _SOCKADDR_IN_LEN + 2 : i * _SOCKADDR_IN_LEN + 8])
            addr = cache.get(key)
            if addr is None:
                if len(cache) >= 4096:
                    cache.clear()
                addr = cache[key] = (socket.inet_ntoa(key[2:]), int.from_bytes(key[:2], "big"))
            start = i * bufsize
            out.append((data[start : start + length], addr))
        return out

    def _recv_loop(self, n: int) -> list[Datagram]:
        out: list[Datagram] = []
        # recvmsg rather than recvfrom: only it reports MSG_TRUNC, which the mmsg path honours too.
        recvmsg = self.sock.recvmsg
        bufsize = self.bufsize
        space = self._control_space()
        if self.stamping:
            self.stamps = []
        if self.ingress:
            self.ifindexes = []
        for _ in range(n):
            try:
                data, anc, flags, addr = recvmsg(bufsize, space, _MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                if out:
                    break
                raise
            if flags & _MSG_TRUNC:
                self.truncated += 1
                continue
            if self.stamping:
                self.stamps.append(rx_stamp_ns(anc))
            if self.ingress:
                self.ifindexes.append(ingress_ifindex(anc))
            out.append((data, addr[:2]))
        return out

    # -- send -------------------------------------------------------------------------------------
    def send(self, msgs: Sequence[Datagram], failed: list[int] | None = None) -> int:
        """Send ``[(payload, (addr, port)), ...]``; return how many the kernel accepted.

        Indexes of datagrams not sent (refused, or left over after EAGAIN) are appended to
        ``failed``, in ascending order, when it is given.
        """
        self.stopped_at = None
        if not self.mmsg:
            return self._send_loop(msgs, failed)
        sent = 0
        bad: list[int] | None = None if failed is None else []
        for base in range(0, len(msgs), self.max_msgs):
            chunk = msgs[base : base + self.max_msgs]
            done, again = self._send_chunk(chunk, base, bad)
            sent += done
            if again:
                if bad is not None:
                    bad.extend(range(base + len(chunk), len(msgs)))
                break
        if failed is not None and bad:
            failed.extend(sorted(bad))
        return sent

    def _send_chunk(self, chunk: Sequence[Datagram], base: int, failed: list[int] | None) -> tuple[int, bool]:
        ring = self._tx
        if ring is None:
            ring = self._tx = _Ring(self.max_msgs, self.bufsize)
        data = ring.data_mv
        names = ring.names_mv
        iovs = ring.iovs_mv
        slot_names = ring.slot_names
        bufsize = self.bufsize
        cache = self._sockaddr_cache
        count = 0
        # Slots are filled densely; index_of maps a slot back to the caller's index.
        index_of: list[int] = []
        for j, (payload, addr) in enumerate(chunk):
            length = len(payload)
            if length > bufsize:
                if failed is not None:
                    failed.append(base + j)
                continue
            name = cache.get(addr)
            if name is None:
                try:
                    port = addr[1].to_bytes(2, "big")
                    name = _SOCKADDR_IN.pack(_AF_INET, port, socket.inet_aton(addr[0]))
                except (OSError, OverflowError, TypeError, IndexError):
                    if failed is not None:
                        failed.append(base + j)
                    continue
                if len(cache) >= 4096:
                    cache.clear()
                cache[addr] = name
            start = count * bufsize
            data[start : start + length] = payload
            # Forwarders send to a few neighbors with the same tuple objects: skip rewriting the slot.
            if slot_names[count] is not name:
                names[count * _SOCKADDR_IN_LEN : (count + 1) * _SOCKADDR_IN_LEN] = name
                slot_names[count] = name
            _SIZE_T.pack_into(iovs, count * _IOV_SIZE + _IOV_LEN_OFF, length)
            index_of.append(base + j)
            count += 1
        sendmmsg = _MMSG[1]  # type: ignore[index]
        done = 0
        pos = 0
        while pos < count:
            ret = sendmmsg(self._fd, ring.msgs_addr + pos * _MMSG_SIZE, count - pos, _MSG_DONTWAIT)  # type: ignore[operator]
            if ret > 0:
                done += ret
                pos += ret
                continue
            err = ctypes.get_errno() if ret < 0 else errno.EAGAIN
            if err == errno.EINTR:
                continue
            if err == errno.ENOBUFS:
                self.nobufs += 1
            if err in _FULL:
                self.stopped_at = index_of[pos]
                if failed is not None:
                    failed.extend(index_of[pos:])
                return done, True
            # The kernel refused this datagram only (sendmmsg reports the first failure): skip it.
            if failed is not None:
                failed.append(index_of[pos])
            pos += 1
        return done, False

    def _send_loop(self, msgs: Sequence[Datagram], failed: list[int] | None) -> int:
        sendto = self.sock.sendto
        bufsize = self.bufsize
        sent = 0
        for i, (payload, addr) in enumerate(msgs):
            if len(payload) > bufsize:  # as on the recvmmsg path, where it would not fit its slot
                if failed is not None:
                    failed.append(i)
                continue
            try:
                sendto(payload, _MSG_DONTWAIT, addr)
            except BlockingIOError:
                self.stopped_at = i
                if failed is not None:
                    failed.extend(range(i, len(msgs)))
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    if failed is not None:
                        failed.append(i)
                    continue
                self.nobufs += 1
                self.stopped_at = i
                if failed is not None:
                    failed.extend(range(i, len(msgs)))
                break
            except (OverflowError, TypeError):
                if failed is not None:
                    failed.append(i)
                continue
            sent += 1
        return sent


class _Ring:
    """Preallocated ``mmsghdr``/``iovec`` arrays, address slots and datagram slots."""

    __slots__ = (
        "_keep", "control", "control_mv", "data_mv", "hdrs_mv",
        "iovs_mv", "msgs_addr", "names_mv", "slot_names",
    )  # fmt: skip

    def __init__(self, n: int, bufsize: int, control: int = 0) -> None:
        """``control``: octets of ancillary data room per slot (receive stamps), 0 for none."""
        # An anonymous mapping, not a zero-filled buffer: its pages cost nothing until a datagram lands
        # in them. A ring of 64 slots of 64 KiB filled 4 MiB on its first use, and 256 hosts doing that
        # at a run's start held every one of them back by a second or two (docs/time-and-fidelity.md).
        data = mmap.mmap(-1, n * bufsize)
        names = ctypes.create_string_buffer(n * _SOCKADDR_IN_LEN)
        iovs = (_IOVec * n)()
        msgs = (_MMsgHdr * n)()
        data_addr = ctypes.addressof(ctypes.c_char.from_buffer(data))
        names_addr = ctypes.addressof(names)
        for i in range(n):
            iovs[i].iov_base = data_addr + i * bufsize
            iovs[i].iov_len = bufsize
            hdr = msgs[i].msg_hdr
            hdr.msg_name = names_addr + i * _SOCKADDR_IN_LEN
            hdr.msg_namelen = _SOCKADDR_IN_LEN
            hdr.msg_iov = ctypes.addressof(iovs) + i * _IOV_SIZE
            hdr.msg_iovlen = 1
        ctrl = ctypes.create_string_buffer(max(1, n * control))
        if control:
            for i in range(n):
                msgs[i].msg_hdr.msg_control = ctypes.addressof(ctrl) + i * control
        self.control = control
        self.control_mv = memoryview(ctrl).cast("B")
        # A receive ring keeps iov_len = bufsize for good; a send ring rewrites it per datagram.
        self._keep = (data, names, iovs, msgs, ctrl)
        self.msgs_addr = ctypes.addressof(msgs)
        self.data_mv = memoryview(data).cast("B")
        self.names_mv = memoryview(names).cast("B")
        self.iovs_mv = memoryview(iovs).cast("B")
        self.hdrs_mv = memoryview(msgs).cast("B")
        self.slot_names: list[bytes | None] = [None] * n

    def reset_control(self, n: int) -> None:
        """The kernel shrinks msg_controllen to what it wrote: give the first ``n`` slots their room back."""
        for i in range(n):
            _SIZE_T.pack_into(self.hdrs_mv, i * _MMSG_SIZE + _CONTROLLEN_OFF, self.control)

    def stamp(self, i: int) -> int:
        """Slot ``i``'s receive stamp (wall-clock ns), 0 if the kernel wrote none: the fast path when the
        stamp is the only control message asked for."""
        length, level, kind, sec, nsec = _STAMP_CMSG.unpack_from(self.control_mv, i * self.control)
        if length >= _STAMP_CMSG.size and level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
            return sec * 1_000_000_000 + nsec
        return 0

    def ingress(self, i: int) -> int:
        """Slot ``i``'s ingress ifindex when IP_PKTINFO is the only control message asked for (0: none)."""
        (used,) = _SIZE_T.unpack_from(self.hdrs_mv, i * _MMSG_SIZE + _CONTROLLEN_OFF)
        if used < _PKTINFO_CMSG.size:  # nothing written for this datagram: the slot holds an older one's
            return 0
        length, level, kind, ifindex = _PKTINFO_CMSG.unpack_from(self.control_mv, i * self.control)
        if length >= _PKTINFO_CMSG.size and level == socket.IPPROTO_IP and kind == IP_PKTINFO:
            return ifindex
        return 0

    def ancillary(self, i: int) -> tuple[int, int]:
        """Slot ``i``'s (receive stamp, ingress ifindex), each 0 when the kernel wrote none. The layout
        Linux writes for UDP (the stamp, then IP_PKTINFO) is read in one go; any other is walked."""
        base = i * self.control
        (used,) = _SIZE_T.unpack_from(self.hdrs_mv, i * _MMSG_SIZE + _CONTROLLEN_OFF)
        if used >= _BOTH_CMSGS.size:
            _sl, slevel, skind, sec, nsec, _pl, plevel, pkind, ifindex = _BOTH_CMSGS.unpack_from(
                self.control_mv, base
            )
            if (slevel, skind, plevel, pkind) == _BOTH_KINDS:
                return sec * 1_000_000_000 + nsec, ifindex
        end = base + min(used, self.control)
        stamp = ifindex = 0
        off = base
        while off + _CMSG_HDR.size <= end:
            length, level, kind = _CMSG_HDR.unpack_from(self.control_mv, off)
            if length < _CMSG_HDR.size or off + length > end:
                break
            if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and length >= _STAMP_CMSG.size:
                sec, nsec = _TIMESPEC.unpack_from(self.control_mv, off + _CMSG_HDR.size)
                stamp = sec * 1_000_000_000 + nsec
            elif level == socket.IPPROTO_IP and kind == IP_PKTINFO and length >= _CMSG_HDR.size + 4:
                (ifindex,) = _IFINDEX.unpack_from(self.control_mv, off + _CMSG_HDR.size)
            off += _cmsg_align(length)
        return stamp, ifindex


_ios: weakref.WeakKeyDictionary[socket.socket, BatchIO] = weakref.WeakKeyDictionary()

# <asm-generic/socket.h>: the kernel's receive time of each datagram, a struct timespec on the wall clock.
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
# One control message: cmsghdr (size_t len, int level, int type) then the timespec (two longs).
_STAMP_CMSG = struct.Struct("@Nii2q")
STAMP_SPACE = socket.CMSG_SPACE(16)
_CMSG_HDR = struct.Struct("@Nii")
_TIMESPEC = struct.Struct("@2q")
# <linux/in.h>: the interface a datagram came in on, a struct in_pktinfo (int ifindex, two addresses).
IP_PKTINFO = 8
_IFINDEX = struct.Struct("@i")
PKTINFO_SPACE = socket.CMSG_SPACE(12)
# IP_PKTINFO alone: cmsghdr, then in_pktinfo's ifindex (the two addresses after it are not read).
_PKTINFO_CMSG = struct.Struct("@Niii")
# Both, as Linux writes them for UDP: the stamp's message (padded to CMSG_SPACE), then IP_PKTINFO's.
_BOTH_CMSGS = struct.Struct(f"@Nii2q{STAMP_SPACE - 32}xNiii")
_BOTH_KINDS = (socket.SOL_SOCKET, SCM_TIMESTAMPNS, socket.IPPROTO_IP, IP_PKTINFO)


def _cmsg_align(length: int) -> int:
    """CMSG_ALIGN: control messages start on size_t boundaries."""
    return (length + _SIZE_T.size - 1) & ~(_SIZE_T.size - 1)


# <linux/sockios.h>: an interface's index by name, asked of a socket, so in the socket's network namespace.
_SIOCGIFINDEX = 0x8933
_IFREQ_INDEX = struct.Struct("16si20x")


def interface_index(sock: socket.socket, ifname: str) -> int:
    """The index of ``ifname`` in the network namespace ``sock`` lives in (OSError ENODEV if none)."""
    import fcntl

    req = _IFREQ_INDEX.pack(ifname.encode(), 0)
    return _IFREQ_INDEX.unpack(fcntl.ioctl(sock.fileno(), _SIOCGIFINDEX, req))[1]


def received_ttl(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The IPv4 TTL from ``recvmsg``'s ancillary data (IP_RECVTTL on), None when there is none."""
    for level, kind, data in ancdata:
        if level == socket.IPPROTO_IP and kind == socket.IP_TTL and len(data) >= 4:
            return _IFINDEX.unpack_from(data)[0]  # an int, as in_pktinfo's ifindex
    return None


def ingress_ifindex(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The interface index from ``recvmsg``'s IP_PKTINFO, 0 when there is none."""
    for level, kind, data in ancdata:
        if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(data) >= 4:
            return _IFINDEX.unpack_from(data)[0]
    return 0


def enable_rx_stamps(sock: socket.socket) -> None:
    """Have the kernel stamp every datagram ``sock`` receives with the moment it arrived (software RX
    timestamps, taken when the packet came off the interface, before any queueing toward us)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def rx_stamp_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The kernel's receive stamp from ``recvmsg``'s ancillary data, wall-clock ns; 0 when there is
    none (stamps not enabled on the socket)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack_from("@2q", data)
            return sec * 1_000_000_000 + nsec
    return 0


def batch_io(sock: socket.socket, max_msgs: int = DEFAULT_BATCH) -> BatchIO:
    """The :class:`BatchIO` the module functions use for ``sock`` (created on first use)."""
    io = _ios.get(sock)
    if io is None or io.max_msgs < max_msgs:
        io = _ios[sock] = BatchIO(sock, max(max_msgs, DEFAULT_BATCH))
    return io


def recv_batch(sock: socket.socket, max_msgs: int = DEFAULT_BATCH) -> list[Datagram]:
    """Receive up to ``max_msgs`` waiting datagrams without blocking; ``[]`` when none wait.

    On the recvmmsg path each ``data`` is a memoryview valid until the next receive on ``sock``.
    """
    return batch_io(sock, max_msgs).recv(max_msgs)


def send_batch(sock: socket.socket, msgs: Sequence[Datagram], failed: list[int] | None = None) -> int:
    """Send ``[(payload, (addr, port)), ...]`` without blocking; return how many were sent."""
    return batch_io(sock).send(msgs, failed)


# <linux/in.h>; Python 3.11's socket module does not export it.
IP_RECVERR = int(getattr(socket, "IP_RECVERR", 11))
# <asm-generic/socket.h>; Python's socket module does not export them.
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33


# Below this a socket cannot hold two jumbo datagrams (the kernel charges each its truesize).
MIN_SNDBUF = 16 << 10


def set_socket_buffer(sock: socket.socket, opt: int, size: int) -> None:
    """Ask for a ``size``-byte SO_RCVBUF or SO_SNDBUF. The plain options are capped at the host's
    rmem_max/wmem_max (about 200 KiB: a few dozen jumbo datagrams, which a burst overruns); the FORCE
    variants pass the cap with CAP_NET_ADMIN, which lab nodes have. Falls back to the capped one."""
    force = {socket.SO_RCVBUF: SO_RCVBUFFORCE, socket.SO_SNDBUF: SO_SNDBUFFORCE}[opt]
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)
    except OSError:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, opt, size)


def enable_backpressure(sock: socket.socket, sndbuf: int | None = None) -> None:
    """Make a shaped link push back on this UDP socket instead of dropping silently.

    ``IP_RECVERR``: a datagram the local queue drops comes back as ENOBUFS (counted in
    :attr:`BatchIO.nobufs`; :func:`send_all` sends it again). ``sndbuf``: the socket's memory in bytes
    (the kernel doubles what is asked; pass half of what may be in flight). Below the shaper's queue
    limit it keeps a lone sender from ever filling the queue: it waits for room instead.
    """
    sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
    if sndbuf is not None:
        set_socket_buffer(sock, socket.SO_SNDBUF, sndbuf)


def drain_error_queue(sock: socket.socket, limit: int = 256) -> int:
    """Read and discard what ``IP_RECVERR`` queued on ``sock`` (ICMP errors such as port unreachable);
    returns how many. Unread, they stay charged to the socket's receive memory, and the pending error
    makes the next receive fail once (ECONNREFUSED and the like): a receiver that meets such an
    OSError calls this and goes on."""
    msg_errqueue = int(getattr(socket, "MSG_ERRQUEUE", 0x2000))
    n = 0
    for _ in range(limit):
        try:
            sock.recvmsg(1, 1024, msg_errqueue | _MSG_DONTWAIT)
        except OSError:  # EAGAIN: empty
            break
        n += 1
    return n


def shaped_sndbuf(queue_bytes: int | None, sockets: int = 1) -> int | None:
    """The SO_SNDBUF to ask for so that ``sockets`` sockets of one sender together can never fill a shaper
    queue of ``queue_bytes``: a datagram stays charged to its socket until it leaves the queue, and the
    kernel doubles what is asked, so asking a quarter of the queue per socket keeps half of it free for
    everyone else (control traffic, other senders). None (unshaped): leave the buffer as it is."""
    if queue_bytes is None:
        return None
    return max(MIN_SNDBUF, queue_bytes // (4 * max(1, sockets)))


def size_send_buffer(sock: socket.socket, sndbuf: int | None, unshaped: int) -> None:
    """Shaped lab (``sndbuf`` from :func:`shaped_sndbuf`): back-pressure with that buffer, so the sender
    waits instead of overrunning its queue. Unshaped (None): an ``unshaped``-byte buffer for bursts."""
    if sndbuf is None:
        set_socket_buffer(sock, socket.SO_SNDBUF, unshaped)
    else:
        enable_backpressure(sock, sndbuf)


def mreqn(group: str, ifindex: int) -> bytes:
    """struct ip_mreqn: the group (or 0.0.0.0 for IP_MULTICAST_IF), any local address, the interface."""
    return struct.pack("4s4si", socket.inet_aton(group), socket.inet_aton("0.0.0.0"), ifindex)


def multicast_sender(
    bind: tuple[str, int], interface: str, ttl: int, sndbuf: int | None, unshaped: int
) -> socket.socket:
    """A non-blocking UDP socket that sends IP multicast from ``bind`` (an address and port: a source host's
    loopback is the S a leaf matches (S,G) on) out of ``interface`` with TTL ``ttl``, never looped back to
    this host; its send buffer as :func:`size_send_buffer` says."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        size_send_buffer(sock, sndbuf, unshaped)
        sock.bind(bind)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
        ifindex = socket.if_nametoindex(interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn("0.0.0.0", ifindex))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class SendTimeout(TimeoutError):
    pass


def send_all(
    sock: socket.socket,
    msgs: Sequence[Datagram],
    timeout: float | None = None,
    backoff: tuple[float, float] = (0.0001, 0.01),
) -> int:
    """Send every datagram, waiting for room instead of losing any: a full send buffer waits until the
    socket is writable again; a full queue (ENOBUFS) backs off, from ``backoff[0]`` doubling to
    ``backoff[1]`` seconds, and sends the dropped datagram again. Datagrams the kernel refuses for
    good (bad destination, too big) are skipped, as in :func:`send_batch`. Returns how many were
    sent; raises :class:`SendTimeout` when ``timeout`` passes first.
    """
    import select
    import time

    io = batch_io(sock)
    deadline = None if timeout is None else time.monotonic() + timeout
    start = 0
    sent = 0
    pause = backoff[0]
    while start < len(msgs):
        # One batch at a time: a stop then costs no copy of the whole tail.
        chunk = msgs[start : start + io.max_msgs]
        before = io.nobufs
        sent += io.send(chunk)
        if io.stopped_at is None:
            start += len(chunk)  # all sent, but for datagrams refused for good
            continue
        start += io.stopped_at
        full = io.nobufs > before
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise SendTimeout(f"send_all: {len(msgs) - start} datagrams still unsent after {timeout} s")
        if full:
            time.sleep(pause if left is None else min(pause, left))
            pause = min(pause * 2, backoff[1])
        else:
            pause = backoff[0]
            select.select([], [sock], [], left)
    return sent
