"""The delay relay: one process per lab on the host that holds every packet of a delayed link end for its
delay × time scale of wall time, then hands it to the receiver (docs/delay.md).

No qdisc of this kernel holds a packet for a time, and the eBPF BFR forwards at tc before netfilter, so
the delay is held here, in user space, where a timer's error (a millisecond) is small against the hold (1
µs of fabric is 20 ms of wall time at 1:20000). For a delayed end ``A:eth1`` whose peer is ``B:eth1``:

* the sender's shaper (A's root TBF) serialises the packet as before; it crosses the veth;
* at B:eth1's tc ingress, before anything in B sees it (``delay_divert``, aidcnet/ebpf/delay_relay.c), it
  is redirected out of a tap ``dl<ifindex>`` in B's namespace, whose file descriptor this process holds;
* this process reads it, keeps it for the end's hold (:class:`orchestrator.lab.delay.HoldLine`: jitter
  without reordering) and writes it back into the tap;
* at the tap's ingress (``delay_return``) it is marked and redirected into B:eth1's ingress, where the
  divert lets it through once: the eBPF BFR, the sockets and the stack see it as arriving from A, late.

Every kind of traffic meets it (BIER, unicast, BGP, IGMP, ARP): the divert takes whatever the link
delivers. The taps offer no offloads, so the kernel completes checksums and segments GSO packets on the
way out to the tap, and the relay holds whole frames. What it drops is counted (:data:`DROP_COUNTER`):
a frame over the memory cap, a failed write, and what the kernel dropped at a tap because this process
was too slow to read it. Any such drop makes a run unfaithful. ARP crosses the relay too, so the kernel's
neighbour retransmit time on a delayed link is stretched to its round trip (:meth:`Relay.stretch_neighbours`).

The relay is controlled through a Unix socket in the lab dir (:mod:`orchestrator.lab.relayctl`), reads
the lab's ``fabric.json`` for the delays and the time scale, and exits when it holds nothing (every
namespace it served is gone). ``python -m orchestrator.lab.relay LAB_DIR`` runs it in the foreground.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import heapq
import itertools
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aidcnet.timescale import TimeScale
from orchestrator.lab.delay import HoldLine, neighbour_retrans_ms
from orchestrator.lab.fabric import EndShaper, Fabric
from orchestrator.lab.netns import opened_in, swap_neigh_params
from orchestrator.lab.shaping import load_fabric, node_netns

SOCKET_NAME = "delay-relay.sock"
PID_NAME = "delay-relay.pid"
LOG_NAME = "delay-relay.log"
# What the fidelity verdict reads (orchestrator.lab.relayctl.relay_drops): frames the relay lost.
DROP_COUNTER = "delay.dropped"
# skb->mark of a frame the relay gave back (delay_relay.c RELAY_MARK).
RELAY_MARK = 0xD1A70001
# tc preference of the divert at the receiver's ingress: before the eBPF BFR's (49).
DIVERT_PREF = 1
TAP_PREFIX = "dl"
# Each attachment's own one-entry map: the interface index it redirects to (delay_relay.c).
TARGET_MAP = "dr_target"
# A tap's ring (its txqueuelen): frames waiting for this process to read them. Past it the kernel drops.
TAP_QUEUE = 20000
# Frames the relay keeps at most, all ends together; past it a frame is dropped and counted.
MAX_HELD_BYTES = 1 << 30
READ_BATCH = 256
HOUSEKEEPING_S = 2.0
FRAME_MAX = 65536 + 64

IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
TUNSETIFF = 0x400454CA


class RelayError(RuntimeError):
    pass


@dataclass
class HeldEnd:
    """One delayed link end: where its packets are held (the receiver's namespace and interface), the tap,
    the hold line and what waits in it, and its counters."""

    end: str  # the sending end, "A:eth1"
    receiver: str  # "B:eth1"
    netns: str
    interface: str
    line: HoldLine
    delay_s: float
    jitter_s: float
    fd: int = -1
    tap: str = ""
    queue: collections.deque[tuple[float, bytes]] = field(default_factory=collections.deque)
    scheduled: bool = False
    packets: int = 0
    bytes: int = 0
    in_flight_bytes: int = 0
    max_in_flight_packets: int = 0
    max_in_flight_bytes: int = 0
    dropped: int = 0
    late_sum_s: float = 0.0
    late_max_s: float = 0.0
    released: int = 0

    def stats(self) -> dict[str, Any]:
        return {
            "held_at": self.receiver,
            "tap": self.tap,
            "delay_s": self.delay_s,
            "jitter_s": self.jitter_s,
            "packets": self.packets,
            "bytes": self.bytes,
            "in_flight_packets": len(self.queue),
            "in_flight_bytes": self.in_flight_bytes,
            "max_in_flight_packets": self.max_in_flight_packets,
            "max_in_flight_bytes": self.max_in_flight_bytes,
            "dropped": self.dropped,
            "late_max_s": self.late_max_s,
            "late_mean_s": self.late_sum_s / self.released if self.released else 0.0,
        }


# -- the kernel side: taps and filters in a node's namespace ---------------------------------------------


def open_tap(netns: str, name: str) -> int:
    """A tap named ``name`` made inside ``netns``, non-blocking, without packet info or offloads; the
    device lives as long as the returned descriptor."""

    def make() -> int:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
            # A tap with an IPv6 link-local address would send its own ND/MLD out to us: no IPv6 on it.
            v6 = Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6")
            if v6.exists():
                v6.write_text("1")
        except BaseException:
            os.close(fd)
            raise
        return fd

    try:
        return opened_in(netns, make)
    except FileNotFoundError as exc:
        raise RelayError(f"{netns}: {exc}; is the lab deployed? (and /dev/net/tun: modprobe tun)") from None


def _set_up(netns: str, tap: str, interface: str, mtu: int) -> tuple[int, int]:
    """The tap up with the link's MTU and a deep ring; returns (tap ifindex, interface ifindex)."""
    from orchestrator.lab.shaping import open_netns

    with open_netns(netns) as ns:
        tap_index = ns.link_lookup(ifname=tap)
        rx_index = ns.link_lookup(ifname=interface)
        if not tap_index or not rx_index:
            raise RelayError(f"{netns}: no interface {interface if not rx_index else tap}")
        ns.link("set", index=tap_index[0], mtu=max(mtu, 1500), txqlen=TAP_QUEUE, state="up")
        return tap_index[0], rx_index[0]


def attach_lines(interface: str, tap: str, obj: Path) -> tuple[str, str]:
    """The ``tc -batch`` lines that route one link's arrivals through a tap and back: the tap's return
    first, then the link's divert (each does nothing until :func:`set_target` gives it its target)."""
    back = (
        f"qdisc replace dev {tap} clsact\n"
        f'filter replace dev {tap} ingress pref 1 handle 1 bpf da obj "{obj}" sec tc/return\n'
    )
    divert = (
        f"qdisc replace dev {interface} clsact\n"
        f"filter replace dev {interface} ingress pref {DIVERT_PREF} handle 1 bpf da "
        f'obj "{obj}" sec tc/divert\n'
    )
    return back, divert


def set_target(netns: str, interface: str, ifindex: int) -> None:
    """Tell the relay program at ``interface``'s ingress where to redirect (its ``dr_target`` map)."""
    from aidcnet.ebpf import RELAY_PROGRAM
    from orchestrator.lab.shaping import map_write, program_maps, tc_list, tc_programs

    prog = tc_programs(tc_list(netns), "ingress", RELAY_PROGRAM).get(interface)
    if prog is None:
        raise RelayError(f"{netns}: no {RELAY_PROGRAM} program at {interface}'s ingress after attaching it")
    maps = program_maps(prog)
    if TARGET_MAP not in maps:
        raise RelayError(f"{netns}: program {prog} at {interface} has no {TARGET_MAP} map: an old object?")
    map_write(maps[TARGET_MAP], struct.pack("=I", ifindex))


def detach_divert(netns: str, interface: str) -> None:
    """Frames on ``interface`` go straight up again (a missing filter or namespace is fine: nothing to do)."""
    import subprocess

    from orchestrator.lab.shaping import _in_netns

    subprocess.run(
        [*_in_netns(netns), "tc", "filter", "del", "dev", interface, "ingress", "pref", str(DIVERT_PREF)],
        capture_output=True,
        timeout=30,
    )


def _tc_batch(netns: str, lines: str, what: str) -> None:
    from orchestrator.lab.shaping import _in_netns, _run

    _run([*_in_netns(netns), "tc", "-batch", "-"], what, lines)


def _neigh_retrans(netns: str, interface: str, value: str) -> str:
    """Set ``interface``'s ARP retransmit time (ms) in ``netns``; returns what it was ("" when the
    namespace or the interface is gone)."""
    return swap_neigh_params(netns, "retrans_time_ms", {interface: value}).get(interface, "")


def relay_object() -> Path:
    from aidcnet.ebpf import RELAY_PROGRAM, build

    return build(programs=(RELAY_PROGRAM,))[RELAY_PROGRAM]


def containers(lab_dir: Path) -> dict[str, str]:
    """node -> container name, from the lab dir's topology-data.json."""
    path = lab_dir / "topology-data.json"
    try:
        nodes = json.loads(path.read_text())["nodes"]
    except (OSError, ValueError, KeyError) as exc:
        raise RelayError(f"{path}: cannot read the lab's nodes ({exc}); is the lab deployed?") from None
    return {name: info["longname"] for name, info in nodes.items()}


# -- the relay ---------------------------------------------------------------------------------------------


class _Stop(Exception):
    pass


class Relay:
    """Every delayed end of one lab, one thread, one epoll."""

    def __init__(self, lab_dir: Path, obj: Path | None = None, seed: int | None = None) -> None:
        self.lab_dir = lab_dir
        self.obj = obj or relay_object()
        self.random = random.Random(seed)
        self.ends: dict[str, HeldEnd] = {}
        self.by_fd: dict[int, HeldEnd] = {}
        self.heap: list[tuple[float, int, str]] = []
        self.seq = itertools.count()
        self.poller = select.epoll()
        self.held_bytes = 0
        self.scale = TimeScale.unshaped()
        self.control: socket.socket | None = None
        self.last_housekeeping = time.monotonic()
        # (netns, interface) -> the ARP retransmit time it had before a delay stretched it
        self.neigh_saved: dict[tuple[str, str], str] = {}

    # -- configuration ---------------------------------------------------------------------------------
    def reload(self) -> dict[str, Any]:
        """Follow the lab's fabric.json: its time scale, its delayed ends (new ones attached, gone ones
        released and detached, changed ones re-timed)."""
        fabric = load_fabric(self.lab_dir)
        self.scale = fabric.time_scale
        wanted = fabric.delayed_ends()
        for name in [n for n in self.ends if n not in wanted]:
            self.remove(name)
        names = containers(self.lab_dir)
        for name, end in sorted(wanted.items()):
            held = self.ends.get(name)
            if held is not None and held.receiver != end.peer:
                self.remove(name)
                held = None
            if held is None:
                self.add(fabric, end, names)
            else:
                held.delay_s, held.jitter_s = end.delay_s, end.jitter_s
                held.line.set(self.scale.wall_s(end.delay_s), self.scale.wall_s(end.jitter_s))
        self.stretch_neighbours(fabric, names)
        return {"ok": True, "ends": sorted(self.ends)}

    def stretch_neighbours(self, fabric: Fabric, names: dict[str, str]) -> None:
        """ARP on a delayed link waits for its round trip (:func:`neighbour_retrans_ms`) at both ends; a link
        no longer delayed gets its old retransmit time back."""
        want: dict[tuple[str, str], int] = {}
        for end in fabric.delayed_ends().values():
            peer = fabric.end(end.peer)
            rtt = self.scale.wall_s(end.delay_s + end.jitter_s + peer.delay_s + peer.jitter_s)
            for side in (end, peer):
                if side.node in names:
                    key = (node_netns(names[side.node]), side.interface)
                    want[key] = max(want.get(key, 0), neighbour_retrans_ms(rtt))
        for (netns, interface), ms in want.items():
            old = _neigh_retrans(netns, interface, str(ms))
            self.neigh_saved.setdefault((netns, interface), old)
        for key in [k for k in self.neigh_saved if k not in want]:
            old = self.neigh_saved.pop(key)
            if old:
                _neigh_retrans(*key, old)

    def add(self, fabric: Fabric, end: EndShaper, names: dict[str, str]) -> None:
        peer = fabric.end(end.peer)
        if peer.node not in names:
            raise RelayError(f"{end.name}: its peer {peer.name} is not a node of the deployed lab")
        netns = node_netns(names[peer.node])
        line = HoldLine(self.scale.wall_s(end.delay_s), self.scale.wall_s(end.jitter_s))
        held = HeldEnd(end.name, peer.name, netns, peer.interface, line, end.delay_s, end.jitter_s)
        from orchestrator.lab.shaping import open_netns

        with open_netns(netns) as ns:
            found = ns.link_lookup(ifname=peer.interface)
        if not found:
            raise RelayError(f"{netns}: no interface {peer.interface} (is the lab wired?)")
        held.tap = f"{TAP_PREFIX}{found[0]}"
        held.fd = open_tap(netns, held.tap)
        try:
            tap_index, rx_index = _set_up(netns, held.tap, peer.interface, end.mtu + 14)
            back, divert = attach_lines(peer.interface, held.tap, self.obj)
            what = f"{end.name}: holding its packets at {peer.name}"
            _tc_batch(netns, back, what)
            set_target(netns, held.tap, rx_index)
            _tc_batch(netns, divert, what)
            set_target(netns, peer.interface, tap_index)
        except BaseException:
            os.close(held.fd)
            raise
        self.ends[end.name] = held
        self.by_fd[held.fd] = held
        self.poller.register(held.fd, select.EPOLLIN)

    def remove(self, name: str) -> None:
        """Stop holding an end: new arrivals go straight through, what is held is released at once."""
        held = self.ends[name]
        detach_divert(held.netns, held.interface)
        self._drain(held, release_all=True)
        self._forget(held)

    def _forget(self, held: HeldEnd) -> None:
        self.ends.pop(held.end, None)
        self.by_fd.pop(held.fd, None)
        with contextlib.suppress(OSError, ValueError):
            self.poller.unregister(held.fd)
        os.close(held.fd)

    # -- packets -----------------------------------------------------------------------------------------
    def _read(self, held: HeldEnd) -> None:
        was_empty = not held.queue
        for _ in range(READ_BATCH):
            try:
                frame = os.read(held.fd, FRAME_MAX)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno in (errno.EBADFD, errno.EIO, errno.ENODEV):
                    self._lost(held)
                    return
                raise
            arrived = time.monotonic()
            size = len(frame)
            if self.held_bytes + size > MAX_HELD_BYTES:
                held.dropped += 1
                continue
            held.queue.append((held.line.due(arrived, self.random.random()), frame))
            held.packets += 1
            held.bytes += size
            held.in_flight_bytes += size
            self.held_bytes += size
        held.max_in_flight_packets = max(held.max_in_flight_packets, len(held.queue))
        held.max_in_flight_bytes = max(held.max_in_flight_bytes, held.in_flight_bytes)
        if was_empty and held.queue and not held.scheduled:
            heapq.heappush(self.heap, (held.queue[0][0], next(self.seq), held.end))
            held.scheduled = True

    def _drain(self, held: HeldEnd, release_all: bool = False) -> None:
        """Write back every frame of ``held`` that is due (all of them with ``release_all``)."""
        queue = held.queue
        while queue:
            now = time.monotonic()
            due, frame = queue[0]
            if due > now and not release_all:
                break
            queue.popleft()
            held.in_flight_bytes -= len(frame)
            self.held_bytes -= len(frame)
            try:
                os.write(held.fd, frame)
            except OSError:
                held.dropped += 1
                continue
            late = max(0.0, now - due)
            held.released += 1
            held.late_sum_s += late
            held.late_max_s = max(held.late_max_s, late)

    def _release(self) -> None:
        now = time.monotonic()
        while self.heap and self.heap[0][0] <= now:
            _due, _seq, name = heapq.heappop(self.heap)
            held = self.ends.get(name)
            if held is None:
                continue
            held.scheduled = False
            self._drain(held)
            if held.queue:
                heapq.heappush(self.heap, (held.queue[0][0], next(self.seq), name))
                held.scheduled = True
            now = time.monotonic()

    def _lost(self, held: HeldEnd) -> None:
        """The tap went away (its namespace was removed): what it held cannot be delivered."""
        held.dropped += len(held.queue)
        self.held_bytes -= held.in_flight_bytes
        held.queue.clear()
        held.in_flight_bytes = 0
        self._forget(held)

    # -- state ---------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        ends = {name: held.stats() for name, held in sorted(self.ends.items())}
        for name, dropped in tap_drops(list(self.ends.values())).items():
            ends[name]["tap_dropped"] = dropped
        total = lambda key: sum(e[key] for e in ends.values())  # noqa: E731
        return {
            "ok": True,
            "pid": os.getpid(),
            "scale": self.scale.value,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "packets": total("packets"),
            "bytes": total("bytes"),
            "in_flight_bytes": self.held_bytes,
            DROP_COUNTER: total("dropped") + total("tap_dropped"),
            "ends": ends,
        }

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self.last_housekeeping < HOUSEKEEPING_S:
            return
        self.last_housekeeping = now
        for held in list(self.ends.values()):
            if not os.path.exists(held.netns):
                self._lost(held)
        if not self.ends:
            raise _Stop()  # nothing left to hold: the lab was destroyed (a new delay starts a new relay)

    # -- the loop ------------------------------------------------------------------------------------------
    def serve(self) -> None:
        path = self.lab_dir / SOCKET_NAME
        path.unlink(missing_ok=True)
        control = self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.bind(str(path))
        control.listen(8)
        control.setblocking(False)
        self.poller.register(control.fileno(), select.EPOLLIN)
        (self.lab_dir / PID_NAME).write_text(f"{os.getpid()}\n")

    def run(self) -> None:
        control_fd = self.control.fileno() if self.control else -1
        while True:
            timeout = max(0.0, self.heap[0][0] - time.monotonic()) if self.heap else HOUSEKEEPING_S
            for fd, _event in self._wait(min(timeout, HOUSEKEEPING_S)):
                if fd == control_fd:
                    self._answer()
                elif fd in self.by_fd:
                    self._read(self.by_fd[fd])
            self._release()
            self._housekeeping()

    def _wait(self, timeout: float) -> list[tuple[int, int]]:
        """epoll's events within ``timeout`` s, to about 0.1 ms: epoll_wait counts whole milliseconds
        (Python rounds up), so the last millisecond is waited in select(2) on the epoll's own descriptor."""
        if timeout >= 0.001:
            return self.poller.poll(timeout - 0.001)
        ready, _, _ = select.select([self.poller.fileno()], [], [], timeout)
        return self.poller.poll(0) if ready else []

    def _answer(self) -> None:
        assert self.control is not None
        try:
            conn, _ = self.control.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(2.0)
            try:
                request = json.loads(_read_line(conn))
                reply = self.handle(request)
            except (OSError, ValueError, RelayError) as exc:
                reply = {"ok": False, "error": str(exc)}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode() + b"\n")
            if request_op(reply) == "stop":
                raise _Stop()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return self.status()
        if op == "reload":
            return self.reload()
        if op == "stop":
            return {"ok": True, "op": "stop"}
        if op == "reset-peaks":
            # A run's own peaks: what is in flight now is where they start again.
            for held in self.ends.values():
                held.max_in_flight_packets, held.max_in_flight_bytes = len(held.queue), held.in_flight_bytes
                held.late_max_s = 0.0
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}: status, reload, reset-peaks or stop"}

    def close(self) -> None:
        for key in list(self.neigh_saved):
            if self.neigh_saved[key]:
                _neigh_retrans(*key, self.neigh_saved.pop(key))
        for name in list(self.ends):
            try:
                self.remove(name)
            except Exception as exc:  # one end failing must not keep the others attached
                print(f"delay relay: releasing {name}: {exc}", file=sys.stderr)
        if self.control is not None:
            self.control.close()
            (self.lab_dir / SOCKET_NAME).unlink(missing_ok=True)
        pid_file = self.lab_dir / PID_NAME
        if pid_file.exists() and pid_file.read_text().strip() == str(os.getpid()):
            pid_file.unlink()


