"""Netlink handles inside a node's network namespace: the one place the orchestrator opens them, and the
namespace's interface counters read through ``/proc/PID/net/dev`` without entering it.

pyroute2's ``NetNS`` forks a short-lived helper to open each handle's socket inside the namespace and
stops it with SIGTERM, so nothing in the orchestrator may install a SIGTERM handler that a forked child
would run as Python code (aidclab/pytest.py's handler ends such a child at once).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import NetNS

# /proc/net/dev columns after "name:": eight receive counters, then eight transmit counters.
NET_DEV_COLUMNS = (
    "rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame", "rx_compressed", "rx_multicast",
    "tx_bytes", "tx_packets", "tx_errs", "tx_drop", "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed",
)  # fmt: skip


def open_handle(netns: str | Path, create: bool = False) -> NetNS:
    """A pyroute2 handle inside ``netns`` (a path such as ``/proc/PID/ns/net`` or a /run/netns name);
    the caller closes it (``with`` works too). Without ``create``, a missing namespace is a
    FileNotFoundError rather than a new empty namespace."""
    return NetNS(str(netns)) if create else NetNS(str(netns), flags=0)


@contextmanager
def netlink(netns: str | Path, create: bool = False) -> Iterator[NetNS]:
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
