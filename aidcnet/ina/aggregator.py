"""Per-(job, chunk) aggregation slots for an INA switch, driven by the VAT rules of :mod:`aidcnet.ina.vat`.

One :class:`Aggregator` serves every job (tenant) configured on a switch.  Each job has its own budget
of slots, like the register pools of SwitchML/ATP: a slot holds the running aggregate of one chunk
until its merged P-BMs equal the A-BM, then keeps the finished result so that a late retransmit can
be answered (``resend-result``) until the slot is reused for a newer chunk.  When every slot of a job
holds an unfinished chunk, a packet for yet another chunk is dropped (``slot-budget-exceeded``) and
the worker's retransmit timer recovers it, so one tenant can never take memory from another.

Arithmetic: int32 and FIXED32 sums and products wrap modulo 2**32 (two's complement, as a switch
ALU does); FLOAT32 uses numpy float32 directly, whose sums depend on arrival order (use FIXED32 when
bit-exact reproducibility matters, see :mod:`aidcnet.ina.fixedpoint`).

Every packet gets exactly one :class:`~aidcnet.ina.vat.Decision` and bumps ``counters[reason]``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from aidcnet.bier.bitstring import BSL_CODES, bitstrings_from_ids
from aidcnet.ina.header import (
    NATIVE_DTYPES,
    DType,
    InaFlags,
    InaHeader,
    Op,
    payload_from_array,
)
from aidcnet.ina.vat import RESEND_RESULT, Action, Decision, VatNode, step

# Drop reasons the aggregator adds to those of the VAT rules.
SLOT_BUDGET_EXCEEDED: Final = "slot-budget-exceeded"
STALE_CHUNK: Final = "stale-chunk"
UNEXPECTED_RESULT: Final = "unexpected-result"
OP_MISMATCH: Final = "op-mismatch"
DTYPE_MISMATCH: Final = "dtype-mismatch"
BSL_MISMATCH: Final = "bsl-mismatch"
COUNT_MISMATCH: Final = "count-mismatch"
SCALE_MISMATCH: Final = "scale-mismatch"
# Not a drop: this switch has no VAT node for the job, so it is only a transit hop toward the root.
TRANSIT: Final = "transit"

_UFUNCS: Final = {Op.SUM: np.add, Op.MIN: np.minimum, Op.MAX: np.maximum, Op.PROD: np.multiply}


def _enum_by_name(enum: Any, value: Any) -> Any:
    # YAML job files say "sum"/"fixed32"; the wire and Python callers use the enum or its code.
    if isinstance(value, str):
        try:
            return enum[value.upper()]
        except KeyError:
            raise ValueError(f"must be one of {[m.name.lower() for m in enum]}, got {value!r}") from None
    return value


class JobConfig(BaseModel):
    """One job's INA configuration on one switch.  Field order matters: validators read earlier fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: int = Field(ge=0, le=0xFFFFFFFF)
    bsl: int = 256
    abm: tuple[int, ...] = Field(min_length=1, description="A-BM as BFR-ids of the workers below this node")
    op: Op = Op.SUM
    dtype: DType = DType.INT32
    root: bool = False
    parent: str | None = Field(default=None, validate_default=True)
    slot_budget: int = Field(default=64, ge=1, le=1 << 20)

    @field_validator("bsl")
    @classmethod
    def _bsl_known(cls, v: int) -> int:
        if v not in BSL_CODES:
            raise ValueError(f"BSL must be one of {sorted(BSL_CODES)} (RFC 8296), got {v}")
        return v

    @field_validator("abm")
    @classmethod
    def _abm_one_si(cls, v: tuple[int, ...], info: ValidationInfo) -> tuple[int, ...]:
        bad = [i for i in v if not 1 <= i <= 0xFFFF]
        if bad:
            raise ValueError(f"BFR-ids must be 1..65535, got {bad}")
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate BFR-ids in {list(v)}")
        bsl = info.data.get("bsl")
        if bsl is not None:
            sis = sorted(bitstrings_from_ids(v, bsl))
            if len(sis) > 1:
                # One INA packet carries one SI, so a job whose workers span SIs could never complete.
                raise ValueError(f"BFR-ids span SIs {sis} at BSL {bsl}; a job's workers must share one SI")
        return tuple(sorted(v))

    @field_validator("op", mode="before")
    @classmethod
    def _op_name(cls, v: Any) -> Any:
        return _enum_by_name(Op, v)

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_name(cls, v: Any) -> Any:
        return _enum_by_name(DType, v)

    @field_validator("dtype")
    @classmethod
    def _dtype_fits_op(cls, v: DType, info: ValidationInfo) -> DType:
        if v is DType.FIXED32 and info.data.get("op") is Op.PROD:
            raise ValueError("fixed32 cannot carry prod: the scale of a product is the sum of the scales")
        return v

    @field_validator("parent")
    @classmethod
    def _parent_iff_not_root(cls, v: str | None, info: ValidationInfo) -> str | None:
        root = info.data.get("root", False)
        if root and v is not None:
            raise ValueError("the root sends its result by BIER and has no parent")
        if not root and not v:
            raise ValueError("a non-root VAT node needs a parent (address or node name)")
        return v

    @property
    def si(self) -> int:
        (si,) = bitstrings_from_ids(self.abm, self.bsl)
        return si

    @property
    def abm_bits(self) -> int:
        """The A-BM as a BitString int (bit 1 = least significant) within SI :attr:`si`."""
        return bitstrings_from_ids(self.abm, self.bsl)[self.si]

    def vat_node(self) -> VatNode:
        return VatNode(abm=self.abm_bits, si=self.si, bsl=self.bsl, root=self.root, parent=self.parent)


