"""A deployed, configured lab as an experiment sees it: its plan, one agent client per node, the GPU
hosts with their loopbacks and BFR-ids, and counter snapshots.

Agents are reached through their control sockets from the host (``AgentClient.for_pid``): a
``docker exec`` per request would cost more than the replay of a small trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aidcnet.agent.client import AgentClient
from aidcnet.agent.control import ControlError
from aidcnet.roles import AGENT_ROLES, Role
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.schema import LabPlan
from orchestrator.experiment.metrics import MGMT_INTERFACES, STAT_KEYS
from orchestrator.lab import labdir
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.topology import Topology

Snapshot = dict[str, dict[str, int]]
T = TypeVar("T")


class ExperimentError(ValueError):
    """What went wrong and what to do; the CLI prints it and exits 1."""


@dataclass(frozen=True)
class HostInfo:
    name: str
    loopback: str
    bfr_id: int | None


def load_plan(topo: Topology) -> LabPlan:
    from orchestrator.configure.plan import read_plan

    path = labdir.lab_dir(topo) / "plan.yml"
    if not path.exists():
        raise ExperimentError(
            f"lab {topo.name} has no plan at {path}: the lab must be deployed and configured first "
            f"(aidclab deploy {topo.path}; aidclab configure {topo.name})"
        )
    return read_plan(path)


def node_pids(topo: Topology, runtime: DockerRuntime) -> dict[str, int]:
    """Every node's container PID; the engine is asked for them 8 at a time (280 one-by-one inspects
    were seconds of a replay's prepare on the bsl256 lab)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        pids = pool.map(lambda node: _node_pid(topo, runtime, node), topo.nodes)
        return dict(zip(topo.nodes, pids, strict=True))


def _node_pid(topo: Topology, runtime: DockerRuntime, node: str) -> int:
    container = topo.container_name(node)
    try:
        state = runtime.inspect(container)["State"]
    except Exception as exc:  # docker's NotFound and API errors alike mean "not deployed"
        raise ExperimentError(
            f"lab {topo.name}: container {container} is not there ({exc}); deploy and configure the "
            f"lab first (aidclab deploy {topo.path}; aidclab configure {topo.name})"
        ) from exc
    if not state.get("Running"):
        raise ExperimentError(
            f"lab {topo.name}: container {container} is not running (docker logs {container})"
        )
    return int(state["Pid"])


def live_time_scale(topo: Topology, plan: LabPlan) -> TimeScale:
    """The scale the lab's links are shaped to now: ``fabric.json``'s, which configure writes from the plan
    and which a scale search or the automatic scale changes; the plan's when the lab has none."""
    from orchestrator.lab.shaping import FabricIOError, load_fabric

    try:
        return load_fabric(labdir.lab_dir(topo)).time_scale
    except FabricIOError:
        return TimeScale.of(plan.time.scale)


def live_delays(topo: Topology, plan: LabPlan) -> dict[str, float]:
    """``node:interface`` -> the one-way delay (fabric seconds, jitter included) of what each link end sends
    now: ``fabric.json``'s, which ``link set ... delay`` changes; the plan's when the lab has none."""
    from orchestrator.lab.propagation import fabric_delays, plan_delays
    from orchestrator.lab.shaping import FabricIOError, load_fabric

    try:
        return fabric_delays(load_fabric(labdir.lab_dir(topo)))
    except FabricIOError:
        return plan_delays(plan)


