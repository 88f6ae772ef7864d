"""Traces at fabric scale as :class:`orchestrator.model.clos.OpArrays`, one batch per step, from the
workload generators' own routing (``orchestrator.workloads.moe``), never a JSONL file of 60M lines.

MoE dispatch at 64k GPUs: the DeepSeek-V3 shape (256 experts, top-8, at most 4 hosts per token) holds
for one expert-parallel (EP) group of ``group_size`` hosts; a large fabric runs many EP groups side by
side. Each group's tokens are routed by :func:`orchestrator.workloads.moe.route` on affinities from
:func:`orchestrator.workloads.moe.affinities`; to keep 64k GPUs x 10 steps within minutes, ``draws``
independent groups are routed per step and group g replays draw ``g % draws`` on its own hosts (same
statistics, different hosts). Ops are formed exactly as the generator forms them: per source, the
tokens with the same remote host set are one op of ``tokens x bytes_per_token`` bytes.

``placement``: ``contiguous`` puts an EP group on consecutive hosts (under one leaf when it fits);
``strided`` spreads it one host per leaf-block across the fabric (the worst case for the network).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

from orchestrator.model.clos import OpArrays
from orchestrator.workloads import moe

# Hosts per expert-parallel group: DeepSeek-V3's 256 routed experts at 8 per host.
EP_GROUP = 32


def group_hosts(n_hosts: int, group_size: int, placement: Literal["contiguous", "strided"]) -> np.ndarray:
    """[groups, group_size] global host indices of each EP group."""
    if n_hosts % group_size:
        raise ValueError(f"{n_hosts} hosts do not split into EP groups of {group_size}")
    groups = n_hosts // group_size
    local = np.arange(group_size)
    if placement == "contiguous":
        return np.arange(groups)[:, None] * group_size + local[None, :]
    return local[None, :] * groups + np.arange(groups)[:, None]


def moe_steps(
    n_hosts: int,
    steps: int = 10,
    group_size: int = EP_GROUP,
    tokens_per_host: int = 128,
    skew: Literal["uniform", "zipf"] = "uniform",
    zipf_s: float = 1.0,
    draws: int = 16,
    placement: Literal["contiguous", "strided"] = "contiguous",
    seed: int = 0,
) -> Iterator[OpArrays]:
    params = moe.MoEParams(
        hosts=tuple(f"h{i}" for i in range(1, group_size + 1)),
        seed=seed,
        steps=steps,
        tokens_per_host=tokens_per_host,
        skew=skew,
        zipf_s=zipf_s,
    )
    rng = np.random.default_rng(seed)
    log_w = moe.expert_log_weights(params, rng)
    place = moe.expert_placement(params.experts, group_size)
    members = group_hosts(n_hosts, group_size, placement)
    n_groups = members.shape[0]
    next_id = 0
    for _step in range(steps):
        bank = [_group_ops(params, log_w, place, rng) for _ in range(min(draws, n_groups))]
        srcs, ptrs, dsts, sizes = [], [], [], []
        for g in range(n_groups):
            src, counts, dst_local, nbytes = bank[g % len(bank)]
            srcs.append(members[g][src])
            ptrs.append(counts)
            dsts.append(members[g][dst_local])
            sizes.append(nbytes)
        counts = np.concatenate(ptrs)
        ptr = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        n = counts.size
        yield OpArrays(
            np.concatenate(srcs),
            ptr,
            np.concatenate(dsts),
            np.concatenate(sizes),
            np.arange(next_id, next_id + n, dtype=np.int64),
        )
        next_id += n


def _group_ops(
    params: moe.MoEParams, log_w: np.ndarray, place: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One EP group's step: (op source, receivers per op, receivers flat, bytes), local host indices."""
    g, t = len(params.hosts), params.tokens_per_host
    aff = moe.affinities(log_w, g * t, rng)
    experts = moe.route(aff, place, params.top_k, params.max_nodes)
    src = np.repeat(np.arange(g), t)
    reached = np.zeros((g * t, g), dtype=bool)
    reached[np.arange(g * t)[:, None], place[experts]] = True
    reached[np.arange(g * t), src] = False
    weights = 1 << np.arange(g, dtype=np.int64)
    mask = reached.astype(np.int64) @ weights
    keep = mask != 0
    keys, tokens = np.unique(src[keep] * (1 << g) + mask[keep], return_counts=True)
    op_src = keys >> g
    op_mask = keys & ((1 << g) - 1)
    bits = (op_mask[:, None] >> np.arange(g)[None, :]) & 1
    counts = bits.sum(axis=1)
    dst = np.nonzero(bits)[1]
    return op_src, counts, dst, tokens * params.bytes_per_token


def broadcast(n_hosts: int, nbytes: int, sources: int = 1) -> OpArrays:
    """Model distribution (seed 000's "1,000 GPUs" case): ``sources`` hosts each send ``nbytes`` to every
    other host."""
    src = np.arange(sources, dtype=np.int64)
    dst = np.concatenate([np.delete(np.arange(n_hosts), s) for s in src])
    ptr = np.arange(sources + 1, dtype=np.int64) * (n_hosts - 1)
    return OpArrays(
        src, ptr, dst, np.full(sources, nbytes, dtype=np.int64), np.arange(sources, dtype=np.int64)
    )
