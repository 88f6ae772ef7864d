"""Predicted time: how long a replay of a trace takes on the fabric the lab plan describes, in fabric seconds
(the real links at the plan's bandwidths; no time scale enters here). docs/scale.md "Predicted time".

The bytes come from the scale model itself (``orchestrator.model.exact.PlanModel``), so every path,
BIER replication tree, ECMP or FARE share is the nodes' own: a unicast copy is one flow along its
path (each member of an ECMP group carries its expected share); a host-BIER or network-BIER op is one
flow over its whole replication tree; an AllReduce is the packets its workers, switches and parameter
server send one another, released as their own windows and aggregators release them
(``orchestrator.model.timing_collectives``). The flows share every link direction at max-min fair
rates (``orchestrator.model.fluid``), and a flow's last packet is stored and forwarded at every hop after
its bottleneck and propagates along every link's length (its delay: docs/delay.md), so an open-loop
transfer ends one path delay after its last byte left and a window waits on its round trips.

Pure: no files, no containers, no clock.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aidcnet.agent.replay.protocol import DEFAULT_QPS
from aidcnet.modes import COLLECTIVE, MODELLED, STEP_MESSAGES, Mode, StepModes, in_order
from aidcnet.replay import fragment_sizes
from orchestrator.lab.propagation import plan_delays
from orchestrator.model.counts import Tally
from orchestrator.model.exact import ModelError, PlanModel
from orchestrator.model.fluid import Flow, FluidError, FluidNetwork, FluidRun
from orchestrator.workloads.step import StepTimes
from orchestrator.workloads.step_metrics import StepMetrics, analyse
from orchestrator.workloads.trace import AnyOp, TraceOp, closed_loop, message_ops

# The kernel hashes each unicast flow's 5-tuple with a key drawn at boot, so which member of an ECMP group
# carries a flow is chance, and a link that draws more flows than its share paces the run: on the superpod
# (every host's traffic to another hashed over four planes) the measured MoE dispatch took 1.29x the
# time of the even split, its busiest downlink carrying 26% more than its share. A unicast prediction
# runs the trace under this many draws of the key and gives the median, with the draws' range.
HASH_DRAWS = 9

# Why a path can cross a link that is down, for the error that says so.
DOWN = (
    " (static routes and BIFTs do not avoid a link that is down; on a lab with bgp.enabled unicast "
    "follows FARE's routes)"
)


@dataclass(frozen=True)
class LinkConditions:
    """Links as a run found them: bandwidths set by ``aidclab link set ... bandwidth`` (bits/s, by either
    end of the link: a link has one speed) and ends taken down. ``loss`` (mean loss per end) is only
    noted: the model assumes nothing is lost. ``delay_s``: the one-way propagation delay (fabric seconds)
    of what an end sends, where it is not the plan's (``link set ... delay``, or a lab's live delays)."""

    bandwidth_bps: Mapping[str, int] = field(default_factory=dict)
    down: tuple[str, ...] = ()
    loss: Mapping[str, float] = field(default_factory=dict)
    delay_s: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, conditions: Mapping[str, Any] | None) -> LinkConditions:
        """From a run's recorded ``settings.conditions`` (``orchestrator.lab.fabric.Fabric.conditions``)."""
        conditions = conditions or {}
        return cls(
            bandwidth_bps={str(k): int(v) for k, v in (conditions.get("bandwidth_bps") or {}).items()},
            down=tuple(str(n) for n in conditions.get("down") or ()),
            loss={str(k): float(v) for k, v in (conditions.get("loss") or {}).items() if v},
            delay_s={str(k): float(v) for k, v in (conditions.get("delay_s") or {}).items()},
        )


