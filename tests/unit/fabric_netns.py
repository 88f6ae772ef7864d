"""Test hosts for the fabric tests: two network namespaces joined by a veth, made and removed here.

Named ``fab-<pid>-<n>`` (or another prefix, :func:`make_veth_pair`) so parallel runs and other helpers
never collide. These tests need root and the host's iproute2; a missing tool fails the test with the
command that installs it (never a skip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count
from typing import TypeVar

import pytest

_serial = count()


def require_tool(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is missing: apt-get install -y {package} (or run scripts/setup.sh)")
    return path


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("these tests create network namespaces and need root: run them as root (sudo)")


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


@dataclass(frozen=True)
class VethPair:
    """``a`` (netns name) holds ``a_if`` with ``a_ip``; ``b`` holds ``b_if`` with ``b_ip``."""

    a: str
    b: str
    a_if: str = "fab0"
    b_if: str = "fab1"
    a_ip: str = "10.99.0.0"
    b_ip: str = "10.99.0.1"

    @property
    def a_path(self) -> str:
        return f"/run/netns/{self.a}"

    @property
    def b_path(self) -> str:
        return f"/run/netns/{self.b}"

    def run_in(self, ns: str, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run Python ``code`` inside namespace ``ns`` with this interpreter (aidcnet importable)."""
        return subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen_in(self, ns: str, code: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@contextmanager
def make_veth_pair(prefix: str = "fab", mtu: int | None = None) -> Iterator[VethPair]:
    """Two namespaces ``<prefix>-<pid>-<n>a``/``b`` joined by a veth (``mtu`` if given), removed after."""
    require_root()
    require_tool("ip", "iproute2")
    require_tool("tc", "iproute2")
    n = next(_serial)
    pair = VethPair(a=f"{prefix}-{os.getpid()}-{n}a", b=f"{prefix}-{os.getpid()}-{n}b")
    try:
        sh("ip", "netns", "add", pair.a)
        sh("ip", "netns", "add", pair.b)
        sh("ip", "link", "add", pair.a_if, "netns", pair.a, "type", "veth", "peer", "name", pair.b_if,
           "netns", pair.b)
        for ns, iface, ip in ((pair.a, pair.a_if, pair.a_ip), (pair.b, pair.b_if, pair.b_ip)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/31", "dev", iface)
            if mtu is not None:
                sh("ip", "-n", ns, "link", "set", iface, "mtu", str(mtu))
            sh("ip", "-n", ns, "link", "set", iface, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # No IPv6 and no ARP on the wire: counters then hold the test's own packets and nothing else.
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        for ns, iface, peer_ns, peer_if, peer_ip in (
            (pair.a, pair.a_if, pair.b, pair.b_if, pair.b_ip),
            (pair.b, pair.b_if, pair.a, pair.a_if, pair.a_ip),
        ):
            mac = sh("ip", "-n", peer_ns, "-j", "link", "show", peer_if).stdout
            lladdr = json.loads(mac)[0]["address"]
            neigh = ("neigh", "replace", peer_ip, "lladdr", lladdr, "dev", iface, "nud", "permanent")
            sh("ip", "-n", ns, *neigh)
        yield pair
    finally:
        for ns in (pair.a, pair.b):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def veth_pair() -> Iterator[VethPair]:
    with make_veth_pair() as pair:
        yield pair


T = TypeVar("T")


def paced_run(
    measure: Callable[[], T], rate_of: Callable[[T], float], rate_bps: float, attempts: int = 3
) -> T:
    """A shaped transfer measured until it is not slower than ``rate_bps`` allows (5% grace), at most
    ``attempts`` times; the last one otherwise. TBF paces with a timer and the transmit softirq: when other
    work saturates the machine's CPUs (a second CI run, helpers' test suites) they run late, the tokens
    beyond the small burst are lost and the link drains below its rate for a while. That is the machine,
    measured by the fidelity sampler in a lab, not the shaper under test, so a slow attempt is repeated.
    A shaper faster than its rate is returned at once, and a misconfigured one fails every attempt."""
    result = measure()
    for _ in range(attempts - 1):
        if rate_of(result) >= rate_bps * 0.95:
            break
        print(f"drained at {rate_of(result) / 1e6:.2f} Mbit/s, below {rate_bps / 1e6:.2f}: measuring again")
        result = measure()
    return result


@contextmanager
def make_uplinks(prefix: str, count: int = 4) -> Iterator[tuple[str, str]]:
    """A node ``<prefix>-<pid>-<n>`` with ``count`` uplinks up0.. (10.64.i.0/31) to a namespace ``...-p``
    holding their far ends dn0.. (10.64.i.1/31), as a GPU's links to its leaves; removed after."""
    require_root()
    require_tool("ip", "iproute2")
    n = next(_serial)
    node, far = f"{prefix}-{os.getpid()}-{n}", f"{prefix}-{os.getpid()}-{n}-p"
    try:
        sh("ip", "netns", "add", node)
        sh("ip", "netns", "add", far)
        for i in range(count):
            sh("ip", "link", "add", f"up{i}", "netns", node, "type", "veth", "peer", "name", f"dn{i}",
               "netns", far)
            sh("ip", "-n", node, "addr", "add", f"10.64.{i}.0/31", "dev", f"up{i}")
            sh("ip", "-n", far, "addr", "add", f"10.64.{i}.1/31", "dev", f"dn{i}")
            sh("ip", "-n", node, "link", "set", f"up{i}", "up")
            sh("ip", "-n", far, "link", "set", f"dn{i}", "up")
        for i in range(count):
            wait_carrier(node, f"up{i}", True)
        yield node, far
    finally:
        for ns in (node, far):
            sh("ip", "netns", "del", ns, check=False)


def wait_carrier(ns: str, dev: str, want: bool, timeout: float = 10.0) -> None:
    """Until ``dev`` in ``ns`` has carrier (``want``) or not, as the kernel reports it."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sh("ip", "-n", ns, "-o", "link", "show", dev).stdout
        if ("LOWER_UP" in out) == want:
            return
        time.sleep(0.005)
    raise RuntimeError(f"{ns}:{dev} carrier never became {'up' if want else 'down'} within {timeout} s")


@contextmanager
def held_namespaces(prefix: str, nodes: Iterable[str]) -> Iterator[dict[str, tuple[str, int]]]:
    """Named network namespaces ``<prefix>-<node>``, each held by a sleeping process the way a container
    holds its own: node -> (namespace, PID). Removed on exit."""
    import time

    made, procs = {}, []
    try:
        for n in nodes:
            name = f"{prefix}-{n}"
            sh("ip", "netns", "add", name)
            proc = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
            procs.append(proc)
            made[n] = (name, proc.pid)
        time.sleep(0.2)  # ip netns exec has entered the namespace before it execs sleep
        yield made
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for name, _pid in made.values():
            sh("ip", "netns", "del", name, check=False)
