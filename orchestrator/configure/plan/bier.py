"""BIER: sub-domain, BitString length and a BFR-ID for every BFR (RFC 8279).

BFR-IDs are dense and stable: GPU hosts first in natural name order (so w1..w8 are bits 1..8, as the
INA draft's figures number them), then leaves, then the other switches by tier; ids pinned in the
vars are honoured and skipped. Dense ids keep the BitStrings short: with BSL 256 the first 256 BFRs
share set identifier 0 (SI = (id-1) // BSL, RFC 8279 §3).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterator

from aidcnet.bier.fast_reroute import adjacency_labels, bypass_path, next_next_hops, tunnel
from aidcnet.config import BierBypass, BierNnhBypass
from aidcnet.roles import Role
from orchestrator.configure.plan.context import Context, Source, clash, natural_key, problem
from orchestrator.configure.plan.schema import (
    GroupVars,
    LabPlan,
    PlanBier,
    PlanEndpoint,
    PlanError,
    PlanGroup,
)
from orchestrator.lab.roles import ROLES, Place, role_named

BSLS = (64, 128, 256, 512, 1024, 2048, 4096)
# BFR-ID is a 16-bit field and 0 is reserved (RFC 8279 §2).
MAX_BFR_ID = 65535
# MPLS labels 0..15 are reserved (RFC 3032 §2.1); a label is 20 bits.
FIRST_UNRESERVED_LABEL = 16
MAX_LABEL = 0xFFFFF
# 224.0.0.0/24 is link-local control traffic (IGMP, OSPF, ...): never forwarded, so never a BIER group.
LINK_LOCAL_MULTICAST = ipaddress.IPv4Network("224.0.0.0/24")


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    sub_domain, _ = ctx.setting("bier.sub_domain")
    bsl, bsl_src = ctx.setting("bier.bsl")
    bift, _ = ctx.setting("bier.bift")
    dataplane, _ = ctx.setting("bier.dataplane")
    edge_policy, _ = ctx.setting("bier.edge_policy")
    fast_reroute, _ = ctx.setting("bier.fast_reroute")
    tenants, tenants_src = ctx.setting("bier.tenants")
    tenant_of: dict[str, str] = {}
    for tenant, hosts in (tenants or {}).items():
        for host in hosts:
            if ctx.roles.get(host) != Role.GPU_HOST:
                raise problem(tenants_src, f"tenant {tenant}: {host!r} is not a gpu-host node of this lab")
            if host in tenant_of:
                raise problem(
                    tenants_src, f"{host} is in tenants {tenant_of[host]} and {tenant}: keep it in one"
                )
            tenant_of[host] = tenant
    if bsl not in BSLS:
        raise problem(
            bsl_src,
            f"BSL {bsl} is not a BitString length RFC 8296 §2.1.2 defines "
            f"(one of {', '.join(map(str, BSLS))})",
        )
    plan.bier = PlanBier(
        sub_domain=sub_domain,
        bsl=bsl,
        bift=bift,
        dataplane=dataplane,
        edge_policy=edge_policy,
        fast_reroute=fast_reroute,
        tenants={t: sorted(hosts, key=natural_key) for t, hosts in (tenants or {}).items()},
    )

    owner: dict[int, tuple[Source, str]] = {}
    for name, node_vars in ctx.vars.nodes.items():
        bfr_id = node_vars.bfr_id
        if bfr_id is None:
            continue
        src = ctx.vars_source(f"nodes.{name}.bfr_id")
        if not ctx.role(name).bfr:
            bfrs = ", ".join(sorted(role.name for role in ROLES.values() if role.bfr))
            raise problem(
                src, f"{name} is a {ctx.roles[name]} node, not a BFR; only {bfrs} nodes take a BFR-ID"
            )
        if not 1 <= bfr_id <= MAX_BFR_ID:
            raise problem(
                src,
                f"BFR-ID {bfr_id} is outside 1..{MAX_BFR_ID} of sub-domain {sub_domain} "
                "(0 is reserved, the field is 16 bits; RFC 8279 §2)",
            )
        if bfr_id in owner:
            raise clash(src, bfr_id, owner[bfr_id][0], bfr_id)
        owner[bfr_id] = (src, name)
        plan.nodes[name].bfr_id = bfr_id

    def order(name: str) -> tuple[int, int, tuple[object, ...]]:
        tier = plan.nodes[name].tier
        # Hosts, then leaves, then higher tiers, then switches no host reaches.
        return (0 if tier is not None else 1, tier or 0, natural_key(name))

    candidates = sorted(
        (n for n in plan.nodes if ctx.role(n).bfr and plan.nodes[n].bfr_id is None), key=order
    )
    next_id = 1
    for name in candidates:
        while next_id in owner:
            next_id += 1
        if next_id > MAX_BFR_ID:
            raise problem(
                Source(ctx.vars_file, "nodes"),
                f"BFR-ID space is exhausted at {name}: more than {MAX_BFR_ID} BFRs in one sub-domain",
            )
        plan.nodes[name].bfr_id = next_id
        owner[next_id] = (Source("automatic allocation", f"bfr_id of {name}"), name)
    assign_labels(plan)
    if fast_reroute:
        assign_fast_reroute(plan)
    plan.bier.groups = [plan_group(plan, ctx, i, g) for i, g in enumerate(ctx.vars.bier.groups)]
    return plan


def host_leaf_port(plan: LabPlan, host: str) -> tuple[str, str] | None:
    """The BFR (leaf) a host hangs off and the leaf's interface toward it."""
    for link in plan.links:
        for here, there in ((link.a, link.b), (link.b, link.a)):
            if (
                here.node == host
                and plan.nodes[there.node].bfr_id is not None
                and plan.nodes[there.node].tier
            ):
                return there.node, there.interface
    return None


