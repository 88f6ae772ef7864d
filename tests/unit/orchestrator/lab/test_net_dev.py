"""Interface counters read from /proc/PID/net/dev (the replay's counter snapshot) against netlink's
IFLA_STATS64 for the same namespace, after real traffic over a veth pair (needs root and ``ip``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from orchestrator.lab.netns import NET_DEV_COLUMNS, net_dev, parse_net_dev
from orchestrator.lab.wiring import link_state

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
    "carrier compressed\n"
)
SAMPLE = (
    HEADER
    + "    lo: 931744526 16557244    0  503    0     0          0         0 931744526 16557244    0    0    0"
    + "     0       0          0\n"
    + "  eth1: 18446744073709551615 7 1 2 3 4 5 6 9000000000 8 9 10 11 12 13 14\n"
)


def test_parse_net_dev_reads_every_column_of_every_interface() -> None:
    counters = parse_net_dev(SAMPLE)
    assert set(counters) == {"lo", "eth1"}
    assert counters["lo"]["rx_drop"] == 503 and counters["lo"]["tx_bytes"] == 931744526
    # 64-bit counters stay exact; the columns land on their names in the kernel's order.
    assert counters["eth1"]["rx_bytes"] == 2**64 - 1
    rest = [7, 1, 2, 3, 4, 5, 6, 9000000000, 8, 9, 10, 11, 12, 13, 14]
    assert [counters["eth1"][k] for k in NET_DEV_COLUMNS[1:]] == rest


def test_parse_net_dev_skips_the_header_and_short_lines() -> None:
    assert parse_net_dev(HEADER + "  bad: 1 2\n") == {}


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 for network namespaces"
)
def test_net_dev_agrees_with_netlink_in_a_namespace() -> None:
    ns = f"netdev{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    holder = None
    try:
        ip = ["ip", "-n", ns]
        # No IPv6: its router solicitations and MLD reports go out on their own timers, and one landing
        # between the two reads made them disagree (seen once in a full unit run).
        subprocess.run(
            ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
             "net.ipv6.conf.default.disable_ipv6=1"],
            check=True,
        )  # fmt: skip
        subprocess.run([*ip, "link", "add", "nd0", "type", "veth", "peer", "name", "nd1"], check=True)
        subprocess.run([*ip, "addr", "add", "10.79.0.1/30", "dev", "nd0"], check=True)
        subprocess.run([*ip, "addr", "add", "10.79.0.2/30", "dev", "nd1"], check=True)
        for dev in ("lo", "nd0", "nd1"):
            subprocess.run([*ip, "link", "set", dev, "up"], check=True)
        # Traffic that crosses the veth: three raw frames out of nd0 (local experimental EtherType); with
        # both addresses in one namespace a ping would stay on lo.
        frames = (
            "import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(('nd0', 0)); "
            "[s.send(b'\\xff' * 6 + b'\\x02' * 6 + b'\\x88\\xb5' + bytes(50)) for _ in range(3)]"
        )
        subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", frames], check=True, timeout=15)
        holder = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "30"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink(
            "/proc/self/ns/net"
        ):
            time.sleep(0.02)
        from_file, from_netlink = net_dev(holder.pid), link_state(holder.pid)
        for dev in ("nd0", "nd1"):
            assert from_file[dev]["tx_packets"] > 0 or from_file[dev]["rx_packets"] > 0
            for key in ("rx_bytes", "rx_packets", "tx_bytes", "tx_packets"):
                assert from_file[dev][key] == from_netlink[dev][key], (dev, key)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