class Links:
    """The plan's link directions as the time model sees them: direction ``2i`` is link ``i`` from its a
    end, ``2i+1`` back (as ``orchestrator.model.counts``), each named by the end that transmits on it,
    with its capacity in bytes per fabric second (0 when the link is down) and its propagation delay in
    fabric seconds (the plan's, jitter included: the latest a packet arrives; or the conditions')."""

    def __init__(self, model: PlanModel, conditions: LinkConditions):
        plan = model.plan
        self.nodes = list(plan.nodes)
        self.node_index = {n: i for i, n in enumerate(self.nodes)}
        self.names: list[str] = []
        self.receiver: list[str] = []
        bps: list[float] = []
        for link in plan.links:
            for here, there in ((link.a, link.b), (link.b, link.a)):
                self.names.append(str(here))
                self.receiver.append(there.node)
                bps.append(link.bandwidth_bps)
        self.sender = [name.split(":", 1)[0] for name in self.names]
        index = {name: d for d, name in enumerate(self.names)}
        for end, value in conditions.bandwidth_bps.items():
            d = self._direction(index, end, plan.lab)
            bps[d] = bps[d ^ 1] = value
        for d, b in enumerate(bps):
            if b <= 0:
                raise ModelError(f"lab {plan.lab}: link end {self.names[d]} has no bandwidth in the plan")
        for end in conditions.down:
            d = self._direction(index, end, plan.lab)
            bps[d] = bps[d ^ 1] = 0
        self.capacity = np.asarray(bps, dtype=np.float64) / 8
        delays = {**plan_delays(plan), **conditions.delay_s}
        for end in conditions.delay_s:
            self._direction(index, end, plan.lab)
        self.delay = np.asarray([delays.get(name, 0.0) for name in self.names], dtype=np.float64)
        self.out: dict[str, list[int]] = {}
        for d, node in enumerate(self.sender):
            self.out.setdefault(node, []).append(d)

    @staticmethod
    def _direction(index: Mapping[str, int], end: str, lab: str) -> int:
        if end not in index:
            raise ModelError(
                f"link end {end!r} is not in lab {lab}: name it NODE:IF as `aidclab link set` does"
            )
        return index[end]

    def network(self) -> FluidNetwork:
        sender = np.asarray([self.node_index[n] for n in self.sender], dtype=np.int64)
        receiver = np.asarray([self.node_index[n] for n in self.receiver], dtype=np.int64)
        return FluidNetwork(self.capacity, sender, receiver, len(self.nodes), self.names)

    def flow(self, key: Any, source: str, tally: Tally, tag: Any = None, queue: Any = None) -> Flow:
        """The flow of what ``tally`` counted, sent by ``source``."""
        nbytes, packets = tally.bytes(), tally.packets()
        dirs = np.flatnonzero(nbytes)
        if not len(dirs):
            raise ModelError(f"{key!r} from {source} crosses no link")
        latency = self.latency(source, dirs, nbytes, packets)
        return Flow(key, dirs, nbytes[dirs], packets[dirs], latency, tag, queue)

    def latency(self, source: str, dirs: np.ndarray, nbytes: np.ndarray, packets: np.ndarray) -> float:
        """Store and forward: after its bottleneck hop the last packet still crosses every other hop of its
        path, one mean-size packet at that hop's rate; and every hop's length, its propagation delay. The
        longest such path from ``source`` (a replication tree's farthest leaf)."""
        onward: dict[str, list[tuple[str, float, float]]] = {}
        for d in dirs.tolist():
            rate = self.capacity[d] or np.inf  # a link that is down: the network refuses the flow
            hop = (self.receiver[d], nbytes[d] / packets[d] / rate, float(self.delay[d]))
            onward.setdefault(self.sender[d], []).append(hop)
        best = 0.0
        # Paths are loop-free (routes, replication trees); the depth limit only guards a broken input.
        stack = [(source, 0.0, 0.0, 0.0, 0)]
        while stack:
            node, serialised, slowest, propagated, depth = stack.pop()
            nxt = onward.get(node) if depth < len(dirs) else None
            if not nxt:
                best = max(best, serialised - slowest + propagated)
                continue
            for there, hop, delay in nxt:
                stack.append((there, serialised + hop, max(slowest, hop), propagated + delay, depth + 1))
        return float(best)


