"""BFR forwarding speed, eBPF and Python, against two kernel anchors, in network namespaces (no Docker).

Topology: ebpf-bsrc -- ebpf-bdut -- ebpf-bs1..ebpf-bs8 (veths; the prefix is $AIDCLAB_NETNS_PREFIX,
default ebpf-).  In the same run, on the same path:
  - kernel IPv4 forwarding 1->1: UDP to s1's address, the DUT routes it (ip_forward);
  - kernel IP multicast forwarding 1->8: UDP to 232.9.9.9, one (S,G) mroute with the eight sink links as
    outputs (the DUT holds an MRT_INIT socket; ipmr replicates);
  - eBPF BFR 1->1 and 1->8: MPLS-in-UDP/BIER with s1's bit or all eight, the tc program forwards;
  - Python BFR 1->1 and 1->8: the same packets through the agent's Python dataplane (one thread).
Load: several sender processes (sendmmsg) on the other CPUs, and a tc egress program on the source's
veth (FANOUT_C) that sends every packet they send --clones more times (bpf_clone_redirect out of the same
device; default 15, so x16): the same generator for every line.  Sockets alone could not offer more than
the DUT's 1->1 capacity, and with 7 clones the eBPF 1->1 line forwarded all that was offered (0-1% not
forwarded, 2026-11-28), so it was the sender's rate.  The clones share their data with each other, so a
DUT that writes a packet may have to copy its head first: the kernel's ip_forward (skb_cow) and the
program (its writes make the skb writable) would pay it alike; a perf profile of the DUT CPU (64 B)
showed pskb_expand_head in neither.
RPS moves the DUT's receive path to its own CPU (--dut-cpu), away from the senders, so the excess is
dropped at the DUT's backlog instead of slowing the senders down.  "offered" is what the source's veth
handed the DUT (its tx packets plus tx drops, i.e. refused at the DUT CPU's full backlog) over the middle
half of each run; rates are what the DUT put on its sink links in that time (veth tx packets, and tx
drops: the sinks' receive queue is the same backlog, and a copy lost there was forwarded); "not
forwarded" is offered minus that.  "k/softirq-s" is copies per second of softirq
time on the DUT CPU (/proc/stat, tick sampled): the DUT's capacity whatever else that CPU ran (the
machine may be shared); the second ratio compares those.  eBPF lines add the program's own mean time
per packet (kernel.bpf_stats_enabled, on in the last quarter of the run only, after the rate is taken:
its clock reads cost every run of the program, which the kernel anchors do not pay); for 1->8 it
includes the clones' transmit.  The source is one of the DUT's BFR neighbours (no bit is routed to it).
Sinks drop IPv4 at their tc ingress, so only the DUT's own work is compared (see setup).
--compare-ref REF adds the program as of a git revision, run in the same rounds.
Targets (issue 13): eBPF 1->1 >= 0.9x kernel IPv4 forwarding; eBPF 1->8 copies/s >= 0.9x ipmr.
Run as root: python bench/bier_forwarding_netns.py [--seconds 4] [--sizes 64,1000] [--rounds 3] [--clones 15]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.agent.bier.dataplane import BierDataplane  # noqa: E402
from aidcnet.agent.bier.ebpf import EbpfBier, EbpfNetBier, run_cmd  # noqa: E402
from aidcnet.agent.bier.net_bier import NetBierEdge  # noqa: E402
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


DROP_C = """#include <linux/bpf.h>
#include <linux/pkt_cls.h>
__attribute__((section("tc"), used)) int sink_drop(struct __sk_buff *skb)
{
	return skb->protocol == __builtin_bswap16(0x0800) ? TC_ACT_SHOT : TC_ACT_OK; /* ARP passes */
}
char LICENSE[] __attribute__((section("license"), used)) = "GPL";
"""

# The load generator's multiplier: on the source's veth egress, every IPv4 packet a sender's socket sends
# leaves CLONES more times (bpf_clone_redirect out of the same device).  A clone re-enters this hook; the
# mark lets it through, and it is scrubbed when the veth hands the packet to the DUT's namespace.
FANOUT_C = """#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#define FANOUT_MARK 0xFA0
__attribute__((section("tc"), used)) int src_fanout(struct __sk_buff *skb)
{
	if (skb->mark == FANOUT_MARK || skb->protocol != __builtin_bswap16(0x0800))
		return TC_ACT_OK;
	skb->mark = FANOUT_MARK;
	for (int i = 0; i < CLONES; i++)
		bpf_clone_redirect(skb, skb->ifindex, 0);
	skb->mark = 0;
	return TC_ACT_OK;
}
char LICENSE[] __attribute__((section("license"), used)) = "GPL";
"""


def build_ref(ref: str, tmp: Path) -> Path:
    """The BFR program as of git ``ref`` (its bier.c and bier.h), compiled like the current one."""
    src = tmp / "ref-src"
    src.mkdir()
    for name in ("bier.c", "bier.h"):
        (src / name).write_text(sh("git", "-C", str(ROOT), "show", f"{ref}:aidcnet/ebpf/{name}"))
    return build(tmp / "ref-obj", src=src, programs=("bier",))["bier"]


def build_drop(tmp: Path) -> Path:
    """A tc program that drops all IPv4 (this kernel may lack cls_matchall and act_gact)."""
    src, obj = tmp / "sink_drop.c", tmp / "sink_drop.o"
    src.write_text(DROP_C)
    sh("clang", "-O2", "-target", "bpf", *_multiarch(), "-c", str(src), "-o", str(obj))
    return obj


def build_fanout(tmp: Path, clones: int) -> Path:
    """The source's load multiplier (FANOUT_C) with ``clones`` extra copies of each sent packet."""
    src, obj = tmp / "src_fanout.c", tmp / "src_fanout.o"
    src.write_text(FANOUT_C)
    sh("clang", "-O2", "-target", "bpf", *_multiarch(), f"-DCLONES={clones}", "-c", str(src), "-o", str(obj))
    return obj


