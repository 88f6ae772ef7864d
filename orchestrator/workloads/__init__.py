"""Seeded, deterministic generators of aidclab traces.

Format: ``orchestrator.workloads.trace``, ``docs/trace-format.md``.

Each generator module (``moe``, ``model_distribution``, ``checkpoint``, ``alltoall``) defines a pydantic
``Params`` model and a pure ``generate(params) -> Workload``: no I/O, no clock, no global random state,
so the same parameters always give a byte-identical trace; ``training`` holds the three closed-loop steps
(version-2 traces), each with its ``Params`` and ``generate_*``. ``cli`` is the only module that touches
files.

Submodules are not imported here, so that importing the package does not pull in numpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.workloads.trace import (
    FORMAT_NAME,
    TRACE_VERSION,
    TraceHeader,
    TraceOp,
    TraceSummary,
    write_trace,
)

__all__ = [
    "GENERATORS",
    "Workload",
    "WorkloadParams",
    "chunk_sizes",
    "make_header",
    "op_time",
]

# Generator name (as written in trace headers) → module under orchestrator.workloads.
GENERATORS: dict[str, str] = {
    "moe": "moe",
    "model-dist": "model_distribution",
    "checkpoint": "checkpoint",
    "all-to-all": "alltoall",
    "moe-step": "training",
    "pipeline-step": "training",
    "decode-step": "training",
}


# Field metadata the workload command reads (orchestrator/cli/workload.py): sizes take units (64KiB), and
# a metavar names what an option's value is.
BYTES: dict[str, Any] = {"unit": "bytes", "metavar": "SIZE"}
SECONDS: dict[str, Any] = {"metavar": "SECONDS"}


def chunk_bytes_field() -> Any:
    return Field(1 << 20, ge=1, description="bytes per op", json_schema_extra=BYTES)


def chunk_interval_field() -> Any:
    # 0: each chunk is issued at once and leaves as fast as the source's link takes it (the senders are
    # back-pressured); a 400G link carries a 256 KiB chunk in about 5 µs.
    return Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="fabric seconds between chunks (0: back to back, as fast as the link takes them)",
        json_schema_extra=SECONDS,
    )


class WorkloadParams(BaseModel):
    """Parameters every generator takes. Field names equal the CLI option names (``_`` → ``-``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: tuple[str, ...] = Field(min_length=2)
    seed: int = Field(0, ge=0)

    @field_validator("hosts")
    @classmethod
    def _hosts_valid(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # The header model owns the host-name rules; reuse them rather than restate them.
        TraceHeader(format=FORMAT_NAME, version=TRACE_VERSION, generator="-", hosts=list(v))
        return v

    def trace_params(self) -> dict[str, Any]:
        """What goes into the header's ``params``: everything but the hosts, which have their own field."""
        return self.model_dump(mode="json", exclude={"hosts"})


@dataclass
class Workload:
    """A generated trace: header now, ops as a lazy iterable (traces can be far larger than memory).

    ``stats`` is filled in by generators that measure something the trace cannot show (MoE expert
    loads); it is complete only once ``ops`` has been consumed.
    """

    header: TraceHeader
    ops: Iterable[TraceOp]
    stats: dict[str, Any] = field(default_factory=dict)

    def write(self, sink: Any) -> TraceSummary:
        return write_trace(sink, self.header, self.ops)


def make_header(generator: str, params: WorkloadParams, version: int = TRACE_VERSION) -> TraceHeader:
    """A generator's header; ``version`` 2 for a trace with dependencies (docs/trace-format.md)."""
    return TraceHeader(
        format=FORMAT_NAME,
        version=version,
        generator=generator,
        params=params.trace_params(),
        hosts=list(params.hosts),
    )


def chunk_sizes(total: int, chunk: int) -> Iterator[int]:
    """Full chunks then the remainder, so the bytes add up to ``total`` exactly."""
    full, rest = divmod(total, chunk)
    for _ in range(full):
        yield chunk
    if rest:
        yield rest


def op_time(index: int, interval: float) -> float:
    # Rounded to the nanosecond so that i*interval accumulates no float noise into the file
    # (0.30000000000000004 would be legal but ugly, and would differ from a sum-based schedule).
    return round(index * interval, 9)
