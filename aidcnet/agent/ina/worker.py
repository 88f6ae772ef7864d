"""The GPU host's AllReduce service: ``allreduce(array, job)`` over INA, and the two baselines
(parameter server, ring) over plain UDP between the same hosts. The protocol logic is
:mod:`aidcnet.ina.worker` and :mod:`aidcnet.ina.aggregator`; this module owns sockets and timers.

* ``ina``: chunks go to the host's first hop toward the job's VAT root (UDP 4792); results come back
  by BIER (the host's BIER service hands them over, :meth:`on_bier_udp`).
* ``ps``: the same INA packets go straight to a parameter server host (the request's ``to``), which runs
  the very same aggregator as a VAT root on a server (the draft's §1 "PS") and answers every worker by
  unicast.
* ``ring``: reduce-scatter + all-gather between the workers on UDP 4793 (the request's ``addresses``),
  every message acknowledged (docs/allreduce.md).

All three retransmit on timeout, so a lost packet costs time, never a wrong or missing result. The
timeout is RFC 6298's (:mod:`aidcnet.rto`): the request's ``timeout_s`` is only the initial RTO, then it
follows the measured round trip; ``min_rto_s``/``max_rto_s`` bound it and ``rto_margin_s`` is its G.
Every socket pushes back (``IP_RECVERR``): a datagram a full local queue refuses waits in an
:class:`Outbox` and is sent again, never lost silently (docs/allreduce.md).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from aidcnet.agent.outbox import Outbox
from aidcnet.config import Ina, InaMember
from aidcnet.ina.aggregator import Aggregator, JobConfig
from aidcnet.ina.header import DType, InaDecodeError, InaHeader, Op
from aidcnet.ina.vat import Action
from aidcnet.ina.worker import (
    DEFAULT_CHUNK_ELEMENTS,
    DEFAULT_MAX_RTO_S,
    DEFAULT_MIN_RTO_S,
    DEFAULT_RTO_MARGIN_S,
    DEFAULT_TIMEOUT_S,
    AllreduceJob,
    ReliableSender,
    RingAllreduce,
    ack_for,
    digest,
    job_fixed_point_scale,
    worker_array,
)
from aidcnet.ipv4 import UdpDatagram
from aidcnet.rto import RtoEstimator
from aidcnet.udpio import (
    BatchIO,
    Datagram,
    drain_error_queue,
    enable_backpressure,
    set_socket_buffer,
    shaped_sndbuf,
)

log = logging.getLogger("aidcnet.ina.worker")

# An AllReduce's result, its retransmits, when it started (epoch s) and its timer's final state.
_Outcome = tuple[np.ndarray, int, float, RtoEstimator]
_BUF = 32 << 20
# An AllReduce's counter label (``allreduce.<label>``): the collective mode's name, as the host sends it.
COUNTER_LABEL = re.compile(r"[a-z][a-z0-9-]{0,31}")


def counter_label(request: Mapping[str, Any]) -> str:
    """The label an AllReduce ``request`` is counted under (``allreduce.<label>``: its ``mode``), once the
    request is known to say what runs. What runs comes from what the request carries, never from a mode's
    name (the host's mode class filled it in): ``addresses``, a ring of those ranks; ``to``, a tree whose
    root is that address (a parameter server); neither, the job's own aggregation tree."""
    if "addresses" in request and "to" in request:
        raise ValueError("an AllReduce is a ring (addresses) or a tree (to), not both")
    if "mode" not in request:
        raise ValueError("an AllReduce request names its mode, the label it is counted under")
    label = str(request["mode"])
    if not COUNTER_LABEL.fullmatch(label):
        raise ValueError(f"mode {label!r}: a counter label is a short lower-case name")
    return label


def _udp_socket(port: int, queue_bytes: int | None) -> tuple[socket.socket, BatchIO]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    set_socket_buffer(sock, socket.SO_RCVBUF, _BUF)
    # Shaped: the two sockets' memory below the smallest queue, so a full socket (EAGAIN) stops them before
    # the queue drops anything; IP_RECVERR for what others' traffic still fills (ENOBUFS). Both the Outbox
    # resends.
    enable_backpressure(sock, sndbuf=shaped_sndbuf(queue_bytes, sockets=2) or _BUF)
    sock.bind(("0.0.0.0", port))
    sock.setblocking(False)
    return sock, BatchIO(sock)


def ps_job_config(request: Mapping[str, Any], bsl: int) -> tuple[JobConfig, dict[int, str]]:
    """A ``ps_serve`` request as the parameter server's job: a VAT root whose A-BM is every worker, and
    the workers' addresses ({BFR-id: address}) it answers by unicast. The scale model builds its PS from
    the same request (``orchestrator.model.collective``)."""
    workers = {int(k): str(v) for k, v in request["workers"].items()}
    cfg = JobConfig(
        job_id=int(request["job"]),
        bsl=bsl,
        abm=tuple(workers),
        op=request.get("reduce", "sum"),  # "op" names the control op itself
        dtype=request.get("dtype", "int32"),
        root=True,
        slot_budget=int(request.get("slot_budget", 64)),
    )
    return cfg, workers


@dataclass
class _Run:
    """One AllReduce in progress on this worker: what the ring and the tree paths share."""

    job_id: int
    member: Any
    values: np.ndarray
    op: Op
    dtype: DType
    fixed_point_scale: int
    chunk_base: int
    per_chunk: int
    timeout: float  # the initial RTO
    min_rto: float
    max_rto: float
    margin: float  # G of RFC 6298's RTO = SRTT + max(G, 4 RTTVAR), at least the tick
    deadline: float
    fut: asyncio.Future[None]

    @property
    def tick(self) -> float:
        """The retransmission timer's period."""
        return min(self.timeout, self.min_rto) / 2

    @property
    def granularity(self) -> float:
        return max(self.tick, self.margin)


class InaWorkerService:
    def __init__(
        self, ina: Ina, bfr_id: int, bsl: int, loopback: str, queue_bytes: int | None = None
    ) -> None:
        self.ina = ina
        self.bfr_id = bfr_id
        self.bsl = bsl
        self.loopback = loopback
        self.members: dict[int, InaMember] = {m.job_id: m for m in ina.members}
        self.c: Counter[str] = Counter()
        self.sock, self.io = _udp_socket(ina.port, queue_bytes)
        self.ring_sock, self.ring_io = _udp_socket(ina.port + 1, queue_bytes)
        self.out, self.ring_out = Outbox(self.io), Outbox(self.ring_io)
        # job -> (AllreduceJob, where its packets go, future set when complete)
        self.active: dict[int, tuple[AllreduceJob, str, asyncio.Future[None]]] = {}
        # job -> (ring state, its sender, next rank's address, previous rank's address, future)
        self.ring: dict[int, tuple[RingAllreduce, ReliableSender, str, str, asyncio.Future[None]]] = {}
        self.ring_prev: dict[int, str] = {}  # job -> previous rank, kept after the ring finished here
        # Closed-loop steps (docs/training.md): a ring this host will join once its own inputs are there.
        # What the previous rank sends it before then is acknowledged and held (a NIC's receive buffer),
        # then reduced when it joins: job -> the held messages.
        self.ring_held: dict[int, list[bytes]] = {}
        # Parameter-server role: an aggregator whose jobs are roots, and each job's worker addresses.
        self.ps = Aggregator()
        self.ps_workers: dict[int, dict[int, str]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick: asyncio.TimerHandle | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.out.attach(loop)
        self.ring_out.attach(loop)
        loop.add_reader(self.sock.fileno(), self._drain)
        loop.add_reader(self.ring_sock.fileno(), self._drain_ring)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is not None:
            loop.remove_reader(self.sock.fileno())
            loop.remove_reader(self.ring_sock.fileno())
        if self._tick is not None:
            self._tick.cancel()
        self.out.close()
        self.ring_out.close()
        pending = [e[-1] for e in self.active.values()] + [e[-1] for e in self.ring.values()]
        for fut in pending:
            if not fut.done():
                fut.set_exception(RuntimeError("the INA service was reconfigured mid-AllReduce"))
        self.sock.close()
        self.ring_sock.close()

    def counters(self) -> dict[str, int]:
        c = self.c.copy()
        boxes = (self.out, self.ring_out)
        c["tx.packets"] = sum(b.sent for b in boxes)
        c["tx.bytes"] = sum(b.sent_bytes for b in boxes)
        c["tx.errors"] = sum(b.refused for b in boxes)
        # Back-pressure at work: sends that met a full local queue (ENOBUFS), datagrams that waited for
        # room, and the backlog now; a drop here (backlog-full) is the agent's own, named as such.
        c["tx.nobufs"] = sum(b.nobufs for b in boxes)
        c["tx.deferred"] = sum(b.deferred for b in boxes)
        c["tx.backlog"] = sum(len(b.backlog) for b in boxes)
        c["tx.icmp-errors"] = sum(b.icmp_errors for b in boxes)
        if any(b.overflow for b in boxes):
            c["dropped.backlog-full"] = sum(b.overflow for b in boxes)
        return {f"ina.{k}": v for k, v in sorted(c.items())}

    # -- receive paths ----------------------------------------------------------------------------
    def on_bier_udp(self, datagram: UdpDatagram) -> bool:
        """BIER delivery hook: claims INA results (UDP destination port 4792) sent by a VAT root."""
        if datagram.dport != self.ina.port:
            return False
        self.c["rx.bier.packets"] += 1
        self._on_ina(datagram.payload, None)
        return True

    def _recv(self, io: BatchIO) -> list[Datagram]:
        try:
            return io.recv()
        except OSError:
            # IP_RECVERR's other side: an ICMP error (say, port unreachable) fails one receive.
            self.c["rx.icmp-errors"] += drain_error_queue(io.sock) or 1
            return []

    def _drain(self) -> None:
        for _ in range(16):
            pkts = self._recv(self.io)
            for buf, src in pkts:
                self.c["rx.udp.packets"] += 1
                self._on_ina(bytes(buf), src[0])
            if len(pkts) < self.io.max_msgs:
                break

    def _on_ina(self, buf: bytes, src: str | None) -> None:
        try:
            hdr = InaHeader.decode(buf)
        except InaDecodeError as exc:
            self.c["dropped.malformed-" + exc.reason] += 1
            return
        if not hdr.result:
            self._ps_handle(hdr)
            return
        entry = self.active.get(hdr.job_id)
        if entry is None:
            self.c["dropped.result-not-running"] += 1
            return
        job, dst, fut = entry
        now = time.monotonic()
        if job.on_result(hdr, now):
            self.c["results"] += 1
            if job.complete:
                del self.active[hdr.job_id]
                if not fut.done():
                    fut.set_result(None)
            else:
                self._send([(p, (dst, self.ina.port)) for p in job.due(now)], self.out)
        else:
            self.c["dropped.duplicate-result"] += 1

    def _ps_handle(self, hdr: InaHeader) -> None:
        decision = self.ps.handle(hdr)
        if decision.action is Action.DISSEMINATE and decision.packet is not None:
            from aidcnet.bier.bitstring import ids_from_bitstring

            data = decision.packet.encode()
            addrs = self.ps_workers[hdr.job_id]
            ids = ids_from_bitstring(decision.si, decision.bitstring, self.bsl)
            # The baseline's dissemination: one unicast copy per worker.
            self._send([(data, (addrs[i], self.ina.port)) for i in ids if i in addrs], self.out)
            self.c["ps." + decision.reason] += 1
        elif decision.action is Action.DROP:
            self.c["ps.dropped." + decision.reason] += 1
        else:
            self.c["ps." + decision.reason] += 1

    def _drain_ring(self) -> None:
        for _ in range(16):
            pkts = self._recv(self.ring_io)
            for buf, _src in pkts:
                self._on_ring(bytes(buf))
            if len(pkts) < self.ring_io.max_msgs:
                break

    def _on_ring(self, buf: bytes) -> None:
        try:
            hdr = InaHeader.decode(buf)
        except InaDecodeError as exc:
            self.c["ring.dropped.malformed-" + exc.reason] += 1
            return
        entry = self.ring.get(hdr.job_id)
        if entry is None and hdr.job_id in self.ring_held and hdr.element_count:
            self.ring_held[hdr.job_id].append(buf)
            self._send([(ack_for(hdr), (self.ring_prev[hdr.job_id], self.ina.port + 1))], self.ring_out)
            self.c["ring.held"] += 1
            return
        if entry is None:
            prev_of_done = self.ring_prev.get(hdr.job_id)
            if prev_of_done is not None and hdr.element_count:
                # Done here, but our ACK was lost: acknowledge again or the previous rank never finishes.
                self._send([(ack_for(hdr), (prev_of_done, self.ina.port + 1))], self.ring_out)
            self.c["ring.dropped.not-running"] += 1
            return
        ring, sender, nxt, prev, fut = entry
        now = time.monotonic()
        if hdr.element_count == 0:
            sender.ack((hdr.chunk - ring.chunk_base, hdr.result), now)
        else:
            # To the previous rank's loopback, not the datagram's source: that is the sender's link
            # address, which only its own leaf has a route to.
            self._send([(ack_for(hdr), (prev, self.ina.port + 1))], self.ring_out)
            self._ring_step(ring, sender, hdr)
        self._send([(p, (nxt, self.ina.port + 1)) for p in sender.due(now)], self.ring_out)
        if ring.complete and sender.idle:
            del self.ring[hdr.job_id]
            if not fut.done():
                fut.set_result(None)

    def _ring_step(self, ring: RingAllreduce, sender: ReliableSender, hdr: InaHeader) -> None:
        step = ring.on_message(hdr)
        if step is None:
            self.c["ring.duplicates"] += 1
        elif step.send is not None:
            sender.push((step.send.chunk - ring.chunk_base, step.send.result), step.send.encode())

    def hold_ring(self, job_id: int, addresses: Mapping[Any, str]) -> None:
        """A closed-loop step: this host will join ``job_id``'s ring later; from now on hold (and
        acknowledge) what its previous rank sends it (``addresses``: {BFR-id: loopback})."""
        if job_id in self.ring:
            return
        _, prev = self._neighbours({int(k): str(v) for k, v in addresses.items()})
        self.ring_prev[job_id] = prev
        self.ring_held.setdefault(job_id, [])

    def release_rings(self) -> None:
        """Forget held rings (a new step's load, or the end of one)."""
        self.ring_held.clear()

    def _neighbours(self, addrs: dict[int, str]) -> tuple[str, str]:
        ranks = sorted(addrs)
        rank = ranks.index(self.bfr_id)
        return addrs[ranks[(rank + 1) % len(ranks)]], addrs[ranks[(rank - 1) % len(ranks)]]

    def _send(self, out: list[Datagram], outbox: Outbox) -> None:
        outbox.send(out)

    # -- timers -----------------------------------------------------------------------------------
    def _schedule(self, period: float) -> None:
        if self._tick is None and self._loop is not None:
            self._tick = self._loop.call_later(period, self._on_tick, period)

    def _on_tick(self, period: float) -> None:
        self._tick = None
        now = time.monotonic()
        for job, dst, _fut in self.active.values():
            self._send([(p, (dst, self.ina.port)) for p in job.due(now)], self.out)
        for ring, sender, nxt, _prev, fut in list(self.ring.values()):
            self._send([(p, (nxt, self.ina.port + 1)) for p in sender.due(now)], self.ring_out)
            if ring.complete and sender.idle:
                self.ring.pop(ring.job_id, None)
                if not fut.done():
                    fut.set_result(None)
        if self.active or self.ring:
            self._schedule(period)

    async def _wait(self, fut: asyncio.Future[None], job_id: int, deadline: float, progress: Any) -> None:
        try:
            await asyncio.wait_for(fut, deadline)
        except TimeoutError:
            self.active.pop(job_id, None)
            self.ring.pop(job_id, None)
            self.c["allreduce.timed-out"] += 1
            raise ValueError(f"job {job_id}: no complete result within {deadline} s ({progress()})") from None

    # -- control ops ------------------------------------------------------------------------------
    def ps_serve(self, request: dict[str, Any]) -> dict[str, Any]:
        """Be the parameter server of ``job`` for ``workers`` ({BFR-id: address}); replaces its slots."""
        cfg, workers = ps_job_config(request, self.bsl)
        self.ps.add_job(cfg)
        self.ps_workers[cfg.job_id] = workers
        return {"ok": True, "job": cfg.job_id, "workers": len(workers)}

    async def allreduce(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run one AllReduce of this worker's generated array (``worker_array(seed, bfr_id, elements)``)
        and report its digest; ``start_at`` (epoch seconds) lines up the workers' starts."""
        job_id = int(request["job"])
        label = counter_label(request)
        member = self.members.get(job_id)
        if member is None:
            known = sorted(self.members)
            raise ValueError(f"this host is no worker of job {job_id} (its ina.members: {known})")
        if job_id in self.active or job_id in self.ring:
            raise ValueError(f"job {job_id} is already running an AllReduce here")
        op, dtype = Op[member.op.upper()], DType[member.dtype.upper()]
        elements = int(request["elements"])
        if elements < 1:
            raise ValueError("elements must be >= 1")
        values = worker_array(int(request.get("seed", 0)), self.bfr_id, elements, dtype)
        timeout = float(request.get("timeout_s", DEFAULT_TIMEOUT_S))
        min_rto = float(request.get("min_rto_s", DEFAULT_MIN_RTO_S))
        max_rto = float(request.get("max_rto_s", DEFAULT_MAX_RTO_S))
        margin = float(request.get("rto_margin_s", DEFAULT_RTO_MARGIN_S))
        if not 0 < min_rto <= max_rto or timeout <= 0 or margin < 0:
            raise ValueError(f"timeout_s {timeout}, min_rto_s {min_rto}, max_rto_s {max_rto}, rto_margin_s "
                             f"{margin}: need timeout_s > 0, 0 < min_rto_s <= max_rto_s, rto_margin_s >= 0")
        per_chunk = int(request.get("chunk_elements", DEFAULT_CHUNK_ELEMENTS))
        chunk_base = int(request.get("chunk_base", 0))
        start_at = float(request.get("start_at", 0.0))
        deadline = float(request.get("deadline_s", 300.0))
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        # Every worker of a fixed32 job must use the same Scale: the driver sends it, else all derive
        # it from the shared bound on worker_array's values.
        fixed_point_scale = (
            int(request["scale"]) if "scale" in request else job_fixed_point_scale(len(member.workers))
        )
        run = _Run(
            job_id, member, values, op, dtype, fixed_point_scale, chunk_base, per_chunk,
            timeout, min_rto, max_rto, margin, deadline, fut,
        )  # fmt: skip
        if "addresses" in request:
            addrs = {int(k): str(v) for k, v in request["addresses"].items()}
            result, retransmits, t0, rto = await self._ring(run, addrs, start_at)
        else:
            dst = str(request.get("to") or member.next_hop)
            result, retransmits, t0, rto = await self._tree(run, dst, start_at)
        end = time.time()
        self.c[f"allreduce.{label}"] += 1
        self.c["retransmits"] += retransmits
        reply: dict[str, Any] = {
            "ok": True,
            "job": job_id,
            "mode": label,
            "bfr_id": self.bfr_id,
            "elements": elements,
            "seconds": round(end - t0, 6),
            "started": t0,
            "finished": end,
            "retransmits": retransmits,
            # The retransmission timer at the end (RFC 6298), to tell a queue's delay from a timer's doing.
            "rto": {
                "srtt": rto.srtt, "rttvar": rto.rttvar, "rto": rto.rto, "samples": rto.samples,
                "backoffs": rto.backoffs,
            },
            "digest": digest(result),
            "head": np.asarray(result[:4]).tolist(),
            "dtype": dtype.name.lower(),
            "scale": fixed_point_scale if dtype is DType.FIXED32 else 0,
        }
        if request.get("values"):
            # The whole result, for a driver that checks float results against a tolerance: the
            # bytes the digest covers (big-endian elements), base64 in the JSON reply.
            big = np.ascontiguousarray(result).astype(result.dtype.newbyteorder(">"))
            reply["values"] = base64.b64encode(big.tobytes()).decode()
        return reply

    @staticmethod
    async def _start(start_at: float) -> float:
        if start_at > time.time():
            await asyncio.sleep(start_at - time.time())
        return time.time()

    async def _ring(self, run: _Run, addrs: dict[int, str], start_at: float) -> _Outcome:
        """The ring baseline: reduce-scatter then all-gather between the workers' loopbacks."""
        if run.op is not Op.SUM:
            raise ValueError(f"the ring baseline does sums only; job {run.job_id} is {run.member.op}")
        ranks = sorted(run.member.workers)
        rank = ranks.index(self.bfr_id)
        ring = RingAllreduce(
            run.values, rank=rank, ranks=ranks, job_id=run.job_id, bsl=self.bsl, op=run.op, dtype=run.dtype,
            scale=run.fixed_point_scale, chunk_base=run.chunk_base, per_chunk=run.per_chunk,
        )
        sender = ReliableSender(
            run.member.window, run.timeout, min_rto=run.min_rto, max_rto=run.max_rto,
            granularity=run.granularity,
        )
        nxt = addrs[ranks[(rank + 1) % len(ranks)]]
        prev = addrs[ranks[(rank - 1) % len(ranks)]]
        self.ring[run.job_id] = (ring, sender, nxt, prev, run.fut)
        self.ring_prev[run.job_id] = prev
        # Registered before the start: a faster rank's first messages must find this ring (they are
        # handled and acknowledged at once), not be dropped and wait for a timeout.
        t0 = await self._start(start_at)
        for msg in ring.originate():
            sender.push((msg.chunk - run.chunk_base, msg.result), msg.encode())
        for held in self.ring_held.pop(run.job_id, []):  # acknowledged when they came
            self._ring_step(ring, sender, InaHeader.decode(held))
        self._send([(p, (nxt, self.ina.port + 1)) for p in sender.due(time.monotonic())], self.ring_out)
        if ring.complete and sender.idle:
            self.ring.pop(run.job_id, None)
            run.fut.set_result(None)
        self._schedule(run.tick)
        await self._wait(run.fut, run.job_id, run.deadline, lambda: f"{ring.have}/{ring.chunks} chunks")
        return ring.result, sender.retransmits, t0, sender.rto

    async def _tree(self, run: _Run, dst: str, start_at: float) -> _Outcome:
        """INA (``dst`` is the next hop toward the VAT) or the parameter server (``dst`` is the PS)."""
        t0 = await self._start(start_at)
        job = AllreduceJob(
            run.values, job_id=run.job_id, bfr_id=self.bfr_id, bsl=self.bsl, op=run.op, dtype=run.dtype,
            chunk_base=run.chunk_base, per_chunk=run.per_chunk, window=run.member.window, timeout=run.timeout,
            scale=run.fixed_point_scale, min_rto=run.min_rto, max_rto=run.max_rto,
            granularity=run.granularity,
        )
        self.active[run.job_id] = (job, dst, run.fut)
        self._send([(p, (dst, self.ina.port)) for p in job.due(time.monotonic())], self.out)
        self._schedule(run.tick)
        progress = lambda: f"{job.results}/{job.window.chunks} chunks"  # noqa: E731
        await self._wait(run.fut, run.job_id, run.deadline, progress)
        return job.out, job.window.retransmits, t0, job.window.rto
