"""A run watching its own fabric: the shapers, the injected faults, every node's CPU and stray drops,
sampled while the run goes and judged after it (docs/time-and-fidelity.md).

What the counters mean is :mod:`orchestrator.experiment.fidelity`'s; the reads are the lab's
(:mod:`orchestrator.lab.shaping`, :class:`orchestrator.experiment.sampler.FabricSampler`). The result is
the run's :class:`~orchestrator.experiment.records.TimingRecord`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aidcnet.roles import Role
from orchestrator.experiment.fidelity import (
    Verdict,
    agent_late,
    agent_losses,
    agent_waits,
    bottleneck_bound,
    fault_port_losses,
    verdict,
)
from orchestrator.experiment.records import BoundRecord, LinkEndTiming, NodeTiming, TimingRecord
from orchestrator.lab import labdir
from orchestrator.lab.fabric import Fabric
from orchestrator.lab.shaping import FabricIOError, fault_stats_of, load_fabric, node_drop_counters

if TYPE_CHECKING:
    from orchestrator.experiment.sampler import FabricSampler
    from orchestrator.experiment.session import LabSession


# Where the delay relay's losses are counted, beside the nodes'.
RELAY = "delay-relay"
# Nodes whose agents forward what they receive: their unread bytes are work held back.
FORWARDING_ROLES = frozenset({Role.BFR, Role.INA_SWITCH})
# Before a run, how long to wait for the shapers' queues to drain of earlier traffic, and how often to look.
QUIET_TIMEOUT_S = 10.0
QUIET_POLL_S = 0.05
# Before a run, the share of the machine's cores that work other than an idle lab may keep busy, the window
# it is measured over and how long to wait for it to fall below. Measured on a 2-core machine: a lab just
# destroyed keeps the kernel tearing down its namespaces and veths for some 20 s at half the machine, and
# a source started into that was held back (10-55% slower than its links) where it kept pace a minute later;
# an idle configured leaf-spine keeps 2-5% busy.
SETTLE_BUSY_SHARE = 0.25
SETTLE_WINDOW_S = 0.3
SETTLE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class QuietWait:
    """What :meth:`FabricWatch.wait_quiet` found: bytes queued per link end at first, the seconds it
    waited for them to drain, and what was still queued when it gave up (empty: the fabric is quiet)."""

    found: dict[str, int]
    waited_s: float
    left: dict[str, int]

    def describe(self) -> str | None:
        """A line for the user when there was something to wait for; None when the queues were empty."""
        if self.left:
            ends = ", ".join(f"{end} {n} B" for end, n in sorted(self.left.items()))
            return (
                f"after {self.waited_s:.1f} s the fabric still queues earlier traffic ({ends}): the run "
                "starts anyway and counts what is left; is something else sending on this lab?"
            )
        if self.found:
            return (
                f"waited {self.waited_s:.2f} s for {sum(self.found.values())} B of earlier traffic to "
                f"drain from {len(self.found)} shaper queue(s)"
            )
        return None


@dataclass(frozen=True)
class MachineSettle:
    """What :func:`wait_machine_settled` found: cores busy at first, the seconds it waited, and the cores
    still busy when it gave up (None: the machine settled)."""

    cores: int
    busy_at_first: float
    waited_s: float
    left: float | None

    def describe(self) -> str | None:
        """A line for the user when there was something to wait for; None when the machine was quiet."""
        if self.left is not None:
            return (
                f"after {self.waited_s:.0f} s the machine is still busy ({self.left:.2f} of {self.cores} "
                "cores): the run starts anyway and its verdict will say whether that held it back; is "
                "something else running on this machine?"
            )
        if self.waited_s > 0:
            return (
                f"waited {self.waited_s:.1f} s for the machine to settle ({self.busy_at_first:.2f} of "
                f"{self.cores} cores busy at first, e.g. the kernel tearing down a lab just destroyed)"
            )
        return None


def wait_machine_settled(
    cores: int,
    read_cpu_s: Callable[[], float],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    *,
    share: float = SETTLE_BUSY_SHARE,
    window_s: float = SETTLE_WINDOW_S,
    timeout_s: float = SETTLE_TIMEOUT_S,
) -> MachineSettle:
    """Before a run: wait until the whole machine (``read_cpu_s``: its busy CPU seconds since boot) is
    busier than ``share`` of its ``cores`` no more over a ``window_s`` window, for at most ``timeout_s``.
    A run started on a machine busy with something else is paced by that, not by its links, and its
    verdict would only say so afterwards."""

    def busy_over_a_window() -> float:
        cpu0, t0 = read_cpu_s(), clock()
        sleep(window_s)
        return (read_cpu_s() - cpu0) / max(clock() - t0, 1e-9)

    # the one window every run looks through is no wait: waiting starts after it
    first = busy_over_a_window()
    if first < share * cores:
        return MachineSettle(cores, first, 0.0, None)
    started = clock()
    while True:
        busy = busy_over_a_window()
        waited = clock() - started
        if busy < share * cores:
            return MachineSettle(cores, first, waited, None)
        if waited >= timeout_s:
            return MachineSettle(cores, first, waited, busy)


def with_relay(judged: Verdict, fabric: Fabric, lab_dir: Path, lost: dict[str, int]) -> Verdict:
    """The verdict with the delay relay's part (docs/delay.md): frames it lost over the run, or delayed
    link ends with no relay running to carry them."""
    if not fabric.delayed_ends():
        return judged
    from orchestrator.lab.relayctl import status

    reasons = [f"the delay relay lost {n} frames" for n in lost.values() if n]
    if status(lab_dir) is None:
        reasons.append(
            f"{len(fabric.delayed_ends())} link ends have a delay but no delay relay runs: their packets "
            "were dropped (aidclab configure starts it again)"
        )
    if not reasons:
        return judged
    return Verdict(False, [*judged.reasons, *reasons], judged.notes)


class FabricWatch:
    """``with FabricWatch(session) as watch: run()`` then ``watch.record`` is the run's timing record.

    A lab whose links are not shaped (``time.scale`` null, or no ``fabric.json``) gets a record with no
    scale and no verdict: its times are the emulator's, and the record says so.
    """

    def __init__(self, session: LabSession, *, lossless: bool = True, period_s: float = 0.1) -> None:
        self.session = session
        self.lossless = lossless
        self.period_s = period_s
        self.lab_dir = labdir.lab_dir(session.topo)
        try:
            self.fabric: Fabric | None = load_fabric(self.lab_dir)
        except FabricIOError:
            self.fabric = None
        self.sampler: FabricSampler | None = None
        self.faults_before: dict[str, int] = {}
        self.drops_before: dict[str, dict[str, int]] = {}
        self.record: TimingRecord | None = None
        self._fabric_after: Fabric | None = None
        self._injected_delta: dict[str, int] = {}
        self._other: dict[str, dict[str, int]] = {}
        # What faults cost at the ports they took down (fidelity.fault_port_losses), a line per node.
        self.fault_losses: list[str] = []

    @property
    def shaped(self) -> bool:
        return self.fabric is not None and self.fabric.scale is not None

    # -- reads ----------------------------------------------------------------------------------------
    def _interfaces(self) -> dict[str, list[str]]:
        assert self.fabric is not None
        out: dict[str, list[str]] = {}
        for end in self.fabric.ends.values():
            out.setdefault(end.node, []).append(end.interface)
        return out

    def _node_drops(self) -> dict[str, dict[str, int]]:
        out = {}
        if self.fabric is not None and self.fabric.delayed_ends():
            from orchestrator.lab.relayctl import relay_drops

            # The relay that holds delayed links' packets is the lab's too: a frame it lost is our
            # software's loss (docs/delay.md).
            out[RELAY] = {"the delay relay": relay_drops(self.lab_dir)}
        for node, interfaces in sorted(self._interfaces().items()):
            pid = self.session.pids.get(node)
            if pid is not None:
                out[node] = node_drop_counters(pid, interfaces)
        return out

    def _injected(self, fabric: Fabric) -> dict[str, int]:
        """Packets the fault program dropped so far, per end that has (or had) a fault (an end never
        given a fault drops nothing)."""
        if not fabric.faults:
            return {}
        stats = fault_stats_of(fabric.faults, self.session.topo.container_name)
        return {name: s.lost_packets for name, s in stats.items()}

    def _sampler(self) -> FabricSampler:
        if self.sampler is None:
            from orchestrator.experiment.sampler import FabricSampler

            assert self.fabric is not None
            self.sampler = FabricSampler(
                self.fabric,
                self.session.topo.container_name,
                period_s=self.period_s,
                pid_of=lambda node: self.session.pids[node],
                forwarders={
                    name for name, node in self.session.plan.nodes.items() if node.role in FORWARDING_ROLES
                },
            )
        return self.sampler

    def wait_quiet(self, timeout_s: float = QUIET_TIMEOUT_S, poll_s: float = QUIET_POLL_S) -> QuietWait:
        """Before the run: wait until no shaper's queue holds a byte. What an earlier run left queued (a
        retransmission nobody needed any more, a late ACK) would otherwise leave during this run: counted
        in its link bytes and queued ahead of its first packets, whose round trips it would stretch."""
        if not self.shaped:
            return QuietWait({}, 0.0, {})
        sampler = self._sampler()
        try:
            found = queued = sampler.backlog()
            started = time.monotonic()
            while queued and time.monotonic() - started < timeout_s:
                time.sleep(poll_s)
                queued = sampler.backlog()
        except BaseException:
            self.close()
            raise
        return QuietWait(found, time.monotonic() - started, queued)

    def close(self) -> None:
        """Give back what a watch that will not run holds (the sampler's namespace handles)."""
        if self.sampler is not None:
            self.sampler.close()

    # -- the run --------------------------------------------------------------------------------------
    def __enter__(self) -> FabricWatch:
        if not self.shaped:
            return self
        assert self.fabric is not None
        self.faults_before = self._injected(self.fabric)
        self.drops_before = self._node_drops()
        sampler = self._sampler()
        sampler.start()
        self.session.fabric_queued = sampler.queued_bytes
        return self

    def __exit__(self, exc_type: object, *_rest: object) -> None:
        if self.sampler is None:
            return
        self.session.fabric_queued = None
        self.sampler.stop()
        if exc_type is not None:
            return  # the run failed: its error is what the user needs, not a verdict
        # link set during the run (a fault experiment) updates fabric.json: judge against the latest
        self._fabric_after = load_fabric(self.lab_dir)
        injected_now = self._injected(self._fabric_after)
        self._injected_delta = {k: v - self.faults_before.get(k, 0) for k, v in injected_now.items()}
        drops_now = self._node_drops()
        self._other = {
            node: {k: v - self.drops_before.get(node, {}).get(k, 0) for k, v in counters.items()}
            for node, counters in drops_now.items()
        }

    def finish(
        self,
        agent_deltas: dict[str, dict[str, int]],
        due_spans: dict[str, list[tuple[float, float]]] | None = None,
        late: list[str] | None = None,
        downed: Mapping[str, Collection[str]] | None = None,
    ) -> TimingRecord | None:
        """The run's timing record, judged once the driver has the agents' counters over the run: a packet
        our software dropped spoils the timing as much as one the kernel dropped. ``due_spans``: per
        sending node, [(due, last datagram handed over)] of each op in wall-clock seconds, from the
        agents' accounts (a node that held data due while its links idled set the pace). ``late``: reasons
        the driver found something of ours ran late or could not be accounted (a fault that took effect
        late, a node that stopped answering). ``downed``: node -> its interfaces a fault took down during
        the run, whose drops are the fault's (:func:`fault_port_losses`). None after a failed run."""
        if self.sampler is None:
            self.record = TimingRecord(lossless=self.lossless)
        elif self._fabric_after is not None:
            judged = self._judge(agent_losses(agent_deltas), due_spans or {}, agent_deltas, downed or {})
            update: dict[str, Any] = {"notes": [*judged.notes, *agent_waits(agent_deltas)]}
            if judged.faithful is not None and (late := [*agent_late(agent_deltas), *(late or [])]):
                update |= {"reasons": [*judged.reasons, *late], "faithful": False}
            self.record = judged.model_copy(update=update)
        return self.record

    def _judge(
        self,
        agent_drops: dict[str, dict[str, int]],
        due_spans: dict[str, list[tuple[float, float]]],
        agent_deltas: Mapping[str, Mapping[str, int]],
        downed: Mapping[str, Collection[str]],
    ) -> TimingRecord:
        assert self.sampler is not None
        fabric = self._fabric_after
        assert fabric is not None
        other = {node: dict(c) for node, c in self._other.items()}
        for node, counters in agent_drops.items():
            other.setdefault(node, {}).update(counters)
        other, self.fault_losses = fault_port_losses(other, agent_deltas, downed)
        links = self.sampler.link_counters(self._injected_delta)
        relay_lost = other.pop(RELAY, {})
        nodes = self.sampler.node_counters(other, due_spans)
        cores = os.cpu_count()
        judged = verdict(
            links,
            nodes,
            # The whole machine, kernel included: a machine too busy starves the shapers' softirq.
            host_cpu_peak=max(self.sampler.host_cpu.peak, self.sampler.machine_cpu.peak),
            cores=cores,
            lossless=self.lossless,
            run_s=self.sampler.run_s,
        )
        judged = with_relay(judged, fabric, self.lab_dir, relay_lost)
        paced = self.sampler.describe_pace()
        judged = replace(judged, notes=[*judged.notes, *self.fault_losses, *([paced] if paced else [])])
        assert fabric.scale is not None
        carried = {c.name: c.tx_bytes for c in links if c.tx_bytes > 0}
        bound = None
        if carried:
            b = bottleneck_bound(carried, {c.name: c.rate_bps for c in links}, fabric.time_scale)
            bound = BoundRecord(
                link=b.link, bytes=b.bytes, rate_bps=b.rate_bps, wall_s=b.wall_s, fabric_s=b.fabric_s
            )
        return TimingRecord(
            scale=fabric.scale,
            faithful=judged.faithful,
            reasons=judged.reasons,
            notes=judged.notes,
            lossless=self.lossless,
            bound=bound,
            host_cpu_peak=self.sampler.host_cpu.peak,
            machine_cpu_peak=self.sampler.machine_cpu.peak,
            machine_cpu_s=self.sampler.machine_cpu.total_cpu_s,
            cores=cores,
            ends=[
                LinkEndTiming(
                    end=c.name,
                    peer=fabric.ends[c.name].peer,
                    bandwidth_bps=fabric.ends[c.name].bandwidth_bps,
                    rate_bps=c.rate_bps,
                    tx_bytes=c.tx_bytes,
                    busy_s=c.busy_s,
                    drain_bps=c.busy_bytes * 8 / c.busy_s if c.busy_s > 0 else None,
                    queue_drops=c.queue_drops,
                    injected_drops=c.injected_drops,
                )
                for c in links
            ],
            nodes={
                n.name: NodeTiming(
                    cpu_peak=n.cpu_peak,
                    cpu_mean=self.sampler.cpu[n.name].mean,
                    other_drops={k: v for k, v in n.other_drops.items() if v},
                    held_s=n.held[0],
                    cpu_s=self.sampler.cpu[n.name].total_cpu_s,
                )
                for n in nodes
            },
        )
