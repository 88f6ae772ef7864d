"""BFR forwarding speed, eBPF and Python, against two kernel anchors, in network namespaces (no Docker).

Topology: ebpf-bsrc -- ebpf-bdut -- ebpf-bs1..ebpf-bs8 (veths; the prefix is $AIDCLAB_NETNS_PREFIX,
default ebpf-).  In the same run, on the same path:
  - kernel IPv4 forwarding 1->1: UDP to s1's address, the DUT routes it (ip_forward);
  - kernel IP multicast forwarding 1->8: UDP to 232.9.9.9, one (S,G) mroute with the eight sink links as
    outputs (the DUT holds an MRT_INIT socket; ipmr replicates);
  - eBPF BFR 1->1 and 1->8: MPLS-in-UDP/BIER with s1's bit or all eight, the tc program forwards;
  - Python BFR 1->1 and 1->8: the same packets through the agent's Python dataplane (one thread).
Several sender processes (sendmmsg) offer more than the DUT forwards; rates are the DUT's veth egress
counters over the middle half of each run, and "lost" is what was offered but not sent on.
Targets (issue 13): eBPF 1->1 >= 0.9x kernel IPv4 forwarding; eBPF 1->8 copies/s >= 0.9x ipmr.
Run as root: python bench/bier_forwarding_netns.py [--seconds 4] [--sizes 64,1000] [--senders 2]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.agent.bier_dataplane import BierDataplane  # noqa: E402
from aidcnet.agent.bier_ebpf import EbpfBier, run_cmd  # noqa: E402
from aidcnet.bier.bift import SELF, build_bifts  # noqa: E402
from aidcnet.ebpf import build  # noqa: E402
from tests.dataplane.netlab import PREFIX, in_netns, sh  # noqa: E402

SINKS = 8
SRC, DUT = f"{PREFIX}bsrc", f"{PREFIX}bdut"
GROUP = "232.9.9.9"
BSL = 64
LABEL = 500
MRT_INIT, MRT_DONE, MRT_ADD_VIF, MRT_ADD_MFC = 200, 201, 202, 204
VIFF_USE_IFINDEX = 0x8
PIN = Path(f"/sys/fs/bpf/{PREFIX}bench")


def sink(i: int) -> str:
    return f"{PREFIX}bs{i}"


def setup() -> None:
    teardown()
    for ns in (SRC, DUT, *(sink(i) for i in range(1, SINKS + 1))):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    links = [(SRC, f"{PREFIX}bl0", "10.78.0")] + [
        (sink(i), f"{PREFIX}bl{i}", f"10.78.{i}") for i in range(1, SINKS + 1)
    ]
    for ns, ifname, net in links:
        sh("ip", "link", "add", ifname, "netns", DUT, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", DUT, "addr", "add", f"{net}.1/24", "dev", ifname)
        sh("ip", "-n", ns, "addr", "add", f"{net}.2/24", "dev", "eth0")
        sh("ip", "-n", DUT, "link", "set", ifname, "up")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", f"{net}.1")
        with in_netns(ns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"", (f"{net}.1", 9))  # the DUT's port unreachable answer resolves both MACs
    time.sleep(0.3)
    sh("ip", "-n", SRC, "route", "add", "224.0.0.0/4", "dev", "eth0")
    sh("ip", "netns", "exec", DUT, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    sh("ip", "netns", "exec", DUT, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
    sh("ip", "netns", "exec", DUT, "sysctl", "-qw", f"net.ipv4.conf.{PREFIX}bl0.rp_filter=0")


def teardown() -> None:
    for ns in (SRC, DUT, *(sink(i) for i in range(1, SINKS + 1))):
        if Path(f"/run/netns/{ns}").exists():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def mroute() -> socket.socket:
    """One (S,G) entry: in on the source link, out on all eight sink links (kernel ipmr)."""
    with in_netns(DUT):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
        s.setsockopt(socket.IPPROTO_IP, MRT_INIT, 1)
        for vif in range(SINKS + 1):
            ifindex = socket.if_nametoindex(f"{PREFIX}bl{vif}")
            s.setsockopt(
                socket.IPPROTO_IP,
                MRT_ADD_VIF,
                struct.pack("=HBBIiI", vif, VIFF_USE_IFINDEX, 1, 0, ifindex, 0),
            )
    ttls = bytes([0] + [1] * SINKS + [0] * (32 - SINKS - 1))
    mfc = struct.pack(
        "=4s4sH32s2xIIIi", socket.inet_aton("10.78.0.2"), socket.inet_aton(GROUP), 0, ttls, 0, 0, 0, 0
    )
    s.setsockopt(socket.IPPROTO_IP, MRT_ADD_MFC, mfc)
    return s


def egress() -> int:
    stats = json.loads(sh("ip", "-n", DUT, "-s", "-j", "link", "show"))
    return sum(
        link["stats64"]["tx"]["packets"]
        for link in stats
        if link["ifname"] != f"{PREFIX}bl0" and link["ifname"] != "lo"
    )


def quiesce() -> None:
    last = egress()
    for _ in range(40):
        time.sleep(0.25)
        now = egress()
        if now == last:
            return
        last = now


def run(args: list[str], seconds: float, senders: int) -> tuple[float, float]:
    """(DUT egress packets/s over the middle half, offered packets/s summed over the senders)."""
    quiesce()
    cmd = ["ip", "netns", "exec", SRC, sys.executable, str(ROOT / "bench" / "bier_sender.py"), *args]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(senders)
    ]
    time.sleep(seconds * 0.25)
    c0, t0 = egress(), time.monotonic()
    time.sleep(seconds * 0.5)
    c1, t1 = egress(), time.monotonic()
    sent = 0
    for p in procs:
        out, err = p.communicate(timeout=seconds * 4)
        if p.returncode != 0:
            raise RuntimeError(f"sender failed: {err.strip()[-500:]}")
        sent += int(out.strip())
    return (c1 - c0) / (t1 - t0), sent / seconds


def line(name: str, rate: float, offered: float, copies: int, base: float | None, target: str = "") -> str:
    lost = max(0.0, 1 - rate / (offered * copies)) if offered else 0.0
    ratio = f"; ratio {rate / base:.2f}{target}" if base else ""
    unit = "k copies/s" if copies > 1 else "kpps"
    offer = f"offered {offered / 1e3:.1f} kpps in, {lost:.0%} not forwarded"
    return f"  {name}: {rate / 1e3:.1f} {unit} ({offer}){ratio}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--sizes", default="64,1000")
    parser.add_argument("--senders", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        obj = build(Path(tmp))["bier"]
        setup()
        mr = None
        try:
            mr = mroute()
            names = [f"s{i}" for i in range(1, SINKS + 1)]
            birt = {9: SELF, **{i: [f"s{i}"] for i in range(1, SINKS + 1)}}
            labels = {n: {(0, BSL, 0): 900 + i} for i, n in enumerate(names)}
            bifts = build_bifts(birt, BSL, labels)
            nbrs = {f"s{i}": (f"10.78.{i}.2", f"{PREFIX}bl{i}") for i in range(1, SINKS + 1)}
            with in_netns(DUT):
                dp = BierDataplane(9, BSL, 0, bifts, nbrs, {(0, BSL, 0): LABEL})
            lines = [f"bench bier_forwarding (netns): src -> dut -> {SINKS} sinks, {args.senders} senders, "
                     f"{args.seconds:.0f} s runs, BSL {BSL}"]  # fmt: skip
            for size in (int(s) for s in args.sizes.split(",")):
                bier = [
                    "bier",
                    "10.78.0.1",
                    str(size),
                    str(args.seconds),
                    str(LABEL),
                    str(BSL),
                    "10",
                    "10.78.0.2",
                ]
                k1, k1o = run(
                    ["udp", "10.78.1.2", "9", str(size), str(args.seconds)], args.seconds, args.senders
                )
                k8, k8o = run(["mcast", GROUP, "9", str(size), str(args.seconds)], args.seconds, args.senders)
                fast = EbpfBier(dp, obj, [f"10.78.{i}.1" for i in range(SINKS + 1)], pin_dir=PIN,
                                run=run_cmd(["nsenter", f"--net=/run/netns/{DUT}"]),
                                interfaces=[f"{PREFIX}bl{i}" for i in range(SINKS + 1)])  # fmt: skip
                with in_netns(DUT):
                    fast.start()
                try:
                    e1, e1o = run([*bier, "1"], args.seconds, args.senders)
                    e8, e8o = run([*bier, "ff"], args.seconds, args.senders)
                finally:
                    fast.stop()
                dp.start()
                try:
                    p1, p1o = run([*bier, "1"], args.seconds, args.senders)
                    p8, p8o = run([*bier, "ff"], args.seconds, args.senders)
                finally:
                    dp.stop()
                lines += [
                    line(f"{size} B kernel IPv4 forward 1->1", k1, k1o, 1, None),
                    line(f"{size} B kernel ipmr 1->8", k8, k8o, 8, None),
                    line(f"{size} B eBPF BFR 1->1", e1, e1o, 1, k1, " x kernel IPv4 (target >= 0.9)"),
                    line(f"{size} B eBPF BFR 1->8", e8, e8o, 8, k8, " x kernel ipmr (target >= 0.9)"),
                    line(f"{size} B Python BFR 1->1", p1, p1o, 1, k1, " x kernel IPv4"),
                    line(f"{size} B Python BFR 1->8", p8, p8o, 8, k8, " x kernel ipmr"),
                ]
            dp.close()
        finally:
            if mr is not None:
                mr.close()
            teardown()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
