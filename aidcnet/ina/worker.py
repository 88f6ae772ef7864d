"""The worker's side of an AllReduce, as pure logic: chunking, the send window, retransmit on timeout,
result assembly (SwitchML/ATP style), and the ring baseline's per-chunk rules. No sockets, no clock:
callers pass ``now``; the agent (``aidcnet/agent/ina/worker.py``) does the I/O.

Window rule (why a slot is never reused under a slow worker): a worker sends chunk ``c`` only while
``c < lowest chunk without a result + window``. Every chunk below the slowest worker's lowest missing
result is finished and needed by nobody, and the chunks anyone can have sent span fewer than
``2 * window`` numbers, so with ``window <= slot_budget // 2`` a switch that reuses its oldest finished
slot never reuses one a worker may still retransmit into (docs/allreduce.md).

Retransmission (why it adapts): on a shaped link the round trip includes the queue, which may be far
longer than any fixed timer; a fixed timer then resends the whole window every period and the
duplicates lengthen the queue further (issue 12). Both senders here, :class:`SendWindow` (INA and the
parameter server) and :class:`ReliableSender` (the ring), keep their outstanding items in an
:class:`aidcnet.rto.InFlight`: an RFC 6298 timer (RTO from the round trip of an item's first send to its
result or ACK, never from a resent item, starting at the caller's ``timeout``; restarted by every new
answer; on expiry only the oldest item is resent and the RTO doubles) and loss detection by send order
(RFC 8985's RACK: an item older than a round trip and a quarter, sent before one already answered, is
resent at once). A queue's delay thus costs no duplicates, and a loss about one round trip.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass
from typing import Final

import numpy as np

from aidcnet.ina import fixedpoint
from aidcnet.ina.header import DType, InaFlags, InaHeader, Op, payload_from_array
from aidcnet.rto import InFlight, RtoEstimator

# 2048 four-octet elements: an 8 KiB payload that still fits a 9500-octet link MTU after the BIER
# encapsulation of the result (outer IPv4/UDP, MPLS, RFC 8296 header with up to a 1024-bit BitString,
# inner IPv4/UDP, INA header with the P-BM).
DEFAULT_CHUNK_ELEMENTS: Final = 2048
# The initial RTO, before the first round trip is measured: RFC 6298 §2.1's 1 s. Shorter fires before the
# first result on a shaped link whose queue is already full (a ring rank's ACKs wait behind its
# neighbour's window: 0.5 s at 4 Mbit/s), and each such timeout is a duplicate.
DEFAULT_TIMEOUT_S: Final = 1.0
# RTO bounds in wall time. The floor stays above the agent's scheduling jitter on a shared 2-core host
# (an unshaped round trip is ~1 ms, a Python agent may be off the CPU for tens of ms); the ceiling is
# RFC 6298 §2.5's lowest allowed maximum.
DEFAULT_MIN_RTO_S: Final = 0.05
DEFAULT_MAX_RTO_S: Final = 60.0
# G in RTO = SRTT + max(G, 4 RTTVAR), for the agent. RFC 6298's G is the timer's granularity; ours is an
# asyncio callback on a shared 2-core host, late by tens of ms at times, and a window answers 32 samples
# per round trip that agree closely (all waited behind the same queue), so RTTVAR collapses and the RTO
# sits a tick above SRTT; the next swing of the queue by a few chunks then fires it spuriously (measured:
# one ring rank in two on a 4 Mbit/s veth). Linux keeps 200 ms under the variance term (TCP_RTO_MIN)
# for the same reasons; 100 ms here, so a real loss still costs about one round trip plus 0.1 s.
DEFAULT_RTO_MARGIN_S: Final = 0.1

NP_DTYPES: Final = {DType.INT32: np.int32, DType.FLOAT32: np.float32, DType.FIXED32: np.float32}
_REDUCE: Final = {Op.SUM: np.add, Op.MIN: np.minimum, Op.MAX: np.maximum, Op.PROD: np.multiply}


def worker_array(seed: int, worker: int, elements: int, dtype: DType) -> np.ndarray:
    """The deterministic test array of worker ``worker`` (its BFR-id): full-range int32 (so sums wrap)
    or floats in [-1, 1). Drivers recompute every worker's array to know the exact expected result."""
    rng = np.random.default_rng([seed, worker])
    if dtype is DType.INT32:
        return rng.integers(-(2**31), 2**31, elements, dtype=np.int64).astype(np.int32)
    return rng.uniform(-1.0, 1.0, elements).astype(np.float32)


