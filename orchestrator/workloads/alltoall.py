"""All-to-all: every host sends ``size`` bytes to every other host.

By default each (source, receiver) pair carries different data (expert-parallel all-to-all), so the ops
are unicast; receivers are visited in ring order from the source (``src+1, src+2, ...``), the usual
pairwise schedule that spreads load instead of having every source hit host 0 first. With
``identical`` the data a source sends is the same for every receiver (all-gather style), which is one
multicast op per source and chunk.

Chunk ``i`` of every flow is issued at ``i × chunk_interval``. There is no randomness; ``seed`` is
accepted (and recorded) so every generator takes the same options.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

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

GENERATOR = "all-to-all"


class AllToAllParams(WorkloadParams):
    size: int = Field(
        16 << 20, ge=1, description="bytes each host sends to each other host", json_schema_extra=BYTES
    )
    chunk_bytes: int = chunk_bytes_field()
    chunk_interval: float = chunk_interval_field()
    identical: bool = Field(False, description="same data to every receiver: one multicast op per source")


def _ops(params: AllToAllParams) -> Iterator[TraceOp]:
    hosts = params.hosts
    n = len(hosts)
    next_id = 0
    for i, size in enumerate(chunk_sizes(params.size, params.chunk_bytes)):
        t = op_time(i, params.chunk_interval)
        for s, src in enumerate(hosts):
            ring = [hosts[(s + k) % n] for k in range(1, n)]
            if params.identical:
                kind = MULTICAST_OP if len(ring) > 1 else UNICAST_OP
                yield TraceOp(t=t, op=kind, src=src, dst=ring, bytes=size, tag=f"chunk{i}", id=next_id)
                next_id += 1
                continue
            for dst in ring:
                yield TraceOp(t=t, op=UNICAST_OP, src=src, dst=[dst], bytes=size, tag=f"chunk{i}", id=next_id)
                next_id += 1


def generate(params: AllToAllParams) -> Workload:
    return Workload(make_header(GENERATOR, params), _ops(params))
