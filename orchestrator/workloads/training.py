"""Closed-loop steps of training and inference (trace version 2): compute phases and the transfers between
them, each op waiting for what it needs (docs/training.md has the model and its sources).

* ``moe-step``: one DeepSeek-V3 training step over ``layers`` MoE layers. Forward, per layer: every host
  computes attention (and its shared expert) for its tokens, dispatches them to the hosts of their top-k
  experts under node-limited routing (FP8, one multicast op per remote host set, as ``moe``), each host
  runs its experts once every dispatch it receives is there, and sends each source the combined outputs of
  its tokens (BF16, one unicast op per source). Then the LM head and the loss, and the backward pass, layer
  by layer from the last: the output gradients go to the experts (FP8, the dispatch's host sets), the
  experts run their backward, the input gradients come back (BF16), attention runs its backward. The
  step ends with one AllReduce of the data-parallel gradients over every host.
* ``pipeline-step``: pipeline parallelism, one host per stage in order: each micro-batch's activations go
  forward stage to stage, its gradients back; 1F1B (PipeDream-Flush) or GPipe order on every stage.
* ``decode-step``: one inference decode step: the forward pass of ``moe-step`` for one new token per
  sequence in the batch, attention over the cached context, and the LM head; no backward, no AllReduce.

A host is ``gpus_per_host`` GPUs behind its one fabric link: by default one H800 with its own 400G NIC, as
each of DeepSeek-V3's GPUs has (§3.1), which gives the paper's computation-to-communication ratio of about
1:1 for cross-node expert parallelism (§3.2.1); routing treats hosts as nodes, as ``moe`` does. A compute
phase takes its FLOPs at the host's effective throughput; a decode phase takes the roofline: those FLOPs
or the weights and KV cache it reads from HBM at the host's bandwidth, whichever is longer (a training
step's weights are read once for a micro-batch far larger than the tokens modelled). Pure and seeded: the
same parameters give the same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from orchestrator.workloads import BYTES, Workload, WorkloadParams, make_header
from orchestrator.workloads.moe import MoEParams, expert_placement, routes
from orchestrator.workloads.trace import (
    ALLREDUCE_OP,
    DEPENDENCIES_VERSION,
    MULTICAST_OP,
    UNICAST_OP,
    AnyOp,
    ComputeOp,
    TraceOp,
)


@dataclass(frozen=True)
class ModelShape:
    """DeepSeek-V3's published shape (arXiv:2412.19437 §4.2 "Hyper-Parameters"; the model's config.json on
    Hugging Face, deepseek-ai/DeepSeek-V3: hidden_size, moe_intermediate_size, q_lora_rank, kv_lora_rank,
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim, num_attention_heads, vocab_size)."""

    hidden: int = 7168
    layers: int = 61
    experts: int = 256
    top_k: int = 8
    max_nodes: int = 4
    expert_intermediate: int = 2048
    heads: int = 128
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    vocab: int = 129280

    @property
    def attention_params(self) -> int:
        """MLA's projections (§2.1.1): W^DQ, W^UQ and W^QR, W^DKV and W^KR, W^UK and W^UV, W^O."""
        h, qk = self.heads, self.qk_nope_head_dim + self.qk_rope_head_dim
        return (
            self.hidden * self.q_lora_rank
            + self.q_lora_rank * h * qk
            + self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
            + self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
            + h * self.v_head_dim * self.hidden
        )

    @property
    def expert_params(self) -> int:
        """One expert's SwiGLU FFN: gate, up and down projections."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def dense_params_per_layer(self) -> int:
        """What data parallelism replicates in an MoE layer (its gradients are AllReduced): attention, the
        shared expert and the router's centroids; the routed experts live on one host each."""
        return self.attention_params + self.expert_params + self.experts * self.hidden

    def attention_flops(self, tokens: int, context: float) -> float:
        """Forward FLOPs of a layer's attention for ``tokens`` tokens each attending to ``context`` keys."""
        h, qk = self.heads, self.qk_nope_head_dim + self.qk_rope_head_dim
        return tokens * (2 * self.attention_params + 2 * h * (qk + self.v_head_dim) * context)