def request_op(reply: dict[str, Any]) -> str | None:
    return reply.get("op")


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def tap_drops(ends: list[HeldEnd]) -> dict[str, int]:
    """end -> frames the kernel dropped at its tap because the ring was full (this process read too
    slowly), read through netlink in each receiver's namespace; an end whose namespace is gone reads 0."""
    from orchestrator.lab.shaping import FabricIOError, open_netns

    out: dict[str, int] = {}
    by_netns: dict[str, list[HeldEnd]] = {}
    for held in ends:
        by_netns.setdefault(held.netns, []).append(held)
    for netns, group in by_netns.items():
        try:
            with open_netns(netns) as ns:
                stats = {
                    link.get_attr("IFLA_IFNAME"): (link.get_attr("IFLA_STATS64") or {}).get("tx_dropped", 0)
                    for link in ns.get_links()
                }
        except (FabricIOError, OSError):
            stats = {}
        for held in group:
            out[held.end] = int(stats.get(held.tap, 0))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m orchestrator.lab.relay LAB_DIR", file=sys.stderr)
        return 2
    relay = Relay(Path(args[0]).resolve())

    def stop(_signum: int, _frame: object) -> None:
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        relay.serve()
        relay.reload()
        print(f"delay relay: holding {', '.join(sorted(relay.ends)) or 'nothing'}", flush=True)
        relay.run()
    except _Stop:
        pass
    finally:
        relay.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
