"""Netlink handles inside a node's network namespace: the one place the orchestrator opens them, and the
namespace's interface counters read through ``/proc/PID/net/dev`` without entering it.

A handle to an existing namespace gets its netlink socket from a short-lived thread that enters the
namespace with setns(2) (which moves only that thread) and opens the socket there: a socket stays in the
namespace it was made in. pyroute2's ``NetNS`` forks a helper process for that instead, for each handle
and again for each thread that uses it: about 5 s of a bsl256 replay's prepare for its 280 nodes. ``NetNS`` is
still what creates a namespace; it stops its helper with SIGTERM, so nothing in the orchestrator may
install a SIGTERM handler that a forked child would run as Python code (aidclab/pytest.py's handler ends
such a child at once).
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pyroute2 import IPRoute, NetNS

# /proc/net/dev columns after "name:": eight receive counters, then eight transmit counters.
NET_DEV_COLUMNS = (
    "rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame", "rx_compressed", "rx_multicast",
    "tx_bytes", "tx_packets", "tx_errs", "tx_drop", "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed",
)  # fmt: skip


T = TypeVar("T")
CLONE_NEWNET = 0x40000000  # linux/sched.h
NETLINK_ROUTE = 0


def open_handle(netns: str | Path, create: bool = False) -> IPRoute:
    """A pyroute2 handle inside ``netns`` (a path such as ``/proc/PID/ns/net`` or a /run/netns name);
    the caller closes it (``with`` works too). Without ``create``, a missing namespace is a
    FileNotFoundError rather than a new empty namespace."""
    if create:
        return NetNS(str(netns))
    path = str(netns) if "/" in str(netns) else f"/run/netns/{netns}"
    handle = IPRoute(fileno=_route_socket_in(path))
    core = getattr(handle, "asyncore", None)
    spec = getattr(core, "spec", None)
    if not hasattr(core, "setup_socket") or not hasattr(spec, "config"):
        handle.close()  # a pyroute2 laid out otherwise than 0.9: its own, slower way
        return NetNS(path, flags=0)
    # pyroute2 opens a socket for each thread that uses a handle (the fabric sampler reads from its own):
    # each one is opened inside the namespace too.
    make_socket = core.setup_socket
    lock = threading.Lock()

    def setup_socket_in_namespace() -> socket.socket:
        with lock:
            spec["fileno"] = _route_socket_in(path)
            return make_socket()

    core.setup_socket = setup_socket_in_namespace
    return handle


def _route_socket_in(path: str) -> int:
    """The file descriptor of a NETLINK_ROUTE socket opened inside the network namespace at ``path``."""
    return opened_in(
        path, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE).detach()
    )


def opened_in(path: str, opener: Callable[[], T]) -> T:
    """What ``opener`` returns, called inside the network namespace at ``path``: a socket or a device's file
    descriptor stays in the namespace it was made in (a netlink socket, a tap)."""
    made: dict[str, Any] = {}

    def enter_and_open() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if _libc().setns(fd, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns into {path}: {os.strerror(errno)}")
            finally:
                os.close(fd)
            made["value"] = opener()
        except BaseException as exc:  # raised again in the caller's thread
            made["error"] = exc

    # The thread ends inside the namespace; no other thread ever leaves the orchestrator's own.
    thread = threading.Thread(target=enter_and_open, name="netns-open")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    return made["value"]


def swap_neigh_params(path: str, name: str, values: dict[str, str]) -> dict[str, str]:
    """Set the neighbour (ARP) parameter ``name`` (``retrans_time_ms``, ``base_reachable_time_ms``) of each
    interface in ``values`` to its value, inside the network namespace at ``path``; returns what each was.
    An interface that is gone is left out (a namespace that is gone: nothing). From the host: a container
    sees its /proc/sys read-only."""

    def swap() -> dict[str, str]:
        old = {}
        for interface, value in values.items():
            param = Path(f"/proc/sys/net/ipv4/neigh/{interface}/{name}")
            try:
                old[interface] = param.read_text().strip()
                param.write_text(value)
            except OSError:
                continue
        return old

    try:
        return opened_in(path, swap)
    except OSError:
        return {}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@contextmanager
def netlink(netns: str | Path, create: bool = False) -> Iterator[IPRoute]:
    """``open_handle`` for a ``with`` block: closed on exit."""
    handle = open_handle(netns, create)
    try:
        yield handle
    finally:
        handle.close()


def parse_net_dev(text: str) -> dict[str, dict[str, int]]:
    """Interface name → its counters (``NET_DEV_COLUMNS``) from the text of a /proc/net/dev. The kernel
    fills the file from the same ``dev_get_stats`` as netlink's IFLA_STATS64, so the numbers agree."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        cols = rest.split()
        if sep and len(cols) >= len(NET_DEV_COLUMNS):
            out[name.strip()] = {key: int(v) for key, v in zip(NET_DEV_COLUMNS, cols, strict=False)}
    return out


def net_dev(pid: int, proc: Path = Path("/proc")) -> dict[str, dict[str, int]]:
    """The interface counters of the namespace process ``pid`` lives in. Reading a file costs no fork and no
    setns, unlike a netlink handle (about 40 times cheaper per node), which matters at hundreds of nodes."""
    return parse_net_dev((proc / str(pid) / "net" / "dev").read_text())