def plan_group(plan: LabPlan, ctx: Context, index: int, group: GroupVars) -> PlanGroup:
    where = f"bier.groups.{index}"
    if not group.group.is_multicast or group.group in LINK_LOCAL_MULTICAST:
        raise problem(
            ctx.vars_source(f"{where}.group"), f"{group.group} is not a routable IPv4 multicast group"
        )
    hosts = [group.source] if group.source else []
    ports = {}
    for i, host in enumerate([*hosts, *group.receivers]):
        path = f"{where}.source" if group.source and i == 0 else f"{where}.receivers"
        if host not in plan.nodes or not ctx.is_host(host):
            raise problem(ctx.vars_source(path), f"{host!r} is not a gpu-host node of this lab")
        found = host_leaf_port(plan, host)
        if found is None:
            raise problem(ctx.vars_source(path), f"{host} is not linked to a BIER leaf")
        if host in group.receivers:
            ports[host] = found
    source = plan.nodes[group.source] if group.source else None
    return PlanGroup(
        group=group.group,
        source=group.source,
        source_address=source.loopback.ip if source and source.loopback else None,
        receivers=sorted(group.receivers, key=natural_key),
        receiver_ports=dict(sorted(ports.items())),
    )


def assign_labels(plan: LabPlan) -> None:
    """Each BFR gets one label per SI in use, in BFR-id order after the reserved labels 0..15. Labels are
    local to the BFR that advertises them; distinct blocks make every label swap visible on the wire."""
    ids = [n.bfr_id for n in plan.nodes.values() if n.bfr_id is not None]
    si_count = (max(ids) - 1) // plan.bier.bsl + 1 if ids else 1
    plan.bier.si_count = si_count
    for node in plan.nodes.values():
        if node.bfr_id is None:
            continue
        base = FIRST_UNRESERVED_LABEL + (node.bfr_id - 1) * si_count
        if base + si_count - 1 > MAX_LABEL:
            raise PlanError(
                f"{plan.topology}: BIER labels for {node.name} (BFR-ID {node.bfr_id}, {si_count} SIs) pass "
                "the 20-bit label space; use a longer BSL (bier.bsl) or fewer, denser BFR-IDs"
            )
        node.bier_label_base = base


def bfr_links(plan: LabPlan, name: str | None = None) -> Iterator[tuple[PlanEndpoint, PlanEndpoint]]:
    """The BFR-NBR rule: every (local, remote) end pair of a link between two BFRs with BIER labels whose
    remote end has an address (``name``: only the links of that BFR). These are the neighbours a node file
    lists, and the adjacency fast reroute routes its bypasses over."""
    for link in plan.links:
        if link.a.node == link.b.node:
            continue
        for local, remote in ((link.a, link.b), (link.b, link.a)):
            if name is not None and local.node != name:
                continue
            here, there = plan.nodes[local.node], plan.nodes[remote.node]
            if (
                remote.address is not None
                and here.bier_label_base is not None
                and there.bier_label_base is not None
            ):
                yield local, remote


