"""Addressing: a /32 loopback per managed node and a /31 per link (RFC 3021), pins first.

Order of claims: the management subnet (it is on every container too), pinned link subnets, pinned
loopbacks, then automatic loopbacks in node order and automatic /31s in link order. Automatic
allocation walks its pool and steps over anything already claimed, so a pin inside a pool is avoided
rather than an error; two claims that overlap are an error naming both.
"""

from __future__ import annotations

import bisect
import ipaddress
from dataclasses import dataclass, field

from orchestrator.configure.plan.context import Context, Source, clash, link_pins, problem
from orchestrator.configure.plan.schema import LabPlan

IPv4Net = ipaddress.IPv4Network


@dataclass
class AddressSpace:
    """Claimed IPv4 ranges, kept sorted and disjoint so overlap tests are a bisect."""

    starts: list[int] = field(default_factory=list)
    entries: list[tuple[int, int, IPv4Net, Source]] = field(default_factory=list)

    def overlapping(self, first: int, last: int) -> tuple[IPv4Net, Source] | None:
        i = bisect.bisect_right(self.starts, last) - 1
        if i >= 0 and self.entries[i][1] >= first:
            return self.entries[i][2], self.entries[i][3]
        return None

    def claim(self, net: IPv4Net, src: Source, shown: object = None) -> None:
        first, last = int(net.network_address), int(net.broadcast_address)
        hit = self.overlapping(first, last)
        if hit is not None:
            other_net, other_src = hit
            relation = "is the same as" if other_net == net else "overlaps"
            if other_net != net and net.subnet_of(other_net):
                relation = "lies inside"
            raise clash(src, shown if shown is not None else net, other_src, other_net, relation)
        i = bisect.bisect_right(self.starts, first)
        self.starts.insert(i, first)
        self.entries.insert(i, (first, last, net, src))

    def allocate(self, pool: IPv4Net, prefixlen: int, cursor: int) -> tuple[IPv4Net, int] | None:
        """First free aligned block of ``prefixlen`` in ``pool`` at or after ``cursor``."""
        size = 1 << (32 - prefixlen)
        end = int(pool.broadcast_address)
        start = max(cursor, int(pool.network_address))
        start += -start % size
        while start + size - 1 <= end:
            hit = self.overlapping(start, start + size - 1)
            if hit is None:
                return IPv4Net((start, prefixlen)), start + size
            # Jump past the claim in the way instead of stepping block by block through it.
            hit_last = int(hit[0].broadcast_address)
            start = hit_last + 1
            start += -start % size
        return None


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    space = AddressSpace()
    # None: a lab's own network not deployed yet; deploy picks its subnet in MGMT_POOL, clear of the pools.
    if ctx.topo.mgmt.ipv4_subnet is not None:
        mgmt = ipaddress.ip_network(ctx.topo.mgmt.ipv4_subnet, strict=False)
        space.claim(mgmt, Source(ctx.topo_file, "mgmt.ipv4-subnet"))

    for index, (subnet, src) in sorted(link_pins(ctx, "subnet").items()):
        if subnet.prefixlen != 31:
            raise problem(src, f"{subnet} must be a /31 (RFC 3021 point-to-point: one address per end)")
        space.claim(subnet, src)
        _address_link(plan, index, subnet)

    for name in plan.nodes:
        pin = ctx.vars.nodes.get(name)
        if pin is None or pin.loopback is None:
            continue
        src = ctx.vars_source(f"nodes.{name}.loopback")
        if not ctx.is_managed(name):
            raise problem(src, f"{name} is a {ctx.roles[name]} node, which the plan does not configure")
        if pin.loopback.network.prefixlen != 32:
            raise problem(src, f"{pin.loopback} must be a /32 (or a bare address)")
        space.claim(pin.loopback.network, src, pin.loopback)
        plan.nodes[name].loopback = pin.loopback

    pool, pool_src = ctx.setting("pools.loopback")
    # The pool's network and broadcast addresses look like mistakes on a loopback; skip them.
    cursor = int(pool.network_address) + (1 if pool.prefixlen < 31 else 0)
    limit = int(pool.broadcast_address) - (1 if pool.prefixlen < 31 else 0)
    want = [n for n, node in plan.nodes.items() if ctx.is_managed(n) and node.loopback is None]
    for done, name in enumerate(want):
        got = space.allocate(pool, 32, cursor)
        if got is None or int(got[0].network_address) > limit:
            raise problem(
                pool_src,
                f"{pool} is exhausted: no /32 left for the loopback of {name} "
                f"({len(want) - done} of {len(want)} nodes still need one); give a larger pool",
            )
        net, cursor = got
        space.claim(net, Source("automatic allocation", f"loopback of {name} from pools.loopback"))
        plan.nodes[name].loopback = ipaddress.IPv4Interface((net.network_address, 32))

    pool, pool_src = ctx.setting("pools.links")
    cursor = int(pool.network_address)
    want_links = [i for i, link in enumerate(plan.links) if link.subnet is None]
    for done, index in enumerate(want_links):
        got = space.allocate(pool, 31, cursor)
        if got is None:
            link = plan.links[index]
            raise problem(
                pool_src,
                f"{pool} is exhausted: no /31 left for link {link.a} <-> {link.b} "
                f"({len(want_links) - done} of {len(want_links)} links still need one); give a larger pool",
            )
        net, cursor = got
        space.claim(net, Source("automatic allocation", f"subnet of link {index} from pools.links"))
        _address_link(plan, index, net)
    return plan


def _address_link(plan: LabPlan, index: int, subnet: IPv4Net) -> None:
    link = plan.links[index]
    low = subnet.network_address
    link.subnet = subnet
    link.a.address = ipaddress.IPv4Interface((low, 31))
    link.b.address = ipaddress.IPv4Interface((low + 1, 31))
