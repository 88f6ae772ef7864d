"""FARE in the model: the weighted next hops a converged BGP underlay installs, from the agents' own
decision code, and the per-plane shares they give.

A lab with ``bgp.enabled`` runs ExaBGP plus the agent's ``aidcnet.bgp.rib`` on every node: each UPDATE
goes into a :class:`~aidcnet.bgp.rib.Rib`, :func:`~aidcnet.bgp.rib.select` picks the multipath set and the
FARE weights (``aidcnet.fare.weights``), :func:`~aidcnet.bgp.rib.advertisements` says what to send each
peer. :func:`converge` runs exactly those three functions for every node of the plan, exchanging the
announcements in memory (the link bandwidth rounded to float32 as the community carries it, RFC 10005)
until nothing changes: the fixed point the sessions reach. The links and ASNs come from each node's file
(``orchestrator.configure.plan.node_config``) as ``aidcnet.agent.bgp.service.BgpService`` builds them.

``bandwidth`` overrides a link direction's bandwidth as ``aidclab link set NODE:IF bandwidth X`` does
(bits/s, keyed ``"node:if"``), ``down`` takes ``"node:if"`` links down, so the model can answer what the
shares become after a failure.

Per-flow WECMP (the replay's unicast): the kernel hashes each flow over the weights with a per-boot
seed, so a plane's share of a host's traffic is its weight over the sum of weights, in expectation;
the model marks those links hashed and keeps the tier sums exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aidcnet.bgp.rib import Link, Path, Rib, Selected, advertisements, select
from aidcnet.fare.bandwidth import bits_to_bytes
from aidcnet.fare.linkbw import float32

# A fabric of diameter d converges in about d rounds; more means the exchange loops.
MAX_ROUNDS = 64


def _default_bps() -> float:
    """The agent's bandwidth for a link with none configured."""
    from aidcnet.agent.bgp.service import DEFAULT_LINK_BPS

    return float(DEFAULT_LINK_BPS)


class _Speaker:
    def __init__(self, name: str, cfg: Any, bandwidth: Mapping[str, float], down: set[str]) -> None:
        bgp = cfg.bgp
        self.name = name
        self.asn = bgp.asn
        self.transit = bgp.transit
        self.originate = {str(cfg.loopback.network): ""}
        bw_of = {i.name: i.bandwidth_bps for i in cfg.interfaces}
        self.links: dict[str, Link] = {}
        # peer address -> our own address on that link (what the peer sees as its path's peer)
        self.local: dict[str, str] = {}
        for n in bgp.neighbors:
            key = f"{name}:{n.interface}"
            bps = bandwidth.get(key) or bw_of.get(n.interface) or _default_bps()
            self.links[str(n.address)] = Link(
                peer=str(n.address),
                neighbor=n.name,
                dev=n.interface,
                asn=n.asn,
                bandwidth=bits_to_bytes(bps),
                up=key not in down,
            )
            self.local[str(n.address)] = str(n.local_address)
        self.rib = Rib()
        self.selected: dict[str, Selected] = {}


def converge(
    plan: Any, bandwidth: Mapping[str, float] | None = None, down: Iterable[str] = ()
) -> dict[str, dict[str, Selected]]:
    """Per BGP node, its selected routes (prefix -> multipath set and kernel next hops with weights)."""
    from orchestrator.configure.plan import node_config

    # ``aidclab link set`` changes the link, so both of its ends see the new bandwidth or the carrier loss.
    other_end: dict[str, str] = {}
    for link in plan.links:
        other_end[str(link.a)] = str(link.b)
        other_end[str(link.b)] = str(link.a)
    down = set(down) | {other_end.get(k, k) for k in down}
    bandwidth = {**{other_end.get(k, k): v for k, v in (bandwidth or {}).items()}, **(bandwidth or {})}
    speakers: dict[str, _Speaker] = {}
    for name in plan.nodes:
        cfg = node_config(plan, name)
        if cfg.bgp is not None and cfg.bgp.neighbors:
            speakers[name] = _Speaker(name, cfg, bandwidth, down)
    for _round in range(MAX_ROUNDS):
        sent: dict[tuple[str, str], dict[str, Path]] = {}
        for sp in speakers.values():
            sp.selected = select(sp.rib, sp.links, sp.asn)
            wanted = advertisements(sp.selected, sp.links, sp.asn, sp.originate, sp.transit)
            for peer, routes in wanted.items():
                receiver = sp.links[peer].neighbor
                if receiver not in speakers:
                    continue
                sender_addr = sp.local[peer]
                sent[(receiver, sender_addr)] = {
                    prefix: Path(
                        prefix=prefix,
                        peer=sender_addr,
                        as_path=ann.as_path,
                        link_bw=None if ann.link_bw is None else float32(ann.link_bw),
                    )
                    for prefix, ann in routes.items()
                }
        changed = False
        for sp in speakers.values():
            for peer, link in sp.links.items():
                table = sent.get((sp.name, peer), {}) if link.up else {}
                if sp.rib.adj_in.get(peer, {}) != table:
                    sp.rib.adj_in[peer] = dict(table)
                    changed = True
        if not changed:
            return {name: sp.selected for name, sp in speakers.items()}
    raise RuntimeError(f"BGP of lab {plan.lab} did not converge in {MAX_ROUNDS} rounds (a routing loop?)")


def weighted_routes(
    plan: Any, selected: Mapping[str, Mapping[str, Selected]]
) -> dict[str, dict[str, list[tuple[str, str, int]]]]:
    """node -> destination node -> [(dev, neighbor node, weight)] for every node's loopback, as the
    kernel holds them on a BGP node (the plan's static routes are not installed there)."""
    by_prefix = {str(n.loopback.network): name for name, n in plan.nodes.items() if n.loopback is not None}
    out: dict[str, dict[str, list[tuple[str, str, int]]]] = {}
    for node, routes in selected.items():
        table: dict[str, list[tuple[str, str, int]]] = {}
        for prefix, sel in routes.items():
            dst = by_prefix.get(prefix)
            if dst is None:
                continue
            table[dst] = [(dev, _neighbor_of(plan, node, dev), w) for _via, dev, w in sel.nexthops]
        out[node] = table
    return out


def _neighbor_of(plan: Any, node: str, dev: str) -> str:
    for link in plan.links:
        if link.a.node == node and link.a.interface == dev:
            return link.b.node
        if link.b.node == node and link.b.interface == dev:
            return link.a.node
    raise ValueError(f"{node} has no link on {dev} in the plan of lab {plan.lab}")


def plane_shares(run: Any) -> dict[str, dict[str, float]]:
    """Per source with several data ports: the share of its egress bytes on each port (its planes)."""
    out: dict[str, dict[str, float]] = {}
    for src in run.sources:
        ports: dict[str, float] = {}
        for lk in run.links:
            if lk.a_node == src:
                ports[lk.a.split(":", 1)[1]] = ports.get(lk.a.split(":", 1)[1], 0.0) + lk.a_to_b_bytes
            if lk.b_node == src:
                ports[lk.b.split(":", 1)[1]] = ports.get(lk.b.split(":", 1)[1], 0.0) + lk.b_to_a_bytes
        total = sum(ports.values())
        if len(ports) > 1 and total:
            out[src] = {dev: b / total for dev, b in sorted(ports.items())}
    return out
