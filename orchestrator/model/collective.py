"""The AllReduce baselines in the model: what a replay in mode ``ring`` or ``ps``
(``orchestrator.experiment.modes.ring``, ``.ps``) counts, computed with the code the workers run.

Per ``allreduce`` op the replay runs one AllReduce of ``bytes / 4`` elements over the INA job whose
workers are exactly the op's hosts (``orchestrator.experiment.modes.collective.job_for``), the same job
INA would run (``orchestrator.model.ina``). Both baselines are plain UDP between loopbacks, so every
datagram follows the plan's unicast routes (``PlanModel.unicast_flow``: exact on a tree such as
ina-fig1, the kernel hash's expectation inside an ECMP group, as for mode unicast).

* ``ring`` (UDP 4793, ``aidcnet.agent.ina.worker.InaWorkerService._ring``): ranks in BFR-id order; per
  chunk, ``aidcnet.ina.worker.RingAllreduce`` itself decides every message (n - 1 partial sums from the
  chunk's first rank, then n - 1 copies of the result), each to the next rank's loopback, and each is
  answered by ``ack_for`` (the header with no elements) to the previous rank's loopback.
* ``ps`` (UDP 4792, ``InaWorkerService._tree`` and ``_ps_handle``): every worker's
  ``aidcnet.ina.worker.AllreduceJob`` sends its chunks, window by window, to the parameter server host
  (``--ps-host``, by default ``default_ps_host``); the server's ``Aggregator`` is built from the very
  request the driver sends it (``serve_request`` -> ``ps_job_config``), and each result goes back as
  one unicast copy per worker, which the worker's ``AllreduceJob.on_result`` must accept.

What is counted: every link direction, the workers' and the server's ``ina.*`` counters that do not
depend on timing (``tx.packets``/``tx.bytes`` of UDP payload, ``rx.udp.packets``, ``results``,
``ps.<decision>``, ``allreduce.<mode>``, ``retransmits`` = 0), and in ``stats``: ``bytes_in``, the
bytes and packets into each worker and parameter server over its data links, counted as
``orchestrator.experiment.metrics.node_ingress`` counts a replay's, and ``ps_hosts`` (job -> host).

Assumed, as for INA: no loss and no retransmit; a run with retransmits is outside the model.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from aidcnet.agent.ina.worker import ps_job_config
from aidcnet.bier.bitstring import ids_from_bitstring
from aidcnet.ina.aggregator import Aggregator
from aidcnet.ina.header import DType, InaHeader, Op
from aidcnet.ina.vat import Action
from aidcnet.ina.worker import (
    DEFAULT_CHUNK_ELEMENTS,
    NP_DTYPES,
    AllreduceJob,
    RingAllreduce,
    ack_for,
    job_fixed_point_scale,
)
from aidcnet.modes import Mode
from orchestrator.model.counts import Tally
from orchestrator.model.wire import udp_frame_overhead
from orchestrator.workloads.trace import TraceOp

# The logical clock of the windowed senders: every round of the PS model is one tick later. Far below any
# RTO (50 ms at the least), so no timer fires; answers come in send order, so RACK finds no loss.
TICK_S = 1e-6


class CollectiveModel:
    """The ring and parameter-server part of a :class:`orchestrator.model.exact.PlanModel`."""

    def __init__(self, model: Any, per_chunk: int = DEFAULT_CHUNK_ELEMENTS):
        self.model = model
        self.plan = model.plan
        self.bsl = self.plan.bier.bsl
        self.per_chunk = per_chunk
        self.host_of = {str(n.loopback.ip): name for name, n in self.plan.nodes.items() if n.loopback}
        self.udp0 = udp_frame_overhead()
        self.bytes_in: Counter[str] = Counter()
        self.packets_in: Counter[str] = Counter()

    # -- shared ------------------------------------------------------------------------------------
    def _job(self, op: TraceOp, mode: Mode) -> Any:
        from orchestrator.experiment.modes import mode_class
        from orchestrator.experiment.modes.collective import job_for

        if op.op != "allreduce":
            raise ValueError(f"op {op.id} is {op.op}: mode {mode} models allreduce ops only")
        if op.bytes % 4:
            raise ValueError(f"op {op.id}: bytes {op.bytes} is not a whole number of 4-octet elements")
        job = job_for(self.plan, op)
        mode_class(mode)().check_job(job)  # what the mode itself refuses (ring: sums only)
        return job

    def _member(self, worker: str, job_id: int) -> Any:
        from orchestrator.configure.plan import node_config

        ina = node_config(self.plan, worker).ina
        member = next((m for m in ina.members if m.job_id == job_id), None) if ina else None
        if member is None:
            raise ValueError(f"{worker}: its node file has no ina.members entry for job {job_id}")
        return member

    def _values(self, job: Any, elements: int) -> tuple[np.ndarray, int]:
        """A worker's array (zeros: the model counts, it does not add) and the job's fixed32 Scale."""
        dtype = DType[job.dtype.upper()]
        fixed_point_scale = job_fixed_point_scale(len(job.workers)) if dtype is DType.FIXED32 else 0
        return np.zeros(elements, dtype=NP_DTYPES[dtype]), fixed_point_scale

    def _udp(self, frm: str, to: str, data: bytes, payload: int, tally: Tally, stats: dict[str, Any]) -> None:
        """One datagram from ``frm``'s socket to ``to``'s loopback: the links it crosses (shares where the
        kernel hashes) and the sender's Outbox counters. ``payload``: its element bytes."""
        tally.count(frm, "ina.tx.packets")
        tally.count(frm, "ina.tx.bytes", len(data))
        if frm == to:
            return  # over lo: no data link sees it
        frame = self.udp0 + len(data)
        flow = self.model.unicast_flow(frm, to)
        for d, share in flow.items():
            tally.add_share(d, share, frame, 1)
        stats["header_bytes"] += int((frame - payload) * sum(flow.values()))
        self.bytes_in[to] += frame
        self.packets_in[to] += 1

    def finish(self, stats: dict[str, Any], nodes: Sequence[str]) -> None:
        stats["bytes_in"] = {n: [self.bytes_in[n], self.packets_in[n]] for n in sorted(set(nodes))}

    # -- ring --------------------------------------------------------------------------------------
    def run_ring(self, ops: Sequence[TraceOp], tally: Tally, stats: dict[str, Any]) -> None:
        nodes: list[str] = []
        for op in ops:
            job = self._job(op, Mode.RING)
            nodes += job.workers
            self._ring(job, op.bytes // 4, tally, stats)
        self.finish(stats, nodes)

    def ring_ranks(self, job: Any, elements: int) -> tuple[list[str], list[RingAllreduce]]:
        """The job's workers in ring order and each one's ``RingAllreduce``, as the workers build them."""
        op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
        values, fixed_point_scale = self._values(job, elements)
        by_id = {self.model.bfr_id(w): w for w in job.workers}
        rings = []
        for w in job.workers:
            ranks = sorted(self._member(w, job.job).workers)  # as InaWorkerService._ring orders them
            if sorted(by_id) != ranks:
                raise ValueError(
                    f"{w}: job {job.job}'s workers in its node file are {ranks}, the plan's {sorted(by_id)}"
                )
            rings.append(RingAllreduce(
                values, rank=ranks.index(self.model.bfr_id(w)), ranks=ranks, job_id=job.job, bsl=self.bsl,
                op=op, dtype=dtype, scale=fixed_point_scale, per_chunk=self.per_chunk,
            ))  # fmt: skip
        rings.sort(key=lambda r: r.rank)
        return [by_id[r] for r in rings[0].ranks], rings

    def _ring(self, job: Any, elements: int, tally: Tally, stats: dict[str, Any]) -> None:
        hosts, rings = self.ring_ranks(job, elements)
        n = len(hosts)
        queue: deque[tuple[int, InaHeader]] = deque((r.rank, msg) for r in rings for msg in r.originate())
        for r in rings:
            if r.complete:  # a job of one worker: its own values are the result, nothing is sent
                stats["payload_bytes"] += 4 * elements
        while queue:
            rank, hdr = queue.popleft()
            nxt = (rank + 1) % n
            self._udp(hosts[rank], hosts[nxt], hdr.encode(), 4 * hdr.element_count, tally, stats)
            self._udp(hosts[nxt], hosts[rank], ack_for(hdr), 0, tally, stats)
            step = rings[nxt].on_message(hdr)
            if step is None:
                raise ValueError(f"job {job.job}: rank {nxt} refused chunk {hdr.chunk} (result {hdr.result})")
            if step.result is not None:
                stats["payload_bytes"] += 4 * len(step.result)
            if step.send is not None:
                queue.append((nxt, step.send))
        for w, r in zip(hosts, rings, strict=True):
            if not r.complete:
                raise ValueError(f"job {job.job}: {w} holds {r.have} of {r.chunks} chunks after the ring")
            tally.count(w, "ina.allreduce.ring")
            tally.count(w, "ina.retransmits", 0)

    # -- parameter server --------------------------------------------------------------------------
    def run_ps(
        self, ops: Sequence[TraceOp], tally: Tally, stats: dict[str, Any], ps_host: str | None = None
    ) -> None:
        from orchestrator.experiment.modes.collective import default_ps_host

        servers: dict[str, Aggregator] = {}
        ps_hosts: dict[str, str] = {}
        nodes: list[str] = []
        for op in ops:
            job = self._job(op, Mode.PS)
            ps = ps_host or default_ps_host(self.plan, job)
            if ps not in self.plan.nodes:
                raise ValueError(f"parameter server {ps} is no node of lab {self.plan.lab}")
            ps_hosts[str(job.job)] = ps
            nodes += [*job.workers, ps]
            self._ps(job, ps, servers.setdefault(ps, Aggregator()), op.bytes // 4, tally, stats)
        stats["ps_hosts"] = dict(sorted(ps_hosts.items()))
        self.finish(stats, nodes)

    def _ps(
        self, job: Any, ps: str, server: Aggregator, elements: int, tally: Tally, stats: dict[str, Any]
    ) -> None:
        addresses = self.ps_serve(job, server)
        workers = self.tree_workers(job, elements)
        now = 0.0
        while not all(j.complete for j in workers.values()):
            now += TICK_S
            sent = [(w, data) for w, j in workers.items() for data in j.due(now)]
            if not sent:
                raise ValueError(f"job {job.job}: the PS run stalls with chunks missing (window or slots)")
            results: list[tuple[str, bytes]] = []
            for w, data in sent:
                hdr = InaHeader.decode(data)
                self._udp(w, ps, data, 4 * hdr.element_count, tally, stats)
                tally.count(ps, "ina.rx.udp.packets")
                results += self._ps_handle(ps, server, addresses, hdr, tally)
            for w, data in results:
                hdr = InaHeader.decode(data)
                self._udp(ps, w, data, 4 * hdr.element_count, tally, stats)
                tally.count(w, "ina.rx.udp.packets")
                if not workers[w].on_result(hdr, now):
                    raise ValueError(f"job {job.job}: {w} refused the result of chunk {hdr.chunk}")
                tally.count(w, "ina.results")
                stats["payload_bytes"] += 4 * hdr.element_count
        for w, j in workers.items():
            if j.window.retransmits:
                raise ValueError(f"job {job.job}: {w} resent {j.window.retransmits} chunks in the model")
            tally.count(w, "ina.allreduce.ps")
            tally.count(w, "ina.retransmits", 0)

    def tree_workers(self, job: Any, elements: int) -> dict[str, AllreduceJob]:
        """Every worker's ``AllreduceJob`` with its own window, as ``InaWorkerService._tree`` builds it for
        INA and for the parameter server."""
        op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
        values, fixed_point_scale = self._values(job, elements)
        return {
            w: AllreduceJob(
                values, job_id=job.job, bfr_id=self.model.bfr_id(w), bsl=self.bsl, op=op, dtype=dtype,
                per_chunk=self.per_chunk, window=self._member(w, job.job).window, scale=fixed_point_scale,
            )
            for w in job.workers
        }  # fmt: skip

    def ps_serve(self, job: Any, server: Aggregator) -> dict[int, str]:
        """The server's job with fresh slots (``ps_serve`` before every op: chunks restart at 0), built from
        the very request the driver sends; returns its workers' addresses by BFR-id."""
        from orchestrator.experiment.modes.ps import serve_request

        cfg, addresses = ps_job_config(serve_request(self.plan, job), self.bsl)
        server.add_job(cfg)
        return addresses

    def _ps_handle(
        self, ps: str, server: Aggregator, addresses: dict[int, str], hdr: InaHeader, tally: Tally
    ) -> list[tuple[str, bytes]]:
        """``InaWorkerService._ps_handle``: the decision, its counter, and the result's unicast copies."""
        decision = server.handle(hdr)
        if decision.action is Action.DROP:
            tally.count(ps, f"ina.ps.dropped.{decision.reason}")
            return []
        tally.count(ps, f"ina.ps.{decision.reason}")
        if decision.action is not Action.DISSEMINATE or decision.packet is None:
            return []
        data = decision.packet.encode()
        ids = ids_from_bitstring(decision.si, decision.bitstring, self.bsl)
        return [(self.host_of[addresses[i]], data) for i in ids if i in addresses]