@dataclass(slots=True)
class _Slot:
    chunk: int
    merged: int = 0
    scale: int = 0
    count: int = -1
    acc: np.ndarray | None = None
    result: InaHeader | None = None


@dataclass(slots=True)
class _Job:
    cfg: JobConfig
    node: VatNode
    slots: dict[int, _Slot]
    retired: deque[int]
    retired_set: set[int]

    def retire(self, chunk: int) -> None:
        del self.slots[chunk]
        if len(self.retired) == self.retired.maxlen:
            self.retired_set.discard(self.retired[0])
        self.retired.append(chunk)
        self.retired_set.add(chunk)


class Aggregator:
    """INA aggregation state of one switch, for many jobs.  Not thread-safe: one per dataplane loop.

    ``retired_memory`` is how many reused chunk numbers per job are remembered, so that a retransmit
    arriving after its slot was reused is dropped (``stale-chunk``) instead of opening a slot that
    could never complete.
    """

    def __init__(self, jobs: Iterable[JobConfig] = (), *, retired_memory: int = 1024) -> None:
        self._jobs: dict[int, _Job] = {}
        self._retired_memory = retired_memory
        self.counters: Counter[str] = Counter()
        for cfg in jobs:
            self.add_job(cfg)

    def add_job(self, cfg: JobConfig) -> None:
        """Install or replace a job; replacing discards its slots (the VAT may have changed)."""
        self._jobs[cfg.job_id] = _Job(cfg, cfg.vat_node(), {}, deque(maxlen=self._retired_memory), set())

    def remove_job(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)

    def job(self, job_id: int) -> JobConfig | None:
        state = self._jobs.get(job_id)
        return state.cfg if state else None

    def slots_in_use(self, job_id: int) -> int:
        return len(self._jobs[job_id].slots)

    def result(self, job_id: int, chunk: int) -> InaHeader | None:
        """The finished packet of a chunk while its slot is still held, else None."""
        slot = self._jobs[job_id].slots.get(chunk)
        return slot.result if slot else None

    def release(self, job_id: int, chunk: int) -> None:
        """Free a slot now (the daemon's timeout for a chunk that will never complete)."""
        state = self._jobs[job_id]
        if chunk in state.slots:
            state.retire(chunk)

    def handle(self, hdr: InaHeader) -> Decision:
        decision = self._handle(hdr)
        self.counters[decision.reason] += 1
        return decision

    def _handle(self, hdr: InaHeader) -> Decision:
        if hdr.result:
            return Decision(Action.DROP, UNEXPECTED_RESULT)
        state = self._jobs.get(hdr.job_id)
        if state is None:
            return Decision(Action.FORWARD, TRANSIT)
        cfg = state.cfg
        if hdr.op != cfg.op:
            return Decision(Action.DROP, OP_MISMATCH)
        if hdr.dtype != cfg.dtype:
            return Decision(Action.DROP, DTYPE_MISMATCH)
        if hdr.bsl != cfg.bsl:
            return Decision(Action.DROP, BSL_MISMATCH)

        slot = state.slots.get(hdr.chunk)
        merged = slot.merged if slot else 0
        decision, new_merged = step(state.node, merged, hdr.pbm, hdr.si, hdr.retransmit)
        if decision.action in (Action.FORWARD, Action.DROP):
            return decision
        if decision.reason == RESEND_RESULT:
            # step() answers resend-result only for a complete slot, and a complete slot holds its packet.
            assert slot is not None and slot.result is not None
            again = dataclasses.replace(slot.result, flags=slot.result.flags | InaFlags.RETRANSMIT)
            return dataclasses.replace(decision, packet=again)

        if slot is None:
            if hdr.chunk in state.retired_set:
                return Decision(Action.DROP, STALE_CHUNK)
            slot = self._allocate(state, hdr.chunk)
            if slot is None:
                return Decision(Action.DROP, SLOT_BUDGET_EXCEEDED)
        elif hdr.element_count != slot.count:
            return Decision(Action.DROP, COUNT_MISMATCH)
        elif hdr.dtype is DType.FIXED32 and hdr.scale != slot.scale:
            return Decision(Action.DROP, SCALE_MISMATCH)

        values = hdr.payload_array()
        if slot.acc is None:
            slot.acc = values.astype(NATIVE_DTYPES[cfg.dtype])
            slot.count = hdr.element_count
            slot.scale = hdr.scale
        else:
            # numpy reads the big-endian view directly; only the accumulator is native.
            _UFUNCS[cfg.op](slot.acc, values, out=slot.acc)
        slot.merged = new_merged
        if decision.action is Action.ABSORB:
            return decision

        slot.result = InaHeader(
            job_id=hdr.job_id,
            chunk=hdr.chunk,
            op=cfg.op,
            dtype=cfg.dtype,
            bsl=cfg.bsl,
            si=state.node.si,
            pbm=state.node.abm,
            scale=slot.scale,
            flags=InaFlags.RESULT if cfg.root else InaFlags.NONE,
            payload=payload_from_array(slot.acc, cfg.dtype),
        )
        # The result owns a big-endian copy; the native accumulator is no longer needed.
        slot.acc = None
        return dataclasses.replace(decision, packet=slot.result)

    def _allocate(self, state: _Job, chunk: int) -> _Slot | None:
        if len(state.slots) >= state.cfg.slot_budget:
            done = [c for c, s in state.slots.items() if s.result is not None]
            if not done:
                return None
            # Reuse the oldest finished chunk: the one least likely to still see retransmits.
            state.retire(min(done))
        slot = _Slot(chunk)
        state.slots[chunk] = slot
        return slot
