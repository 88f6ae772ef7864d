"""Model distribution: one source pushes a model image of ``size`` bytes to every other host.

Before training or when an inference fleet scales out, the same weights go to all hosts at once
(seed 001 §2, "Model distribution"; seed 000 cites 70 GB–1 TB images). The transfer is cut into
``chunk_bytes`` ops, one every ``chunk_interval`` seconds, each a multicast to all receivers: a unicast
fabric must send each chunk once per receiver.

There is no randomness here; ``seed`` is accepted (and recorded) so every generator takes the same options.
"""

from __future__ import annotations

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

GENERATOR = "model-dist"


class ModelDistParams(WorkloadParams):
    source: str | None = Field(
        None, description="sending host (default: the first host)", json_schema_extra={"metavar": "HOST"}
    )
    size: int = Field(1 << 30, ge=1, description="model bytes every receiver gets", json_schema_extra=BYTES)
    chunk_bytes: int = chunk_bytes_field()
    chunk_interval: float = chunk_interval_field()

    @model_validator(mode="after")
    def _source_known(self) -> ModelDistParams:
        if self.source is not None and self.source not in self.hosts:
            raise ValueError(f"source {self.source!r} is not one of the hosts ({', '.join(self.hosts)})")
        return self

    @property
    def sender(self) -> str:
        return self.source if self.source is not None else self.hosts[0]


def _ops(params: ModelDistParams) -> Iterator[TraceOp]:
    src = params.sender
    receivers = [h for h in params.hosts if h != src]
    kind = MULTICAST_OP if len(receivers) > 1 else UNICAST_OP
    for i, size in enumerate(chunk_sizes(params.size, params.chunk_bytes)):
        yield TraceOp(
            t=op_time(i, params.chunk_interval),
            op=kind,
            src=src,
            dst=receivers,
            bytes=size,
            tag=f"chunk{i}",
            id=i,
        )


def generate(params: ModelDistParams) -> Workload:
    return Workload(make_header(GENERATOR, params), _ops(params))