def bier_adjacency(plan: LabPlan) -> dict[str, list[str]]:
    """Every BFR's BFR-NBRs (:func:`bfr_links`), sorted."""
    adjacency: dict[str, set[str]] = {
        n.name: set() for n in plan.nodes.values() if n.bier_label_base is not None
    }
    for local, remote in bfr_links(plan):
        adjacency[local.node].add(remote.node)
    return {name: sorted(nbrs, key=natural_key) for name, nbrs in adjacency.items()}


def static_birt(plan: LabPlan, name: str, neighbors: Collection[str]) -> dict[int, list[str]]:
    """``name``'s BIRT as the static routes give it: a BFER's next hops are the unicast next hops toward
    its loopback (BIER follows the underlay's routing, RFC 8279 §6.4), restricted to the BFR-NBRs in
    ``neighbors``; BFR-ids with none are left out."""
    by_node = {other.name: other.bfr_id for other in plan.nodes.values() if other.bfr_id is not None}
    birt: dict[int, list[str]] = {}
    for route in plan.nodes[name].routes:
        bfr_id = by_node.get(route.to)
        hops = sorted({h.neighbor for h in route.nexthops if h.neighbor in neighbors}, key=natural_key)
        if bfr_id is not None and hops:
            birt[bfr_id] = hops
    return dict(sorted(birt.items()))


def assign_fast_reroute(plan: LabPlan) -> None:
    """Fast reroute (aidcnet/bier/fast_reroute.py) for every BFR: its adjacency label per BFR-NBR, a link
    bypass per BFR-NBR that has one, and node protection (tunnels to the next-next hops) where the BIRT
    reaches some BFR-ids through one BFR-NBR alone. Adjacency labels follow every BFR's BIER labels, one
    per directed BFR adjacency of the lab; a tunnel's inner nodes are switches. The next-next hops come
    from the static routes' BIRTs, which BIER over BGP follows too (both are the underlay's shortest
    paths)."""
    adjacency = bier_adjacency(plan)
    ids = [n.bfr_id for n in plan.nodes.values() if n.bfr_id is not None]
    first = FIRST_UNRESERVED_LABEL + (max(ids, default=0)) * plan.bier.si_count
    try:
        labels = adjacency_labels(adjacency, first)
    except ValueError as exc:
        raise PlanError(
            f"{plan.topology}: BIER fast reroute: {exc}; turn bier.fast_reroute off or use fewer BFRs"
        ) from exc

    switches = {name for name, n in plan.nodes.items() if role_named(n.role).place is Place.SWITCH}

    def transit(node: str) -> bool:
        return node in switches

    # A BFR with one BFR-NBR neither protects (every way out is through it) nor forwards for a PLR (its only
    # next hop is the PLR itself), so only the others' BIRTs are needed: on bsl256 that skips 256 hosts.
    birts = {name: static_birt(plan, name, nbrs) for name, nbrs in adjacency.items() if len(nbrs) >= 2}
    for name, nbrs in adjacency.items():
        node = plan.nodes[name]
        node.bier_adjacency_labels = labels.get(name, {})
        bypass: dict[str, BierBypass] = {}
        nnh_bypass: dict[str, list[BierNnhBypass]] = {}
        for nbr in nbrs:
            path = bypass_path(adjacency, name, nbr, transit)
            if path is not None:
                via, stack = tunnel(path, labels)
                bypass[nbr] = BierBypass(via=via, labels=stack)
            if len(nbrs) < 2:
                continue  # every way out is through nbr
            for nnh, (path, bfr_ids) in next_next_hops(adjacency, birts, name, nbr, transit).items():
                via, stack = tunnel(path, labels)
                base = plan.nodes[nnh].bier_label_base
                assert base is not None  # a BFR-NBR's next hop is a BFR with labels (bfr_links)
                nnh_bypass.setdefault(nbr, []).append(
                    BierNnhBypass(nnh=nnh, label_base=base, via=via, labels=stack, bfr_ids=bfr_ids)
                )
        node.bier_bypass = bypass
        node.bier_nnh_bypass = nnh_bypass
