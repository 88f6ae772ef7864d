"""The plan, seen from one node: its :class:`aidcnet.config.NodeConfig` (the file the agent applies)."""

from __future__ import annotations

import ipaddress

from aidcnet.config import (
    CONFIG_VERSION,
    Bgp,
    BgpNeighbor,
    Bier,
    BierFlow,
    BierHostBfir,
    BierMembership,
    BierNeighbor,
    BierPortPolicy,
    Interface,
    NextHop,
    NodeConfig,
    Route,
)
from aidcnet.roles import AGENT_ROLES, Role
from orchestrator.configure.plan.bfd import bfd_config
from orchestrator.configure.plan.bier import bfr_links, static_birt
from orchestrator.configure.plan.context import natural_key
from orchestrator.configure.plan.igmp import igmp_config
from orchestrator.configure.plan.ina import ina_config
from orchestrator.configure.plan.routes import collapsed as collapsed_routes
from orchestrator.configure.plan.schema import BGP_KNOBS, LabPlan, PlanError, PlanLink, PlanNode
from orchestrator.lab.roles import Place, role_named


def node_config(plan: LabPlan, name: str) -> NodeConfig:
    node = plan.nodes[name]
    if node.loopback is None:
        raise PlanError(
            f"{plan.topology}: node {name} ({node.role}) has no loopback; the plan does not configure it"
        )
    interfaces = []
    for link in plan.links:
        for local, remote in ((link.a, link.b), (link.b, link.a)):
            if local.node != name or local.address is None:
                continue
            interfaces.append(
                Interface(
                    name=local.interface,
                    ipv4=local.address,
                    peer=remote.node,
                    peer_interface=remote.interface,
                    mtu=link.mtu,
                    bandwidth_bps=link.bandwidth_bps,
                    queue_bytes=link.queue_bytes if link.shaped_bps else None,
                )
            )
    interfaces.sort(key=lambda i: natural_key(i.name))
    routes = [
        Route(prefix=prefix, nexthops=[NextHop(via=via, dev=dev) for via, dev in hops])
        for prefix, hops in collapsed_routes(node.routes)
    ]
    bgp = bgp_config(plan, name)
    bier = bier_config(plan, name)
    if bgp is not None and bgp.neighbors:
        routes = []  # BGP installs the routes (proto bgp); static ones would shadow FARE's weights
    return NodeConfig(
        version=CONFIG_VERSION,
        node=name,
        role=node.role,
        loopback=node.loopback,
        interfaces=interfaces,
        routes=routes,
        bgp=bgp,
        bier=bier,
        ina=ina_config(plan, name),
        igmp=igmp_config(plan, name, bier.host_ports if bier else []),
        bfd=bfd_config(plan, name),
        time_scale=plan.time.scale,
    )


def bgp_config(plan: LabPlan, name: str) -> Bgp | None:
    """The node's ASN and, when the lab runs BGP, one eBGP session per link to another node that has an
    ASN and addresses (RFC 7938 §5.2: sessions on the point-to-point link addresses)."""
    node = plan.nodes[name]
    if node.asn is None or node.loopback is None:
        return None
    knobs = {key: getattr(plan.bgp, key) for key in BGP_KNOBS}
    if not plan.bgp.enabled:
        return Bgp(asn=node.asn, router_id=node.loopback.ip, **knobs)
    neighbors = []
    for link in plan.links:
        for local, remote in ((link.a, link.b), (link.b, link.a)):
            peer = plan.nodes[remote.node]
            if local.node != name or local.address is None or remote.address is None or peer.asn is None:
                continue
            neighbors.append(
                BgpNeighbor(
                    name=remote.node,
                    address=remote.address.ip,
                    local_address=local.address.ip,
                    interface=local.interface,
                    asn=peer.asn,
                    md5_password=md5_password(plan, link),
                    ttl_security_hops=link.ttl_security_hops,
                    passive=listens(plan, local.node, remote.node),
                )
            )
    neighbors.sort(key=lambda n: natural_key(n.interface))
    return Bgp(
        asn=node.asn,
        router_id=node.loopback.ip,
        neighbors=neighbors,
        transit=node.role != Role.GPU_HOST,
        **knobs,
    )


def listens(plan: LabPlan, local: str, remote: str) -> bool:
    """Whether ``local`` only listens on its session with ``remote`` (docs/fare.md "Who connects"). Between
    two agents one end connects: the fabric to a GPU host, and between switches the higher BGP Identifier
    (loopback), the connection RFC 4271 §6.8's collision rule keeps. Towards FRR, GoBGP and BIRD our end
    connects too (they connect as well and resolve the collision themselves)."""
    a, b = plan.nodes[local], plan.nodes[remote]
    if a.role not in AGENT_ROLES or b.role not in AGENT_ROLES or a.loopback is None or b.loopback is None:
        return False
    if (a.role == Role.GPU_HOST) != (b.role == Role.GPU_HOST):
        return a.role == Role.GPU_HOST
    return a.loopback.ip < b.loopback.ip


