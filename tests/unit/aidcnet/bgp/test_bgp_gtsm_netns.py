"""GTSM (RFC 5082) between real ExaBGP speakers in network namespaces (bgs-*), started the way the agent
starts them (``python -m aidcnet.bgp.exabgp_main``, config from aidcnet.bgp.exabgp.config_text):

    bgs-a 10.91.0.1 ---- 10.91.0.2 bgs-b             one hop: GTSM (+MD5) sessions come up, whichever
    bgs-a 10.91.2.1 ---- bgs-r ---- 10.91.1.1 bgs-c  side is passive; two hops: refused.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidcnet.bgp import exabgp
from tests.exabgp_speaker import SPEAKER_ENV, event_sink_script, session_came_up

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("ss") is None,
    reason="needs root, iproute2 (ip, ss) for network namespaces",
)

NS = ("bgs-a", "bgs-b", "bgs-r", "bgs-c")
ROOT = Path(__file__).resolve().parents[4]
UP_WAIT_S = 25.0
# A refused session is given this long: ExaBGP retries its connect every few seconds, and an accepted
# handshake shows within one retry (the positive tests come up well inside it).
DOWN_WAIT_S = 12.0
MAIN = "aidcnet.bgp.exabgp_main"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def nsx(ns: str, *cmd: str) -> None:
    sh("ip", "netns", "exec", ns, *cmd)


@pytest.fixture(scope="module")
def fabric() -> Iterator[None]:
    def cleanup() -> None:
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    cleanup()
    try:
        for ns in NS:
            sh("ip", "netns", "add", ns)
            nsx(ns, "ip", "link", "set", "lo", "up")
        for left, right, lip, rip in (
            ("bgs-a", "bgs-b", "10.91.0.1/30", "10.91.0.2/30"),
            ("bgs-a", "bgs-r", "10.91.2.1/30", "10.91.2.2/30"),
            ("bgs-c", "bgs-r", "10.91.1.1/30", "10.91.1.2/30"),
        ):
            lif, rif = f"{left[-1]}{right[-1]}", f"{right[-1]}{left[-1]}"
            sh("ip", "link", "add", f"bgs-{lif}", "netns", left,
               "type", "veth", "peer", f"bgs-{rif}", "netns", right)
            nsx(left, "ip", "addr", "add", lip, "dev", f"bgs-{lif}")
            nsx(right, "ip", "addr", "add", rip, "dev", f"bgs-{rif}")
            nsx(left, "ip", "link", "set", f"bgs-{lif}", "up")
            nsx(right, "ip", "link", "set", f"bgs-{rif}", "up")
        nsx("bgs-r", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        nsx("bgs-a", "ip", "route", "add", "10.91.1.0/30", "via", "10.91.2.2")
        nsx("bgs-c", "ip", "route", "add", "10.91.2.0/30", "via", "10.91.1.2")
        yield
    finally:
        cleanup()


class Speaker:
    """One ExaBGP in a namespace; its API process appends ExaBGP's JSON messages to a file."""

    def __init__(self, tmp: Path, ns: str, procs: list[subprocess.Popen]) -> None:
        self.tmp, self.ns, self.procs = tmp, ns, procs
        self.events = tmp / f"{ns}.events"

    def start(self, neighbor: exabgp.Neighbor, passive: bool, module: str = MAIN) -> None:
        sink = self.tmp / f"{self.ns}.sink.py"
        sink.write_text(event_sink_script(str(self.events)))
        neighbor = dataclasses.replace(neighbor, passive=passive)
        text = exabgp.config_text([neighbor], f"{sys.executable} {sink}")
        conf = self.tmp / f"{self.ns}.conf"
        conf.write_text(text)
        env = {**os.environ, **SPEAKER_ENV, "PYTHONPATH": str(ROOT)}
        log = (self.tmp / f"{self.ns}.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", self.ns, sys.executable, "-m", module, "server", str(conf)],
                env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )
        )

    def up(self) -> bool:
        return self.events.exists() and session_came_up(self.events.read_text())


@pytest.fixture
def speakers(tmp_path: Path, fabric: None) -> Iterator[dict[str, Speaker]]:
    procs: list[subprocess.Popen] = []
    yield {ns: Speaker(tmp_path, ns, procs) for ns in NS}
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def neighbor(
    local: str, peer: str, local_asn: int, peer_asn: int, hops: int | None, md5: str | None = None
) -> exabgp.Neighbor:
    return exabgp.Neighbor(
        address=peer, local_address=local, local_asn=local_asn, peer_asn=peer_asn,
        router_id=local, hold_time=9, ttl_security_hops=hops, md5_password=md5,
    )


def wait_for(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.25)
    return cond()


def pair(sp: dict[str, Speaker], far: str, far_ip: str, a_ip: str, a_passive: bool, hops: int | None,
         module: str = MAIN, md5: str | None = None) -> tuple[Speaker, Speaker]:
    a, other = sp["bgs-a"], sp[far]
    a.start(neighbor(a_ip, far_ip, 65001, 65002, hops, md5), passive=a_passive, module=module)
    other.start(neighbor(far_ip, a_ip, 65002, 65001, hops, md5), passive=not a_passive, module=module)
    return a, other


@pytest.mark.parametrize("a_passive", [True, False], ids=["a-passive", "b-passive"])
def test_gtsm_session_one_hop_comes_up_whichever_side_is_passive(speakers, a_passive: bool) -> None:
    # As the plan renders every session by default: GTSM one hop and TCP-MD5.
    a, b = pair(speakers, "bgs-b", "10.91.0.2", "10.91.0.1", a_passive, hops=1, md5="lab-Secret_1")
    assert wait_for(lambda: a.up() and b.up(), UP_WAIT_S), "GTSM session between bgs-a and bgs-b stayed down"


def test_plain_exabgp_passive_side_breaks_gtsm(speakers) -> None:
    """Why exabgp_main exists: plain ExaBGP 5.0.15's SYN-ACK leaves with TTL 64 and the GTSM peer drops it.
    If this fails, ExaBGP now sets the listener's TTL itself and aidcnet.bgp.exabgp_main can go."""
    a, b = pair(speakers, "bgs-b", "10.91.0.2", "10.91.0.1", a_passive=True, hops=1, module="exabgp")
    assert not wait_for(lambda: a.up() or b.up(), DOWN_WAIT_S)


def test_gtsm_refuses_a_peer_two_hops_away(speakers) -> None:
    a, c = pair(speakers, "bgs-c", "10.91.1.1", "10.91.2.1", a_passive=False, hops=1)
    assert not wait_for(lambda: a.up() or c.up(), DOWN_WAIT_S), "a GTSM hops-1 session came up over two hops"


def test_without_gtsm_the_two_hop_session_comes_up(speakers) -> None:
    """The control of the test above: the routed path works, only GTSM refuses it."""
    a, c = pair(speakers, "bgs-c", "10.91.1.1", "10.91.2.1", a_passive=False, hops=None)
    assert wait_for(lambda: a.up() and c.up(), UP_WAIT_S)
