"""IGMP actors for tests/e2e/test_igmp.py, run inside a node's netns with `ip netns exec NS python
igmp_app.py ...`: what a host application and a source that knows its receivers would do.

* ``join IFNAME GROUP[/SOURCE] ...``: one socket per group (IP_ADD_SOURCE_MEMBERSHIP with a source,
  IP_ADD_MEMBERSHIP without), prints "ready"; each stdin line "leave G" drops that one ("left G"); EOF
  drops all.  The kernel sends the IGMPv3 reports.
* ``proxy IFNAME SOURCE GROUP PORT COUNT TAG RECEIVER...``: a Receiver Proxy Report for (SOURCE, GROUP)
  to 224.0.0.22, then COUNT datagrams to GROUP at once, the first within the same millisecond.
"""

from __future__ import annotations

import socket
import struct
import sys
from ipaddress import IPv4Address

IP_ADD_SOURCE_MEMBERSHIP = 39
SIOCGIFADDR = 0x8915


def interface_address(ifname: str) -> bytes:
    """The IPv4 address of ``ifname``: ip_mreq_source names its interface by address, and "any" only
    works where a route to the group picks one (a router such as the FRR node has none)."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()))[20:24]


def join(ifname: str, specs: list[str]) -> None:
    index = socket.if_nametoindex(ifname)
    socks = {}
    for spec in specs:
        group, _, source = spec.partition("/")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if source:
            # ip_mreq_source: group, interface address, source
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
            mreq = socket.inet_aton(group) + interface_address(ifname) + socket.inet_aton(source)
            s.setsockopt(socket.IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, mreq)
        else:
            mreqn = struct.pack("4s4si", socket.inet_aton(group), socket.inet_aton("0.0.0.0"), index)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
        socks[group] = s
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "leave" and words[1] in socks:
            socks.pop(words[1]).close()
            print(f"left {words[1]}", flush=True)
    for s in socks.values():
        s.close()


def proxy(
    ifname: str, source: str, group: str, port: int, count: int, tag: str, receivers: list[str]
) -> None:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    from aidcnet.igmp.codec import encode
    from aidcnet.igmp.extensions import ProxyReport

    report = ProxyReport(IPv4Address(group), IPv4Address(source), tuple(map(IPv4Address, receivers)))
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data.bind((source, 0))
    data.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
    data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    raw.sendto(encode(report.to_report()), ("224.0.0.22", 0))
    for seq in range(count):
        data.sendto(f"{tag}:{seq}".encode(), (group, port))


if __name__ == "__main__":
    if sys.argv[1] == "join":
        join(sys.argv[2], sys.argv[3:])
    else:
        a = sys.argv
        proxy(a[2], a[3], a[4], int(a[5]), int(a[6]), a[7], a[8:])
