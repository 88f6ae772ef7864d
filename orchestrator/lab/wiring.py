"""Veth data links between lab containers, through netlink (pyroute2).

Each pair is created straight into the two containers' network namespaces with its final names, so
nothing is ever left in the host namespace, even when a deploy dies halfway (docs/design.md §5). The kernel
cannot set the peer end up in the same request, so a second step opens each namespace once and sets
all of its data interfaces up. That step deletes the default route Docker installs through the
management bridge: a lab packet with no route must be dropped, never sent toward the host (docs/design.md §5).
"""

from __future__ import annotations

import errno
import socket
from concurrent.futures import Future, ThreadPoolExecutor

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from orchestrator.lab.mgmtbridge import (
    MGMT_IFNAME,
    MgmtBridge,
    MgmtError,
    attach_node,
    configure_eth0,
    write_hosts,
)
from orchestrator.lab.netns import netlink
from orchestrator.lab.topology import Link, Topology
from orchestrator.lab.vxlan import VxlanError, create_end


class WiringError(RuntimeError):
    pass


class IncrementalWiring:
    """Wires links while containers are still starting: a pair is created as soon as both of its nodes
    have a PID, and a node's namespace is prepared as soon as all of its links exist. Deploy time is then
    bounded by container starts, not by starts plus wiring. ``mgmt``: the lab's own management hub, whose
    ``eth0`` each node gets here (orchestrator.lab.mgmtbridge); None on a Docker network."""

    def __init__(
        self, topo: Topology, pool: ThreadPoolExecutor, underlay_netns: str | None = None,
        mgmt: MgmtBridge | None = None,
    ):  # fmt: skip
        self.topo = topo
        self.pool = pool
        self.underlay_netns = underlay_netns
        self.mgmt = mgmt
        self.pids: dict[str, int] = {}
        self.waiting: dict[str, list[Link]] = {node: [] for node in topo.nodes}
        self.missing: dict[str, int] = dict.fromkeys(topo.nodes, 0)
        for link in topo.links:
            for ep in link.endpoints:
                self.waiting[ep.node].append(link)
                self.missing[ep.node] += 1
        for vx in topo.vxlan_links:
            self.missing[vx.endpoint.node] += 1
        self.prepared: list[Future[None]] = []
        self.ipr = IPRoute()
        self.a_ifindex = a_end_ifindexes(topo)
        self.hosts = (
            mgmt.hosts_file({n: topo.container_name(n) for n in topo.nodes}) if mgmt is not None else None
        )

    def node_started(self, node: str, pid: int) -> None:
        self.pids[node] = pid
        if self.mgmt is not None:
            try:
                attach_node(self.ipr, self.mgmt, node, pid)
            except MgmtError as exc:
                raise WiringError(str(exc)) from exc
        # A VXLAN end needs only its own node: its peer is in another part, on another host.
        for vx in self.topo.vxlan_links:
            if vx.endpoint.node == node:
                try:
                    create_end(self.topo.name, vx, pid, self.underlay_netns)
                except VxlanError as exc:
                    raise WiringError(str(exc)) from exc
                self.missing[node] -= 1
        for link in self.waiting[node]:
            other = link.b.node if link.a.node == node else link.a.node
            if other in self.pids and (other != node or link.a == link.b):
                _create_pair(self.ipr, link, self.pids, self.a_ifindex[link.index])
                for ep in link.endpoints:
                    self.missing[ep.node] -= 1
                    if self.missing[ep.node] == 0 and ep.node in self.pids:
                        self._prepare(ep.node)
        if self.missing[node] == 0 and not self.waiting[node]:
            self._prepare(node)

    def _prepare(self, node: str) -> None:
        interfaces = [ep.interface for _link, ep, _peer in self.topo.links_of(node)]
        interfaces += [vx.endpoint.interface for vx in self.topo.vxlan_links if vx.endpoint.node == node]
        eth0 = self.mgmt.interface(node) if self.mgmt is not None else None
        self.prepared.append(
            self.pool.submit(_prepare_netns, node, self.pids[node], interfaces, eth0, self.hosts)
        )

    def finish(self) -> int:
        """Wait for every namespace to be prepared; raise the first wiring error."""
        try:
            for fut in self.prepared:
                fut.result()
        finally:
            self.ipr.close()
        unwired = [n for n, left in self.missing.items() if left]
        if unwired:
            raise WiringError(f"nodes with unwired links: {', '.join(sorted(unwired))}")
        return len(self.topo.links) + len(self.topo.vxlan_links)