DEEPSEEK_V3 = ModelShape()
# Bytes per token on the wire (§3.3.2 "Low-Precision Communication"): the dispatch and the backward's
# activation gradients toward the experts in FP8 (the hidden state and one scale per 128 values, plus the
# routing metadata: 7408 B as moe); both combines in BF16.
FP8_TOKEN_BYTES = 7408
BF16_TOKEN_BYTES = 2 * DEEPSEEK_V3.hidden
GRADIENT_BYTES_PER_PARAM = 4  # FP32 gradients (§3.3.1: master weights and gradients stay in FP32)


class NodeParams(WorkloadParams):
    """What a host computes with: a node of GPUs at an effective throughput and memory bandwidth."""

    gpus_per_host: int = Field(1, ge=1, description="GPUs a host stands for (sharing its link)")
    gpu_tflops: float = Field(
        400.0, gt=0, description="effective TFLOPS per GPU (an assumption: about 40%% of H800's dense BF16)"
    )
    hbm_tbps: float = Field(3.35, gt=0, description="HBM bandwidth per GPU, TB/s (H800: 3.35)")

    def seconds(self, flops: float, hbm_bytes: float = 0.0) -> float:
        """The roofline: FLOPs at the node's throughput or bytes at its bandwidth, whichever is longer
        (fabric seconds, to the picosecond)."""
        compute = flops / (self.gpus_per_host * self.gpu_tflops * 1e12)
        memory = hbm_bytes / (self.gpus_per_host * self.hbm_tbps * 1e12)
        return round(max(compute, memory), 12)


class MoEShapeParams(NodeParams):
    """The MoE layers a step models and how their tokens are routed (as ``moe``)."""

    layers: int = Field(4, ge=1, description="MoE layers modelled (DeepSeek-V3 has 58 of its 61)")
    tokens_per_host: int = Field(16, ge=1, description="tokens each host holds (its micro-batch)")
    experts: int = Field(DEEPSEEK_V3.experts, ge=1, description="routed experts")
    top_k: int = Field(DEEPSEEK_V3.top_k, ge=1, description="routed experts per token")
    max_nodes: int = Field(DEEPSEEK_V3.max_nodes, ge=1, description="hosts a token may reach, M")
    skew: Literal["uniform", "zipf"] = Field("uniform", description="expert popularity (as moe)")
    zipf_s: float = Field(1.0, ge=0, le=10, description="Zipf exponent s (skew=zipf only)")

    def routing(self, tokens: int) -> MoEParams:
        return MoEParams(
            hosts=self.hosts, seed=self.seed, steps=self.layers, tokens_per_host=tokens, skew=self.skew,
            zipf_s=self.zipf_s, experts=self.experts, top_k=self.top_k, max_nodes=self.max_nodes,
        )  # fmt: skip


class MoEStepParams(MoEShapeParams):
    seq_len: int = Field(4096, ge=1, description="sequence length: attention covers half of it on average")
    tokens_per_gpu_step: int = Field(
        30720, ge=1, description="tokens a GPU trains on per optimizer step (DeepSeek-V3: 15360 sequences of "
        "4096 tokens over 2048 GPUs): the gradient AllReduce's share of the tokens modelled",
    )  # fmt: skip
    gradient_bytes: int = Field(
        0, ge=0, description="bytes each host AllReduces (0: the FP32 gradients of the modelled layers' "
        "dense parameters times tokens-per-host / tokens-per-gpu-step)", json_schema_extra=BYTES,
    )  # fmt: skip

    @field_validator("gradient_bytes")
    @classmethod
    def _whole_elements(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"{v} is not a whole number of 4-byte elements")
        return v

    @property
    def allreduce_bytes(self) -> int:
        """What each host AllReduces at the end of the step: the gradients of the dense parameters, in the
        share of an optimizer step's tokens that the step models (at least one element)."""
        if self.gradient_bytes:
            return self.gradient_bytes
        full = self.layers * DEEPSEEK_V3.dense_params_per_layer * GRADIENT_BYTES_PER_PARAM
        share = full * self.tokens_per_host / max(self.tokens_per_gpu_step, self.tokens_per_host)
        return max(4, 4 * round(share / 4))


