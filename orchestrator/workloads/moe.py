"""MoE token dispatch, modelled on DeepSeek-V3 (arXiv:2412.19437, §2.1.2 and §3.2 / Table of hyper-params).

The model: ``experts`` routed experts (256) are placed over the hosts in contiguous blocks (8 hosts →
experts 0..31 on host 0, 32..63 on host 1, ...). A host here stands for one of DeepSeek's nodes. Every
token is routed to ``top_k`` (8) routed experts plus one shared expert. The shared expert is replicated
on every host, so it never causes network traffic and is not modelled further.

Node-limited routing (DeepSeek-V3 §2.1.2 "Node-Limited Routing"): each node is scored by the sum of the
highest ``ceil(top_k / max_nodes)`` affinities of its experts; the token may use only the ``max_nodes``
(4) best nodes, and takes its ``top_k`` experts among those nodes' experts. So a token reaches at most 4
hosts, one of which may be its own (no traffic for local experts).

Affinities: DeepSeek-V3 uses ``s = sigmoid(u·e)``. We draw the logit as ``log w_e + Gumbel`` where
``w_e`` is the popularity of expert ``e``. Without the node limit, top-k over such logits is exactly
sampling k experts without replacement in proportion to ``w`` (the Gumbel-top-k trick), so expert load
follows the requested skew; the node limit bends it only slightly. ``uniform`` gives equal ``w``;
``zipf`` gives ``w ∝ rank^-s`` with ranks assigned to experts by a seeded permutation, so hot experts
are scattered over hosts as in real models rather than all on host 0.

Traffic: each step every host dispatches ``tokens_per_host`` tokens (at ``t = step × step_interval``).
Tokens from one source with the same remote host set form one op of ``tokens × bytes_per_token``
bytes: a multicast op when the set has several hosts (one send instead of one per host, which is what
multicast saves), a unicast op when it has one.

``bytes_per_token`` defaults to 7408: DeepSeek-V3 dispatches FP8 activations (hidden size 7168 → 7168 B)
plus their quantisation scales and metadata.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from orchestrator.workloads import BYTES, SECONDS, Workload, WorkloadParams, make_header, op_time
from orchestrator.workloads.trace import MULTICAST_OP, UNICAST_OP, TraceOp

GENERATOR = "moe"
HIDDEN_SIZE = 7168
BYTES_PER_TOKEN = 7408


class MoEParams(WorkloadParams):
    steps: int = Field(2, ge=1, description="dispatch steps (one MoE layer's dispatch per step)")
    tokens_per_host: int = Field(128, ge=1, description="tokens each host dispatches per step")
    step_interval: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="fabric seconds between steps (0: every step's dispatch at once)",
        json_schema_extra=SECONDS,
    )
    skew: Literal["uniform", "zipf"] = Field(
        "uniform",
        description="expert popularity: uniform, or zipf (popularity of the r-th most popular expert ∝ r^-s)",
    )
    zipf_s: float = Field(
        1.0, ge=0, le=10, description="Zipf exponent s (skew=zipf only)", json_schema_extra={"metavar": "S"}
    )
    experts: int = Field(256, ge=1, description="routed experts")
    top_k: int = Field(8, ge=1, description="routed experts per token")
    max_nodes: int = Field(4, ge=1, description="nodes (hosts) a token may reach, M (node-limited)")
    bytes_per_token: int = Field(
        BYTES_PER_TOKEN, ge=1, description="dispatched bytes per token", json_schema_extra=BYTES
    )

    @model_validator(mode="after")
    def _routable(self) -> MoEParams:
        h = len(self.hosts)
        if self.experts < h:
            raise ValueError(
                f"experts ({self.experts}) must be >= the number of hosts ({h}): every host holds one"
            )
        smallest = self.experts // h
        reachable = smallest * min(self.max_nodes, h)
        if reachable < self.top_k:
            raise ValueError(
                f"top_k ({self.top_k}) experts cannot be found on max_nodes ({self.max_nodes}) hosts holding "
                f"as few as {smallest} experts each; raise experts or max_nodes, or lower top_k"
            )
        return self


def expert_placement(experts: int, n_hosts: int) -> np.ndarray:
    """Host index of each expert: contiguous, near-equal blocks (exactly equal when divisible)."""
    return (np.arange(experts, dtype=np.int64) * n_hosts) // experts


def expert_log_weights(params: MoEParams, rng: np.random.Generator) -> np.ndarray:
    """log popularity per expert, scaled so the mean weight is 1 (keeps sigmoid out of saturation)."""
    e = params.experts
    if params.skew == "uniform":
        return np.zeros(e)
    ranks = rng.permutation(e) + 1
    logw = -params.zipf_s * np.log(ranks.astype(np.float64))
    return logw - np.log(np.exp(logw).sum()) + np.log(e)


def affinities(log_w: np.ndarray, tokens: int, rng: np.random.Generator) -> np.ndarray:
    u = np.maximum(rng.random((tokens, log_w.size)), np.finfo(np.float64).tiny)
    logits = log_w[None, :] - np.log(-np.log(u))
    # sigmoid written via logaddexp: no overflow warning for very unpopular experts.
    return np.exp(-np.logaddexp(0.0, -logits))


def route(aff: np.ndarray, placement: np.ndarray, top_k: int, max_nodes: int) -> np.ndarray:
    """DeepSeek-V3 node-limited top-k: ``[tokens, experts]`` affinities → ``[tokens, top_k]`` expert ids."""
    tokens, _ = aff.shape
    n_hosts = int(placement.max()) + 1
    m = min(max_nodes, n_hosts)
    per_node = math.ceil(top_k / max_nodes)
    bounds = np.searchsorted(placement, np.arange(n_hosts + 1))
    node_score = np.empty((tokens, n_hosts))
    for h in range(n_hosts):
        block = aff[:, bounds[h] : bounds[h + 1]]
        g = min(per_node, block.shape[1])
        node_score[:, h] = np.sort(block, axis=1)[:, -g:].sum(axis=1)
    # Stable sorts: ties (measure zero, but possible) break towards the lower index, reproducibly.
    nodes = np.argsort(-node_score, axis=1, kind="stable")[:, :m]
    allowed = np.zeros((tokens, n_hosts), dtype=bool)
    allowed[np.arange(tokens)[:, None], nodes] = True
    masked = np.where(allowed[:, placement], aff, -np.inf)
    return np.argsort(-masked, axis=1, kind="stable")[:, :top_k]


def routes(params: MoEParams) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(step, source host index, [tokens, top_k] expert ids)`` in trace order. The generator's only
    source of randomness, exposed so tests can check the ops against the routing they came from."""
    rng = np.random.default_rng(params.seed)
    log_w = expert_log_weights(params, rng)
    placement = expert_placement(params.experts, len(params.hosts))
    for step in range(params.steps):
        for src in range(len(params.hosts)):
            aff = affinities(log_w, params.tokens_per_host, rng)
            yield step, src, route(aff, placement, params.top_k, params.max_nodes)


