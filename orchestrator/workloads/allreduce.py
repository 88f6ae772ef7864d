"""AllReduce steps: every ``interval`` seconds the workers reduce a ``size``-byte gradient array.

Data-parallel training ends every step with an AllReduce of the gradients over the workers of a job
(seed 002 §1). Each op names the participants (``src`` the first worker, ``dst`` the rest) and the
bytes each contributes; ``aidclab replay --mode ina|ring|ps`` runs it as one AllReduce of ``size / 4``
int32 elements over the lab's INA job with exactly these workers.

There is no randomness here; ``seed`` is accepted (and recorded) so every generator takes the same options.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field, field_validator

from orchestrator.workloads import BYTES, SECONDS, Workload, WorkloadParams, make_header, op_time
from orchestrator.workloads.trace import ALLREDUCE_OP, TraceOp

GENERATOR = "allreduce"


class AllreduceParams(WorkloadParams):
    size: int = Field(
        1 << 20,
        ge=4,
        description="bytes each worker contributes (int32 elements x 4)",
        json_schema_extra=BYTES,
    )
    steps: int = Field(1, ge=1, description="AllReduce ops, one per training step")
    interval: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="fabric seconds between steps", json_schema_extra=SECONDS
    )

    @field_validator("size")
    @classmethod
    def _whole_elements(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"{v} is not a whole number of 4-byte elements")
        return v


def _ops(params: AllreduceParams) -> Iterator[TraceOp]:
    first, *rest = params.hosts
    for i in range(params.steps):
        yield TraceOp(
            t=op_time(i, params.interval), op=ALLREDUCE_OP, src=first, dst=rest, bytes=params.size,
            tag=f"step{i}", id=i,
        )  # fmt: skip


def generate(params: AllreduceParams) -> Workload:
    return Workload(make_header(GENERATOR, params), _ops(params))
