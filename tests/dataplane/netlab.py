"""A BFR under test in network namespaces: ``ebpf-dut`` with veths to neighbour namespaces
``ebpf-n0``..; frames are injected and captured with AF_PACKET on the neighbours' ends.

Every netns and veth name starts with :data:`PREFIX` (``ebpf-``, or ``$AIDCLAB_NETNS_PREFIX`` so two
people on one machine do not tear down each other's namespaces); :meth:`NetLab.close` removes them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from aidcnet.ipv4 import checksum16

PREFIX = os.environ.get("AIDCLAB_NETNS_PREFIX", "ebpf-")

CLONE_NEWNET = 0x40000000
ETH_P_IP = 0x0800
ETH_P_ALL = 0x0003
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body (this thread) in netns ``name``: sockets made there stay there."""
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        yield
    finally:
        _libc.setns(back, CLONE_NEWNET)
        os.close(back)
        os.close(target)


def udp_frame(dmac: bytes, smac: bytes, src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    """Ethernet/IPv4/UDP with correct checksums, as a Linux socket would send it (ID 0, DF, TTL 64)."""
    total = 28 + len(payload)
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 17, 0, s, d)
    ip = ip[:10] + struct.pack("!H", checksum16(ip)) + ip[12:]
    ulen = 8 + len(payload)
    pseudo = s + d + struct.pack("!BBH", 0, 17, ulen)
    csum = checksum16(pseudo + struct.pack("!HHHH", sport, dport, ulen, 0) + payload) or 0xFFFF
    return (
        dmac
        + smac
        + struct.pack("!H", ETH_P_IP)
        + ip
        + struct.pack("!HHHH", sport, dport, ulen, csum)
        + payload
    )


class NetLab:
    """DUT ``ebpf-dut`` with ``n`` neighbours; link i is 10.77.i.1 (DUT, ``ebpf-d<i>``) -- 10.77.i.2
    (neighbour ``ebpf-n<i>``, ``ebpf-p<i>``)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.dut = f"{PREFIX}dut"
        self.nbrs = [f"{PREFIX}n{i}" for i in range(n)]
        self.dut_if = [f"{PREFIX}d{i}" for i in range(n)]
        self.nbr_if = [f"{PREFIX}p{i}" for i in range(n)]
        self.dut_addr = [f"10.77.{i}.1" for i in range(n)]
        self.nbr_addr = [f"10.77.{i}.2" for i in range(n)]
        self.caps: list[socket.socket] = []
        self.sinks: list[socket.socket] = []
        self.tx: socket.socket | None = None
        self.close()  # leftovers of an interrupted run
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        for ns in (self.dut, *self.nbrs):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            for key in ("all", "default"):
                sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
        for i in range(self.n):
            sh("ip", "link", "add", self.dut_if[i], "netns", self.dut, "type", "veth", "peer", "name",
               self.nbr_if[i], "netns", self.nbrs[i])  # fmt: skip
            sh("ip", "-n", self.dut, "addr", "add", f"{self.dut_addr[i]}/24", "dev", self.dut_if[i])
            sh("ip", "-n", self.nbrs[i], "addr", "add", f"{self.nbr_addr[i]}/24", "dev", self.nbr_if[i])
            sh("ip", "-n", self.dut, "link", "set", self.dut_if[i], "up")
            sh("ip", "-n", self.nbrs[i], "link", "set", self.nbr_if[i], "up")
        self.dut_mac = [self._mac(self.dut, ifn) for ifn in self.dut_if]
        self.nbr_mac = [self._mac(self.nbrs[i], self.nbr_if[i]) for i in range(self.n)]
        for i in range(self.n):
            # static ARP both ways: the tests are about forwarding, not about resolution timing
            sh("ip", "-n", self.dut, "neigh", "replace", self.nbr_addr[i], "lladdr", self.nbr_mac[i].hex(":"),
               "dev", self.dut_if[i], "nud", "permanent")  # fmt: skip
            sh("ip", "-n", self.nbrs[i], "neigh", "replace", self.dut_addr[i], "lladdr",
               self.dut_mac[i].hex(":"), "dev", self.nbr_if[i], "nud", "permanent")  # fmt: skip
            with in_netns(self.nbrs[i]):
                cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
                cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
                cap.bind((self.nbr_if[i], ETH_P_IP))
                cap.setblocking(False)
                self.caps.append(cap)
                # a bound, never-read socket: copies end here instead of in ICMP port unreachables
                sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sink.bind((self.nbr_addr[i], 6635))
                self.sinks.append(sink)
        with in_netns(self.nbrs[0]):
            self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            self.tx.bind((self.nbr_if[0], 0))

    def _mac(self, ns: str, ifname: str) -> bytes:
        out = sh("ip", "-n", ns, "-br", "link", "show", "dev", ifname).split()
        return bytes.fromhex(out[2].replace(":", ""))

    def run_prefix(self) -> list[str]:
        """Commands in the DUT's netns but our mount namespace (so our bpffs pins are visible)."""
        return ["nsenter", f"--net=/run/netns/{self.dut}"]

    def frame_in(self, payload: bytes, dport: int = 6635, sport: int = 6635) -> bytes:
        """A frame from neighbour 0 to the DUT carrying ``payload`` over UDP."""
        return udp_frame(
            self.dut_mac[0], self.nbr_mac[0], self.nbr_addr[0], self.dut_addr[0], sport, dport, payload
        )

    def copy_frame(self, i: int, payload: bytes) -> bytes:
        """The frame a BFR sends neighbour i for a copy whose UDP payload is ``payload``."""
        return udp_frame(
            self.nbr_mac[i], self.dut_mac[i], self.dut_addr[i], self.nbr_addr[i], 6635, 6635, payload
        )

    def send(self, frames: list[bytes]) -> None:
        assert self.tx is not None
        for frame in frames:
            self.tx.send(frame)

    def capture(self, settle: float = 0.05, poll=None) -> list[list[bytes]]:
        """Frames UDP/6635 from the DUT per neighbour, until ``settle`` s pass with nothing new.
        ``poll()`` (the Python dataplane) runs in between and counts as activity when it returns > 0."""
        got: list[list[bytes]] = [[] for _ in range(self.n)]
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < settle:
            active = bool(poll and poll())
            for i, cap in enumerate(self.caps):
                while True:
                    try:
                        frame, addr = cap.recvfrom(65535)
                    except BlockingIOError:
                        break
                    if addr[2] == socket.PACKET_OUTGOING:
                        continue
                    active = True
                    if (
                        frame[23] == 17
                        and frame[36:38] == b"\x19\xeb"
                        and frame[26:30] == socket.inet_aton(self.dut_addr[i])
                    ):
                        got[i].append(frame)
            if active:
                quiet_since = time.monotonic()
            else:
                time.sleep(0.002)
        return got

    def close(self) -> None:
        for s in (*self.caps, *self.sinks, *([self.tx] if self.tx else [])):
            s.close()
        self.caps, self.sinks, self.tx = [], [], None
        for ns in (f"{PREFIX}dut", *[f"{PREFIX}n{i}" for i in range(max(self.n, 16))]):
            if Path(f"/run/netns/{ns}").exists():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
