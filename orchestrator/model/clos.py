"""The vectorised engine: a whole trace over a generated Clos (:class:`orchestrator.model.fabrics.Clos`)
as numpy array operations, for fabrics of 64k GPUs where a per-packet walk would take hours.

It computes what :class:`orchestrator.model.exact.PlanModel` computes on the same fabric, using what
§6.5 forwarding does on a Clos's BIFTs (``tests/unit/model/`` holds the two equal, link by link, on small
fabrics with random ops and random BFR-id pins):

* a host's BIFT sends every bit to its leaf: one copy up;
* a leaf's F-BM toward any spine covers every BFER outside the leaf, so the remote bits leave in one
  copy to spine ``h % S`` of the pod (``h = aidcnet.bier.forwarding.ecmp_hash(Entropy)``, the spines in
  natural name order, as the BIFT lists them); local bits get one copy per host;
* a spine copies once per destination leaf of its pod and once to super-spine ``h % K`` of its plane for
  everything outside the pod; a super-spine copies once per destination pod (to that pod's spine of its
  plane); per SI touched, one packet.

BFR-ids beyond 65,535 stand for further sub-domains of :func:`sub_domain_size` ids each (whole SIs):
id ``k * size + j`` is BFR-id ``j`` of sub-domain ``k``. A packet goes to one (sub-domain, SI), so its
key ``(id - 1) // BSL`` in this global numbering is exactly one packet per (sub-domain, SI) touched;
``stats["sub_domains"]`` says how many a run needs.

Unicast: the kernel's hash is not reproducible, so ECMP links get their expected share (hashed); the
tier sums are exact. Network-BIER: the leaf's Entropy is ``flow_entropy(S, G, ports)``; at a scale where
the replay's group pool (239.100.0.0/16) cannot number the receiver sets, the engine takes the op id as
a stand-in Entropy, which moves only which spine/super-spine a packet takes, not any tier sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aidcnet.bier.bitstring import MAX_BFR_ID
from aidcnet.bier.forwarding import ecmp_hash
from aidcnet.modes import Mode
from aidcnet.replay import HEADER_SIZE
from orchestrator.model.counts import MODES, ModelRun, link_loads
from orchestrator.model.fabrics import Clos
from orchestrator.model.wire import DEFAULT_MAX_DATAGRAM, replay_bier_frame_overhead, replay_frame_overhead
from orchestrator.workloads.trace import TraceOp

ENTROPY_MASK = 0xFFFFF


def sub_domain_size(bsl: int) -> int:
    """BFR-ids one sub-domain numbers in whole SIs: a BFR-id is 16 bits (RFC 8279 §3, 1..65535), so a
    fabric with more BFERs (65,536 GPUs plus their leaves) needs a second sub-domain, whose packets and
    BIFTs are apart from the first's (RFC 8279 §1)."""
    return MAX_BFR_ID // bsl * bsl


