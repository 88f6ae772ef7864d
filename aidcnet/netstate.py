"""What the kernel should hold for a node config, and the difference to what it holds: pure logic.

The agent owns exactly: the addresses on its data interfaces and the loopback address on ``lo``, and
the routes it installs with its own routing protocol number. It never touches eth0 (management),
127.0.0.1, or routes other programs (FRR, the kernel) installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the agent imports this before it has (or needs) the pydantic models
    from aidcnet.config import NodeConfig

# rtnetlink protocol number marking our routes. Debian's rt_protos names 186-197 (bgp, isis, ospf,
# FRR's daemons, ...); 245 is free, and the node image names it `aidcnet` (ip route show proto aidcnet).
RTPROT_AIDCNET = 245

Address = tuple[str, str]  # (ifname, "a.b.c.d/len")
NextHops = tuple[tuple[str, str, int], ...]  # sorted (via, dev, weight)


@dataclass(frozen=True)
class KernelState:
    addresses: frozenset[Address] = frozenset()
    routes: dict[str, NextHops] = field(default_factory=dict)
    mtus: dict[str, int] = field(default_factory=dict)


@dataclass
class KernelDiff:
    add_addresses: list[Address] = field(default_factory=list)
    remove_addresses: list[Address] = field(default_factory=list)
    replace_routes: dict[str, NextHops] = field(default_factory=dict)
    remove_routes: list[str] = field(default_factory=list)
    set_mtus: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.add_addresses
            or self.remove_addresses
            or self.replace_routes
            or self.remove_routes
            or self.set_mtus
        )

    def summary(self) -> dict[str, int]:
        return {
            "addresses_added": len(self.add_addresses),
            "addresses_removed": len(self.remove_addresses),
            "routes_replaced": len(self.replace_routes),
            "routes_removed": len(self.remove_routes),
            "mtus_set": len(self.set_mtus),
        }


def desired_state(config: NodeConfig) -> KernelState:
    addresses = {("lo", str(config.loopback))}
    mtus = {}
    for iface in config.interfaces:
        if iface.ipv4 is not None:
            addresses.add((iface.name, str(iface.ipv4)))
        if iface.mtu is not None:
            mtus[iface.name] = iface.mtu
    routes = {
        str(route.prefix): tuple(sorted((str(h.via), h.dev, h.weight) for h in route.nexthops))
        for route in config.routes
    }
    return KernelState(frozenset(addresses), routes, mtus)


def managed_interfaces(config: NodeConfig | None) -> set[str]:
    return {"lo"} | ({i.name for i in config.interfaces} if config else set())


def diff_state(desired: KernelState, current: KernelState, managed: set[str]) -> KernelDiff:
    """``current`` holds only what we may touch: addresses on ``managed`` interfaces (not 127.0.0.0/8)
    and our own routes."""
    out = KernelDiff()
    out.add_addresses = sorted(desired.addresses - current.addresses)
    out.remove_addresses = sorted(a for a in current.addresses - desired.addresses if a[0] in managed)
    out.replace_routes = {
        p: hops for p, hops in sorted(desired.routes.items()) if current.routes.get(p) != hops
    }
    out.remove_routes = sorted(set(current.routes) - set(desired.routes))
    out.set_mtus = {n: m for n, m in sorted(desired.mtus.items()) if current.mtus.get(n) != m}
    return out


UNKNOWN: NextHops = ()  # a route's next hops as far as we know after the kernel changed it on its own


def forget_routes_on(routes: dict[str, NextHops], devs: set[str]) -> dict[str, NextHops]:
    """Our record of installed routes after links ``devs`` changed state: the kernel flushes or marks
    routes through a downed link by itself, so every route with a next hop on one of them becomes
    :data:`UNKNOWN`. Diffed against, such a route is replaced if still wanted and deleted if not (a delete
    of a route already gone is no error), which costs what the change itself costs and no table dump."""
    return {
        prefix: UNKNOWN if any(dev in devs for _via, dev, _w in hops) else hops
        for prefix, hops in routes.items()
    }


def link_peers(config: NodeConfig) -> list[tuple[str, str, str]]:
    """``(ifname, own address, peer address)`` of each point-to-point data link (a /31, RFC 3021: the
    other address of the pair is the peer): the neighbours whose ARP entries a run needs resolved."""
    import ipaddress

    out = []
    for iface in config.interfaces:
        if iface.ipv4 is None or iface.ipv4.network.prefixlen != 31:
            continue
        own = iface.ipv4.ip
        peer = next(a for a in (iface.ipv4.network.network_address, iface.ipv4.network.broadcast_address)
                    if a != own)
        out.append((iface.name, str(own), str(ipaddress.IPv4Address(peer))))
    return out