def md5_password(plan: LabPlan, link: PlanLink) -> str | None:
    """The TCP-MD5 secret of the link's session (None: unsigned). It lives only in a plan computed from
    the vars: plan.yml never holds it, so a plan read back from there cannot render a signed session."""
    if not link.md5:
        return None
    if link.md5_secret is None:
        raise PlanError(
            f"{plan.topology}: link {link.a.node}:{link.a.interface} -- {link.b.node}:{link.b.interface} is "
            "signed (TCP-MD5) but this plan has no secret: it was read from plan.yml, which never holds "
            "secrets; compute the plan from the vars (aidclab plan / configure)"
        )
    return link.md5_secret.get_secret_value()


# Host-BIER hands delivered payloads to the host's application on the RoCEv2 port (docs/design.md §3).
HOST_APP_PORT = 4791


def port_policy(
    role: str,
    peer: PlanNode,
    peer_addr: ipaddress.IPv4Address,
    allowed: list[int] | None = None,
) -> BierPortPolicy:
    """RFC 8296 §6: a BFR's port to a GPU host that is a BFIR is a host port (that host, its own BFR-id,
    ``allowed`` BFR-ids: its tenant's, None for the whole domain); any other port is a fabric port, open
    only to a BFR neighbour (none if the peer is not a BFR)."""
    if role != Role.GPU_HOST and peer.role == Role.GPU_HOST and peer.bfr_id is not None:
        bfir = BierHostBfir(bfr_id=peer.bfr_id, allowed=allowed)
        return BierPortPolicy(kind="host", hosts={peer_addr: bfir})
    nbrs = [peer_addr] if peer.bfr_id is not None and peer.bier_label_base is not None else []
    return BierPortPolicy(kind="fabric", neighbors=nbrs)


def tenant_ids(plan: LabPlan, host: str) -> list[int] | None:
    """The BFR-ids ``host`` may address under the edge policy: its tenant's hosts', None (the whole
    domain) when it is in no tenant."""
    for hosts in plan.bier.tenants.values():
        if host in hosts:
            return sorted(i for h in hosts if (i := plan.nodes[h].bfr_id) is not None)
    return None


def bier_config(plan: LabPlan, name: str) -> Bier | None:
    """BIER settings plus the static BIRT (:func:`static_birt`) and the fast reroute the plan worked out."""
    node = plan.nodes[name]
    if node.bfr_id is None or node.bier_label_base is None:
        return None
    neighbors: dict[str, BierNeighbor] = {}
    for local, remote in bfr_links(plan, name):
        assert remote.address is not None and plan.nodes[remote.node].bier_label_base is not None
        neighbors.setdefault(
            remote.node,
            BierNeighbor(
                name=remote.node,
                address=remote.address.ip,
                interface=local.interface,
                label_base=plan.nodes[remote.node].bier_label_base,
            ),
        )
    edge_policy: dict[str, BierPortPolicy] = {}
    if plan.bier.edge_policy:
        for link in plan.links:
            for local, remote in ((link.a, link.b), (link.b, link.a)):
                if local.node == name and local.address and remote.address:
                    edge_policy[local.interface] = port_policy(
                        node.role, plan.nodes[remote.node], remote.address.ip, tenant_ids(plan, remote.node)
                    )
    birt = static_birt(plan, name, neighbors) if plan.bier.bift == "static" else {}
    host_ports = (
        sorted(
            (n.interface for n in neighbors.values() if plan.nodes[n.name].role == Role.GPU_HOST),
            key=natural_key,
        )
        if node.role != Role.GPU_HOST
        else []
    )
    flows, members = [], []
    if host_ports:
        for g in plan.bier.groups:
            bfers = sorted({plan.nodes[leaf].bfr_id for leaf, _port in g.receiver_ports.values()})
            flows.append(BierFlow(group=g.group, source=g.source_address, bfers=bfers))
            mine = sorted({port for leaf, port in g.receiver_ports.values() if leaf == name}, key=natural_key)
            if mine:
                members.append(BierMembership(group=g.group, interfaces=mine))
    return Bier(
        bfr_id=node.bfr_id,
        sub_domain=plan.bier.sub_domain,
        bsl=plan.bier.bsl,
        bift=plan.bier.bift,
        dataplane=plan.bier.dataplane,
        label_base=node.bier_label_base,
        si_count=plan.bier.si_count,
        neighbors=sorted(neighbors.values(), key=lambda n: natural_key(n.name)),
        birt=birt,
        host_ports=host_ports,
        edge_policy=dict(sorted(edge_policy.items(), key=lambda kv: natural_key(kv[0]))),
        app_port=HOST_APP_PORT if node.role == Role.GPU_HOST else None,
        flows=flows,
        members=members,
        adjacency_labels=node.bier_adjacency_labels,
        bypass=node.bier_bypass,
        nnh_bypass=node.bier_nnh_bypass,
    )


def node_configs(plan: LabPlan) -> dict[str, NodeConfig]:
    """A config for every node the plan manages (every role but the unmanaged), in topology node order."""
    return {
        name: node_config(plan, name)
        for name, node in plan.nodes.items()
        if role_named(node.role).place is not Place.UNMANAGED
    }