def sub_domains(max_id: int, bsl: int) -> int:
    return -(-max_id // sub_domain_size(bsl))


# (op, receiver) pairs the engine works on at once: ~15 int64/float64 arrays of this length are live
# in the BIER tree, so 4M pairs keep its working set near 0.5 GiB whatever the step's size.
CHUNK_PAIRS = 4_000_000


@dataclass
class OpArrays:
    """A trace's ops as arrays: host indices (0-based, h1 is 0), receivers in CSR form."""

    src: np.ndarray
    dst_ptr: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    ids: np.ndarray

    def __len__(self) -> int:
        return int(self.src.size)

    @classmethod
    def from_ops(cls, ops: Iterable[TraceOp], host_index: dict[str, int]) -> OpArrays:
        src, ptr, dst, nbytes, ids = [], [0], [], [], []
        for op in ops:
            src.append(host_index[op.src])
            dst.extend(host_index[d] for d in op.dst)
            ptr.append(len(dst))
            nbytes.append(op.bytes)
            ids.append(op.id)
        return cls(
            np.array(src, dtype=np.int64),
            np.array(ptr, dtype=np.int64),
            np.array(dst, dtype=np.int64),
            np.array(nbytes, dtype=np.int64),
            np.array(ids, dtype=np.int64),
        )

    def slice(self, start: int, stop: int) -> OpArrays:
        """Ops ``start:stop`` as their own batch (receivers re-based)."""
        a, b = int(self.dst_ptr[start]), int(self.dst_ptr[stop])
        return OpArrays(
            self.src[start:stop],
            self.dst_ptr[start : stop + 1] - a,
            self.dst[a:b],
            self.nbytes[start:stop],
            self.ids[start:stop],
        )

    def chunks(self, max_pairs: int) -> Iterator[OpArrays]:
        """The batch cut at op boundaries into pieces of at most ``max_pairs`` (op, receiver) pairs (an
        op with more receivers is a piece of its own), so the engine's working set stays bounded."""
        n = len(self)
        if n == 0 or int(self.dst_ptr[-1]) <= max_pairs:
            yield self
            return
        start = 0
        while start < n:
            stop = int(np.searchsorted(self.dst_ptr, self.dst_ptr[start] + max_pairs, side="right")) - 1
            stop = min(max(stop, start + 1), n)
            yield self.slice(start, stop)
            start = stop

    def pair_op(self) -> np.ndarray:
        """The op index of every (op, receiver) pair."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.dst_ptr))


def unique(keys: np.ndarray, return_inverse: bool = False) -> Any:
    """``np.unique`` for int64 keys, linear when they are already sorted.

    The engine's keys are (op, x) packed as ``op * n + x`` with ops in CSR order, so they arrive sorted
    whenever the receivers of an op are in host order (every generated trace); numpy 2's hash-table
    unique takes about 300x longer than a scan on such arrays (measured: 4.1 s against 12 ms for 4M).
    Unsorted keys (random BFR-id pins) are sorted first."""
    keys = np.asarray(keys, dtype=np.int64)
    if keys.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return (empty, empty) if return_inverse else empty
    order = None
    if keys.size > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        if return_inverse:
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
        else:
            keys = np.sort(keys)
    first = np.empty(keys.size, dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    uniq = keys[first]
    if not return_inverse:
        return uniq
    inverse = np.cumsum(first) - 1
    if order is not None:
        out = np.empty_like(inverse)
        out[order] = inverse
        inverse = out
    return uniq, inverse


def fragments(nbytes: np.ndarray, max_datagram: int = DEFAULT_MAX_DATAGRAM) -> tuple[np.ndarray, np.ndarray]:
    """(fragments, UDP payload bytes) per message, as ``aidcnet.replay.fragment_sizes`` cuts them: a
    message no larger than the replay header is one header-sized datagram."""
    small = nbytes <= HEADER_SIZE
    count = np.where(small, 1, -(-nbytes // max_datagram))
    return count, np.where(small, HEADER_SIZE, nbytes)


@dataclass
class _Loads:
    """Bytes and packets per link direction, in the fabric's own index spaces."""

    fabric: Clos
    host_up: np.ndarray = field(init=False)
    host_down: np.ndarray = field(init=False)
    leaf_up: np.ndarray = field(init=False)
    leaf_down: np.ndarray = field(init=False)
    spine_up: np.ndarray = field(init=False)
    spine_down: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        f = self.fabric
        # [:, 0] bytes, [:, 1] packets; float64 holds integers exactly far beyond any run here (2^53).
        self.host_up = np.zeros((f.hosts, 2))
        self.host_down = np.zeros((f.hosts, 2))
        self.leaf_up = np.zeros((f.leaves * f.spines_per_pod, 2))
        self.leaf_down = np.zeros((f.leaves * f.spines_per_pod, 2))
        n_up = f.spines * max(f.supers_per_plane, 1)
        self.spine_up = np.zeros((n_up, 2))
        self.spine_down = np.zeros((n_up, 2))

    @staticmethod
    def add(target: np.ndarray, index: np.ndarray, nbytes: np.ndarray, packets: np.ndarray) -> None:
        n = target.shape[0]
        target[:, 0] += np.bincount(index, weights=nbytes, minlength=n)
        target[:, 1] += np.bincount(index, weights=packets, minlength=n)


class ClosModel:
    """A generated Clos with its BFR-ids; :meth:`run` takes :class:`OpArrays` (or batches of them)."""

    def __init__(
        self,
        fabric: Clos,
        bsl: int = 256,
        host_bfr: np.ndarray | None = None,
        leaf_bfr: np.ndarray | None = None,
        max_datagram: int = DEFAULT_MAX_DATAGRAM,
    ):
        self.fabric = fabric
        self.bsl = bsl
        self.max_datagram = max_datagram
        n = fabric.hosts
        # The plan's dense allocation: hosts 1..N in name order, then the leaves.
        self.host_bfr = np.arange(1, n + 1) if host_bfr is None else np.asarray(host_bfr, dtype=np.int64)
        self.leaf_bfr = (
            np.arange(n + 1, n + fabric.leaves + 1)
            if leaf_bfr is None
            else np.asarray(leaf_bfr, dtype=np.int64)
        )
        self._endpoint_cache: list[tuple[str, str]] | None = None
        h = np.arange(n)
        self.leaf_of = h // fabric.hosts_per_leaf
        self.pod_of_leaf = np.arange(fabric.leaves) // fabric.leaves_per_pod

    # -- one batch ------------------------------------------------------------------------------------
    def run(self, mode: Mode, batches: OpArrays | Iterable[OpArrays], lab: str | None = None) -> ModelRun:
        return self.runs((mode,), batches, lab)[mode]

    def runs(
        self, modes: Sequence[Mode], batches: OpArrays | Iterable[OpArrays], lab: str | None = None
    ) -> dict[str, ModelRun]:
        """Every mode in one pass over the batches, so a trace of 60M ops is streamed, never held."""
        for mode in modes:
            if mode not in MODES:
                raise ValueError(f"mode '{mode}': the Clos engine knows {', '.join(MODES)}")
        loads = {m: _Loads(self.fabric) for m in modes}
        stats: dict[str, dict[str, Any]] = {
            m: {"ops": 0, "fragments": 0, "payload_bytes": 0, "bier_packets": 0, "copies": {}} for m in modes
        }
        sources = np.zeros(self.fabric.hosts, dtype=bool)
        for whole in [batches] if isinstance(batches, OpArrays) else batches:
            sources[whole.src] = True
            for batch in whole.chunks(CHUNK_PAIRS):
                sent = int(fragments(batch.nbytes, self.max_datagram)[0].sum())
                for mode in modes:
                    stats[mode]["ops"] += len(batch)
                    stats[mode]["fragments"] += sent  # datagrams the sources' messages are cut into
                    getattr(self, "_" + mode.replace("-", "_"))(batch, loads[mode], stats[mode])
        top = int(max(self.host_bfr.max(), self.leaf_bfr.max()))
        for m in modes:
            stats[m]["sub_domains"] = sub_domains(top, self.bsl) if m != Mode.UNICAST else 0
        return {m: self._finish(m, loads[m], stats[m], sources, lab) for m in modes}

    def _unicast(self, ops: OpArrays, loads: _Loads, stats: dict[str, Any]) -> None:
        f = self.fabric
        S, K = f.spines_per_pod, max(f.supers_per_plane, 1)
        nfrag, payload = fragments(ops.nbytes, self.max_datagram)
        per = ops.pair_op()
        src, dst = ops.src[per], ops.dst
        b = (payload + nfrag * replay_frame_overhead())[per].astype(np.float64)
        p = nfrag[per].astype(np.float64)
        stats["payload_bytes"] += int(payload[per].sum())
        loads.add(loads.host_up, src, b, p)
        loads.add(loads.host_down, dst, b, p)
        ls, ld = self.leaf_of[src], self.leaf_of[dst]
        remote = ls != ld
        up = np.zeros((f.leaves, 2))
        _Loads.add(up, ls[remote], b[remote], p[remote])
        loads.leaf_up += np.repeat(up / S, S, axis=0)
        down = np.zeros((f.leaves, 2))
        _Loads.add(down, ld[remote], b[remote], p[remote])
        loads.leaf_down += np.repeat(down / S, S, axis=0)
        if f.supers_per_plane:
            ps, pd = self.pod_of_leaf[ls], self.pod_of_leaf[ld]
            far = ps != pd
            up = np.zeros((f.pods, 2))
            _Loads.add(up, ps[far], b[far], p[far])
            loads.spine_up += np.repeat(up / (S * K), S * K, axis=0)
            down = np.zeros((f.pods, 2))
            _Loads.add(down, pd[far], b[far], p[far])
            loads.spine_down += np.repeat(down / (S * K), S * K, axis=0)

    def _tree(
        self,
        ops: OpArrays,
        loads: _Loads,
        stats: dict[str, Any],
        pair_op: np.ndarray,
        pair_leaf: np.ndarray,
        pair_si: np.ndarray,
        frame: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The BIER tree above the leaves for every (op, SI) packet: leaf->spine, spine->super,
        super->spine and spine->leaf copies. Returns the packets' op, source leaf, bytes and packets."""
        f = self.fabric
        S, K = f.spines_per_pod, max(f.supers_per_plane, 1)
        nfrag, payload = fragments(ops.nbytes, self.max_datagram)
        n_si = int(pair_si.max()) + 1 if pair_si.size else 1
        pkt_key, pair_pkt = unique(pair_op * n_si + pair_si, return_inverse=True)
        pkt_op = pkt_key // n_si
        h = ecmp_hash((ops.ids[pkt_op] & ENTROPY_MASK).astype(np.uint64)).astype(np.int64)
        pkt_b = (payload + nfrag * frame)[pkt_op].astype(np.float64)
        pkt_p = nfrag[pkt_op].astype(np.float64)
        pkt_leaf = self.leaf_of[ops.src[pkt_op]]
        pkt_pod = self.pod_of_leaf[pkt_leaf]
        j = h % S
        k = h % K
        copies = stats["copies"]
        # Leaf -> spine: one copy per packet with a bit outside the source leaf.
        remote = pair_leaf != pkt_leaf[pair_pkt]
        has_remote = np.zeros(pkt_key.size, dtype=bool)
        has_remote[pair_pkt[remote]] = True
        idx = pkt_leaf[has_remote] * S + j[has_remote]
        loads.add(loads.leaf_up, idx, pkt_b[has_remote], pkt_p[has_remote])
        copies["leaf>spine"] = copies.get("leaf>spine", 0) + float(pkt_p[has_remote].sum())
        # Spine -> leaf: one copy per (packet, destination leaf) outside the source leaf.
        pl = unique(pair_pkt[remote] * f.leaves + pair_leaf[remote])
        pl_pkt, pl_leaf = pl // f.leaves, pl % f.leaves
        loads.add(loads.leaf_down, pl_leaf * S + j[pl_pkt], pkt_b[pl_pkt], pkt_p[pl_pkt])
        copies["spine>leaf"] = copies.get("spine>leaf", 0) + float(pkt_p[pl_pkt].sum())
        if f.supers_per_plane:
            dest_pod = self.pod_of_leaf[pl_leaf]
            far = dest_pod != pkt_pod[pl_pkt]
            pp = unique(pl_pkt[far] * f.pods + dest_pod[far])
            pp_pkt, pp_pod = pp // f.pods, pp % f.pods
            has_far = unique(pp_pkt)
            up = (pkt_pod[has_far] * S + j[has_far]) * K + k[has_far]
            loads.add(loads.spine_up, up, pkt_b[has_far], pkt_p[has_far])
            down = (pp_pod * S + j[pp_pkt]) * K + k[pp_pkt]
            loads.add(loads.spine_down, down, pkt_b[pp_pkt], pkt_p[pp_pkt])
            copies["spine>super"] = copies.get("spine>super", 0) + float(pkt_p[has_far].sum())
            copies["super>spine"] = copies.get("super>spine", 0) + float(pkt_p[pp_pkt].sum())
        stats["bier_packets"] += int(pkt_p.sum())
        return pkt_op, pair_pkt, pkt_b, pkt_p

    def _host_bier(self, ops: OpArrays, loads: _Loads, stats: dict[str, Any]) -> None:
        frame = replay_bier_frame_overhead(self.bsl)
        per = ops.pair_op()
        si = (self.host_bfr[ops.dst] - 1) // self.bsl
        pkt_op, pair_pkt, pkt_b, pkt_p = self._tree(ops, loads, stats, per, self.leaf_of[ops.dst], si, frame)
        # Host -> leaf: each SI packet once; leaf -> host: one copy per receiver.
        loads.add(loads.host_up, ops.src[pkt_op], pkt_b, pkt_p)
        loads.add(loads.host_down, ops.dst, pkt_b[pair_pkt], pkt_p[pair_pkt])
        stats["copies"]["leaf>host"] = stats["copies"].get("leaf>host", 0) + float(pkt_p[pair_pkt].sum())
        _nfrag, payload = fragments(ops.nbytes, self.max_datagram)
        stats["payload_bytes"] += int(payload[per].sum())

    def _net_bier(self, ops: OpArrays, loads: _Loads, stats: dict[str, Any]) -> None:
        frame = replay_bier_frame_overhead(self.bsl)
        per = ops.pair_op()
        dleaf = self.leaf_of[ops.dst]
        # The BFERs are the receivers' leaves: one BitString position per leaf, not per host.
        pl = unique(per * self.fabric.leaves + dleaf)
        pl_op, pl_leaf = pl // self.fabric.leaves, pl % self.fabric.leaves
        si = (self.leaf_bfr[pl_leaf] - 1) // self.bsl
        self._tree(ops, loads, stats, pl_op, pl_leaf, si, frame)
        nfrag, payload = fragments(ops.nbytes, self.max_datagram)
        plain = (payload + nfrag * replay_frame_overhead()).astype(np.float64)
        loads.add(loads.host_up, ops.src, plain, nfrag.astype(np.float64))
        loads.add(loads.host_down, ops.dst, plain[per], nfrag[per].astype(np.float64))
        stats["payload_bytes"] += int(payload[per].sum())

    # -- results --------------------------------------------------------------------------------------
    def link_arrays(self, loads: _Loads) -> np.ndarray:
        """[2 * links, 2] (bytes, packets) in the generated topology's link order (a->b, b->a)."""
        f = self.fabric
        _S, L, K = f.spines_per_pod, f.leaves_per_pod, f.supers_per_plane
        parts = []
        # leaf-spine links in (pod, leaf, spine) order; a is the leaf.
        parts.append(np.stack([loads.leaf_up, loads.leaf_down], axis=1).reshape(-1, 2))
        if K:
            # spine-super links in (pod, spine, super) order; a is the spine.
            parts.append(np.stack([loads.spine_up, loads.spine_down], axis=1).reshape(-1, 2))
        parts.append(np.stack([loads.host_up, loads.host_down], axis=1).reshape(-1, 2))
        del L
        return np.concatenate(parts)

    def _finish(
        self, mode: Mode, loads: _Loads, stats: dict[str, Any], sources: np.ndarray, lab: str | None
    ) -> ModelRun:
        arr = self.link_arrays(loads)
        endpoints = self._endpoints()
        hashed = mode == Mode.UNICAST

        class _T:  # the Tally interface link_loads reads
            pass

        t = _T()
        t.bytes = lambda: arr[:, 0]  # type: ignore[attr-defined]
        t.packets = lambda: arr[:, 1]  # type: ignore[attr-defined]
        t.hashed = self._hashed_mask(len(endpoints)) if hashed else np.zeros(arr.shape[0], bool)  # type: ignore[attr-defined]
        links = link_loads(endpoints, t)  # type: ignore[arg-type]
        egress = loads.host_up[sources].sum(axis=0)
        total = arr.sum(axis=0)
        stats["fabric_bytes"] = float(total[0])
        stats["fabric_packets"] = float(total[1])
        # Every packet on a link carries one fragment and a fixed set of headers: Ethernet/IPv4/UDP/BTH on
        # host links in unicast and network-BIER, the BIER frame between BFRs.
        udp, bier = replay_frame_overhead(), replay_bier_frame_overhead(self.bsl)
        host_packets = float(loads.host_up[:, 1].sum() + loads.host_down[:, 1].sum())
        switch_packets = float(total[1]) - host_packets
        per_mode = {Mode.UNICAST: (udp, udp), Mode.HOST_BIER: (bier, bier), Mode.NET_BIER: (udp, bier)}
        per_packet = per_mode[mode]
        stats["header_bytes"] = host_packets * per_packet[0] + switch_packets * per_packet[1]
        return ModelRun(
            lab=lab or self.fabric.name,
            mode=mode,
            links=links,
            agents={},
            tier_sums=self._tier_sums(loads),
            sources=[f"h{i + 1}" for i in np.flatnonzero(sources)],
            source_egress_bytes=round(float(egress[0])),
            source_egress_packets=round(float(egress[1])),
            stats=stats,
        )

    def _hashed_mask(self, n_links: int) -> np.ndarray:
        """Unicast: every direction between switches sits in an ECMP group; host links do not."""
        f = self.fabric
        mask = np.ones(2 * n_links, dtype=bool)
        mask[-2 * f.hosts :] = False
        return mask

    def _endpoints(self) -> list[tuple[str, str]]:
        """The generated topology's links as (a, b) endpoint names, built once (393k links at 64k GPUs)."""
        if self._endpoint_cache is None:
            self._endpoint_cache = [(f"{a}", f"{b}") for a, b in self.fabric.wiring()[1]]
        return self._endpoint_cache

    def _tier_sums(self, loads: _Loads) -> dict[str, list[int]]:
        """``counts.tier_sums`` read off the per-tier arrays (host 0, leaf 1, spine 2, super-spine 3);
        tests/unit/model/test_clos_engine.py holds them equal to the plan model's."""
        pairs = [("0>1", loads.host_up), ("1>0", loads.host_down)]
        pairs += [("1>2", loads.leaf_up), ("2>1", loads.leaf_down)]
        if self.fabric.supers_per_plane:
            pairs += [("2>3", loads.spine_up), ("3>2", loads.spine_down)]
        return {k: [round(float(a[:, 0].sum())), round(float(a[:, 1].sum()))] for k, a in sorted(pairs)}