def gini(values: np.ndarray | list[int]) -> float:
    """Gini coefficient: 0 when all equal, → 1 when one item has everything."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n, total = x.size, x.sum()
    if n == 0 or total == 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float((2 * (ranks * x).sum()) / (n * total) - (n + 1) / n)


def _ops(params: MoEParams, stats: dict[str, object]) -> Iterator[TraceOp]:
    hosts = params.hosts
    n_hosts = len(hosts)
    placement = expert_placement(params.experts, n_hosts)
    loads = np.zeros(params.experts, dtype=np.int64)
    tokens = local_only = remote_pairs = 0
    next_id = 0
    for step, src, experts in routes(params):
        t = op_time(step, params.step_interval)
        loads += np.bincount(experts.ravel(), minlength=params.experts)
        reached = np.zeros((experts.shape[0], n_hosts), dtype=bool)
        reached[np.arange(experts.shape[0])[:, None], placement[experts]] = True
        reached[:, src] = False
        fanout = reached.sum(axis=1)
        tokens += experts.shape[0]
        local_only += int((fanout == 0).sum())
        remote_pairs += int(fanout.sum())
        groups, counts = np.unique(reached[fanout > 0], axis=0, return_counts=True)
        # Order by fan-out then receivers, so a step reads unicast first and is stable across numpy versions.
        keyed = sorted(
            (tuple(int(i) for i in np.flatnonzero(g)), int(c)) for g, c in zip(groups, counts, strict=True)
        )
        keyed.sort(key=lambda kc: len(kc[0]))
        for dst_idx, count in keyed:
            yield TraceOp(
                t=t,
                op=MULTICAST_OP if len(dst_idx) > 1 else UNICAST_OP,
                src=hosts[src],
                dst=[hosts[i] for i in dst_idx],
                bytes=count * params.bytes_per_token,
                tag=f"step{step}",
                id=next_id,
            )
            next_id += 1
    stats.update(
        tokens=tokens,
        local_only_tokens=local_only,
        remote_token_hosts=remote_pairs,
        unicast_bytes=remote_pairs * params.bytes_per_token,
        expert_loads=loads.tolist(),
        gini=gini(loads),
    )


def generate(params: MoEParams) -> Workload:
    """The dispatch trace. ``stats`` (tokens, expert_loads, gini, ...) is complete once ops are consumed."""
    stats: dict[str, object] = {}
    return Workload(make_header(GENERATOR, params), _ops(params, stats), stats)
