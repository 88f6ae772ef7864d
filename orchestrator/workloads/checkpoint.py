"""Multi-replica checkpoint: every host writes its shard of ``shard_bytes`` to ``replicas`` storage hosts.

Training jobs periodically save model state to several storage nodes at once (seed 001 §2,
"Multi-replica checkpoint storage"); the replicas receive identical data, so each chunk is one
multicast op to the host's replica set (unicast when ``replicas`` is 1).

Without ``storage`` every host both writes and stores (GPU-local NVMe, the common case); with
``storage`` those hosts are dedicated storage nodes and only the other hosts write shards.

Replica choice is deterministic and never the writer itself. Without ``storage`` the hosts are put in a
ring by a seeded permutation and each takes the next ``replicas`` hosts after itself, so every host
stores exactly ``replicas`` shards and the seed changes who pairs with whom. With ``storage`` (in the
same seeded ring order) writer number ``w`` takes ``replicas`` consecutive storage hosts from position
``w × replicas``, spreading shards round-robin.

All hosts checkpoint together: chunk ``i`` of every shard is issued at ``i × chunk_interval``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from pydantic import Field, model_validator

from orchestrator.workloads import (
    BYTES,
    Workload,
    WorkloadParams,
    chunk_bytes_field,
    chunk_interval_field,
    chunk_sizes,
    make_header,
    op_time,
)
from orchestrator.workloads.trace import MULTICAST_OP, UNICAST_OP, TraceOp

GENERATOR = "checkpoint"


class CheckpointParams(WorkloadParams):
    shard_bytes: int = Field(
        256 << 20, ge=1, description="checkpoint bytes each host writes", json_schema_extra=BYTES
    )
    replicas: int = Field(
        2, ge=1, description="storage hosts receiving each shard (k)", json_schema_extra={"metavar": "K"}
    )
    storage: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="dedicated storage hosts; default: every host writes and stores",
        json_schema_extra={"metavar": "H1,H2,..."},
    )
    chunk_bytes: int = chunk_bytes_field()
    chunk_interval: float = chunk_interval_field()

    @model_validator(mode="after")
    def _pool_large_enough(self) -> CheckpointParams:
        if self.storage is None:
            available = len(self.hosts) - 1
        else:
            unknown = [h for h in self.storage if h not in self.hosts]
            if unknown:
                raise ValueError(
                    f"storage host {unknown[0]!r} is not one of the hosts ({', '.join(self.hosts)})"
                )
            if len(set(self.storage)) != len(self.storage):
                raise ValueError("storage lists a host twice")
            if not self.writers:
                raise ValueError("every host is a storage host, so nobody writes a shard; leave some out")
            available = len(self.storage)
        if self.replicas > available:
            raise ValueError(
                f"replicas ({self.replicas}) exceeds the {available} storage hosts available to a writer "
                "(a host never stores its own shard)"
            )
        return self

    @property
    def writers(self) -> tuple[str, ...]:
        if self.storage is None:
            return self.hosts
        return tuple(h for h in self.hosts if h not in self.storage)


def replica_sets(params: CheckpointParams) -> dict[str, list[str]]:
    """Writer → its storage hosts, in ring order."""
    ring = list(params.storage if params.storage is not None else params.hosts)
    # random.Random(int).shuffle is reproducible across Python versions, unlike numpy's stream guarantees.
    random.Random(params.seed).shuffle(ring)
    out: dict[str, list[str]] = {}
    for w, host in enumerate(params.writers):
        start = ring.index(host) + 1 if params.storage is None else w * params.replicas
        out[host] = [h for h in (ring[(start + j) % len(ring)] for j in range(len(ring))) if h != host][
            : params.replicas
        ]
    return out


def _ops(params: CheckpointParams) -> Iterator[TraceOp]:
    sets = replica_sets(params)
    kind = MULTICAST_OP if params.replicas > 1 else UNICAST_OP
    order = {h: i for i, h in enumerate(params.hosts)}
    next_id = 0
    for i, size in enumerate(chunk_sizes(params.shard_bytes, params.chunk_bytes)):
        for src in params.writers:
            yield TraceOp(
                t=op_time(i, params.chunk_interval),
                op=kind,
                src=src,
                dst=sorted(sets[src], key=order.__getitem__),
                bytes=size,
                tag=f"chunk{i}",
                id=next_id,
            )
            next_id += 1


def generate(params: CheckpointParams) -> Workload:
    return Workload(make_header(GENERATOR, params), _ops(params))
