"""Netlink handles inside a node's network namespace, opened one at a time.

pyroute2's ``NetNS`` forks a helper process to open each handle's socket inside the namespace. The
orchestrator opens handles from several threads at once (deploy prepares namespaces 8 at a time; the
counters and the fabric watcher read them in pools), and two of those forks taken at the same moment
hung a deploy for good: both children stuck in pyroute2's ``ChildProcess.stop``. Handles are therefore
opened under one process-wide lock; the work done with them afterwards runs in parallel as before. (A
fork-free ``setns`` of the calling thread is not an option: pyroute2 keeps its socket per thread and
would open one in the host's own namespace for a handle used from another thread.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import NetNS

_OPENING = threading.Lock()


def open_handle(netns: str | Path, create: bool = False) -> NetNS:
    """A pyroute2 handle inside ``netns`` (a path such as ``/proc/PID/ns/net`` or a /run/netns name);
    the caller closes it (``with`` works too). Without ``create``, a missing namespace is a
    FileNotFoundError rather than a new empty namespace."""
    with _OPENING:
        return NetNS(str(netns)) if create else NetNS(str(netns), flags=0)


@contextmanager
def netlink(netns: str | Path, create: bool = False) -> Iterator[NetNS]:
    """``open_handle`` for a ``with`` block: closed on exit."""
    handle = open_handle(netns, create)
    try:
        yield handle
    finally:
        handle.close()
