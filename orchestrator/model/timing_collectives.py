"""The AllReduce modes in the time model: every packet the workers, switches and parameter server send
one another becomes a flow the moment their own code sends it (``orchestrator.model.timing``).

* ``ina``: each worker's ``aidcnet.ina.worker.AllreduceJob`` sends the chunks its window allows to its
  first hop; each switch decides with its own aggregator (``orchestrator.model.ina.InaModel.receive``):
  absorb, pass on, send the aggregate to its parent, or at the root disseminate the result by BIER (one
  flow over the replication tree). A result lets each worker's window move on.
* ``ring``: ranks in BFR-id order, each with the worker's ``RingAllreduce`` and ``ReliableSender`` (its
  window of unacknowledged messages to the next rank); every message is acknowledged by its receiver, so
  each of a chunk's 2 (n - 1) steps waits for the one before it.
* ``ps``: each worker's ``AllreduceJob`` sends to the parameter server, whose aggregator answers each
  complete chunk with one unicast copy per worker.

Ops run in waves as the replay runs them (``orchestrator.experiment.modes.collective``): the ops at one
``t`` for different jobs together, the next wave once the last one is done. The workers' timers never
fire: they see a clock that stands still, as nothing is lost (the model's assumption), so only their
windows decide what they send when.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from aidcnet.ina.aggregator import Aggregator
from aidcnet.ina.header import InaHeader
from aidcnet.ina.worker import DEFAULT_TIMEOUT_S, AllreduceJob, ReliableSender, ack_for
from aidcnet.modes import Mode
from orchestrator.model.collective import CollectiveModel
from orchestrator.model.counts import Tally
from orchestrator.model.fluid import Flow, FluidNetwork, FluidRun
from orchestrator.model.ina import InaModel
from orchestrator.workloads.trace import TraceOp

# The workers' clock: their windows follow results, their retransmission timers never expire.
STILL = 0.0


def run_collectives(
    tm: Any, net: FluidNetwork, ops: list[TraceOp], mode: Mode, starts: Mapping[int, float],
    ps_host: str | None,
) -> tuple[FluidRun, dict[int, tuple[float, float]], Counter[str]]:  # fmt: skip
    """Every op's (start, finish) in fabric seconds, and the datagrams each INA switch's agent handled
    (:attr:`_Driver.aggregated`). ``tm``: the ``orchestrator.model.timing.TimeModel`` (its PlanModel and
    link directions)."""
    driver = _Driver(tm, net, mode, ops, starts, ps_host)
    driver.begin_wave(0, starts[ops[0].id])
    run = net.run(driver.delivered)
    missing = [op.id for op in ops if op.id not in driver.finished]
    if missing:
        raise ValueError(f"op {missing[0]} never completed in the model (a window or a slot stalled it)")
    spans = {op.id: (driver.started[op.id], driver.finished[op.id]) for op in ops}
    return run, spans, driver.aggregated


def waves(ops: list[TraceOp], job_of: Mapping[int, Any]) -> list[list[TraceOp]]:
    """The replay's waves: consecutive ops at one ``t``, each job at most once."""
    out: list[list[TraceOp]] = []
    for op in ops:
        wave = out[-1] if out else None
        if wave is None or op.t != wave[0].t or job_of[op.id].job in {job_of[o.id].job for o in wave}:
            out.append([op])
        else:
            wave.append(op)
    return out