@dataclass
class OpTime:
    start: float  # fabric seconds
    finish: float  # its last receiver holds all of it


@dataclass
class NodeLoad:
    """Packets a node sends (a host) or sends on (a switch, each copy) per fabric second: its most over any
    window of ``window_s`` (:meth:`Prediction.peak_pps`) and its mean over the run; and the same for the
    packets it receives."""

    peak_pps: float
    mean_pps: float
    packets: float
    received_peak_pps: float
    received_mean_pps: float
    window_s: float


@dataclass
class Prediction:
    """A trace's completion in one mode, in fabric seconds, and what set its pace."""

    lab: str
    mode: str  # the mode's name, or a closed-loop step's modes (StepModes' name)
    completion_s: float
    ops: dict[int, OpTime]
    pace: str | None  # the link end (direction) that was full for longest
    pace_to: str | None  # the node it sends to
    pace_full_s: float  # fabric seconds it was full
    pace_utilisation: float  # its bytes over what it could have carried in completion_s
    bound_s: float  # the single-link bound: max over directions of bytes / bandwidth
    bound_end: str | None
    utilisation: dict[str, float]  # per link end that carried bytes
    link_packets: dict[str, float]  # per link end that carried bytes: the packets it sent
    clock: np.ndarray = field(repr=False)  # fabric seconds at which rates changed
    sent: np.ndarray = field(repr=False)  # [moment, node]: packets each node had sent by then
    received: np.ndarray = field(repr=False)  # [moment, node]: packets each node had received by then
    node_names: list[str] = field(repr=False)
    notes: list[str] = field(default_factory=list)
    # A closed-loop step (docs/training.md): each host's times and what they cost its GPU.
    step_times: StepTimes | None = field(default=None, repr=False)
    step: StepMetrics | None = None
    # Per INA switch, the INA datagrams its agent takes in and sends on (in Python, whatever the
    # dataplane): work beside the forwarding that ``nodes`` counts.
    aggregated: dict[str, int] = field(default_factory=dict)
    # Per host, the copies (one per fragment and receiver) its sender issues at the moment the hosts issue
    # the most: every op of the moment hands all its fragments to its socket at once, where the fluid
    # network spreads them at the links' pace (TimeModel.issued_at_once).
    issued_at_once: dict[str, int] = field(default_factory=dict)
    # Where the kernel's ECMP hash decides unicast paths: the completion under each draw of its key, in
    # order (this prediction is the median draw's); empty where no hash decides a path.
    hash_draws_s: tuple[float, ...] = ()

    def peak_pps(self, window_s: float, received: bool = False) -> dict[str, float]:
        """Per node that sends (or with ``received``, that receives), the most packets per fabric second
        over any window of ``window_s`` (a run shorter than the window: its mean). A scale choice reads it
        at the window its CPU check uses."""
        t, count = self.clock, self.received if received else self.sent
        window = min(window_s, t[-1] - t[0]) if len(t) > 1 else 0.0
        if window <= 0:
            return {n: 0.0 for n, total in zip(self.node_names, count[-1], strict=True) if total > 0}
        begin = np.clip(np.concatenate([t, t - window]), t[0], t[-1] - window)
        ahead = _at(t, count, begin + window) - _at(t, count, begin)
        peak = ahead.max(axis=0) / window
        return {n: float(peak[i]) for i, n in enumerate(self.node_names) if count[-1, i] > 0}

    def nodes(self, window_s: float | None = None) -> dict[str, NodeLoad]:
        """Each node's load, sending and receiving; peaks over windows of ``window_s`` (default: a tenth
        of the run)."""
        window = self.completion_s / 10 if window_s is None else window_s
        sent, got = self.peak_pps(window), self.peak_pps(window, received=True)
        out = {}
        for i, n in enumerate(self.node_names):
            total, received = float(self.sent[-1, i]), float(self.received[-1, i])
            if total or received:
                out[n] = NodeLoad(
                    sent.get(n, 0.0), total / self.completion_s, total,
                    got.get(n, 0.0), received / self.completion_s, window,
                )  # fmt: skip
        return out

    def describe(self) -> str:
        line = f"{self.mode} on {self.lab}: predicted {self.completion_s * 1e6:.4g} µs fabric"
        if self.bound_end is not None and self.bound_s > 0:
            line += f" ({self.completion_s / self.bound_s:.2f}× the bound of {self.bound_end})"
        if self.hash_draws_s:
            line += f", the median of {self.hash_spread()}"
        if self.pace is not None:
            full = self.pace_full_s / self.completion_s if self.completion_s else 0.0
            line += (
                f", paced by {self.pace} -> {self.pace_to} (full {full:.0%} of the time, "
                f"{self.pace_utilisation:.0%} used)"
            )
        nodes = self.nodes() if self.completion_s > 0 else {}
        if nodes:
            node, load = max(nodes.items(), key=lambda kv: (kv[1].peak_pps, kv[0]))
            line += f", busiest node {node} {load.peak_pps / 1e6:.1f} Mpps ({load.mean_pps / 1e6:.1f} mean)"
        if self.step is not None:
            step = self.step
            line += (
                f"; the step {step.step_s * 1e6:.4g} µs, GPU utilisation {step.mean_share('compute'):.0%}, "
                f"exposed communication {step.exposed_s * 1e6:.4g} µs"
            )
        return line

    def hash_spread(self) -> str:
        """The draws of the ECMP hash key in words: "9 draws of the kernel's ECMP hash (5.9 to 7.3 µs)"."""
        low, high = self.hash_draws_s[0] * 1e6, self.hash_draws_s[-1] * 1e6
        return f"{len(self.hash_draws_s)} draws of the kernel's ECMP hash ({low:.4g} to {high:.4g} µs)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "lab": self.lab,
            "mode": self.mode,
            "completion_s": self.completion_s,
            "pace": self.pace,
            "pace_to": self.pace_to,
            "pace_full_s": self.pace_full_s,
            "pace_utilisation": self.pace_utilisation,
            "bound_s": self.bound_s,
            "bound_end": self.bound_end,
            "ops": {str(k): [v.start, v.finish] for k, v in self.ops.items()},
            "utilisation": self.utilisation,
            "nodes": {n: v.__dict__ for n, v in self.nodes().items()} if self.completion_s > 0 else {},
            "notes": self.notes,
            "hash_draws_s": list(self.hash_draws_s),
        } | ({} if self.step is None else {"step": self.step.to_dict()})


