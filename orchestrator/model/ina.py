"""In-network aggregation in the model: what a replay in mode ``ina``
(``orchestrator.experiment.modes.ina``) counts, computed with the code the nodes run.

Per ``allreduce`` op the replay runs one AllReduce of ``bytes / 4`` elements over the INA job whose
workers are exactly the op's hosts (``orchestrator.experiment.modes.collective.job_for``). Every worker
cuts its array into chunks of ``aidcnet.ina.worker.DEFAULT_CHUNK_ELEMENTS`` and sends chunk ``c`` with
P-BM = its own bit to its first hop (``ina.members[].next_hop`` of its node file); each switch hands the
packet to an ``aidcnet.ina.aggregator.Aggregator`` built from its node file exactly as its agent builds it
(``aidcnet.agent.ina.switch.job_config``) and acts on the decision as ``InaSwitchService._decide`` does:
forward unchanged or send the aggregate to its next hop (UDP 4792 between link addresses), or, at the VAT
root, impose the result on BIER with BitString = A-BM and Entropy = chunk number, which the model follows
hop by hop with §6.5 forwarding (:meth:`orchestrator.model.exact.PlanModel._impose`).

What is counted: every link direction (exact: INA hops are unicast between link addresses and BIER
decides by Entropy), the switches' ``ina.*`` counters (rx/tx packets and bytes of the INA header and
payload, aggregated, completed, forwarded, transit, disseminated), the BIER counters of the
dissemination, and in ``stats``: INA bytes into each switch (frames on the wire) and into the root.

Assumed: no loss and no retransmit (the worker's timer fires only after 0.2 s without a result); a run
with retransmits (``allreduce.json``) is outside the model, and the cross-validation checks for it.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from aidcnet.agent.ina.switch import job_config
from aidcnet.bier.bitstring import bfr_id_to_si_bit, ids_from_bitstring
from aidcnet.config import Ina
from aidcnet.ina.aggregator import Aggregator
from aidcnet.ina.header import DType, InaHeader, Op
from aidcnet.ina.vat import Action
from aidcnet.ina.worker import DEFAULT_CHUNK_ELEMENTS, chunk_count
from orchestrator.model.counts import Tally
from orchestrator.model.wire import bier_frame_overhead, udp_frame_overhead
from orchestrator.workloads.trace import TraceOp

ENTROPY_MASK = 0xFFFFF


class InaModel:
    """The INA part of a :class:`orchestrator.model.exact.PlanModel` (one per run: the switches'
    aggregators keep slots, as the agents do between ``ina reset``s)."""

    def __init__(self, model: Any, per_chunk: int = DEFAULT_CHUNK_ELEMENTS):
        from orchestrator.configure.plan import node_config

        self.model = model
        self.plan = model.plan
        self.bsl = self.plan.bier.bsl
        self.per_chunk = per_chunk
        # link address -> (the direction that reaches it, the node that owns it); direction 2i is sent
        # by link i's a end
        self.toward: dict[str, tuple[int, str]] = {}
        for i, link in enumerate(self.plan.links):
            for d, to in enumerate((link.b, link.a)):
                if to.address is not None:
                    self.toward[str(to.address.ip)] = (2 * i + d, to.node)
        self._node_from_direction = {
            **{2 * i: link.a.node for i, link in enumerate(self.plan.links)},
            **{2 * i + 1: link.b.node for i, link in enumerate(self.plan.links)},
        }
        self.ina: dict[str, Ina] = {}
        for name in self.plan.nodes:
            cfg = node_config(self.plan, name).ina
            if cfg is not None and (cfg.jobs or cfg.transit or cfg.members):
                self.ina[name] = cfg
        self.aggregators = {
            name: Aggregator(job_config(j, self.bsl) for j in cfg.jobs)
            for name, cfg in self.ina.items()
            if cfg.jobs or cfg.transit
        }
        self.next_hop = {
            name: {
                **{j.job_id: str(j.next_hop) for j in cfg.jobs if j.next_hop},
                **{t.job_id: str(t.next_hop) for t in cfg.transit},
            }
            for name, cfg in self.ina.items()
        }

    def _job_for(self, op: TraceOp) -> Any:
        from orchestrator.experiment.modes.collective import job_for

        return job_for(self.plan, op)

    def _hop(self, node: str, address: str) -> tuple[int, str]:
        got = self.toward.get(address)
        if got is None:
            raise ValueError(f"{node}: INA next hop {address} is no link address of lab {self.plan.lab}")
        direction, to = got
        if self._node_from_direction[direction] != node:
            raise ValueError(f"{node}: INA next hop {address} is not on a link of {node}")
        return direction, to

    def run_ops(self, ops: Sequence[TraceOp], tally: Tally, stats: dict[str, Any]) -> None:
        bytes_in: Counter[str] = Counter()
        roots: dict[int, str] = {}
        for op in ops:
            if op.op != "allreduce":
                raise ValueError(f"op {op.id} is {op.op}: mode ina models allreduce ops only")
            if op.bytes % 4:
                raise ValueError(f"op {op.id}: bytes {op.bytes} is not a whole number of 4-octet elements")
            job = self._job_for(op)
            roots[job.job] = job.root
            # Each AllReduce restarts its chunk numbers at 0: the driver resets the job's slots first
            # (orchestrator.experiment.modes.ina, InaSwitchService.reset).
            for agg in self.aggregators.values():
                cfg = agg.job(job.job)
                if cfg is not None:
                    agg.add_job(cfg)
            elements = op.bytes // 4
            for chunk in range(chunk_count(elements, self.per_chunk)):
                k = min(self.per_chunk, elements - chunk * self.per_chunk)
                self._chunk(job, chunk, k, tally, stats, bytes_in)
        stats["ina_bytes_in"] = dict(sorted(bytes_in.items()))
        stats["ina_root_bytes_in"] = {str(j): bytes_in[r] for j, r in sorted(roots.items())}

    def _chunk(
        self, job: Any, chunk: int, k: int, tally: Tally, stats: dict[str, Any], bytes_in: Counter[str]
    ) -> None:
        payload = memoryview(np.zeros(k, dtype=">i4").tobytes())
        queue: deque[tuple[str, str, InaHeader]] = deque(
            (worker, self.first_hop(job, worker), self.worker_packet(job, worker, chunk, payload))
            for worker in job.workers
        )
        while queue:
            frm, address, hdr = queue.popleft()
            here = self.transmit(frm, address, hdr, k, tally, stats, bytes_in)[1]
            queue.extend(self.receive(here, hdr, k, tally, stats)[0])

    def first_hop(self, job: Any, worker: str) -> str:
        """The address a worker sends its chunks to (``ina.members[].next_hop`` of its node file)."""
        return str(next(m for m in self.ina[worker].members if m.job_id == job.job).next_hop)

    def worker_packet(self, job: Any, worker: str, chunk: int, payload: memoryview) -> InaHeader:
        """A worker's chunk: P-BM = its own bit."""
        si, bit = bfr_id_to_si_bit(self.model.bfr_id(worker), self.bsl)
        return InaHeader(
            job_id=job.job, chunk=chunk, op=Op[job.op.upper()], dtype=DType[job.dtype.upper()], bsl=self.bsl,
            si=si, pbm=1 << (bit - 1), payload=payload,
        )  # fmt: skip

    def transmit(
        self, frm: str, address: str, hdr: InaHeader, k: int, tally: Tally, stats: dict[str, Any],
        bytes_in: Counter[str],
    ) -> tuple[int, str]:  # fmt: skip
        """One INA packet from ``frm`` to the neighbour that owns ``address``: the link direction it
        crosses and the node it reaches (``k``: its elements)."""
        udp0 = udp_frame_overhead()
        direction, here = self._hop(frm, address)
        size = hdr.encoded_len
        tally.add(direction, udp0 + size, 1)
        stats["header_bytes"] += udp0 + size - 4 * k
        if frm in self.aggregators:  # a switch's own counters; workers count theirs apart
            tally.count(frm, "ina.tx.packets")
            tally.count(frm, "ina.tx.bytes", size)
        bytes_in[here] += udp0 + size
        tally.count(here, "ina.rx.packets")
        tally.count(here, "ina.rx.bytes", size)
        return direction, here

    def receive(
        self, here: str, hdr: InaHeader, k: int, tally: Tally, stats: dict[str, Any]
    ) -> tuple[list[tuple[str, str, InaHeader]], InaHeader | None]:
        """``InaSwitchService._decide`` at ``here``: the packets it sends on (from, to address, packet),
        and the result when it is the root and disseminates it (its BIER copies are in ``tally``)."""
        decision = self.aggregators[here].handle(hdr)
        if decision.action is Action.ABSORB:
            tally.count(here, "ina.aggregated")
        elif decision.action is Action.FORWARD:
            tally.count(here, f"ina.{decision.reason}")
            return [(here, self.next_hop[here][hdr.job_id], hdr)], None
        elif decision.action is Action.TO_PARENT:
            tally.count(here, f"ina.{decision.reason}")
            assert decision.packet is not None
            return [(here, self.next_hop[here][hdr.job_id], decision.packet)], None
        elif decision.action is Action.DISSEMINATE:
            tally.count(here, f"ina.{decision.reason}")
            tally.count(here, "ina.disseminated")
            assert decision.packet is not None
            receivers = ids_from_bitstring(decision.si, decision.bitstring, self.bsl)
            frame = bier_frame_overhead(self.bsl) + decision.packet.encoded_len
            # Each worker's delivery counts the chunk's elements as payload (as a replay's message).
            self.model._impose(here, receivers, hdr.chunk & ENTROPY_MASK, frame, tally, stats, 4 * k)
            return [], decision.packet
        else:
            tally.count(here, f"ina.dropped.{decision.reason}")
        return [], None