def reference(arrays: list[np.ndarray], op: Op) -> np.ndarray:
    """numpy's reduction of the workers' arrays: int32 wraps modulo 2**32, as the switch ALU does."""
    out = arrays[0].copy()
    for a in arrays[1:]:
        _REDUCE[op](out, a, out=out)
    return out


# worker_array's floats lie in [-1, 1): the bound every worker of a fixed32 job shares, so all of them
# pick the same Scale without exchanging their maxima first (SwitchML's alternative).
WORKER_ARRAY_MAX_ABS: Final = 1.0
U32: Final = 2.0**-24  # unit roundoff of float32 (round to nearest)
U64: Final = 2.0**-53  # unit roundoff of float64, for numpy's float64 reference


def job_fixed_point_scale(n_workers: int) -> int:
    """The fixed32 Scale of a job of ``n_workers`` whose arrays come from :func:`worker_array`."""
    return fixedpoint.choose_fixed_point_scale(WORKER_ARRAY_MAX_ABS, n_workers)


def _gamma(k: int, u: float) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k roundings in any order."""
    return k * u / (1 - k * u)


def exact_result(arrays: list[np.ndarray], op: Op, dtype: DType, scale: int = 0) -> np.ndarray | None:
    """The bit pattern every worker must end with, when the arithmetic makes it order-independent:
    int32 (wrapping), fixed32 (int32 arithmetic on ``rint(x * 2**scale)``, converted back), and
    float32 min/max. None for float32 sum and prod, whose rounding depends on the arrival order."""
    if dtype is DType.INT32:
        return reference(arrays, op)
    if dtype is DType.FIXED32:
        fixed = reference([fixedpoint.to_fixed(a, scale) for a in arrays], op)
        return fixedpoint.from_fixed(fixed, scale)
    if op in (Op.MIN, Op.MAX):
        return reference(arrays, op)
    return None


def float_tolerance(
    arrays: list[np.ndarray], result: np.ndarray, op: Op, dtype: DType, scale: int = 0
) -> np.ndarray:
    """Per-element bound on ``|result - numpy's float64 reduction of arrays|`` for a float job.

    * fixed32 sum (fixedpoint.error_bound): ``n 2^-(s+1) + 2^-24 |r|``; min/max: ``2^-(s+1) + 2^-24 |r|``
      (one rint, one conversion back). Valid while nothing saturates: |x| * 2**s <= 2**31 - 1.
    * float32 sum, any summation tree (the switches add in arrival order): each x_i passes through
      at most n - 1 roundings, so ``|r - sum| <= gamma_(n-1) sum |x_i|`` with
      ``gamma_k = k u / (1 - k u)``, u = 2^-24 (Higham, Accuracy and Stability, eq. 4.4).
      Float additions never underflow inexactly, so no absolute term is needed.
    * float32 min/max: 0 (they round nothing).

    numpy's reference is itself a float64 sum of the inputs: its own error,
    ``gamma_(n-1)(2^-53) sum |x_i|``, is added so the bound holds against it and not only against the
    exact sum. float32 prod has no bound here (raises ValueError): products of large or tiny values
    underflow or overflow in ways a per-element bound does not capture simply.
    """
    n = len(arrays)
    wide = np.stack([np.asarray(a, dtype=np.float64) for a in arrays])
    r = np.abs(np.asarray(result, dtype=np.float64))
    if op in (Op.MIN, Op.MAX):
        if dtype is DType.FIXED32:
            return math.ldexp(1.0, -(scale + 1)) + U32 * r
        return np.zeros_like(r)
    if op is not Op.SUM:
        raise ValueError(f"no tolerance for {dtype.name.lower()} {op.name.lower()}: only sum, min and max")
    abs_sum = np.abs(wide).sum(axis=0)
    ref_error = _gamma(n - 1, U64) * abs_sum
    if dtype is DType.FIXED32:
        return np.asarray(fixedpoint.error_bound(n, scale, r)) + ref_error
    return _gamma(n - 1, U32) * abs_sum + ref_error


def out_of_tolerance(
    arrays: list[np.ndarray], result: np.ndarray, op: Op, dtype: DType, scale: int = 0
) -> tuple[np.ndarray, float]:
    """Indices where ``result`` strays from numpy's float64 reduction beyond :func:`float_tolerance`,
    and the largest error seen (for the report). Wrong lengths or NaN count as everywhere wrong."""
    ref = np.stack([np.asarray(a, dtype=np.float64) for a in arrays])
    ref = ref.sum(axis=0) if op is Op.SUM else (ref.min(axis=0) if op is Op.MIN else ref.max(axis=0))
    got = np.asarray(result, dtype=np.float64)
    if got.shape != ref.shape:
        return np.arange(len(ref)), math.inf
    err = np.abs(got - ref)
    bad = np.flatnonzero(~(err <= float_tolerance(arrays, result, op, dtype, scale)))  # NaN is bad too
    return bad, float(np.nanmax(err)) if len(err) and not np.isnan(err).all() else math.inf


def digest(values: np.ndarray) -> str:
    """sha256 of the array as big-endian elements: equal digests mean bit-exact equal results."""
    big = np.ascontiguousarray(values).astype(values.dtype.newbyteorder(">"))
    return hashlib.sha256(big.tobytes()).hexdigest()


def chunk_count(elements: int, per_chunk: int) -> int:
    return max(1, -(-elements // per_chunk))


class SendWindow:
    """Which chunks to send now: new ones inside the window, and those :class:`InFlight` finds lost or
    overdue (module docstring). A chunk is outstanding from its first send until :meth:`done`."""

    def __init__(
        self,
        chunks: int,
        window: int,
        timeout: float,
        *,
        min_rto: float = DEFAULT_MIN_RTO_S,
        max_rto: float = DEFAULT_MAX_RTO_S,
        granularity: float = 0.0,
    ) -> None:
        self.chunks, self.window = chunks, window
        rto = RtoEstimator(timeout, min(min_rto, timeout), max(max_rto, timeout), granularity)
        self.flight: InFlight[int] = InFlight(rto)
        self.lowest = 0  # lowest chunk without a result
        self.next_new = 0
        self.finished: set[int] = set()

    @property
    def rto(self) -> RtoEstimator:
        return self.flight.rto

    @property
    def retransmits(self) -> int:
        return self.flight.retransmits

    @property
    def complete(self) -> bool:
        return len(self.finished) == self.chunks

    def next_deadline(self) -> float | None:
        return self.flight.next_deadline()

    def due(self, now: float) -> list[tuple[int, bool]]:
        """``(chunk, retransmit)`` pairs to send at ``now``, marking them sent."""
        out = [(chunk, True) for chunk in self.flight.due(now)]
        while self.next_new < self.chunks and self.next_new < self.lowest + self.window:
            self.flight.sent(self.next_new, now)
            out.append((self.next_new, False))
            self.next_new += 1
        return out

    def done(self, chunk: int, now: float) -> bool:
        """Record a result at ``now``; False for a chunk out of range or already finished (a duplicate)."""
        if not 0 <= chunk < self.chunks or chunk in self.finished:
            return False
        self.finished.add(chunk)
        self.flight.answered(chunk, now)
        while self.lowest in self.finished:
            self.lowest += 1
        return True


class AllreduceJob:
    """One worker's AllReduce of ``values`` over INA (or a parameter server speaking the same header).

    ``packet(chunk, retransmit)`` builds what to send; ``on_result(hdr, now)`` takes a result packet
    and returns True when it was new. ``timeout`` is the initial RTO (module docstring). FIXED32 jobs
    convert with a shared ``scale`` (every worker must use the same one:
    :func:`aidcnet.ina.fixedpoint.choose_fixed_point_scale` from a bound all workers know).
    """

    def __init__(
        self,
        values: np.ndarray,
        *,
        job_id: int,
        bfr_id: int,
        bsl: int,
        op: Op,
        dtype: DType,
        chunk_base: int = 0,
        per_chunk: int = DEFAULT_CHUNK_ELEMENTS,
        window: int = 32,
        timeout: float = DEFAULT_TIMEOUT_S,
        scale: int = 0,
        min_rto: float = DEFAULT_MIN_RTO_S,
        max_rto: float = DEFAULT_MAX_RTO_S,
        granularity: float = 0.0,
    ) -> None:
        from aidcnet.bier.bitstring import bfr_id_to_si_bit

        self.job_id, self.op, self.dtype, self.bsl = job_id, op, dtype, bsl
        self.si, bit = bfr_id_to_si_bit(bfr_id, bsl)
        self.pbm = 1 << (bit - 1)
        self.chunk_base, self.per_chunk, self.scale = chunk_base, per_chunk, scale
        self.elements = len(values)
        wire = fixedpoint.to_fixed(values, scale) if dtype is DType.FIXED32 else values
        self.wire = np.ascontiguousarray(wire).astype(wire.dtype.newbyteorder(">"))
        self.out = np.zeros(self.elements, dtype=NP_DTYPES[dtype])
        self.window = SendWindow(
            chunk_count(self.elements, per_chunk), window, timeout,
            min_rto=min_rto, max_rto=max_rto, granularity=granularity,
        )
        self.results = 0
        self.ignored = 0

    def _slice(self, chunk: int) -> slice:
        return slice(chunk * self.per_chunk, min(self.elements, (chunk + 1) * self.per_chunk))

    def packet(self, chunk: int, retransmit: bool) -> bytes:
        return InaHeader(
            job_id=self.job_id,
            chunk=self.chunk_base + chunk,
            op=self.op,
            dtype=self.dtype,
            bsl=self.bsl,
            si=self.si,
            pbm=self.pbm,
            scale=self.scale,
            flags=InaFlags.RETRANSMIT if retransmit else InaFlags.NONE,
            payload=memoryview(self.wire[self._slice(chunk)]).cast("B"),
        ).encode()

    def due(self, now: float) -> list[bytes]:
        return [self.packet(c, r) for c, r in self.window.due(now)]

    def on_result(self, hdr: InaHeader, now: float) -> bool:
        chunk = hdr.chunk - self.chunk_base
        where = self._slice(chunk) if 0 <= chunk < self.window.chunks else None
        if (
            where is None
            or hdr.job_id != self.job_id
            or not hdr.result
            or not hdr.pbm & self.pbm
            or hdr.element_count != where.stop - where.start
            or not self.window.done(chunk, now)
        ):
            self.ignored += 1
            return False
        values = hdr.payload_array()
        self.out[where] = fixedpoint.from_fixed(values, hdr.scale) if self.dtype is DType.FIXED32 else values
        self.results += 1
        return True

    @property
    def complete(self) -> bool:
        return self.window.complete


# ------------------------------------------------------------------------------------------- ring


@dataclass(frozen=True)
class RingStep:
    """What a ring worker does with a message: keep ``result`` (final values) and/or send ``send`` on."""

    send: InaHeader | None
    result: np.ndarray | None


class RingAllreduce:
    """Ring AllReduce (reduce-scatter then all-gather) pipelined per chunk, between ``n`` workers.

    Chunk ``k`` starts at rank ``k % n`` with that worker's values and P-BM = its bit; each rank adds
    its own values and passes it to the next rank until the P-BM holds every worker (reduce-scatter,
    n - 1 hops); the completing rank then passes the final values around with the S flag until every
    rank has them (all-gather, n - 1 more hops). Every rank sends 2 (n - 1) / n of the array, the
    classic ring cost. Duplicates (a retransmitted message already handled) are recognised by
    ``(chunk, S)`` and only re-acknowledged.
    """

    def __init__(
        self,
        values: np.ndarray,
        *,
        rank: int,
        ranks: list[int],
        job_id: int,
        bsl: int,
        op: Op,
        dtype: DType = DType.INT32,
        scale: int = 0,
        chunk_base: int = 0,
        per_chunk: int = DEFAULT_CHUNK_ELEMENTS,
    ) -> None:
        from aidcnet.bier.bitstring import bfr_id_to_si_bit

        self.dtype, self.scale = dtype, scale
        self.ranks = ranks  # BFR-ids in ring order
        self.n = len(ranks)
        self.rank = rank  # index into ranks
        self.job_id, self.bsl, self.op = job_id, bsl, op
        self.si = bfr_id_to_si_bit(ranks[0], bsl)[0]
        self.bits = [1 << (bfr_id_to_si_bit(r, bsl)[1] - 1) for r in ranks]
        self.all_bits = sum(self.bits)
        # fixed32 travels and adds as int32 (exactly as on an INA switch), float32 adds in float32.
        self.acc = np.float32 if dtype is DType.FLOAT32 else np.int32
        wire = fixedpoint.to_fixed(values, scale) if dtype is DType.FIXED32 else values
        self.values = np.ascontiguousarray(wire, dtype=self.acc)
        self.out = np.zeros(len(values), dtype=self.acc)
        self.per_chunk, self.chunk_base = per_chunk, chunk_base
        self.chunks = chunk_count(len(values), per_chunk)
        self.handled: set[tuple[int, bool]] = set()
        self.have = 0

    def _slice(self, chunk: int) -> slice:
        return slice(chunk * self.per_chunk, min(len(self.values), (chunk + 1) * self.per_chunk))

    def _msg(self, chunk: int, pbm: int, values: np.ndarray, result: bool) -> InaHeader:
        return InaHeader(
            job_id=self.job_id, chunk=self.chunk_base + chunk, op=self.op, dtype=self.dtype, bsl=self.bsl,
            si=self.si, pbm=pbm, scale=self.scale, flags=InaFlags.RESULT if result else InaFlags.NONE,
            payload=payload_from_array(values, self.dtype),
        )

    def originate(self) -> list[InaHeader]:
        """This rank's own chunks (those starting here), to send to the next rank."""
        if self.n == 1:
            self.out[:] = self.values
            self.have = self.chunks
            return []
        return [
            self._msg(k, self.bits[self.rank], self.values[self._slice(k)], False)
            for k in range(self.rank, self.chunks, self.n)
        ]

    @property
    def complete(self) -> bool:
        return self.have == self.chunks

    @property
    def result(self) -> np.ndarray:
        """The reduced array in the job's element type (fixed32 converted back to float32)."""
        return fixedpoint.from_fixed(self.out, self.scale) if self.dtype is DType.FIXED32 else self.out

    def on_message(self, hdr: InaHeader) -> RingStep | None:
        """None for a duplicate or a message that is not ours (acknowledge it anyway)."""
        chunk = hdr.chunk - self.chunk_base
        if hdr.job_id != self.job_id or not 0 <= chunk < self.chunks:
            return None
        if hdr.dtype is not self.dtype or hdr.scale != self.scale:
            return None  # a ring of another element type or Scale: adding it would be garbage
        key = (chunk, hdr.result)
        if key in self.handled:
            return None
        where = self._slice(chunk)
        if hdr.element_count != where.stop - where.start:
            return None
        self.handled.add(key)
        values = hdr.payload_array()
        completer = (chunk % self.n - 1) % self.n
        nxt = (self.rank + 1) % self.n
        if hdr.result:
            self.out[where] = values
            self.have += 1
            send = self._msg(chunk, self.all_bits, values, True) if nxt != completer else None
            return RingStep(send, self.out[where])
        acc = values.astype(self.acc)
        _REDUCE[self.op](acc, self.values[where], out=acc)
        pbm = hdr.pbm | self.bits[self.rank]
        if pbm == self.all_bits:
            self.out[where] = acc
            self.have += 1
            self.handled.add((chunk, True))
            return RingStep(self._msg(chunk, pbm, acc, True), acc)
        return RingStep(self._msg(chunk, pbm, acc, False), None)


