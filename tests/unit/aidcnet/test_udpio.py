"""Batched UDP I/O over 127.0.0.1: recvmmsg/sendmmsg through ctypes and the forced fallback."""

from __future__ import annotations

import ctypes
import errno
import socket
import time
from collections.abc import Iterator

import pytest

from aidcnet import udpio
from aidcnet.udpio import BatchIO, recv_batch, send_batch

PATHS = [pytest.param(True, id="mmsg"), pytest.param(False, id="fallback")]


@pytest.fixture
def socks() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    for _ in range(4):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        made.append(s)
    yield made
    for s in made:
        s.close()


def recv_all(io: BatchIO, expected: int, max_msgs: int = 64) -> list[tuple[bytes, tuple[str, int]]]:
    """Receive until ``expected`` datagrams arrived (copying each) or a second passed."""
    got: list[tuple[bytes, tuple[str, int]]] = []
    deadline = time.monotonic() + 1.0
    while len(got) < expected and time.monotonic() < deadline:
        got.extend((bytes(d), a) for d, a in io.recv(max_msgs))
    return got


def test_mmsg_is_available_on_this_linux() -> None:
    # The fast path is what the forwarder is measured with; silently running the fallback is a bug.
    assert udpio.MMSG_AVAILABLE


@pytest.mark.parametrize("mmsg", PATHS)
def test_batch_between_several_sockets(socks: list[socket.socket], mmsg: bool) -> None:
    a, b, r1, r2 = socks
    ios = {s: BatchIO(s, 16, 2048, mmsg=mmsg) for s in socks}
    assert all(io.mmsg is mmsg for io in ios.values())
    d1, d2 = r1.getsockname(), r2.getsockname()
    msgs_a = [(f"a{i}".encode() * (i + 1), d1 if i % 2 else d2) for i in range(10)]
    msgs_b = [(bytearray(b"b" * 1500), d1), (memoryview(b"tail"), d2)]
    assert ios[a].send(msgs_a) == 10
    assert ios[b].send(msgs_b) == 2

    got1 = recv_all(ios[r1], 6)
    got2 = recv_all(ios[r2], 6)
    src_a, src_b = a.getsockname(), b.getsockname()
    assert sorted(got1) == sorted([(bytes(p), src_a) for p, d in msgs_a if d == d1] + [(b"b" * 1500, src_b)])
    assert sorted(got2) == sorted([(bytes(p), src_a) for p, d in msgs_a if d == d2] + [(b"tail", src_b)])
    assert ios[r1].recv() == [] and ios[r2].recv() == []


@pytest.mark.parametrize("mmsg", PATHS)
def test_recv_respects_max_msgs_and_order(socks: list[socket.socket], mmsg: bool) -> None:
    tx, rx = BatchIO(socks[0], 64, mmsg=mmsg), BatchIO(socks[1], 64, 2048, mmsg=mmsg)
    dest = socks[1].getsockname()
    assert tx.send([(i.to_bytes(2, "big"), dest) for i in range(20)]) == 20
    first = [bytes(d) for d, _ in rx.recv(7)]
    assert first == [i.to_bytes(2, "big") for i in range(7)]
    rest = [d for d, _ in recv_all(rx, 13)]
    assert rest == [i.to_bytes(2, "big") for i in range(7, 20)]


@pytest.mark.parametrize("mmsg", PATHS)
def test_empty_socket_returns_at_once_even_if_blocking(socks: list[socket.socket], mmsg: bool) -> None:
    sock = socks[0]
    sock.setblocking(True)  # MSG_DONTWAIT must make the call non-blocking anyway
    io = BatchIO(sock, 8, mmsg=mmsg)
    t0 = time.monotonic()
    assert io.recv() == []
    assert time.monotonic() - t0 < 0.5