class DecodeStepParams(MoEShapeParams):
    tokens_per_host: int = Field(32, ge=1, description="sequences each host decodes (one new token each)")
    context: int = Field(4096, ge=1, description="tokens of cached context each sequence attends to")


class _Builder:
    """Ops in a topological order with increasing ids (every op waits only for ops above it)."""

    def __init__(self) -> None:
        self.ops: list[AnyOp] = []

    def compute(self, host: str, seconds: float, after: list[int], tag: str) -> int:
        return self._add(ComputeOp(t=0.0, op="compute", src=host, seconds=seconds, after=after, tag=tag,
                                   id=len(self.ops)))  # fmt: skip

    def send(self, src: str, dst: list[str], nbytes: int, after: list[int], tag: str, kind: str = "") -> int:
        op = kind or (MULTICAST_OP if len(dst) > 1 else UNICAST_OP)
        return self._add(TraceOp(t=0.0, op=op, src=src, dst=dst, bytes=nbytes, after=after, tag=tag,  # type: ignore[arg-type]
                                 id=len(self.ops)))  # fmt: skip

    def _add(self, op: AnyOp) -> int:
        op = op.model_copy(update={"after": sorted(set(op.after))})
        self.ops.append(op)
        return op.id


@dataclass
class _Layer:
    """One MoE layer's routing: per source host, its remote host sets with token counts; per (expert host,
    source) the tokens it serves; per host the (token, expert) pairs its experts compute."""

    sets: dict[int, list[tuple[tuple[int, ...], int]]]
    served: dict[tuple[int, int], int]
    pairs: np.ndarray
    hit: np.ndarray  # per host: its experts that got at least one token


def _layers(p: MoEShapeParams, tokens: int) -> list[_Layer]:
    n = len(p.hosts)
    placement = expert_placement(p.experts, n)
    out = [_Layer({}, {}, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)) for _ in range(p.layers)]
    used = np.zeros((p.layers, p.experts), dtype=bool)
    for layer, src, experts in routes(p.routing(tokens)):
        here = out[layer]
        used[layer, experts.ravel()] = True
        here.pairs += np.bincount(placement[experts].ravel(), minlength=n)
        reached = np.zeros((experts.shape[0], n), dtype=bool)
        reached[np.arange(experts.shape[0])[:, None], placement[experts]] = True
        reached[:, src] = False
        groups, counts = np.unique(reached[reached.any(axis=1)], axis=0, return_counts=True)
        keyed = sorted(
            (tuple(int(i) for i in np.flatnonzero(g)), int(c)) for g, c in zip(groups, counts, strict=True)
        )
        keyed.sort(key=lambda kc: len(kc[0]))
        here.sets[src] = keyed
        for d in range(n):
            if reached[:, d].any():
                here.served[(d, src)] = int(reached[:, d].sum())
    for layer, here in enumerate(out):
        here.hit = np.bincount(placement[used[layer]], minlength=n)
    return out