class _Driver:
    """Runs AllReduce ops on the fluid network: in the replay's waves (:meth:`begin_wave`), or one at a time
    as a closed-loop step's workers have all joined (:meth:`begin`, ``on_finished`` told of each end)."""

    def __init__(
        self, tm: Any, net: FluidNetwork, mode: Mode, ops: list[TraceOp], starts: Mapping[int, float],
        ps_host: str | None, on_finished: Callable[[TraceOp, float], None] | None = None,
    ):  # fmt: skip
        self.tm, self.net, self.mode, self.starts, self.ps_host = tm, net, mode, starts, ps_host
        self.on_finished = on_finished
        self.collective = CollectiveModel(tm.model)
        self.ina = InaModel(tm.model) if mode == Mode.INA else None
        self.jobs = {op.id: self.collective._job(op, mode) for op in ops}
        self.waves = waves(ops, self.jobs) if on_finished is None else []
        self.servers: dict[str, Aggregator] = {}
        self.keys = itertools.count()
        self.counts = self.tally()
        self.stats: dict[str, Any] = {"payload_bytes": 0, "header_bytes": 0}
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.running: dict[int, Any] = {}
        self.wave = 0
        # Per INA switch, the datagrams its agent takes in and sends on: the switches aggregate in Python
        # whatever their dataplane, which a choice of time scale must charge as a host agent's work.
        self.aggregated: Counter[str] = Counter()

    def begin_wave(self, i: int, at: float) -> None:
        self.wave = i
        for op in self.waves[i]:
            self.begin(op, at)
        for run in list(self.running.values()):
            self._settled(run, at)  # a job of one worker has nothing to send

    def begin(self, op: TraceOp, at: float) -> None:
        protocol = {Mode.INA: _Ina, Mode.RING: _Ring, Mode.PS: _Ps}[self.mode]
        run = protocol(self, op, self.jobs[op.id])
        self.started[op.id] = at
        self.running[op.id] = run
        run.begin(at)
        if self.on_finished is not None:
            self._settled(run, at)

    def delivered(self, flow: Flow, t: float) -> None:
        run, what = flow.tag
        run.delivered(what, t)
        self._settled(run, t)

    def _settled(self, run: Any, t: float) -> None:
        if not run.done or run.op.id in self.finished:
            return
        self.finished[run.op.id] = t
        del self.running[run.op.id]
        if self.on_finished is not None:
            self.on_finished(run.op, t)
            return
        if not self.running and self.wave + 1 < len(self.waves):
            nxt = self.waves[self.wave + 1][0]
            self.begin_wave(self.wave + 1, max(self.starts[nxt.id], t))

    def send(self, run: Any, source: str, tally: Tally, what: Any, at: float, queue: Any) -> None:
        key = (run.op.id, next(self.keys))
        self.net.start(self.tm.links.flow(key, source, tally, (run, what), queue), at)

    def tally(self) -> Tally:
        return _Bytes(len(self.tm.model.plan.links))

    def udp(self, run: Any, frm: str, to: str, data: bytes, what: Any, at: float) -> None:
        """A datagram between loopbacks along the unicast routes, as ``CollectiveModel._udp`` counts it,
        in turn behind what ``frm``'s socket sent to ``to`` before it (one path, first in first out); what
        it sends elsewhere (a ring rank's ACKs back, a server's results to other workers) shares its link
        instead of waiting until that has crossed a bottleneck further on: the sender's queue empties at
        the link's pace, not at the pace of what lies beyond."""
        tally = self.tally()
        self.collective._udp(frm, to, data, 4 * InaHeader.decode(data).element_count, tally, self.stats)
        self.send(run, frm, tally, what, at, ("socket", frm, to))


class _Windowed:
    """INA and PS: every worker's ``AllreduceJob`` sends what its window allows (``_chunks``), again
    whenever a result moves the window."""

    workers: dict[str, AllreduceJob]

    @property
    def done(self) -> bool:
        return all(j.complete for j in self.workers.values())

    def begin(self, at: float) -> None:
        for w, job in self.workers.items():
            self._chunks(w, job, at)

    def _chunks(self, worker: str, job: AllreduceJob, at: float) -> None:
        raise NotImplementedError