class ReliableSender:
    """Per-peer reliable delivery for the ring: each message waits for an ACK (the same header with no
    elements), at most ``window`` are unacknowledged at a time, and :class:`InFlight` says which to send
    again when (module docstring)."""

    def __init__(
        self,
        window: int,
        timeout: float,
        *,
        min_rto: float = DEFAULT_MIN_RTO_S,
        max_rto: float = DEFAULT_MAX_RTO_S,
        granularity: float = 0.0,
    ) -> None:
        self.window = window
        rto = RtoEstimator(timeout, min(min_rto, timeout), max(max_rto, timeout), granularity)
        self.flight: InFlight[tuple[int, bool]] = InFlight(rto)
        self.queue: deque[tuple[tuple[int, bool], bytes]] = deque()
        self.unacked: dict[tuple[int, bool], bytes] = {}

    @property
    def rto(self) -> RtoEstimator:
        return self.flight.rto

    @property
    def retransmits(self) -> int:
        return self.flight.retransmits

    def push(self, key: tuple[int, bool], data: bytes) -> None:
        self.queue.append((key, data))

    def ack(self, key: tuple[int, bool], now: float) -> None:
        if self.flight.answered(key, now):  # else a duplicate ACK (of a resent message): nothing new
            del self.unacked[key]

    @property
    def idle(self) -> bool:
        return not self.queue and not self.unacked

    def next_deadline(self) -> float | None:
        return self.flight.next_deadline()

    def due(self, now: float) -> list[bytes]:
        out = [self.unacked[key] for key in self.flight.due(now)]
        while self.queue and len(self.unacked) < self.window:
            key, data = self.queue.popleft()
            self.unacked[key] = data
            self.flight.sent(key, now)
            out.append(data)
        return out


def ack_for(hdr: InaHeader) -> bytes:
    """The acknowledgement of a ring message: its header fields with no elements."""
    return InaHeader(
        job_id=hdr.job_id, chunk=hdr.chunk, op=hdr.op, dtype=hdr.dtype, bsl=hdr.bsl, si=hdr.si,
        pbm=hdr.pbm, flags=hdr.flags,
    ).encode()