def _multiarch() -> list[str]:
    arch = sysconfig.get_config_var("MULTIARCH")
    return ["-I", f"/usr/include/{arch}"] if arch and Path(f"/usr/include/{arch}").is_dir() else []


def setup(drop_obj: Path, fanout_obj: Path | None) -> None:
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
    for ns, ifname, net in links:
        # static ARP both ways: a STALE entry that fails its probe would send copies to the Python path
        dmac, smac = _mac(ns, "eth0"), _mac(DUT, ifname)
        sh("ip", "-n", DUT, "neigh", "replace", f"{net}.2", "lladdr", dmac, "dev", ifname, "nud", "permanent")
        sh("ip", "-n", ns, "neigh", "replace", f"{net}.1", "lladdr", smac, "dev", "eth0", "nud", "permanent")
    for i in range(1, SINKS + 1):
        # Sinks drop IPv4 at tc ingress: on veths their receive runs on the DUT's CPU, and a
        # unicast copy to a closed port would cost a route lookup and an ICMP error there that a
        # multicast copy (ipmr's) does not; only the DUT's own work should be compared.
        sh("ip", "netns", "exec", sink(i), "tc", "qdisc", "add", "dev", "eth0", "clsact")
        sh("ip", "netns", "exec", sink(i), "tc", "filter", "add", "dev", "eth0", "ingress", "bpf", "da",
           "obj", str(drop_obj), "sec", "tc")  # fmt: skip
    sh("ip", "-n", SRC, "route", "add", "224.0.0.0/4", "dev", "eth0")
    if fanout_obj is not None:
        sh("ip", "netns", "exec", SRC, "tc", "qdisc", "add", "dev", "eth0", "clsact")
        sh("ip", "netns", "exec", SRC, "tc", "filter", "add", "dev", "eth0", "egress", "bpf", "da",
           "obj", str(fanout_obj), "sec", "tc")  # fmt: skip
    sh("ip", "netns", "exec", DUT, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    sh("ip", "netns", "exec", DUT, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
    sh("ip", "netns", "exec", DUT, "sysctl", "-qw", f"net.ipv4.conf.{PREFIX}bl0.rp_filter=0")


def _mac(ns: str, ifname: str) -> str:
    return sh("ip", "-n", ns, "-br", "link", "show", "dev", ifname).split()[2]


def teardown() -> None:
    for ns in (SRC, DUT, *(sink(i) for i in range(1, SINKS + 1))):
        if Path(f"/run/netns/{ns}").exists():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def mroute() -> socket.socket:
    """One (S,G) entry: in on the source link, out on all eight sink links (kernel ipmr)."""
    with in_netns(DUT):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
        try:
            s.setsockopt(socket.IPPROTO_IP, MRT_INIT, 1)
        except OSError as exc:
            s.close()
            raise SystemExit(
                f"bench bier_forwarding_netns: the 1->8 baseline is the kernel's multicast forwarding, and "
                f"this kernel has none (MRT_INIT: {exc.strerror}; CONFIG_IP_MROUTE, /proc/net/ip_mr_vif "
                f"absent): run it on a kernel with IP multicast routing"
            ) from None
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
    """Packets the DUT sent onto its sink links.  A veth counts as tx drops the packets the peer's receive
    queue refused: on veths that queue is the DUT CPU's backlog (the sinks' receive runs there), which
    the offered flood keeps full, so copies the DUT had finished are lost there.  They count as sent:
    the DUT did its work, the link lost them (the offered packets the backlog refuses are "not
    forwarded")."""
    stats = json.loads(sh("ip", "-n", DUT, "-s", "-j", "link", "show"))
    return sum(
        link["stats64"]["tx"]["packets"] + link["stats64"]["tx"]["dropped"]
        for link in stats
        if link["ifname"] != f"{PREFIX}bl0" and link["ifname"] != "lo"
    )


def offered() -> int:
    """Packets the source's veth handed towards the DUT: sent on, or dropped at the DUT CPU's full
    backlog (veth counts those as its tx drops)."""
    tx = json.loads(sh("ip", "-n", SRC, "-s", "-j", "link", "show", "dev", "eth0"))[0]["stats64"]["tx"]
    return tx["packets"] + tx["dropped"]


def quiesce() -> None:
    last = egress()
    for _ in range(40):
        time.sleep(0.25)
        now = egress()
        if now == last:
            return
        last = now


@dataclass
class Result:
    rate: float  # DUT egress packets/s over the middle half
    offered: float  # packets/s into the DUT over the middle half (its ingress veth's peer: sent + dropped)
    cpu_s: float  # softirq seconds on the DUT CPU over the middle half (tick sampled)
    prog_ns: float = 0.0  # the program's mean time per packet (eBPF only)

    def per_cpu(self) -> float:
        """Copies per softirq-second of the DUT CPU: its capacity, whatever else that CPU ran."""
        return self.rate * self.window / self.cpu_s if self.cpu_s else 0.0

    window: float = 0.0


def softirq_s(cpu: int) -> float:
    """Softirq time of ``cpu`` so far (the receive path, also when ksoftirqd runs it)."""
    for ln in Path("/proc/stat").read_text().splitlines():
        if ln.startswith(f"cpu{cpu} "):
            return int(ln.split()[7]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def run(
    args: list[str], seconds: float, senders: int, cpus: list[int] | None, dut_cpu: int, prog: bool = False
) -> Result:
    """One measurement.  ``cpus``: pin the senders there (the DUT's work runs on the RPS CPU
    ``dut_cpu``, see steer_dut).  ``prog``: also the BFR program's mean time per packet, taken with
    kernel.bpf_stats_enabled on in the last quarter only, so the rate is not measured with the
    statistics' own cost (two clock reads per run) that the kernel anchors do not pay."""
    quiesce()
    cmd = ["ip", "netns", "exec", SRC, sys.executable, str(ROOT / "bench" / "bier_sender.py"), *args]
    if cpus:
        cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(senders)
    ]
    time.sleep(seconds * 0.25)
    c0, o0, t0, s0 = egress(), offered(), time.monotonic(), softirq_s(dut_cpu)
    time.sleep(seconds * 0.5)
    c1, o1, t1, s1 = egress(), offered(), time.monotonic(), softirq_s(dut_cpu)
    if prog:
        stats = ProgStats()
        stats.__enter__()
        n0, r0 = ProgStats.read()
        time.sleep(seconds * 0.2)
        n1, r1 = ProgStats.read()
        stats.__exit__()
    for p in procs:
        _, err = p.communicate(timeout=seconds * 4)
        if p.returncode != 0:
            raise RuntimeError(f"sender failed: {err.strip()[-500:]}")
    cpu_s = s1 - s0 if dut_cpu >= 0 else 0.0
    res = Result((c1 - c0) / (t1 - t0), (o1 - o0) / (t1 - t0), cpu_s, window=t1 - t0)
    if prog:
        res.prog_ns = (r1 - r0) / max(1, n1 - n0)
    return res


def steer_dut(cpu: int) -> None:
    """RPS on the DUT's ingress veth: its receive path (tc program, ipmr, IPv4 forwarding, and the
    copies' transmit) runs on ``cpu`` from the backlog, apart from the senders, so the offered load can
    exceed what the DUT forwards and the excess is dropped (and shown) instead of slowing the senders."""
    path = f"/sys/class/net/{PREFIX}bl0/queues/rx-0/rps_cpus"
    sh("ip", "netns", "exec", DUT, "sh", "-c", f"echo {1 << cpu:x} > {path}")


class ProgStats:
    """The program's own time per run (kernel.bpf_stats_enabled), which includes bpf_clone_redirect's
    clone and transmit onto the veth but not the sinks' receive."""

    def __init__(self) -> None:
        self.old = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()

    def __enter__(self) -> ProgStats:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
        return self

    def __exit__(self, *exc: object) -> None:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text(self.old)

    @staticmethod
    def read() -> tuple[int, int]:
        info = json.loads(sh("bpftool", "-j", "prog", "show", "pinned", str(PIN / "bier_rx")))
        return int(info.get("run_cnt", 0)), int(info.get("run_time_ns", 0))


def median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.rate)[len(results) // 2]


def line(
    name: str,
    runs: list[Result],
    copies: int,
    base: list[Result] | None,
    target: str = "",
    softirq: bool = True,
) -> str:
    """The median run by rate; the ratio of medians; the CPU-cost ratio of medians (``softirq``: the
    DUT works in softirq context; the Python dataplane works in its own thread, so not for it)."""
    m = median(runs)
    lost = max(0.0, 1 - m.rate / (m.offered * copies)) if m.offered else 0.0
    unit = "k copies/s" if copies > 1 else "kpps"
    out = f"  {name}: {m.rate / 1e3:.1f} {unit} (offered {m.offered / 1e3:.1f} kpps in, "
    out += f"{lost:.0%} not forwarded"
    per_cpu = sorted(r.per_cpu() for r in runs)[len(runs) // 2] if softirq else 0.0
    if per_cpu:
        out += f"; {per_cpu / 1e3:.0f} k/softirq-s"
    out += ")"
    if base:
        out += f"; ratio {m.rate / median(base).rate:.2f}{target}"
        base_cpu = sorted(r.per_cpu() for r in base)[len(base) // 2]
        if per_cpu and base_cpu:
            out += f", per DUT CPU-second {per_cpu / base_cpu:.2f}"
    if m.prog_ns:
        out += f"; program {m.prog_ns:.0f} ns/packet"
    if len(runs) > 1:
        out += f"; rounds {', '.join(f'{r.rate / 1e3:.0f}' for r in runs)}"
    return out


def serve_edge(edge: NetBierEdge, stop: threading.Event) -> None:
    """The Python edge's capture loop (the agent runs it from its event loop)."""
    while not stop.is_set():
        if not edge.drain():
            time.sleep(0.0002)


def imposition(dp: BierDataplane, obj: Path, args: argparse.Namespace, cpus, dcpu: int) -> list[str]:
    """The DUT as a leaf whose host port is the source link: (*,232.9.9.9) -> BFR-ids 1..8, the same
    multicast packets as the ipmr line (a socket's, so their UDP checksums are left to offload)."""
    flows = [SimpleNamespace(group=GROUP, source=None, bfers=list(range(1, SINKS + 1)))]
    sec, n = args.seconds, args.senders
    out = []
    for size in (int(s) for s in args.sizes.split(",")):
        mcast = ["mcast", GROUP, "9", str(size), str(sec)]
        res: dict[str, list[Result]] = {}
        for _ in range(args.rounds):
            mr = mroute()
            try:
                res.setdefault("k8", []).append(run(mcast, sec, n, cpus, dcpu))
            finally:
                mr.close()
            with in_netns(DUT):
                edge = NetBierEdge(dp, [f"{PREFIX}bl0"], flows, [])
            try:
                fast = EbpfBier(dp, obj, [f"10.78.{i}.1" for i in range(SINKS + 1)], pin_dir=PIN,
                                run=run_cmd(["nsenter", f"--net=/run/netns/{DUT}"]),
                                interfaces=[f"{PREFIX}bl{i}" for i in range(1, SINKS + 1)])  # fmt: skip
                with in_netns(DUT):
                    fast.start()
                    net = EbpfNetBier(fast, edge, [f"{PREFIX}bl0"], flows)
                    net.start()
                try:
                    res.setdefault("e8", []).append(run(mcast, sec, n, cpus, dcpu))
                finally:
                    net.stop()
                    fast.stop()
                stop = threading.Event()
                t = threading.Thread(target=serve_edge, args=(edge, stop), daemon=True)
                t.start()
                try:
                    res.setdefault("p8", []).append(run(mcast, sec, n, cpus, dcpu))
                finally:
                    stop.set()
                    t.join()
            finally:
                edge.close()
        out += [
            line(f"{size} B kernel ipmr 1->8 (same packets)", res["k8"], 8, None),
            line(f"{size} B eBPF imposition 1->8", res["e8"], 8, res["k8"], " x kernel ipmr"),
            line(
                f"{size} B Python edge imposition 1->8",
                res["p8"],
                8,
                res["k8"],
                " x kernel ipmr",
                softirq=False,
            ),
        ]
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--sizes", default="64,1000")
    p.add_argument("--senders", type=int, default=2)
    p.add_argument(
        "--clones",
        type=int,
        default=15,
        help="load multiplier: each packet the senders send leaves the source this many more times "
        "(a tc program's bpf_clone_redirect on its veth), so the offered load exceeds the DUT's 1->1 "
        "capacity; 0: the senders' packets only",
    )
    p.add_argument("--rounds", type=int, default=3, help="repeat every line, interleaved; print medians")
    ncpu = os.cpu_count() or 1
    p.add_argument(
        "--dut-cpu",
        type=int,
        default=ncpu - 1 if ncpu > 1 else -1,
        help="CPU for the DUT's receive path (RPS); the senders get the others. -1: no steering, "
        "the DUT's work then runs in the senders' own softirqs and nothing is ever dropped",
    )
    p.add_argument("--no-python", action="store_true", help="skip the Python BFR lines")
    p.add_argument(
        "--compare-ref",
        metavar="REF",
        help="also run the tc program as of git REF (same maps, same agent), interleaved: before/after",
    )
    p.add_argument(
        "--imposition",
        action="store_true",
        help="also network-BIER imposition 1->8 at the DUT as a leaf: eBPF (bier_impose) and the Python "
        "edge, next to ipmr on the same multicast packets",
    )
    return p


def dut_dataplane() -> BierDataplane:
    """The DUT's BFR (BFR-id 9): one bit per sink; the source is a BFR neighbour too (no bit is routed to
    it), as BIER senders are in a fabric: its packets are counted under its name, through the program's
    per-interface shortcut."""
    names = [f"s{i}" for i in range(1, SINKS + 1)]
    birt = {9: SELF, **{i: [f"s{i}"] for i in range(1, SINKS + 1)}}
    labels = {n: {(0, BSL, 0): 900 + i} for i, n in enumerate(names)}
    bifts = build_bifts(birt, BSL, labels)
    nbrs = {f"s{i}": (f"10.78.{i}.2", f"{PREFIX}bl{i}") for i in range(1, SINKS + 1)}
    nbrs["src"] = ("10.78.0.2", f"{PREFIX}bl0")
    with in_netns(DUT):
        return BierDataplane(9, BSL, 0, bifts, nbrs, {(0, BSL, 0): LABEL})


def one_round(size: int, dp: BierDataplane, progs: dict[str, Path], args, cpus, dcpu: int, res) -> None:
    """One round of every line at ``size``, appended to ``res``: the kernel anchors, each eBPF program
    (``progs``: tag -> object) and, unless --no-python, the Python dataplane."""
    sec, n = args.seconds, args.senders
    bier = ["bier", "10.78.0.1", str(size), str(sec), str(LABEL), str(BSL), "10", "10.78.0.2"]
    res.setdefault("k1", []).append(run(["udp", "10.78.1.2", "9", str(size), str(sec)], sec, n, cpus, dcpu))
    res.setdefault("k8", []).append(run(["mcast", GROUP, "9", str(size), str(sec)], sec, n, cpus, dcpu))
    for tag, prog in progs.items():
        fast = EbpfBier(dp, prog, [f"10.78.{i}.1" for i in range(SINKS + 1)], pin_dir=PIN,
                        run=run_cmd(["nsenter", f"--net=/run/netns/{DUT}"]),
                        interfaces=[f"{PREFIX}bl{i}" for i in range(SINKS + 1)])  # fmt: skip
        with in_netns(DUT):
            fast.start()
        try:
            res.setdefault(f"{tag}1", []).append(run([*bier, "1"], sec, n, cpus, dcpu, True))
            res.setdefault(f"{tag}8", []).append(run([*bier, "ff"], sec, n, cpus, dcpu, True))
        finally:
            fast.stop()
    if not args.no_python:
        dp.start()
        try:
            res.setdefault("p1", []).append(run([*bier, "1"], sec, n, cpus, dcpu))
            res.setdefault("p8", []).append(run([*bier, "ff"], sec, n, cpus, dcpu))
        finally:
            dp.stop()


def size_lines(size: int, res: dict[str, list[Result]], args: argparse.Namespace) -> list[str]:
    lines = [
        line(f"{size} B kernel IPv4 forward 1->1", res["k1"], 1, None),
        line(f"{size} B kernel ipmr 1->8", res["k8"], 8, None),
        line(f"{size} B eBPF BFR 1->1", res["e1"], 1, res["k1"], " x kernel IPv4 (target >= 0.9)"),
        line(f"{size} B eBPF BFR 1->8", res["e8"], 8, res["k8"], " x kernel ipmr (target >= 0.9)"),
    ]
    if args.compare_ref:
        ref = args.compare_ref
        lines += [
            line(f"{size} B eBPF BFR @{ref} 1->1", res["o1"], 1, res["k1"], " x kernel IPv4"),
            line(f"{size} B eBPF BFR @{ref} 1->8", res["o8"], 8, res["k8"], " x kernel ipmr"),
        ]
    if not args.no_python:
        lines += [
            line(f"{size} B Python BFR 1->1", res["p1"], 1, res["k1"], " x kernel IPv4", softirq=False),
            line(f"{size} B Python BFR 1->8", res["p8"], 8, res["k8"], " x kernel ipmr", softirq=False),
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    ncpu = os.cpu_count() or 1
    cpus = [c for c in range(ncpu) if c != args.dut_cpu] if args.dut_cpu >= 0 else None
    dcpu = args.dut_cpu
    with tempfile.TemporaryDirectory() as tmp:
        progs = {"e": build(Path(tmp))["bier"]}
        if args.compare_ref:
            progs["o"] = build_ref(args.compare_ref, Path(tmp))
        setup(build_drop(Path(tmp)), build_fanout(Path(tmp), args.clones) if args.clones else None)
        mr = None
        try:
            mr = mroute()
            if dcpu >= 0:
                steer_dut(dcpu)
            dp = dut_dataplane()
            split = f"DUT on CPU {dcpu}, senders on {cpus}" if cpus else "no CPU split"
            lines = [f"bench bier_forwarding (netns): src -> dut -> {SINKS} sinks, {args.senders} senders, "
                     f"{args.seconds:.0f} s runs, BSL {BSL}, {split}, "
                     f"source load x{args.clones + 1} (tc clones), "
                     f"median of {args.rounds}"]  # fmt: skip
            for size in (int(s) for s in args.sizes.split(",")):
                res: dict[str, list[Result]] = {}
                for _ in range(args.rounds):
                    one_round(size, dp, progs, args, cpus, dcpu, res)
                lines += size_lines(size, res, args)
            if args.imposition:
                mr.close()
                mr = None
                lines += imposition(dp, progs["e"], args, cpus, dcpu)
            dp.close()
        finally:
            if mr is not None:
                mr.close()
            teardown()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