class _Ina(_Windowed):
    def __init__(self, d: _Driver, op: TraceOp, job: Any):
        assert d.ina is not None
        self.d, self.ina, self.op, self.job = d, d.ina, op, job
        for agg in self.ina.aggregators.values():  # the driver resets the job's slots before each op
            cfg = agg.job(job.job)
            if cfg is not None:
                agg.add_job(cfg)
        self.workers = d.collective.tree_workers(job, op.bytes // 4)
        self.first = {w: self.ina.first_hop(job, w) for w in job.workers}

    def _chunks(self, worker: str, job: AllreduceJob, at: float) -> None:
        for data in job.due(STILL):
            self._hop(worker, self.first[worker], InaHeader.decode(data), at)

    def _hop(self, frm: str, address: str, hdr: InaHeader, at: float) -> None:
        tally = self.d.tally()
        k = hdr.element_count
        direction, here = self.ina.transmit(frm, address, hdr, k, tally, self.d.stats, Counter())
        self.d.send(self, frm, tally, ("hop", here, hdr), at, ("port", direction))

    def delivered(self, what: tuple[Any, ...], t: float) -> None:
        if what[0] == "hop":
            _, here, hdr = what
            tally = self.d.tally()
            onward, result = self.ina.receive(here, hdr, hdr.element_count, tally, self.d.stats)
            self.d.aggregated[here] += 1 + len(onward) + (result is not None)
            for frm, address, packet in onward:
                self._hop(frm, address, packet, t)
            if result is not None:
                self.d.send(self, here, tally, ("result", result), t, ("bier", here))
            return
        result = what[1]
        for w, job in self.workers.items():
            if job.on_result(result, STILL):
                self._chunks(w, job, t)


class _Ring:
    def __init__(self, d: _Driver, op: TraceOp, job: Any):
        self.d, self.op = d, op
        self.hosts, self.rings = d.collective.ring_ranks(job, op.bytes // 4)
        self.senders = [
            ReliableSender(d.collective._member(h, job.job).window, DEFAULT_TIMEOUT_S) for h in self.hosts
        ]

    @property
    def done(self) -> bool:
        return all(r.complete for r in self.rings) and all(s.idle for s in self.senders)

    def begin(self, at: float) -> None:
        for rank, ring in enumerate(self.rings):
            for msg in ring.originate():
                self.senders[rank].push((msg.chunk, msg.result), msg.encode())
            self._flush(rank, at)

    def _flush(self, rank: int, at: float) -> None:
        nxt = self.hosts[(rank + 1) % len(self.hosts)]
        for data in self.senders[rank].due(STILL):
            self.d.udp(self, self.hosts[rank], nxt, data, ("message", rank, data), at)

    def delivered(self, what: tuple[Any, ...], t: float) -> None:
        kind, rank, data = what
        hdr = InaHeader.decode(data)
        if kind == "ack":
            self.senders[rank].ack((hdr.chunk, hdr.result), STILL)
            self._flush(rank, t)
            return
        nxt = (rank + 1) % len(self.hosts)
        self.d.udp(self, self.hosts[nxt], self.hosts[rank], ack_for(hdr), ("ack", rank, data), t)
        step = self.rings[nxt].on_message(hdr)
        if step is not None and step.send is not None:
            self.senders[nxt].push((step.send.chunk, step.send.result), step.send.encode())
        self._flush(nxt, t)


class _Ps(_Windowed):
    def __init__(self, d: _Driver, op: TraceOp, job: Any):
        from orchestrator.experiment.modes.collective import default_ps_host

        self.d, self.op = d, op
        self.ps = d.ps_host or default_ps_host(d.tm.model.plan, job)
        if self.ps not in d.tm.model.plan.nodes:
            raise ValueError(f"parameter server {self.ps} is no node of lab {d.tm.model.plan.lab}")
        self.server = d.servers.setdefault(self.ps, Aggregator())
        self.addresses = d.collective.ps_serve(job, self.server)
        self.workers = d.collective.tree_workers(job, op.bytes // 4)

    def _chunks(self, worker: str, job: AllreduceJob, at: float) -> None:
        for data in job.due(STILL):
            self.d.udp(self, worker, self.ps, data, ("up", worker, data), at)

    def delivered(self, what: tuple[Any, ...], t: float) -> None:
        kind, worker, data = what
        if kind == "up":
            answer = self.d.collective._ps_handle(
                self.ps, self.server, self.addresses, InaHeader.decode(data), self.d.counts
            )
            for w, result in answer:
                self.d.udp(self, self.ps, w, result, ("down", w, result), t)
            return
        job = self.workers[worker]
        if job.on_result(InaHeader.decode(data), STILL):
            self._chunks(worker, job, t)


class _Bytes(Tally):
    """Bytes and packets per link direction only: the agents' counters are the counting model's."""

    def count(self, node: str, name: str, n: int = 1) -> None:
        pass