class _MoEPass:
    """The layers' transfers and computes, forward and backward, on a builder."""

    def __init__(
        self, p: MoEShapeParams, b: _Builder, layers: list[_Layer], context: float, memory: bool
    ) -> None:
        self.p, self.b, self.layers, self.context, self.memory = p, b, layers, context, memory
        self.hosts = list(p.hosts)
        self.shape = DEEPSEEK_V3
        self.tokens = p.tokens_per_host

    def attention_s(self, factor: float = 1.0) -> float:
        shape = self.shape
        flops = shape.attention_flops(self.tokens, self.context) + 2 * self.tokens * shape.expert_params
        weights = self.shape.attention_params + self.shape.expert_params  # FP8: a byte each
        kv = self.tokens * self.context * (self.shape.kv_lora_rank + self.shape.qk_rope_head_dim) * 2
        return self.p.seconds(factor * flops, weights + kv if self.memory else 0.0)

    def experts_s(self, host: int, layer: int, factor: float = 1.0) -> float:
        here = self.layers[layer]
        weights = int(here.hit[host]) * self.shape.expert_params if self.memory else 0.0
        return self.p.seconds(factor * 2 * int(here.pairs[host]) * self.shape.expert_params, weights)

    def exchange(self, layer: int, ready: dict[int, int], out_bytes: int, back_bytes: int, factor: float,
                 word: str) -> dict[int, list[int]]:  # fmt: skip
        """Tokens out to their experts' hosts after ``ready[src]``, the experts' compute once all a host
        receives is there, the results back: each host's incoming result ops (what its next step waits for,
        with its own expert compute)."""
        here, b, hosts = self.layers[layer], self.b, self.hosts
        inbound: dict[int, list[int]] = {d: [] for d in range(len(hosts))}
        for src, sets in here.sets.items():
            for dst_idx, count in sets:
                op = b.send(hosts[src], [hosts[i] for i in dst_idx], count * out_bytes, [ready[src]],
                            f"L{layer} {word} dispatch")  # fmt: skip
                for d in dst_idx:
                    inbound[d].append(op)
        results: dict[int, list[int]] = {h: [] for h in range(len(hosts))}
        for d in range(len(hosts)):
            expert = b.compute(hosts[d], self.experts_s(d, layer, factor), [ready[d], *inbound[d]],
                               f"L{layer} {word} experts")  # fmt: skip
            results[d].append(expert)
            for (server, src), count in sorted(here.served.items()):
                if server == d:
                    results[src].append(b.send(hosts[d], [hosts[src]], count * back_bytes, [expert],
                                               f"L{layer} {word} combine"))  # fmt: skip
        return results

    def forward(self, first: dict[int, list[int]]) -> dict[int, list[int]]:
        waits = first
        for layer in range(len(self.layers)):
            attention = {h: self.b.compute(name, self.attention_s(), waits[h], f"L{layer} attention")
                         for h, name in enumerate(self.hosts)}  # fmt: skip
            waits = self.exchange(layer, attention, FP8_TOKEN_BYTES, BF16_TOKEN_BYTES, 1.0, "forward")
        return waits

    def backward(self, start: dict[int, int]) -> dict[int, int]:
        ready = start
        for layer in reversed(range(len(self.layers))):
            waits = self.exchange(layer, ready, FP8_TOKEN_BYTES, BF16_TOKEN_BYTES, 2.0, "backward")
            ready = {h: self.b.compute(name, self.attention_s(2.0), waits[h], f"L{layer} attention backward")
                     for h, name in enumerate(self.hosts)}  # fmt: skip
        return ready


def _head_s(p: NodeParams, tokens: int, factor: float, memory: bool) -> float:
    shape = DEEPSEEK_V3
    return p.seconds(factor * 2 * tokens * shape.hidden * shape.vocab, shape.hidden * shape.vocab * memory)


def moe_step_ops(p: MoEStepParams) -> list[AnyOp]:
    b = _Builder()
    moe = _MoEPass(p, b, _layers(p, p.tokens_per_host), p.seq_len / 2, memory=False)
    waits = moe.forward({h: [] for h in range(len(p.hosts))})
    # The LM head and the loss, forward and backward (3x the forward FLOPs), then the backward pass.
    head = {h: b.compute(name, _head_s(p, p.tokens_per_host, 3.0, False), waits[h], "head and loss")
            for h, name in enumerate(p.hosts)}  # fmt: skip
    done = moe.backward(head)
    first, *rest = p.hosts
    b.send(first, rest, p.allreduce_bytes, list(done.values()), "gradient allreduce", ALLREDUCE_OP)
    return b.ops


def decode_step_ops(p: DecodeStepParams) -> list[AnyOp]:
    b = _Builder()
    moe = _MoEPass(p, b, _layers(p, p.tokens_per_host), p.context, memory=True)
    waits = moe.forward({h: [] for h in range(len(p.hosts))})
    for h, name in enumerate(p.hosts):
        b.compute(name, _head_s(p, p.tokens_per_host, 1.0, True), waits[h], "head and sampling")
    return b.ops


