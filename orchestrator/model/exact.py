"""The model on a lab plan: per op, the path every packet of a replay takes, and what it adds to each link
and agent counter. Exact by construction where the emulation is deterministic, because every decision is
made by the code the nodes run:

* BIER: each BFR's BIFTs come from its node file (``orchestrator.configure.plan.node_config``) through
  the agent's own ``aidcnet.agent.bier.service.build_tables``; the BFIR decision is
  ``aidcnet.bier.forwarding.impose`` and every hop's is ``forward`` (RFC 8279 §6.5, ECMP by the packet's
  Entropy), so BIER paths, copies and per-SI packets are the emulator's own.
* Network-BIER: the leaf's Entropy is ``aidcnet.bier.edge.flow_entropy`` of (S, G, ports) and the groups
  are the replay's (``orchestrator.experiment.replay_groups.derive_groups``).
* Unicast: the plan's routes (the static routes the nodes install). The kernel picks among equal-cost
  next hops with a hash whose key is random per boot, so a link inside an ECMP group gets the expected
  share and is marked hashed; sums across a tier boundary (``tier_sums``) stay exact.

* INA (mode ``ina``): ``orchestrator.model.ina`` with the switches' own aggregator and VAT rules.
* Ring and parameter-server AllReduce (modes ``ring``, ``ps``): ``orchestrator.model.collective`` with
  the workers' own ring and window logic and the server's aggregator; their datagrams follow the unicast
  routes (hashed where the kernel hashes).
* FARE: on a lab with ``bgp.enabled`` unicast follows the weighted next hops of a BGP underlay converged
  in memory with the agents' RIB code (``orchestrator.model.fare``); the shares are the hash's expectation.

Pure computation over an in-memory plan: no files, no containers. Fit for labs and generated fabrics of
a few thousand nodes; ``orchestrator.model.clos`` is the vectorised engine for 64k GPUs, and the tests
hold it equal to this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from functools import cache
from typing import Any

from aidcnet.agent.bier.service import HOST_BIER_GROUP, build_tables
from aidcnet.bier.bift import Bift
from aidcnet.bier.bitstring import bitstrings_from_ids
from aidcnet.bier.edge import flow_entropy
from aidcnet.bier.forwarding import forward, impose
from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT
from aidcnet.modes import COLLECTIVE, MODELLED, PER_RECEIVER, Mode, in_order
from orchestrator.configure.plan.context import natural_key
from orchestrator.configure.plan.schema import LabPlan
from orchestrator.model.counts import (
    ModelRun,
    Tally,
    link_loads,
    source_egress,
    tier_sums,
)
from orchestrator.model.wire import (
    DEFAULT_MAX_DATAGRAM,
    fragment_sizes,
    replay_bier_frame_overhead,
    replay_frame_overhead,
    udp_frame_overhead,
)
from orchestrator.workloads.trace import TraceOp

# The BFIR's TTL for imposed packets (aidcnet.agent.bier.dataplane.DEFAULT_TTL via BierHost.send).
BIER_TTL = 64
# One mode's counting: ``engine(ops, tally, stats)`` adds the run's traffic to ``tally``.
Engine = Callable[[list[TraceOp], Tally, dict[str, Any]], None]
ENTROPY_MASK = 0xFFFFF


class ModelError(ValueError):
    """The plan or the trace does not allow the mode; the message says which node or op and why."""


class PlanModel:
    """One lab plan, indexed for the model. Build it once, then :meth:`run` any number of traces/modes."""

    def __init__(
        self,
        plan: LabPlan,
        max_datagram: int = DEFAULT_MAX_DATAGRAM,
        bandwidth: dict[str, float] | None = None,
        down: Sequence[str] = (),
    ):
        """``bandwidth`` ("node:if" -> bits/s) and ``down`` ("node:if") change links as ``aidclab link
        set`` does; they move FARE's weights on a BGP lab (``orchestrator.model.fare``)."""
        # Session security changes nothing the model computes, and a plan read back from plan.yml has no
        # TCP-MD5 secrets to render node configs with: the model works on an unsigned copy.
        unsigned = [link.model_copy(update={"md5": False}) for link in plan.links]
        plan = plan.model_copy(update={"links": unsigned})
        self.plan = plan
        self.max_datagram = max_datagram
        self.endpoints = [(str(link.a), str(link.b)) for link in plan.links]
        # (node, interface) -> the link direction it transmits on, and the node at the other end
        self.port: dict[tuple[str, str], int] = {}
        self.peer: dict[tuple[str, str], str] = {}
        for i, link in enumerate(plan.links):
            self.port[(link.a.node, link.a.interface)] = 2 * i
            self.port[(link.b.node, link.b.interface)] = 2 * i + 1
            self.peer[(link.a.node, link.a.interface)] = link.b.node
            self.peer[(link.b.node, link.b.interface)] = link.a.node
        self.tiers = {name: node.tier for name, node in plan.nodes.items()}
        # node -> destination -> [(dev, neighbor, weight)]: the plan's static routes (equal weights), or
        # with bgp.enabled the weighted next hops the converged BGP/FARE underlay installs instead.
        self.routes = {
            name: {r.to: [(h.dev, h.neighbor, 1) for h in r.nexthops] for r in node.routes}
            for name, node in plan.nodes.items()
        }
        self.fare_routes: dict[str, dict[str, list[tuple[str, str, int]]]] = {}
        if plan.bgp.enabled:
            from orchestrator.model.fare import converge, weighted_routes

            self.fare_routes = weighted_routes(plan, converge(plan, bandwidth, down))
            self.routes.update(self.fare_routes)
        self._bier: dict[str, tuple[dict[int, Bift], dict[str, tuple[str, str]]]] = {}
        self._flows: dict[tuple[str, str], dict[int, Fraction]] = {}
        self._onward_shares: dict[tuple[str, str], dict[int, Fraction]] = {}

    # -- state the nodes hold ----------------------------------------------------------------------
    def bier_tables(self, node: str) -> tuple[dict[int, Bift], dict[str, tuple[str, str]]]:
        """The node's BIFTs by SI and its BFR-NBRs (name -> (address, local interface)), built as its
        agent builds them from its node file."""
        got = self._bier.get(node)
        if got is None:
            from orchestrator.configure.plan import node_config

            bier = node_config(self.plan, node).bier
            if bier is None:
                raise ModelError(f"node {node} is not a BFR in the plan of lab {self.plan.lab}")
            if bier.bift == "bgp":
                # A converged BIER-over-BGP fabric installs the shortest-path next hops the static
                # BIRT lists (RFC 9793 follows the BGP best paths; multipath over equal AS-path length).
                bier = bier.model_copy(update={"birt": _static_birt(self.plan, node, bier)})
            bifts, neighbors, _labels = build_tables(bier)
            got = self._bier[node] = (bifts, neighbors)
        return got

    def bfr_id(self, node: str) -> int:
        bfr_id = self.plan.nodes[node].bfr_id
        if bfr_id is None:
            raise ModelError(f"{node} has no BFR-id in the plan of lab {self.plan.lab}")
        return bfr_id

    def fabric_interface(self, host: str) -> str:
        names = sorted(
            (ep.interface for link in self.plan.links for ep in (link.a, link.b) if ep.node == host),
            key=natural_key,
        )
        if not names:
            raise ModelError(f"host {host} has no data interface in the plan")
        return names[0]

    # -- unicast ------------------------------------------------------------------------------------
    def unicast_flow(self, src: str, dst: str) -> dict[int, Fraction]:
        """Link direction -> share of one src->dst packet crossing it (1 where no ECMP splits)."""
        key = (src, dst)
        got = self._flows.get(key)
        if got is None:
            got = self._flows[key] = self._onward(src, dst, frozenset())
        return got

    def unicast_path(self, src: str, dst: str, fraction: float) -> list[int]:
        """The link directions of one src->dst flow whose ECMP hash falls at ``fraction`` (0 to 1) of the
        hash's range. Every node of a lab runs on the host's one kernel and its one hash key, and the
        5-tuple does not change on the way, so the same hash decides every hop (:func:`ecmp_member`)."""
        if not 0 <= fraction < 1:
            raise ValueError(f"a hash fraction is in [0, 1), not {fraction}")
        path, node, seen = [], src, {src}
        while node != dst:
            nh = self.routes.get(node, {}).get(dst)
            if not nh:
                raise ModelError(f"{node} has no route to {dst} in the plan of lab {self.plan.lab}")
            dev, neighbor, _w = nh[ecmp_member([w for _d, _n, w in nh], fraction)]
            path.append(self.port[(node, dev)])
            if neighbor in seen:
                raise ModelError(f"routes to {dst} loop at {neighbor} in the plan of lab {self.plan.lab}")
            node = neighbor
            seen.add(node)
        return path

    def hashed(self, src: str, dst: str) -> bool:
        """Whether the kernel's ECMP hash decides the path of src->dst (some hop has several next hops)."""
        return any(share != 1 for share in self.unicast_flow(src, dst).values())

    def _onward(self, node: str, dst: str, before: frozenset[str]) -> dict[int, Fraction]:
        """The shares of one packet at ``node`` on its way to ``dst`` (``before``: the nodes it crossed),
        each node's own computed once per destination: every source behind it shares them."""
        key = (node, dst)
        got = self._onward_shares.get(key)
        if got is not None:
            return got
        if node in before:
            raise ModelError(f"routes to {dst} loop through {node} in the plan of lab {self.plan.lab}")
        nh = self.routes.get(node, {}).get(dst)
        if not nh:
            raise ModelError(f"{node} has no route to {dst} in the plan of lab {self.plan.lab}")
        total = sum(w for _dev, _nbr, w in nh)
        out: dict[int, Fraction] = {}
        for dev, neighbor, w in nh:
            part = Fraction(w, total)
            rest = {} if neighbor == dst else self._onward(neighbor, dst, before | {node})
            if part == 1 and not out:
                out.update(rest)  # a single next hop (the common case): no arithmetic
            else:
                for d, share in rest.items():
                    out[d] = out.get(d, Fraction(0)) + part * share
            d = self.port[(node, dev)]
            out[d] = out.get(d, Fraction(0)) + part
        self._onward_shares[key] = out
        return out

    # -- the run ------------------------------------------------------------------------------------
    def run(self, ops: Iterable[TraceOp], mode: Mode, ps_host: str | None = None) -> ModelRun:
        """``ps_host``: mode ps's parameter server (the replay's ``--ps-host``); by default the replay's
        own default, the first gpu-host outside the job."""
        engine = self.engines(ps_host).get(mode)
        if engine is None:
            known = ", ".join(in_order(MODELLED | COLLECTIVE))
            raise ModelError(f"mode '{mode}': the plan model knows {known}")
        ops = list(ops)
        tally = Tally(len(self.plan.links))
        stats: dict[str, Any] = {"ops": len(ops), "payload_bytes": 0, "header_bytes": 0}
        try:
            engine(ops, tally, stats)
        except ModelError:
            raise
        except ValueError as exc:  # e.g. a collective's job the lab cannot run
            raise ModelError(f"lab {self.plan.lab}: {exc}") from exc
        run = self._finish(ops, mode, tally, stats)
        if mode in PER_RECEIVER:
            from orchestrator.model.fare import plane_shares

            shares = plane_shares(run)
            if shares:
                # A source's split over its planes: FARE's weights (expected under the kernel's hash).
                stats["plane_shares"] = shares
        return run

    def engines(self, ps_host: str | None = None) -> dict[Mode, Engine]:
        """How each mode the plan model knows is counted: the message modes without runtime state
        (``MODELLED``) here, the collectives (``COLLECTIVE``) in their own models."""
        from orchestrator.model.collective import CollectiveModel
        from orchestrator.model.ina import InaModel

        return {
            Mode.UNICAST: self._unicast_ops,
            Mode.HOST_BIER: self._host_bier_ops,
            Mode.NET_BIER: self._net_bier,
            Mode.INA: lambda ops, tally, stats: InaModel(self).run_ops(ops, tally, stats),
            Mode.RING: lambda ops, tally, stats: CollectiveModel(self).run_ring(ops, tally, stats),
            Mode.PS: lambda ops, tally, stats: CollectiveModel(self).run_ps(ops, tally, stats, ps_host),
        }

    def _unicast_ops(self, ops: list[TraceOp], tally: Tally, stats: dict[str, Any]) -> None:
        for op in ops:
            self._unicast(op, tally, stats)

    def _host_bier_ops(self, ops: list[TraceOp], tally: Tally, stats: dict[str, Any]) -> None:
        per_op = [self._host_bier(op, tally, stats) for op in ops]
        stats["bier_packets_per_op"] = _mean(per_op)
        stats["bier_packets"] = sum(per_op)

    def _finish(self, ops: Sequence[TraceOp], mode: Mode, tally: Tally, stats: dict[str, Any]) -> ModelRun:
        links = link_loads(self.endpoints, tally)
        sources = sorted({op.src for op in ops}, key=natural_key)
        egress = source_egress(links, set(sources))
        return ModelRun(
            lab=self.plan.lab,
            mode=mode,
            links=links,
            agents={n: dict(sorted(c.items())) for n, c in sorted(tally.agents.items())},
            tier_sums=tier_sums(self.endpoints, self.tiers, tally.bytes(), tally.packets()),
            sources=sources,
            source_egress_bytes=egress[0],
            source_egress_packets=egress[1],
            stats=stats,
        )

    def unicast_message(self, size: int) -> tuple[list[int], int]:
        """A unicast message of ``size`` bytes as the replay sends it: its fragments' UDP payloads and its
        bytes on every link it crosses (each fragment in its Ethernet, IPv4 and UDP headers)."""
        frags = fragment_sizes(size, self.max_datagram)
        return frags, sum(frags) + replay_frame_overhead() * len(frags)

    def _unicast(self, op: TraceOp, tally: Tally, stats: dict[str, Any]) -> None:
        frags, nbytes = self.unicast_message(op.bytes)
        for dst in op.dst:
            stats["payload_bytes"] += sum(frags)
            flow = self.unicast_flow(op.src, dst)
            # Header bytes on the wire: every fragment's headers once per link it crosses (the shares
            # of an ECMP split add up to whole hops).
            stats["header_bytes"] += int(replay_frame_overhead() * len(frags) * sum(flow.values()))
            for d, share in flow.items():
                tally.add_share(d, share, nbytes, len(frags))

    def _host_bier(self, op: TraceOp, tally: Tally, stats: dict[str, Any]) -> int:
        bsl = self.plan.bier.bsl
        receivers = [self.bfr_id(d) for d in op.dst]
        frags = fragment_sizes(op.bytes, self.max_datagram)
        packets = 0
        # The replay hands BierService.send one fragment at a time with entropy=msg_id, so every
        # fragment of a message is flow msg_id: one Entropy, one ECMP path (aidcnet.agent.replay.senders).
        entropy = op.id & ENTROPY_MASK
        for frag in frags:
            frame = replay_bier_frame_overhead(bsl) + frag
            packets += self._impose(op.src, receivers, entropy, frame, tally, stats, frag)
        return packets

    def _impose(
        self,
        node: str,
        receivers: Sequence[int],
        entropy: int,
        frame: int,
        tally: Tally,
        stats: dict[str, Any],
        payload: int,
        deliver_payload: bool = True,
    ) -> int:
        """BierDataplane.impose at ``node``: one packet per SI, then the copies down the tree."""
        bifts, _ = self.bier_tables(node)
        by_si = bitstrings_from_ids(receivers, self.plan.bier.bsl)
        for si, bits in sorted(by_si.items()):
            tally.count(node, "bier.imposed")
            bift = bifts.get(si)
            if bift is None:
                tally.count(node, "bier.dropped-no-entry")
                continue
            self._dispatch(
                node,
                impose(bift, bits, BIER_TTL, entropy),
                si,
                entropy,
                frame,
                tally,
                stats,
                payload,
                deliver_payload,
            )
        return len(by_si)

    def _dispatch(
        self,
        node: str,
        res: Any,
        si: int,
        entropy: int,
        frame: int,
        tally: Tally,
        stats: dict[str, Any],
        payload: int,
        deliver_payload: bool = True,
    ) -> None:
        """What BierDataplane._dispatch counts at ``node``, then the same at every neighbour reached."""
        udp = frame - udp_frame_overhead()
        stack = [(node, res)]
        while stack:
            here, r = stack.pop()
            _, neighbors = self.bier_tables(here)
            if r.copies:
                tally.count(here, "bier.forwarded")
                tally.count(here, "bier.replicated", len(r.copies) - 1)
            if r.local:
                tally.count(here, "bier.delivered")
                if deliver_payload:  # network-BIER counts what its leaves emit to the hosts instead
                    stats["payload_bytes"] += payload
            if r.copies or r.local:
                tally.count(here, "bier.accepted")
            for nbr, bits, _label in r.copies:
                ifname = neighbors[nbr][1]
                tally.add(self.port[(here, ifname)], frame, 1)
                stats["header_bytes"] += frame - payload
                tally.count(here, "bier.tx.packets")
                tally.count(here, "bier.tx.bytes", udp)
                tally.count(nbr, "bier.rx.packets")
                tally.count(nbr, "bier.rx.bytes", udp)
                nbifts, _ = self.bier_tables(nbr)
                stack.append((nbr, forward(nbifts[si], bits, r.ttl, entropy)))
            self._on_deliver(here, r, si)

    def _on_deliver(self, node: str, res: Any, si: int) -> None:
        """Hook for network-BIER's egress at a BFER leaf (set per run)."""

    def _net_bier(self, ops: list[TraceOp], tally: Tally, stats: dict[str, Any]) -> None:
        op_group = self.net_bier_groups(ops)
        per_op = [self.net_bier_op(op, op_group[op.id], tally, stats) for op in ops]
        stats["bier_packets_per_op"] = _mean(per_op)
        stats["bier_packets"] = sum(per_op)

    def net_bier_groups(self, ops: list[TraceOp]) -> dict[int, str]:
        """The multicast group of every op, as the replay numbers them over the whole trace."""
        from orchestrator.experiment.replay_groups import derive_groups

        user = [g.group for g in self.plan.bier.groups if not str(g.group).startswith("239.100.")]
        _groups, op_group = derive_groups(ops, avoid=user)
        return op_group

    def net_bier_op(self, op: TraceOp, group: str, tally: Tally, stats: dict[str, Any]) -> int:
        """One op of network-BIER: the host's multicast to its leaf, the leaf's imposition with the flow's
        Entropy, and the receivers' leaves emitting to their hosts. Returns the BIER packets imposed."""
        from orchestrator.configure.plan.bier import host_leaf_port

        udp0 = replay_frame_overhead()  # around a fragment on a host link (the BTH included)
        src_if = self.fabric_interface(op.src)
        leaf = self.peer[(op.src, src_if)]
        ports: dict[str, list[str]] = {}
        for d in op.dst:
            found = host_leaf_port(self.plan, d)
            if found is None:
                raise ModelError(f"{d} is not linked to a BIER leaf in lab {self.plan.lab}")
            ports.setdefault(found[0], []).append(found[1])
        ingress = next(
            ep.interface
            for link in self.plan.links
            for ep, other in ((link.a, link.b), (link.b, link.a))
            if ep.node == leaf and other.node == op.src and other.interface == src_if
        )
        bfers = sorted({self.bfr_id(n) for n in ports})
        src_ip = self.plan.nodes[op.src].loopback
        assert src_ip is not None
        entropy = flow_entropy(src_ip.ip.packed, _packed(group), QP_PORT_BASE, ROCEV2_PORT)
        packets = 0
        for frag in fragment_sizes(op.bytes, self.max_datagram):
            host_frame = udp0 + frag
            tally.add(self.port[(op.src, src_if)], host_frame, 1)
            stats["header_bytes"] += udp0
            tally.count(leaf, "net-bier.captured")
            tally.count(leaf, "net-bier.imposed")
            emitted: list[str] = []

            def egress(
                node: str,
                res: Any,
                si: int,
                frag: int = frag,
                emitted: list[str] = emitted,
                ports: dict[str, list[str]] = ports,
                leaf: str = leaf,
                ingress: str = ingress,
            ) -> None:
                if not res.local:
                    return
                for port in sorted(ports.get(node, []), key=natural_key):
                    if node == leaf and port == ingress:
                        continue
                    tally.add(self.port[(node, port)], udp0 + frag, 1)
                    tally.count(node, "net-bier.emitted")
                    emitted.append(port)

            self._on_deliver = egress  # type: ignore[method-assign]
            try:
                frame = replay_bier_frame_overhead(self.plan.bier.bsl) + frag
                packets += self._impose(leaf, bfers, entropy, frame, tally, stats, frag, False)
            finally:
                del self._on_deliver
            stats["payload_bytes"] += frag * len(emitted)
            stats["header_bytes"] += udp0 * len(emitted)
        return packets