@pytest.mark.parametrize("mmsg", PATHS)
def test_refused_datagram_is_skipped_and_reported(socks: list[socket.socket], mmsg: bool) -> None:
    io, rx = BatchIO(socks[0], 8, 2048, mmsg=mmsg), BatchIO(socks[1], 8, 2048, mmsg=mmsg)
    dest = socks[1].getsockname()
    # UDP destination port 0 is refused by the kernel with EINVAL; "x" is not an address at all;
    # 3000 octets exceed the 2048-octet send slot.
    msgs = [(b"one", dest), (b"bad", ("127.0.0.1", 0)), (b"two", dest), (b"bad", ("x", 1))]
    msgs.append((b"3" * 3000, dest))
    failed: list[int] = []
    assert io.send(msgs, failed) == 2
    assert failed == [1, 3, 4]
    assert [d for d, _ in recv_all(rx, 2)] == [b"one", b"two"]
    assert rx.recv() == []


@pytest.mark.parametrize("mmsg", PATHS)
def test_datagram_longer_than_slot_is_dropped_and_counted(socks: list[socket.socket], mmsg: bool) -> None:
    tx, rx = BatchIO(socks[0], 8, mmsg=mmsg), BatchIO(socks[1], 8, 16, mmsg=mmsg)
    dest = socks[1].getsockname()
    assert tx.send([(b"short", dest), (b"x" * 17, dest), (b"y" * 16, dest)]) == 3
    assert [d for d, _ in recv_all(rx, 2)] == [b"short", b"y" * 16]
    assert rx.truncated == 1


def test_send_eagain_stops_and_reports_rest_mmsg(socks: list[socket.socket], monkeypatch) -> None:
    real_recv, real_send = udpio._MMSG  # type: ignore[misc]
    calls: list[int] = []

    def send_three_then_eagain(fd: int, msgs: int, n: int, flags: int) -> int:
        # A loopback send never fills up, so the kernel's EAGAIN is played here.
        calls.append(n)
        if len(calls) == 1:
            return real_send(fd, msgs, min(n, 3), flags)
        ctypes.set_errno(errno.EAGAIN)
        return -1

    monkeypatch.setattr(udpio, "_MMSG", (real_recv, send_three_then_eagain))
    io, rx = BatchIO(socks[0], 4, 64), BatchIO(socks[1], 16, 64)
    dest = socks[1].getsockname()
    failed: list[int] = []
    # 10 datagrams over a 4-slot ring: the EAGAIN in the first chunk must end the whole send.
    assert io.send([(bytes([i]), dest) for i in range(10)], failed) == 3
    assert failed == list(range(3, 10))
    assert calls == [4, 1]
    assert [d for d, _ in recv_all(rx, 3)] == [b"\x00", b"\x01", b"\x02"]
    assert rx.recv() == []


class _FullAfter(socket.socket):
    """A socket whose send buffer is 'full' after ``limit`` datagrams."""

    limit = 2

    def sendto(self, *args):  # type: ignore[override]
        if self.limit <= 0:
            raise BlockingIOError(errno.EAGAIN, "full")
        self.limit -= 1
        return super().sendto(*args)