class Unresponsive:
    """Nodes whose agent stopped answering mid-run (a paused or stopped container). A run must report
    their loss, not hang or crash on them: a node that failed a request is not asked again.

    ``patience_s`` is for requests that poll: a busy agent may miss one answer (all of bsl256's 256 GPU
    hosts receiving at once on two cores kept one of them past a 2 s poll now and then, and its
    deliveries were counted lost). A node is given up only when it has not answered for that long."""

    def __init__(self, say: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.nodes: dict[str, str] = {}
        self.say = say
        self.clock = clock
        self.silent_since: dict[str, float] = {}

    def call(
        self, node: str, request: Callable[[], dict[str, Any]], patience_s: float = 0.0
    ) -> dict[str, Any] | None:
        if node in self.nodes:
            return None
        try:
            reply = request()
        except ControlError as exc:
            since = self.silent_since.setdefault(node, self.clock())
            if self.clock() - since < patience_s:
                return None
            self.nodes[node] = str(exc)
            if self.say is not None:
                self.say(f"node {node} stopped answering; counting its deliveries as lost ({exc})")
            return None
        self.silent_since.pop(node, None)
        return reply


@dataclass
class LabSession:
    topo: Topology
    plan: LabPlan
    pids: dict[str, int]
    agents: dict[str, AgentClient] = field(default_factory=dict)
    # Agents that stopped answering during the run: not asked again, their deliveries count as lost.
    lost: Unresponsive = field(default_factory=Unresponsive)
    # Senders the run gave up on while they were still sending: node -> what they had sent ("3/16 ops").
    unfinished: dict[str, str] = field(default_factory=dict)
    # The scale the links are shaped to now (fabric.json, which a scale search or the automatic scale
    # changes between runs): the one value every conversion of this run's times uses.
    time_scale: TimeScale = field(default_factory=TimeScale.unshaped)
    # node:interface -> the one-way delay of what each link end sends (fabric s; docs/delay.md), as
    # fabric.json had it when the session opened; empty: no link is long.
    delays: dict[str, float] = field(default_factory=dict)
    # While a run's fabric is sampled: the bytes its shapers' queues held at the last sample
    # (FabricWatch), so the driver waits for what is still on its way.
    fabric_queued: Callable[[], int] | None = None

    @classmethod
    def open(cls, topo: Topology, runtime: DockerRuntime | None = None) -> LabSession:
        plan = load_plan(topo)
        pids = node_pids(topo, runtime or DockerRuntime())
        agents = {
            name: AgentClient.for_pid(pids[name], name)
            for name, node in plan.nodes.items()
            if node.role in AGENT_ROLES and name in pids
        }
        return cls(
            topo, plan, pids, agents, time_scale=live_time_scale(topo, plan), delays=live_delays(topo, plan)
        )

    def reload_plan(self) -> None:
        self.plan = load_plan(self.topo)

    def agent(self, node: str) -> AgentClient:
        try:
            return self.agents[node]
        except KeyError:
            raise ExperimentError(f"lab {self.topo.name}: node {node} runs no aidcnet agent") from None

    # -- GPU hosts ------------------------------------------------------------------------------------
    def gpu_hosts(self) -> list[str]:
        return [n for n, p in self.plan.nodes.items() if p.role == Role.GPU_HOST]

    def hosts(self, names: Iterable[str]) -> dict[str, HostInfo]:
        out = {}
        for name in names:
            node = self.plan.nodes.get(name)
            if node is None or node.role != Role.GPU_HOST:
                raise ExperimentError(
                    f"trace host {name!r} is not a {Role.GPU_HOST} of lab {self.topo.name} (plan: "
                    f"{', '.join(self.gpu_hosts())})"
                )
            if node.loopback is None:
                raise ExperimentError(
                    f"lab {self.topo.name}: host {name} has no loopback in the plan; rerun aidclab configure"
                )
            out[name] = HostInfo(name, str(node.loopback.ip), node.bfr_id)
        return out

    def require_configured(self, names: Iterable[str]) -> None:
        for name in names:
            if not self.agent(name).health().get("configured"):
                lab = self.topo.name
                raise ExperimentError(f"lab {lab}: host {name} is not configured: aidclab configure {lab}")

    def fabric_interface(self, host: str) -> str:
        """The host's first data interface (natural order, as in its node file): where net-bier multicast
        leaves and where its groups are joined."""
        from orchestrator.configure.plan.context import natural_key

        names = sorted(
            (ep.interface for link in self.plan.links for ep in (link.a, link.b) if ep.node == host),
            key=natural_key,
        )
        if not names:
            raise ExperimentError(f"host {host} has no data interface in the plan")
        return names[0]

    # -- counters -------------------------------------------------------------------------------------
    def interface_snapshot(self) -> Snapshot:
        """Kernel counters of every data interface of every node, read on the host from each node's
        /proc/PID/net/dev; a node with a VXLAN device (a cut link) through netlink, which knows the device's
        kind and adds the Ethernet header a VXLAN device does not count."""
        from orchestrator.lab.netns import net_dev
        from orchestrator.lab.wiring import link_state

        wanted: dict[str, set[str]] = {}
        for link in self.topo.links:
            for ep in link.endpoints:
                if ep.interface not in MGMT_INTERFACES:
                    wanted.setdefault(ep.node, set()).add(ep.interface)
        vxlan_nodes = {vx.endpoint.node for vx in self.topo.vxlan_links if not vx.stitched}
        # A lab split across hosts is replayed as one topology without its parts' VXLAN links, so any of
        # its nodes may hold a VXLAN device: netlink for all of them.
        split = bool(self.topo.container_names)

        def one(node: str) -> Snapshot:
            read = link_state if split or node in vxlan_nodes else net_dev
            try:
                state = read(self.pids[node])
            except OSError:
                # A stopped container has no namespace left; metrics fall back to the peers' counters.
                return {}
            return {
                f"{node}:{iface}": {k: int(state[iface][k]) for k in STAT_KEYS}
                for iface in sorted(wanted[node])
                if iface in state
            }

        snap: Snapshot = {}
        with ThreadPoolExecutor(8) as pool:
            for part in pool.map(one, sorted(wanted)):
                snap.update(part)
        return snap

    def each_agent(self, ask: Callable[[str, AgentClient], T]) -> dict[str, T]:
        """``ask(node, agent)`` of every agent of the lab, eight at a time; node -> answer."""
        nodes = sorted(self.agents)
        with ThreadPoolExecutor(8) as pool:
            return dict(zip(nodes, pool.map(lambda n: ask(n, self.agents[n]), nodes), strict=True))

    def agent_snapshot(self, lost: Unresponsive | None = None) -> Snapshot:
        def one(node: str, agent: AgentClient) -> dict[str, int] | None:
            if lost is None:
                counters: dict[str, Any] | None = agent.counters()
            else:
                reply = lost.call(node, lambda: {"counters": agent.counters(timeout=2.0)})
                counters = None if reply is None else reply["counters"]
            if counters is None:
                return None
            return {k: int(v) for k, v in counters.items() if isinstance(v, int)}

        return {node: c for node, c in self.each_agent(one).items() if c is not None}