@dataclass(frozen=True)
class HashDraw:
    """One draw of the kernel's ECMP hash key: where in the hash's range each unicast flow (source,
    receiver, QP: its 5-tuple) falls, uniform and independent across flows and draws, the same for a flow
    at every hop and on every call (``key`` numbers the draw)."""

    key: int
    qps: int

    def fraction(self, src: str, dst: str, qp: int) -> float:
        digest = hashlib.blake2b(f"{self.key} {src} {dst} {qp}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64


def _at(t: np.ndarray, sent: np.ndarray, when: np.ndarray) -> np.ndarray:
    """Packets sent by ``when`` (rows) per node (columns): linear between the moments of ``t``."""
    i = np.clip(np.searchsorted(t, when, side="right") - 1, 0, len(t) - 2)
    span = t[i + 1] - t[i]
    frac = np.divide(when - t[i], span, out=np.zeros_like(when), where=span > 0)
    return sent[i] + (sent[i + 1] - sent[i]) * np.clip(frac, 0.0, 1.0)[:, None]


class TimeModel:
    """Predicts a trace's completion on one lab plan under given link conditions."""

    def __init__(
        self,
        model: PlanModel,
        conditions: LinkConditions | None = None,
        *,
        qps: int = DEFAULT_QPS,
        hash_draws: int = HASH_DRAWS,
    ):
        """``qps``: the replay's QPs per host (a unicast flow is source, receiver and QP); ``hash_draws``:
        draws of the kernel's ECMP hash key a prediction whose unicast paths it decides takes the median of
        (1: each member of an ECMP group carries its expected share, as the byte counts do)."""
        if qps < 1 or hash_draws < 1:
            raise ModelError(f"qps ({qps}) and hash_draws ({hash_draws}) must be at least 1")
        self.model = model
        self.conditions = conditions or LinkConditions()
        self.links = Links(model, self.conditions)
        self.qps = qps
        self.hash_draws = hash_draws
        self.draw: HashDraw | None = None  # the draw the unicast flows follow now; None: expected shares

    @classmethod
    def for_plan(cls, plan: Any, conditions: LinkConditions | None = None, **kwargs: Any) -> TimeModel:
        """With a PlanModel under the same conditions (on a BGP lab they move FARE's weights); ``kwargs``
        as the constructor's."""
        conditions = conditions or LinkConditions()
        bandwidth = {k: float(v) for k, v in conditions.bandwidth_bps.items()}
        return cls(PlanModel(plan, bandwidth=bandwidth, down=list(conditions.down)), conditions, **kwargs)

    def predict(
        self,
        ops: Sequence[AnyOp],
        mode: Mode | StepModes,
        starts: Mapping[int, float] | None = None,
        ps_host: str | None = None,
    ) -> Prediction:
        """``starts``: op id -> fabric seconds it is issued at; by default its ``t``, which a trace gives
        in fabric seconds (docs/trace-format.md), shifted by nothing. A closed-loop step (ops that wait
        for others, compute phases) is run as one (``mode``: its :class:`StepModes`, or the one mode its
        ops all travel in); ``starts`` is then not read: each op starts when its inputs are there."""
        ops = list(ops)
        if not ops:
            raise ModelError("the trace has no ops: nothing to predict")
        if isinstance(mode, StepModes) or closed_loop(ops):
            return self._over_hash_draws(ops, mode, lambda: self.predict_step(ops, mode, ps_host))
        return self._over_hash_draws(ops, mode, lambda: self._predict_open(ops, mode, starts, ps_host))

    def _over_hash_draws(
        self, ops: list[AnyOp], mode: Mode | StepModes, predict: Callable[[], Prediction]
    ) -> Prediction:
        """``predict`` once, or where the kernel's hash decides a unicast message's path, under each of
        ``hash_draws`` draws of its key: the median draw's prediction, with every draw's completion."""
        messages = mode.messages if isinstance(mode, StepModes) else mode
        hashed = messages == Mode.UNICAST and any(
            self.model.hashed(op.src, dst) for op in message_ops(ops) for dst in op.dst
        )
        if not hashed or self.hash_draws == 1:
            return predict()
        draws = []
        try:
            for key in range(self.hash_draws):
                self.draw = HashDraw(key, self.qps)
                draws.append(predict())
        finally:
            self.draw = None
        draws.sort(key=lambda p: p.completion_s)
        median = draws[len(draws) // 2]
        median.hash_draws_s = tuple(p.completion_s for p in draws)
        return median

    def _predict_open(
        self,
        ops: list[AnyOp],
        mode: Mode | StepModes,
        starts: Mapping[int, float] | None,
        ps_host: str | None,
    ) -> Prediction:
        assert not isinstance(mode, StepModes)
        starts = dict(starts) if starts is not None else {op.id: op.t for op in ops}
        net = self.links.network()
        aggregated: Counter[str] = Counter()
        try:
            if mode in COLLECTIVE:
                from orchestrator.model.timing_collectives import run_collectives

                run, spans, aggregated = run_collectives(self, net, ops, mode, starts, ps_host)
                op_times = {i: OpTime(start, finish) for i, (start, finish) in spans.items()}
            elif mode in MODELLED:
                run, op_times = self._run_messages(net, ops, mode, starts)
            else:
                known = ", ".join(in_order(MODELLED | COLLECTIVE))
                raise ModelError(f"mode {mode}: the time model knows {known}")
        except ModelError:
            raise
        except ValueError as exc:  # the collectives' own refusals, a flow over a link that is down
            raise ModelError(f"lab {self.model.plan.lab}, mode {mode}: {exc}") from exc
        issued = self.issued_at_once(ops, op_times) if mode in MODELLED else {}
        return self._prediction(mode, run, op_times, aggregated=dict(aggregated), issued_at_once=issued)

    def predict_step(self, ops: list[AnyOp], mode: Mode | StepModes, ps_host: str | None) -> Prediction:
        """A closed-loop step (``orchestrator.model.timing_step``): its completion as a replay measures
        it (first message issued to last byte or AllReduce result in), and the step's own times."""
        from orchestrator.model.timing_step import StepModel

        if not isinstance(mode, StepModes):
            mode = StepModes(mode, None) if mode in STEP_MESSAGES else StepModes(None, mode)
        step = StepModel(self, self.links.network(), ops, mode, ps_host)
        try:
            run = step.run()
        except ValueError as exc:  # the collectives' own refusals
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"lab {self.model.plan.lab}, step in {mode}: {exc}") from exc
        spans = step.spans()
        if not spans:
            raise ModelError("the step moves no bytes: nothing for the time model to predict")
        times = {i: OpTime(a, b) for i, (a, b) in spans.items()}
        issued: dict[str, int] = {}
        if mode.messages is not None:
            messages = [op for op in ops if isinstance(op, TraceOp) and op.id in spans and op.dst]
            issued = self.issued_at_once(messages, times)
        aggregated = dict(step.driver.aggregated) if step.driver is not None else {}
        prediction = self._prediction(str(mode), run, times, aggregated=aggregated, issued_at_once=issued)
        prediction.step_times = step.times
        prediction.step = analyse(ops, step.times)
        return prediction

    def issued_at_once(self, ops: Sequence[TraceOp], op_times: Mapping[int, OpTime]) -> dict[str, int]:
        """Per source, the copies the message ``ops`` issue at the moment (their ``op_times`` start) the
        most are issued: one per fragment and receiver, in every message mode. A unicast op sends that
        many datagrams; a BIER op sends one per fragment, but its source's agent was measured to spend as
        much per op as unicast's (leaf-spine, a 512-op MoE dispatch: 0.34 s of the hosts' CPU over the
        run in both modes, for 1799 datagrams sent in unicast and 512 in host-BIER), so the work at one
        moment follows the receivers, not the datagrams. A network-BIER source, which sends one datagram
        to a group, is charged the same: erring high, as the costs do."""
        at: dict[float, Counter[str]] = {}
        for op in ops:
            frags = len(fragment_sizes(op.bytes, self.model.max_datagram))
            issued = at.setdefault(op_times[op.id].start, Counter())
            issued[op.src] += frags * len(op.dst)
        busiest = max(at.values(), key=lambda issued: issued.total(), default=Counter())
        return dict(busiest)

    # -- the message modes ----------------------------------------------------------------------
    def _run_messages(
        self, net: FluidNetwork, ops: list[TraceOp], mode: Mode, starts: Mapping[int, float]
    ) -> tuple[FluidRun, dict[int, OpTime]]:
        keys: dict[int, list[Any]] = {}
        groups = self.model.net_bier_groups(ops) if mode == Mode.NET_BIER else {}
        for op in ops:
            for flow in self.message_flows(op, mode, groups.get(op.id)):
                try:
                    net.start(flow, starts[op.id])
                except FluidError as exc:
                    where = f"lab {self.model.plan.lab}, {mode} op {op.id} from {op.src}"
                    raise ModelError(f"{where}: {exc}{DOWN}") from None
                keys.setdefault(op.id, []).append(flow.key)
        run = net.run()
        return run, {
            op.id: OpTime(starts[op.id], max(run.flows[k].delivered for k in keys[op.id])) for op in ops
        }

    def message_flows(self, op: TraceOp, mode: Mode, group: str | None = None) -> list[Flow]:
        """A unicast op is one flow per receiver; a BIER op one flow over its replication tree
        (network-BIER: in ``group``, the one the replay gives it over the whole trace)."""
        if mode == Mode.UNICAST:
            return [self._unicast_flow(op, dst, j) for j, dst in enumerate(op.dst)]
        tally = Tally(len(self.model.plan.links))
        stats: dict[str, Any] = {"payload_bytes": 0, "header_bytes": 0}
        if mode == Mode.HOST_BIER:
            self.model._host_bier(op, tally, stats)
        else:
            assert group is not None, "network-BIER needs the op's group (PlanModel.net_bier_groups)"
            self.model.net_bier_op(op, group, tally, stats)
        return [self.links.flow(op.id, op.src, tally)]

    def _unicast_flow(self, op: TraceOp, dst: str, j: int) -> Flow:
        """Receiver ``j`` of ``op`` (the replay sends it on QP (op id + j) mod qps): its path under the
        current hash draw, or every path in its expected share."""
        frags, nbytes = self.model.unicast_message(op.bytes)
        if self.draw is not None:
            fraction = self.draw.fraction(op.src, dst, (op.id + j) % self.qps)
            dirs = np.asarray(self.model.unicast_path(op.src, dst, fraction), dtype=np.int64)
            part = np.ones(len(dirs))
        else:
            shares = self.model.unicast_flow(op.src, dst)
            dirs = np.fromiter(shares, dtype=np.int64, count=len(shares))
            part = np.fromiter((float(s) for s in shares.values()), dtype=np.float64, count=len(shares))
        full_bytes, full_packets = np.zeros(len(self.links.names)), np.zeros(len(self.links.names))
        full_bytes[dirs], full_packets[dirs] = part * nbytes, part * len(frags)
        latency = self.links.latency(op.src, dirs, full_bytes, full_packets)
        return Flow((op.id, dst), dirs, part * nbytes, part * len(frags), latency)

    # -- the answer -----------------------------------------------------------------------------
    def _prediction(
        self,
        label: str,
        run: FluidRun,
        op_times: dict[int, OpTime],
        *,
        aggregated: dict[str, int],
        issued_at_once: dict[str, int],
    ) -> Prediction:
        """``label``: the mode's name, or a step's modes (Prediction.mode); ``aggregated`` and
        ``issued_at_once``: see :class:`Prediction`."""
        links = self.links
        first = min(t.start for t in op_times.values())
        completion = max(t.finish for t in op_times.values()) - first
        capacity = np.where(links.capacity > 0, links.capacity, np.inf)
        need = run.carried / capacity
        bound_d = int(np.argmax(need))
        used = run.carried / (capacity * completion) if completion > 0 else np.zeros_like(need)
        pace_d = int(np.argmax(run.saturated_s)) if run.saturated_s.max() > 0 else None
        notes = [
            f"loss {p:.2%} set on {end}: the model assumes nothing is lost"
            for end, p in self.conditions.loss.items()
        ]
        return Prediction(
            lab=self.model.plan.lab,
            mode=str(label),
            completion_s=completion,
            ops=op_times,
            pace=None if pace_d is None else links.names[pace_d],
            pace_to=None if pace_d is None else links.receiver[pace_d],
            pace_full_s=0.0 if pace_d is None else float(run.saturated_s[pace_d]),
            pace_utilisation=0.0 if pace_d is None else float(used[pace_d]),
            bound_s=float(need[bound_d]),
            bound_end=links.names[bound_d] if need[bound_d] > 0 else None,
            utilisation={links.names[d]: float(used[d]) for d in np.flatnonzero(run.carried)},
            link_packets={links.names[d]: float(run.carried_packets[d]) for d in np.flatnonzero(run.carried)},
            clock=run.clock,
            sent=run.sent,
            received=run.received,
            node_names=links.nodes,
            notes=notes,
            aggregated=aggregated,
            issued_at_once=issued_at_once,
        )
