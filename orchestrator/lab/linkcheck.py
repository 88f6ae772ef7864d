"""Check every data link of a running lab end to end with UDP, before any addressing is configured.

Each link is a veth pair with IPv6 link-local addresses (DAD is off in lab nodes), so a probe sent to the
all-nodes group ff02::1 out of one interface can only reach the peer at the other end. Every node runs a
responder that answers with its node name and the interface the probe arrived on; the prober checks that
each of its interfaces is answered by exactly the peer the topology names. Both run through
``ip netns exec`` with the host's Python, so this works for any node image, FRR included.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.lab.topology import Topology

PORT = 50_007
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)


@dataclass
class LinkResult:
    link: str
    ok: bool
    detail: str


def respond(node: str, seconds: float) -> None:
    """Echo every probe with (node, arrival interface) until ``seconds`` pass."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
    sock.bind(("::", PORT))
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data, anc, _flags, addr = sock.recvmsg(2048, socket.CMSG_SPACE(20))
        except TimeoutError:
            break
        ifindex = next(
            (
                struct.unpack("16sI", d[:20])[1]
                for lvl, typ, d in anc
                if lvl == socket.IPPROTO_IPV6 and typ == IPV6_PKTINFO
            ),
            0,
        )
        ifname = socket.if_indextoname(ifindex) if ifindex else "?"
        reply = json.dumps({"node": node, "interface": ifname, "probe": data.decode(errors="replace")})
        sock.sendto(reply.encode(), addr)


def probe(interfaces: list[str], timeout: float) -> dict[str, list[dict[str, str]]]:
    """Send one probe per interface to ff02::1 and collect the answers per interface."""
    answers: dict[str, list[dict[str, str]]] = {}
    for ifname in interfaces:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, socket.if_nametoindex(ifname))
        # Our own responder must not answer our probe: only the far end of the veth counts.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
        sock.settimeout(timeout)
        got: list[dict[str, str]] = []
        for _attempt in range(3):
            sock.sendto(ifname.encode(), ("ff02::1", PORT, 0, socket.if_nametoindex(ifname)))
            try:
                while True:
                    data, _ = sock.recvfrom(2048)
                    got.append(json.loads(data))
                    sock.settimeout(0.05)
            except TimeoutError:
                pass
            if got:
                break
            sock.settimeout(timeout)
        answers[ifname] = got
        sock.close()
    return answers


def _in_netns(netns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", netns, sys.executable, "-m", "orchestrator.lab.linkcheck", *args]


def check_lab(topo: Topology, workers: int = 16, timeout: float = 1.0) -> list[LinkResult]:
    """Probe every link of a deployed ``topo``; one result per link."""
    budget = 20 + 0.05 * len(topo.links)
    responders = []
    for node in topo.nodes:
        proc = subprocess.Popen(
            _in_netns(topo.container_name(node), "respond", node, str(budget)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        responders.append(proc)
    try:
        for proc in responders:
            line = proc.stdout.readline() if proc.stdout else ""
            if line.strip() != "ready":
                raise RuntimeError(
                    f"link check responder did not start: {proc.stderr.read() if proc.stderr else ''}"
                )

        def run_probe(node: str) -> tuple[str, dict[str, list[dict[str, str]]]]:
            ifaces = [ep.interface for _link, ep, _peer in topo.links_of(node)]
            if not ifaces:
                return node, {}
            out = subprocess.run(
                _in_netns(topo.container_name(node), "probe", str(timeout), *ifaces),
                capture_output=True,
                text=True,
                timeout=budget,
            )
            if out.returncode != 0:
                raise RuntimeError(f"probe in {node} failed: {out.stderr.strip()[-300:]}")
            return node, json.loads(out.stdout)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            answers = dict(pool.map(run_probe, topo.nodes))
    finally:
        for proc in responders:
            proc.kill()
            proc.wait()
    results = []
    for link in topo.links:
        problems = []
        for local, remote in ((link.a, link.b), (link.b, link.a)):
            got = answers.get(local.node, {}).get(local.interface, [])
            peers = {(a["node"], a["interface"]) for a in got}
            if peers != {(remote.node, remote.interface)}:
                problems.append(f"from {local}: expected only {remote}, got {sorted(peers) or 'nothing'}")
        results.append(LinkResult(str(link), not problems, "; ".join(problems) or "udp both ways"))
    return results


def main(argv: list[str]) -> int:
    if argv[0] == "respond":
        respond(argv[1], float(argv[2]))
    elif argv[0] == "probe":
        print(json.dumps(probe(argv[2:], float(argv[1]))))
    else:
        print(
            "usage: python -m orchestrator.lab.linkcheck respond NODE SECONDS | probe TIMEOUT IFACE...",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