class PipelineStepParams(NodeParams):
    micro_batches: int = Field(8, ge=1, description="micro-batches per step")
    tokens_per_micro_batch: int = Field(16, ge=1, description="tokens in a micro-batch")
    layers: int = Field(4, ge=1, description="layers split evenly over the stages (DeepSeek-V3 has 61)")
    seq_len: int = Field(4096, ge=1, description="sequence length: attention covers half of it on average")
    schedule: Literal["1f1b", "gpipe"] = Field("1f1b", description="each stage's order of passes")
    activation_bytes_per_token: int = Field(
        BF16_TOKEN_BYTES, ge=1, description="bytes per token between stages (BF16 hidden state)",
        json_schema_extra=BYTES,
    )  # fmt: skip

    def stage_s(self, stages: int, factor: float) -> float:
        """One stage's compute of one micro-batch: its layers' attention and the token's activated experts
        (top-k routed and the shared one)."""
        s, tokens = DEEPSEEK_V3, self.tokens_per_micro_batch
        per_layer = s.attention_flops(tokens, self.seq_len / 2) + 2 * tokens * (s.top_k + 1) * s.expert_params
        layers = math.ceil(self.layers / stages)
        return self.seconds(factor * layers * per_layer, layers * (s.attention_params + s.expert_params))


def stage_order(stage: int, stages: int, micro_batches: int, schedule: str) -> list[tuple[str, int]]:
    """("F"|"B", micro-batch) in the order stage ``stage`` runs them: GPipe all forwards then all
    backwards; 1F1B ``stages - stage - 1`` warm-up forwards, then one forward and one backward in turn."""
    if schedule == "gpipe":
        return [("F", i) for i in range(micro_batches)] + [("B", i) for i in range(micro_batches)]
    warm = min(micro_batches, stages - stage - 1)
    order = [("F", i) for i in range(warm)]
    f, bw = warm, 0
    while bw < micro_batches:
        if f < micro_batches:
            order.append(("F", f))
            f += 1
        order.append(("B", bw))
        bw += 1
    return order


def pipeline_step_ops(p: PipelineStepParams) -> list[AnyOp]:
    """Each stage's computes in its schedule's order (each after the one before it on that stage), each
    forward after its micro-batch's activations arrived from the stage before, each backward after its
    gradients arrived from the stage after; the sends right after the compute that made them."""
    stages = len(p.hosts)
    orders = [stage_order(s, stages, p.micro_batches, p.schedule) for s in range(stages)]
    nbytes = p.tokens_per_micro_batch * p.activation_bytes_per_token
    b = _Builder()
    sent: dict[tuple[str, int, int], int] = {}  # (F|B, micro-batch, from stage) -> send op
    last: dict[int, int] = {}
    cursor = [0] * stages
    # Emit in an order where every input is above its user: repeatedly take each stage's next compute
    # whose input is already written.
    while any(cursor[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if cursor[s] >= len(orders[s]):
                continue
            kind, mb = orders[s][cursor[s]]
            src = s - 1 if kind == "F" else s + 1
            needs = (kind, mb, src) if 0 <= src < stages else None
            if needs is not None and needs not in sent:
                continue
            after = [op for op in (last.get(s), sent.get(needs) if needs else None) if op is not None]
            c = b.compute(p.hosts[s], p.stage_s(stages, 1.0 if kind == "F" else 2.0), after, f"{kind}{mb}")
            last[s], cursor[s], progressed = c, cursor[s] + 1, True
            nxt = s + 1 if kind == "F" else s - 1
            if 0 <= nxt < stages:
                word = "activations" if kind == "F" else "gradients"
                sent[(kind, mb, s)] = b.send(p.hosts[s], [p.hosts[nxt]], nbytes, [c], f"{word} mb{mb}")
        if not progressed:
            raise ValueError(f"schedule {p.schedule} deadlocks with {stages} stages")  # a bug, not input
    return b.ops


def _workload(generator: str, p: WorkloadParams, ops: list[AnyOp]) -> Workload:
    return Workload(make_header(generator, p, DEPENDENCIES_VERSION), iter(ops), {"ops": len(ops)})


def generate_moe_step(p: MoEStepParams) -> Workload:
    return _workload("moe-step", p, moe_step_ops(p))


def generate_decode_step(p: DecodeStepParams) -> Workload:
    return _workload("decode-step", p, decode_step_ops(p))


def generate_pipeline_step(p: PipelineStepParams) -> Workload:
    return _workload("pipeline-step", p, pipeline_step_ops(p))