def ecmp_member(weights: Sequence[int], fraction: float) -> int:
    """The next hop the kernel takes for a hash at ``fraction`` of its 31-bit range: the first whose
    cumulative weight's upper bound, scaled to 31 bits and rounded (``fib_nh_upper_bound``), the hash does
    not exceed (``fib_select_multipath``), in the order the route lists them (the plan's)."""
    h, total, cumulative = int(fraction * (1 << 31)), sum(weights), 0
    for i, w in enumerate(weights):
        cumulative += w
        if h <= ((cumulative << 31) + total // 2) // total - 1:
            return i
    return len(weights) - 1


def _mean(xs: list[int]) -> float | None:
    return sum(xs) / len(xs) if xs else None


@cache
def _packed(address: str) -> bytes:
    import ipaddress

    return ipaddress.IPv4Address(address).packed


def _static_birt(plan: LabPlan, node: str, bier: Any) -> dict[int, list[str]]:
    names = {n.name for n in bier.neighbors}
    by_node = {o.name: o.bfr_id for o in plan.nodes.values() if o.bfr_id is not None}
    birt: dict[int, list[str]] = {}
    for route in plan.nodes[node].routes:
        bfr_id = by_node.get(route.to)
        # Plain string order, as aidcnet.bgp.bier_routes.birt_from_bgp lists a best path's next hops: §6.5's
        # ECMP indexes that order (natural order differs from L10 on: "L10" < "L2").
        hops = sorted({h.neighbor for h in route.nexthops if h.neighbor in names})
        if bfr_id is not None and hops:
            birt[bfr_id] = hops
    return birt


__all__ = ["HOST_BIER_GROUP", "ModelError", "PlanModel"]
