"""Program addresses, MTUs and routes into the node's kernel with pyroute2; a thin shell around
:mod:`aidcnet.netstate`, which decides what to change."""

from __future__ import annotations

import ipaddress
import socket

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from aidcnet.netstate import RTPROT_AIDCNET, KernelDiff, KernelState, NextHops


class KernelError(RuntimeError):
    pass


def _index(ifname: str) -> int:
    # if_nametoindex is one ioctl; pyroute2's link_lookup dumps every link of the node to find one, and a
    # SuperPoD GPU re-routing its loopbacks after a link event asked once per nexthop of every route
    # (most of a 240 ms reaction at 16 GPUs, py-spy on G1's agent).
    try:
        return socket.if_nametoindex(ifname)
    except OSError:
        raise KernelError(
            f"interface {ifname} does not exist on this node (is the lab wired as planned?)"
        ) from None


def read_state(managed: set[str], proto: int = RTPROT_AIDCNET) -> KernelState:
    """Addresses and MTUs of ``managed`` interfaces, and the routes installed with ``proto``."""
    addresses = set()
    mtus = {}
    routes: dict[str, NextHops] = {}
    with IPRoute() as ipr:
        names = {msg["index"]: msg.get_attr("IFLA_IFNAME") for msg in ipr.get_links()}
        for msg in ipr.get_links():
            name = msg.get_attr("IFLA_IFNAME")
            if name in managed:
                mtus[name] = msg.get_attr("IFLA_MTU")
        for msg in ipr.get_addr(family=socket.AF_INET):
            name = names.get(msg["index"])
            addr = msg.get_attr("IFA_ADDRESS")
            if name in managed and not ipaddress.ip_address(addr).is_loopback:
                addresses.add((name, f"{addr}/{msg['prefixlen']}"))
        for msg in ipr.get_routes(family=socket.AF_INET, proto=proto):
            prefix = f"{msg.get_attr('RTA_DST') or '0.0.0.0'}/{msg['dst_len']}"
            multipath = msg.get_attr("RTA_MULTIPATH")
            if multipath:
                hops = tuple(
                    sorted(
                        (nh.get_attr("RTA_GATEWAY"), names.get(nh["oif"], "?"), nh["hops"] + 1)
                        for nh in multipath
                    )
                )
            else:
                hops = ((msg.get_attr("RTA_GATEWAY"), names.get(msg.get_attr("RTA_OIF"), "?"), 1),)
            routes[prefix] = hops
    return KernelState(frozenset(addresses), routes, mtus)


def apply_diff(diff: KernelDiff, proto: int = RTPROT_AIDCNET) -> None:
    """Apply in the order that keeps routes resolvable: MTUs and new addresses, then routes, then
    removals. Raises :class:`KernelError` naming the item the kernel refused."""
    with IPRoute() as ipr:
        step = ""
        try:
            for name, mtu in diff.set_mtus.items():
                step = f"set mtu {mtu} on {name}"
                ipr.link("set", index=_index(name), mtu=mtu, state="up")
            for name, cidr in diff.add_addresses:
                step = f"add address {cidr} on {name}"
                iface = ipaddress.IPv4Interface(cidr)
                ipr.addr(
                    "replace",
                    index=_index(name),
                    address=str(iface.ip),
                    prefixlen=iface.network.prefixlen,
                )
                if name != "lo":
                    ipr.link("set", index=_index(name), state="up")
            for prefix, hops in diff.replace_routes.items():
                step = f"route {prefix} via {', '.join(f'{v} dev {d} weight {w}' for v, d, w in hops)}"
                if len(hops) == 1:
                    via, dev, _w = hops[0]
                    ipr.route("replace", dst=prefix, gateway=via, oif=_index(dev), proto=proto)
                else:
                    ipr.route(
                        "replace",
                        dst=prefix,
                        proto=proto,
                        multipath=[
                            {"gateway": via, "oif": _index(dev), "hops": w - 1} for via, dev, w in hops
                        ],
                    )
            for prefix in diff.remove_routes:
                step = f"remove route {prefix}"
                ipr.route("del", dst=prefix, proto=proto)
            for name, cidr in diff.remove_addresses:
                step = f"remove address {cidr} from {name}"
                iface = ipaddress.IPv4Interface(cidr)
                ipr.addr(
                    "del", index=_index(name), address=str(iface.ip), prefixlen=iface.network.prefixlen
                )
        except NetlinkError as exc:
            raise KernelError(f"kernel refused to {step}: {exc.args[-1]} (errno {exc.code})") from exc


# The discard service (RFC 863): the datagram only has to make the kernel resolve the neighbour.
DISCARD_PORT = 9


def resolve_neighbors(peers: list[tuple[str, str, str]]) -> int:
    """Send one datagram to each link peer so its ARP entry exists before traffic needs it: a burst to an
    unresolved neighbour waits in a short queue and overflows it (the lost first run of a fresh lab).
    Returns how many were sent."""
    import socket

    sent = 0
    for ifname, own, peer in peers:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
                sock.bind((own, 0))
                sock.sendto(b"arp", (peer, DISCARD_PORT))
                sent += 1
            except OSError:
                continue  # a link that is down resolves when it comes back (the link watcher re-converges)
    return sent
