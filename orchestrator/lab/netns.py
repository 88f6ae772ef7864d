"""Netlink handles inside a node's network namespace: the one place the orchestrator opens them.

pyroute2's ``NetNS`` forks a short-lived helper to open each handle's socket inside the namespace and
stops it with SIGTERM, so nothing in the orchestrator may install a SIGTERM handler that a forked child
would run as Python code (aidclab/pytest.py's handler ends such a child at once).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import NetNS


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
