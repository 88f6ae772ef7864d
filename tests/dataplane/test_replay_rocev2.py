"""What the host agent's replay puts on the wire on UDP 4791 is RoCEv2: the replay service sends a small
unicast schedule from one network namespace to another over a veth, tcpdump captures the link, and
tshark (Wireshark's InfiniBand dissector) decodes every datagram as a valid Base Transport Header with no
expert complaint, while the receiving agent's reassembly takes every message whole (root, iproute2,
tcpdump; tshark for the decode)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidcnet.agent.replay.service import ReplayService
from aidcnet.ipv4 import ROCEV2_PORT
from aidcnet.replay import datagram_sizes, queue_pair
from aidcnet.rocev2 import RC_SEND_ONLY
from tests.dataplane.netlab import PREFIX, in_netns, sh
from tests.pcap import BTH_FIELDS, tshark_fields

SENDER, RECEIVER = f"{PREFIX}rs", f"{PREFIX}rr"
S_LO, R_LO = "10.255.0.1", "10.255.0.2"
# (message id, bytes): the replay cuts 20,000 and 24,001 bytes into several datagrams.
OPS = [(0, 100), (1, 20_000), (2, 1), (3, 24_001), (4, 8_000)]


@pytest.fixture(scope="module")
def link() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces)")
    for tool, pkg in (("ip", "iproute2"), ("tcpdump", "tcpdump")):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: apt-get install -y {pkg}")
    for ns in (SENDER, RECEIVER):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        sh("ip", "netns", "add", ns)
    try:
        # the labs' MTU: a replay datagram (up to 8,000 bytes after its BTH) is never cut by IP
        sh("ip", "-n", SENDER, "link", "add", "eth1", "mtu", "9500", "type", "veth",
           "peer", "name", "eth1", "mtu", "9500", "netns", RECEIVER)  # fmt: skip
        for ns, lo, addr, peer_lo, peer in ((SENDER, S_LO, "10.79.0.1", R_LO, "10.79.0.2"),
                                            (RECEIVER, R_LO, "10.79.0.2", S_LO, "10.79.0.1")):  # fmt: skip
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{lo}/32", "dev", "lo")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth1")
            sh("ip", "-n", ns, "link", "set", "eth1", "up")
            sh("ip", "-n", ns, "route", "add", f"{peer_lo}/32", "via", peer)
        yield
    finally:
        for ns in (SENDER, RECEIVER):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_capture(pcap: Path, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        ["ip", "netns", "exec", RECEIVER, "tcpdump", "-i", "eth1", "-U", "-n", "-w", str(pcap),
         "-c", str(count), "udp", "dst", "port", str(ROCEV2_PORT)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()  # "listening on eth1, ...": the capture is open
    assert "listening" in line, line
    return proc


async def replay_once() -> ReplayService:
    """Send OPS from SENDER to RECEIVER with the agent's replay service; the receiver is one too."""
    receiver = ReplayService(R_LO)
    with in_netns(RECEIVER):
        await receiver.listen()
    sender = ReplayService(S_LO)
    ops = [{"id": i, "t": 0.0, "size": n, "receivers": ["r"]} for i, n in OPS]
    sender.load({"mode": "unicast", "receivers": {"r": {"address": R_LO, "id": None}}, "ops": ops})
    with in_netns(SENDER):  # the send sockets are made when the run starts
        sender.start({"start_ns": time.time_ns()})
        await asyncio.sleep(0.05)
    deadline = time.monotonic() + 10
    while receiver.reassembly.complete_good() < len(OPS) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    sender.close()
    receiver.close()
    return receiver


def test_the_agents_replay_datagrams_decode_as_rocev2(link: None, tmp_path: Path) -> None:
    datagrams = sum(len(datagram_sizes(n)) for _i, n in OPS)
    pcap = tmp_path / "replay.pcap"
    capture = start_capture(pcap, datagrams)
    try:
        receiver = asyncio.run(replay_once())
        capture.wait(timeout=10)
    finally:
        capture.kill()
    assert receiver.reassembly.complete_good() == len(OPS), receiver.reassembly.to_dict()["errors"]

    lines = tshark_fields(pcap, ["udp.length", *BTH_FIELDS])
    assert len(lines) == datagrams
    psns: dict[str, list[int]] = defaultdict(list)
    lengths = []
    for line in lines:
        udp_len, opcode, tver, pkey, qp, psn, expert, malformed = line.split(";")
        assert (opcode, tver, pkey, expert, malformed) == (str(RC_SEND_ONLY), "0", "65535", "", ""), line
        psns[qp].append(int(psn))
        lengths.append(int(udp_len) - 8)
    # one QP per message, each counting its datagrams from 0; the UDP payloads are the codec's sizes
    assert set(psns) == {f"0x{queue_pair(i):06x}" for i, _n in OPS}
    assert all(seq == list(range(len(seq))) for seq in psns.values()), psns
    assert sorted(lengths) == sorted(s for _i, n in OPS for s in datagram_sizes(n))
