"""In a fresh network namespace (edA-md5): a TCP-MD5 connection with the right secret comes up and leaves the
counters alone; with a wrong one it stays down, TCPMD5Failure grows and session_problem names the mismatch.
This is the kernel behaviour the BGP status relies on (aidcnet/bgp/security.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NS = "edA-md5"
PROBE = Path(__file__).with_name("md5_probe.py")
ROOT = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 for a network namespace"
)


@pytest.fixture(scope="module")
def netns():
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up"], check=True)
        yield NS
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def probe(ns: str, key: str) -> dict:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, str(PROBE), str(ROOT), key],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(out.stdout)


def test_right_secret_up_wrong_secret_down_and_named(netns: str) -> None:
    ok = probe(netns, "right")
    assert ok["state"] == "up" and ok["problem"] is None and ok["deltas"]["TCPMD5Failure"] == 0
    bad = probe(netns, "wrong")
    assert bad["state"].startswith("down") and bad["deltas"]["TCPMD5Failure"] > 0
    assert "mismatch" in bad["problem"]