def test_send_eagain_stops_and_reports_rest_fallback(socks: list[socket.socket]) -> None:
    with _FullAfter(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        io = BatchIO(sock, 8, mmsg=False)
        failed: list[int] = []
        dest = socks[1].getsockname()
        assert io.send([(b"x", dest)] * 5, failed) == 2
        assert failed == [2, 3, 4]
        assert len(recv_all(BatchIO(socks[1], 8, mmsg=False), 2)) == 2


def test_module_functions_pick_fallback_when_libc_lacks_mmsg(socks: list[socket.socket], monkeypatch) -> None:
    monkeypatch.setattr(udpio, "MMSG_AVAILABLE", False)
    a, b = socks[2], socks[3]
    assert send_batch(a, [(b"via-sendto", b.getsockname())]) == 1
    deadline = time.monotonic() + 1.0
    got: list = []
    while not got and time.monotonic() < deadline:
        got = recv_batch(b, 4)
    assert udpio.batch_io(a).mmsg is False and udpio.batch_io(b).mmsg is False
    assert got == [(b"via-sendto", a.getsockname())]
    assert isinstance(got[0][0], bytes)


def test_module_functions_reuse_buffers(socks: list[socket.socket]) -> None:
    a, b = socks[0], socks[1]
    dest = b.getsockname()
    rings = []
    for round_ in range(3):
        assert send_batch(a, [(bytes([round_]) * 3, dest)] * 5) == 5
        got: list = []
        deadline = time.monotonic() + 1.0
        while len(got) < 5 and time.monotonic() < deadline:
            got += [(bytes(d), s) for d, s in recv_batch(b, 8)]
        assert got == [(bytes([round_]) * 3, a.getsockname())] * 5
        io_a, io_b = udpio.batch_io(a), udpio.batch_io(b)
        assert io_a.mmsg and io_b.mmsg
        rings.append((id(io_a), id(io_a._tx), id(io_b), id(io_b._rx)))
    assert rings[0] == rings[1] == rings[2]


def test_memoryview_is_only_valid_until_next_recv(socks: list[socket.socket]) -> None:
    # Documents the contract the dataplane relies on: the slot is reused by the next receive.
    tx, rx = BatchIO(socks[0], 1, 64), BatchIO(socks[1], 1, 64)
    dest = socks[1].getsockname()
    tx.send([(b"first", dest)])
    ((view, _),) = recv_all_views(rx)
    assert isinstance(view, memoryview) and bytes(view) == b"first"
    tx.send([(b"SECOND", dest)])
    recv_all_views(rx)
    assert bytes(view) == b"SECON"


def recv_all_views(io: BatchIO) -> list:
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        got = io.recv()
        if got:
            return got
    return []


def test_bad_arguments() -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s6:
        assert BatchIO(s6).mmsg is False  # IPv6: automatic fallback
        with pytest.raises(ValueError, match="AF_INET"):
            BatchIO(s6, mmsg=True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(ValueError, match="positive"):
        BatchIO(s, 0)


def test_enobufs_stops_like_eagain_and_send_all_resends_after_backoff(socks, monkeypatch) -> None:
    """A full queue below the socket (ENOBUFS under IP_RECVERR) is played here twice, once mid-batch:
    the datagram it hit and the rest are reported unsent, and send_all gets every datagram out once."""
    real_recv, real_send = udpio._MMSG  # type: ignore[misc]
    script = [2, -1, 3, -1]  # send 2, ENOBUFS, send 3, ENOBUFS, then everything

    def flaky(fd: int, msgs: int, n: int, flags: int) -> int:
        step = script.pop(0) if script else n
        if step < 0:
            ctypes.set_errno(errno.ENOBUFS)
            return -1
        return real_send(fd, msgs, min(n, step), flags)

    monkeypatch.setattr(udpio, "_MMSG", (real_recv, flaky))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    try:
        io = udpio.batch_io(sender)
        dest = socks[1].getsockname()
        failed: list[int] = []
        assert io.send([(bytes([i]), dest) for i in range(4)], failed) == 2
        assert (failed, io.stopped_at, io.nobufs) == ([2, 3], 2, 1)
        started = time.monotonic()
        assert udpio.send_all(sender, [(bytes([i]), dest) for i in range(2, 10)], backoff=(0.01, 0.02)) == 8
        assert time.monotonic() - started >= 0.01  # it backed off before resending
        assert io.nobufs == 2 and io.stopped_at is None
        got = sorted(bytes(d)[0] for d, _ in recv_all(BatchIO(socks[1], 16, mmsg=False), 10))
        assert got == list(range(10))
    finally:
        sender.close()


def test_send_all_gives_up_at_its_timeout(socks) -> None:
    with _FullAfter(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.limit = 1
        udpio._ios[sock] = BatchIO(sock, udpio.DEFAULT_BATCH, mmsg=False)  # the sendto path, played full
        with pytest.raises(udpio.SendTimeout, match="2 datagrams still unsent"):
            udpio.send_all(sock, [(b"x", socks[1].getsockname())] * 3, timeout=0.05)


@pytest.mark.parametrize("mmsg", PATHS)
def test_receive_stamps_are_the_kernels_arrival_times(socks: list[socket.socket], mmsg: bool) -> None:
    """Each datagram carries the moment the kernel received it, not the moment we read it; a truncated
    datagram takes its stamp with it, so the stamps stay in step with what recv returns."""
    rx, tx = socks[0], socks[1]
    io = BatchIO(rx, 8, bufsize=16, mmsg=mmsg)
    io.enable_stamps()
    tx.sendto(b"warm", rx.getsockname())  # the kernel may turn stamping on a moment after it is asked
    time.sleep(0.05)
    io.recv()
    sent = []
    for payload in (b"a", b"x" * 32, b"c"):
        sent.append(time.time_ns())
        tx.sendto(payload, rx.getsockname())
        time.sleep(0.02)
    time.sleep(0.1)  # read well after they arrived
    read_at = time.time_ns()
    got = io.recv()
    assert [bytes(d) for d, _a in got] == [b"a", b"c"] and io.truncated == 1
    assert len(io.stamps) == 2
    for stamp, before in zip(io.stamps, (sent[0], sent[2]), strict=True):
        assert before <= stamp < before + 10_000_000 < read_at
    # Without enable_stamps nothing is kept.
    plain = BatchIO(socks[2], 8, mmsg=mmsg)
    tx.sendto(b"p", socks[2].getsockname())
    time.sleep(0.02)
    assert plain.recv() and plain.stamps == []


def test_rx_stamp_ns_reads_scm_timestampns_and_nothing_else() -> None:
    import struct

    stamp = struct.pack("@2q", 12, 345)
    assert udpio.rx_stamp_ns([(socket.SOL_SOCKET, udpio.SCM_TIMESTAMPNS, stamp)]) == 12_000_000_345
    assert udpio.rx_stamp_ns([(socket.SOL_SOCKET, 29, stamp)]) == 0  # SCM_TIMESTAMP, microseconds
    assert udpio.rx_stamp_ns([]) == 0


@pytest.mark.parametrize("stamps", [False, True], ids=["ingress", "ingress+stamps"])
@pytest.mark.parametrize("mmsg", PATHS)
def test_ingress_names_the_interface_each_datagram_came_in_on(
    socks: list[socket.socket], mmsg: bool, stamps: bool
) -> None:
    """IP_PKTINFO per datagram, with or without receive stamps beside it in the control buffer (the
    kernel writes both, in an order it chooses); a truncated datagram takes its ifindex with it."""
    rx, tx = socks[0], socks[1]
    io = BatchIO(rx, 8, bufsize=16, mmsg=mmsg)
    if stamps:
        io.enable_stamps()
    io.enable_ingress()
    before = time.time_ns()
    for payload in (b"a", b"x" * 32, b"c", b"d"):
        tx.sendto(payload, rx.getsockname())
    time.sleep(0.05)
    got = io.recv()
    assert [bytes(d) for d, _a in got] == [b"a", b"c", b"d"]
    assert io.ifindexes == [socket.if_nametoindex("lo")] * 3
    if stamps:
        assert len(io.stamps) == 3 and all(before <= s <= time.time_ns() for s in io.stamps)


def test_interface_index_is_asked_in_the_sockets_namespace(socks: list[socket.socket]) -> None:
    assert udpio.interface_index(socks[0], "lo") == socket.if_nametoindex("lo")
    with pytest.raises(OSError, match="No such device"):
        udpio.interface_index(socks[0], "nosuch9")
    assert udpio.ingress_ifindex([(socket.IPPROTO_IP, udpio.IP_PKTINFO, bytes(12))]) == 0
    assert udpio.ingress_ifindex([(socket.SOL_SOCKET, udpio.IP_PKTINFO, b"\x07" + bytes(11))]) == 0
    assert udpio.ingress_ifindex([]) == 0


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_ring_costs_only_the_slots_a_batch_touches(socks: list[socket.socket]) -> None:
    """A ring of 64 slots of 64 KiB is 4 MiB; its first use must not fill all of it. 256 hosts filling
    theirs at a run's start held every one of them back (docs/time-and-fidelity.md, "Big labs")."""
    a, b = socks[0], socks[1]
    ios = [BatchIO(a, max_msgs=64, bufsize=65536) for _ in range(16)]
    before = _resident_bytes()
    for io in ios:
        assert io.send([(b"x" * 100, b.getsockname())]) == 1
    grown = _resident_bytes() - before
    # 16 rings of 4 MiB each, one small datagram sent on each: a page or two per ring, not 64 MiB.
    assert grown < 8 << 20, f"sending one datagram on 16 rings took {grown >> 20} MiB"
    assert len(BatchIO(b, max_msgs=64).recv()) == 16