# Linux's linkwatch treats a carrier change on a device whose ifindex equals its link's peer's ifindex as not
# urgent, and delays it by up to a second (net/core/link_watch.c, linkwatch_urgent_event). Every namespace
# numbers its devices from 2, so the two ends of a veth often get the same number, and a failed link's far end
# then learned of it after 4 ms or after a second, by chance (the FARE bench measured 194 ms median for one
# pair). The a end takes a number from a band the kernel's own count (which the b end gets) never reaches;
# its low byte stays clear of the small ones, since the eBPF BFR keys a shortcut table on it (bier.h).
A_END_IFINDEX_BASE = (1 << 20) + 128


def a_end_ifindexes(topo: Topology) -> dict[int, int]:
    """Link index → the ifindex its a end is created with: unique within its node, never its peer's."""
    ordinal = dict.fromkeys(topo.nodes, 0)
    out: dict[int, int] = {}
    for link in topo.links:
        out[link.index] = A_END_IFINDEX_BASE + ordinal[link.a.node]
        ordinal[link.a.node] += 1
    return out


def _create_pair(ipr: IPRoute, link: Link, pids: dict[str, int], a_ifindex: int) -> None:
    request = {
        "ifname": link.a.interface,
        "kind": "veth",
        "net_ns_pid": pids[link.a.node],
        "mtu": link.mtu,
        "state": "up",
        "peer": {"ifname": link.b.interface, "net_ns_pid": pids[link.b.node], "mtu": link.mtu},
    }
    try:
        try:
            ipr.link("add", index=a_ifindex, **request)
        except NetlinkError as exc:
            # A device Docker moved in (eth0 keeps the host's number) may hold it: the kernel then picks one.
            if exc.code not in (errno.EEXIST, errno.EBUSY):
                raise
            ipr.link("add", **request)
    except NetlinkError as exc:
        raise WiringError(
            f"link {link} (topology/links/{link.index}): netlink refused the veth pair: {exc.args[-1]} "
            f"(errno {exc.code}); an interface of that name may already exist in one of the nodes"
        ) from exc


def _prepare_netns(
    node: str, pid: int, interfaces: list[str], eth0: str | None = None, hosts: str | None = None
) -> None:
    """Set the node's data interfaces up, give ``eth0`` its management address (``A.B.C.D/len``) and the
    node its ``/etc/hosts`` when the lab's own hub made it, and delete any default route."""
    if hosts is not None:
        try:
            write_hosts(node, pid, hosts)
        except MgmtError as exc:
            raise WiringError(str(exc)) from exc
    with netlink(f"/proc/{pid}/ns/net") as ns:
        # One dump for all: link_lookup(ifname=) dumps every link per call, and a SuperPoD leaf has 64.
        index = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ns.get_links()}
        if eth0 is not None:
            if MGMT_IFNAME not in index:
                raise WiringError(f"node {node}: its management interface {MGMT_IFNAME} vanished")
            configure_eth0(ns, index[MGMT_IFNAME], eth0)
        for name in interfaces:
            if name not in index:
                raise WiringError(f"node {node}: interface {name} vanished right after it was created")
            ns.link("set", index=index[name], state="up")
        for family in (socket.AF_INET, socket.AF_INET6):
            for route in ns.get_default_routes(family=family):
                ns.route("del", family=family, dst="default", gateway=route.get_attr("RTA_GATEWAY"))


ETH_HLEN = 14


def link_state(pid: int) -> dict[str, dict[str, int | str]]:
    """Interface name → operstate, mtu and kernel byte/packet counters, read inside one namespace."""
    out: dict[str, dict[str, int | str]] = {}
    with netlink(f"/proc/{pid}/ns/net") as ns:
        for msg in ns.get_links():
            name = msg.get_attr("IFLA_IFNAME")
            stats = msg.get_attr("IFLA_STATS64") or {}
            info = msg.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
            rx_packets, tx_packets = stats.get("rx_packets", 0), stats.get("tx_packets", 0)
            # A VXLAN device counts its inner frames without their Ethernet header, a veth with it: a cut
            # link (aidclab split) is counted as the veth it stands for.
            l2 = ETH_HLEN if kind == "vxlan" else 0
            out[name] = {
                "operstate": msg.get_attr("IFLA_OPERSTATE"),
                "mtu": msg.get_attr("IFLA_MTU"),
                "rx_bytes": stats.get("rx_bytes", 0) + l2 * rx_packets,
                "tx_bytes": stats.get("tx_bytes", 0) + l2 * tx_packets,
                "rx_packets": rx_packets,
                "tx_packets": tx_packets,
            }
    return out
