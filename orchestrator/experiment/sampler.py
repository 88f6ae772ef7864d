"""A run's view of the fabric: every shaper's counters and every node's cgroup CPU time, sampled in a
thread while the run goes, into the inputs of the fidelity verdict (docs/time-and-fidelity.md).

The reads themselves are the lab's (:mod:`orchestrator.lab.shaping`); what they mean for a run is
:mod:`orchestrator.experiment.fidelity`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pyroute2 import IPRoute

from orchestrator.experiment.fidelity import CpuMeter, DrainMeter, HeldMeter, LinkCounters, NodeCounters
from orchestrator.lab.fabric import EndShaper, Fabric
from orchestrator.lab.shaping import (
    FabricIOError,
    QdiscStats,
    cgroup_cpu_usec,
    container_pid,
    machine_cpu_s,
    node_netns,
    open_netns,
    read_qdisc_stats,
    udp_rx_backlog,
)

# The share of one core the sampler may take. A sample reads every node's counters: on bsl256 (280 nodes)
# a sweep took most of the 0.1 s period, so the sampler ran without pause and, with the status polls,
# kept one of this 2-core machine's cores busy at any time scale: our measurement was the lab's busiest
# program. A sweep that takes longer waits proportionally longer before the next.
SAMPLER_SHARE = 0.2


def sample_pause_s(period_s: float, sweep_s: float) -> float:
    """The pause after a sweep that took ``sweep_s``: ``period_s``, or long enough that sweeping takes at
    most :data:`SAMPLER_SHARE` of the time."""
    return max(period_s, sweep_s * (1 - SAMPLER_SHARE) / SAMPLER_SHARE)


class FabricSampler:
    """Samples every shaper's counters and every node's cgroup CPU time during a run, in a thread, and
    turns them into the inputs of :func:`orchestrator.experiment.fidelity.verdict`.

    One netlink socket per node stays open for the whole run (a sample of a 68-node lab is 68 dumps).
    ``pid_of(node)`` gives a process in the node's cgroup (default: the PID behind its /run/netns link).
    ``forwarders``: the nodes whose agents forward what they receive (None: all), whose unread bytes
    count as work held back (:class:`~orchestrator.experiment.fidelity.HeldMeter`).
    """

    def __init__(
        self,
        fabric: Fabric,
        container_of: Callable[[str], str],
        period_s: float = 0.1,
        pid_of: Callable[[str], int] | None = None,
        cpu_window_s: float = 0.5,
        forwarders: set[str] | None = None,
    ) -> None:
        self.fabric = fabric
        self.period_s = period_s
        self.by_node: dict[str, list[EndShaper]] = {}
        for end in fabric.ends.values():
            self.by_node.setdefault(end.node, []).append(end)
        self.netns = {node: node_netns(container_of(node)) for node in self.by_node}
        self.pids = {
            node: (pid_of(node) if pid_of else container_pid(path)) for node, path in self.netns.items()
        }
        self.drain = {name: DrainMeter(end.rate_bps) for name, end in fabric.ends.items()}
        self.cpu = {node: CpuMeter(cpu_window_s) for node in self.by_node}
        self.host_cpu = CpuMeter(cpu_window_s)
        # The whole machine, kernel included: what the lab and everything beside it costs.
        self.machine_cpu = CpuMeter(cpu_window_s)
        self.held = {
            node: HeldMeter(
                node, {end.name: end.rate_bps for end in ends}, forwarders is None or node in forwarders
            )
            for node, ends in self.by_node.items()
        }
        # time.time() - time.monotonic(): agents stamp in the wall clock, the sampler in monotonic time.
        self.realtime_offset = time.time() - time.monotonic()
        self.first: dict[str, QdiscStats] = {}
        self.last: dict[str, QdiscStats] = {}
        self.samples = 0
        self.sweep_s = 0.0  # wall seconds spent sweeping
        self.longest_pause_s = 0.0
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._handles: dict[str, IPRoute] = {}
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _read(self, node: str) -> dict[str, QdiscStats]:
        ns = self._handles.get(node)
        if ns is None:
            ns = self._handles[node] = open_netns(self.netns[node])
        return read_qdisc_stats(ns, self.netns[node], [e.interface for e in self.by_node[node]])

    def backlog(self) -> dict[str, int]:
        """Bytes waiting in each shaper's queue now, one sweep; ends whose queue is empty are left out."""
        out: dict[str, int] = {}
        for node, ends in self.by_node.items():
            stats = self._read(node)
            for end in ends:
                st = stats.get(end.interface)
                if st is not None and st.backlog:
                    out[end.name] = st.backlog
        return out

    def queued_bytes(self) -> int:
        """Bytes the shapers' queues held at the last sample (0 before the first): what the fabric has yet
        to carry. No read of its own: another thread may ask while the sampler runs."""
        return sum(st.backlog for st in list(self.last.values()))

    def sample(self) -> None:
        total_cpu = 0.0
        t_host = time.monotonic()
        for node, ends in self.by_node.items():
            stats = self._read(node)  # each reading carries its own moment
            sent: dict[str, int] = {}
            for end in ends:
                st = stats.get(end.interface)
                if st is None:
                    continue
                self.first.setdefault(end.name, st)
                self.last[end.name] = st
                self.drain[end.name].sample(st.read_at_s, st.bytes, st.backlog, st.read_within_s)
                sent[end.name] = st.bytes
            if sent:
                at = sum(s.read_at_s for s in stats.values()) / len(stats)
                self.held[node].sample(at, sent, udp_rx_backlog(self.pids[node]))
            cpu_s = cgroup_cpu_usec(self.pids[node]) / 1e6
            # Stamped right at its read, not at the sweep's start: a big lab's sweep takes a while.
            self.cpu[node].sample(time.monotonic(), cpu_s)
            total_cpu += cpu_s
        # Nodes may share a cgroup (tests); the host figure is then an upper bound, which errs safe.
        self.host_cpu.sample(t_host, total_cpu)
        self.machine_cpu.sample(time.monotonic(), machine_cpu_s())
        self.samples += 1

    def _loop(self) -> None:
        pause = self.period_s
        try:
            while not self._stop.wait(pause):  # type: ignore[union-attr]
                began = time.monotonic()
                self.sample()
                sweep = time.monotonic() - began
                self.sweep_s += sweep
                pause = sample_pause_s(self.period_s, sweep)
                self.longest_pause_s = max(self.longest_pause_s, pause)
        except BaseException as exc:  # reported by stop(): a dead sampler must not pass for a clean run
            self.error = exc

    def describe_pace(self) -> str | None:
        """A note when the sweeps were slow enough to space the samples out, else None."""
        if self.longest_pause_s <= self.period_s or not self.samples:
            return None
        sweep_ms = self.sweep_s / self.samples * 1e3
        return (
            f"sampler: a sweep of {len(self.by_node)} nodes took {sweep_ms:.0f} ms on average, so samples "
            f"came up to {self.longest_pause_s:.2f} s apart (not {self.period_s:g} s) to keep the sampler "
            f"within {SAMPLER_SHARE:.0%} of a core"
        )

    @property
    def run_s(self) -> float:
        """Wall seconds from the first sample to the last."""
        if self.started_at is None or self.stopped_at is None:
            return 0.0
        return self.stopped_at - self.started_at

    def start(self) -> FabricSampler:
        self.started_at = time.monotonic()
        self.sample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fabric-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()  # type: ignore[union-attr]
            self._thread.join()
            self._thread = None
        try:
            self.sample()
            self.stopped_at = time.monotonic()
        finally:
            self.close()
        if self.error is not None:
            raise FabricIOError(f"fabric sampler failed mid-run: {self.error}") from self.error

    def close(self) -> None:
        """Close the namespace handles (a later read opens them again)."""
        for ns in self._handles.values():
            ns.close()
        self._handles.clear()

    def __enter__(self) -> FabricSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def link_counters(self, injected: dict[str, int] | None = None) -> list[LinkCounters]:
        """Per end, for :func:`~orchestrator.experiment.fidelity.verdict`; ``injected`` = the fault program's
        drops per end over the run (read with :func:`~orchestrator.lab.shaping.read_link_fault` before and
        after)."""
        out = []
        for name, end in sorted(self.fabric.ends.items()):
            first, last = self.first.get(name), self.last.get(name)
            if first is None or last is None:
                continue
            meter = self.drain[name]
            out.append(
                LinkCounters(
                    name=name,
                    rate_bps=end.rate_bps,
                    tx_bytes=last.bytes - first.bytes,
                    busy_s=meter.busy_s,
                    busy_bytes=meter.busy_bytes,
                    queue_drops=last.drops - first.drops,
                    injected_drops=(injected or {}).get(name, 0),
                    burst_bytes=end.burst_bytes,
                    frame_bytes=end.frame_bytes,
                    skipped_readings=meter.skipped,
                )
            )
        return out

    def node_counters(
        self,
        other_drops: dict[str, dict[str, int]] | None = None,
        due_spans: dict[str, list[tuple[float, float]]] | None = None,
    ) -> list[NodeCounters]:
        """Per node; ``other_drops`` = node -> {where: count} (socket buffers, agent backlogs, rx drops);
        ``due_spans`` = node -> [(due, handed over)] of the data it sent, in wall-clock seconds
        (``time.time()``), as the agents account for their ops."""
        out = []
        for node, meter in sorted(self.cpu.items()):
            offset = self.realtime_offset
            spans = [(a - offset, b - offset) for a, b in (due_spans or {}).get(node, [])]
            held = self.held[node].held(spans)
            out.append(NodeCounters(node, meter.peak, (other_drops or {}).get(node, {}), held))
        return out
