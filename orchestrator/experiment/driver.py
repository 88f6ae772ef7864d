"""The replay driver: play a trace over a deployed, configured lab in one transport mode and record a run.

Host agents do the sending and receiving (``aidcnet/agent/replay_service.py``); this side maps trace
hosts to containers, loopbacks and BFR-ids from ``clab-<lab>/plan.yml``, hands each host its ops,
starts every host at one absolute time, watches progress, takes the counter snapshots around the run
and turns the receivers' records into ``orchestrator.experiment.results`` messages. Agents are reached through
their control sockets seen from the host (``/proc/PID/root/run/aidcnet/control.sock``): a
``docker exec`` per request would cost more than the replay of a small trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from aidcnet.agent import control
from aidcnet.replay import DEFAULT_MAX_DATAGRAM
from orchestrator.configure.plan.model import LabPlan
from orchestrator.experiment.groups import groups_received
from orchestrator.experiment.metrics import MGMT_INTERFACES, STAT_KEYS, agent_deltas, link_deltas, link_pairs
from orchestrator.experiment.results import (
    DEFAULT_RESULTS_DIR,
    MessageResult,
    RunResult,
    new_meta,
    new_run_id,
    save_run,
    trace_info,
)
from orchestrator.lab import labdir
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.topology import Topology
from orchestrator.workloads.trace import TraceOp, TraceReader

MODES = ("unicast", "host-bier", "net-bier")
AGENT_ROLES = frozenset({"bfr", "ina-switch", "gpu-host"})
# Keeps each replay_load line well under the agent's 64 KiB request-line limit.
OPS_PER_LOAD = 200
START_LEAD_S = 1.0
POLL_S = 0.2


class ReplayError(ValueError):
    """What went wrong and what to do; the CLI prints it and exits 1."""


@dataclass
class HostInfo:
    name: str
    container: str
    pid: int
    loopback: str
    bfr_id: int | None


@dataclass
class ReplayOutcome:
    result: RunResult
    run_dir: Path
    missing: list[tuple[int, str]] = field(default_factory=list)
    wrong: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        d = self.result.metrics.delivery if self.result.metrics else None
        return not self.missing and not self.wrong and d is not None and d.duplicates == 0


def socket_path(pid: int) -> Path:
    return Path(f"/proc/{pid}/root") / str(control.CONTROL_SOCKET).lstrip("/")


def ask(pid: int, op: str, node: str, timeout: float = 10.0, **fields: Any) -> dict[str, Any]:
    try:
        reply = control.request(op, timeout=timeout, path=socket_path(pid), **fields)
    except (control.ControlError, OSError, ValueError) as exc:
        raise ReplayError(f"node {node}: agent request {op!r} failed: {exc}") from exc
    if not reply.get("ok"):
        raise ReplayError(f"node {node}: {op}: {reply.get('error')}")
    return reply


class Unresponsive:
    """Nodes whose agent stopped answering mid-replay (a paused or stopped container). A replay must
    report their loss, not hang or crash on them: after one failed request a node is not asked again."""

    def __init__(self, say: Any = None):
        self.nodes: dict[str, str] = {}
        self.say = say

    def ask(self, pid: int, op: str, node: str, timeout: float = 2.0, **fields: Any) -> dict[str, Any] | None:
        if node in self.nodes:
            return None
        try:
            return ask(pid, op, node, timeout=timeout, **fields)
        except ReplayError as exc:
            self.nodes[node] = str(exc)
            if self.say is not None:
                self.say(f"node {node} stopped answering; counting its deliveries as lost ({exc})")
            return None


def load_plan(topo: Topology) -> LabPlan:
    path = labdir.lab_dir(topo) / "plan.yml"
    if not path.exists():
        raise ReplayError(
            f"lab {topo.name} has no plan at {path}: the lab must be deployed and configured first "
            f"(aidclab deploy {topo.path}; aidclab configure {topo.name})"
        )
    return LabPlan.model_validate(yaml.safe_load(path.read_text()))


def node_pids(topo: Topology, runtime: DockerRuntime) -> dict[str, int]:
    pids = {}
    for node in topo.nodes:
        container = topo.container_name(node)
        try:
            state = runtime.inspect(container)["State"]
        except Exception as exc:  # docker's NotFound and API errors alike mean "not deployed"
            raise ReplayError(
                f"lab {topo.name}: container {container} is not there ({exc}); deploy and configure the "
                f"lab first (aidclab deploy {topo.path}; aidclab configure {topo.name})"
            ) from exc
        if not state.get("Running"):
            raise ReplayError(
                f"lab {topo.name}: container {container} is not running (docker logs {container})"
            )
        pids[node] = int(state["Pid"])
    return pids


def host_map(
    topo: Topology, plan: LabPlan, pids: dict[str, int], names: Iterable[str]
) -> dict[str, HostInfo]:
    out = {}
    for name in names:
        node = plan.nodes.get(name)
        if node is None or node.role != "gpu-host":
            raise ReplayError(
                f"trace host {name!r} is not a gpu-host of lab {topo.name} (plan: "
                f"{', '.join(n for n, p in plan.nodes.items() if p.role == 'gpu-host')})"
            )
        if node.loopback is None:
            raise ReplayError(
                f"lab {topo.name}: host {name} has no loopback in the plan; rerun aidclab configure"
            )
        out[name] = HostInfo(name, topo.container_name(name), pids[name], str(node.loopback.ip), node.bfr_id)
    return out


def fabric_interface(plan: LabPlan, host: str) -> str:
    """The host's first data interface (natural order, as in its node file): where net-bier multicast
    leaves and where its groups are joined."""
    from orchestrator.configure.plan.context import natural_key

    names = sorted(
        (ep.interface for link in plan.links for ep in (link.a, link.b) if ep.node == host),
        key=natural_key,
    )
    if not names:
        raise ReplayError(f"host {host} has no data interface in the plan")
    return names[0]


def net_bier_groups(topo: Topology, ops: list[TraceOp]) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The replay's groups (orchestrator.experiment.groups), clear of the groups the lab's vars file defines.
    Not of plan.yml's: that holds the previous replay's groups, and a re-run must get the same ones."""
    from orchestrator.configure.plan import PlanError, load_vars, vars_path_for
    from orchestrator.experiment.groups import ReplayGroupsError, derive_groups

    try:
        user = load_vars(vars_path_for(topo)).bier.groups
        return derive_groups(ops, avoid=[g.group for g in user])
    except (ReplayGroupsError, PlanError) as exc:
        raise ReplayError(f"lab {topo.name}: {exc}") from exc


# ---------------------------------------------------------------------------------------------- snapshots


def interface_snapshot(topo: Topology, pids: dict[str, int]) -> dict[str, dict[str, int]]:
    """Kernel counters of every data interface of every node, read from the host through each netns."""
    from orchestrator.lab.wiring import link_state

    wanted: dict[str, set[str]] = {}
    for link in topo.links:
        for ep in link.endpoints:
            if ep.interface not in MGMT_INTERFACES:
                wanted.setdefault(ep.node, set()).add(ep.interface)

    def one(node: str) -> dict[str, dict[str, int]]:
        try:
            state = link_state(pids[node])
        except OSError:
            # A stopped container has no namespace left; metrics fall back to the peers' counters.
            return {}
        return {
            f"{node}:{iface}": {k: int(state[iface][k]) for k in STAT_KEYS}
            for iface in sorted(wanted[node])
            if iface in state
        }

    snap: dict[str, dict[str, int]] = {}
    with ThreadPoolExecutor(8) as pool:
        for part in pool.map(one, sorted(wanted)):
            snap.update(part)
    return snap


def agent_snapshot(agents: dict[str, int], lost: Unresponsive | None = None) -> dict[str, dict[str, int]]:
    def one(node: str) -> tuple[str, dict[str, int] | None]:
        if lost is None:
            counters = ask(agents[node], "counters", node)["counters"]
        else:
            reply = lost.ask(agents[node], "counters", node)
            if reply is None:
                return node, None
            counters = reply["counters"]
        return node, {k: int(v) for k, v in counters.items() if isinstance(v, int)}

    with ThreadPoolExecutor(8) as pool:
        return {node: c for node, c in pool.map(one, sorted(agents)) if c is not None}


# ---------------------------------------------------------------------------------------------- results


def build_messages(
    ops: list[TraceOp], records: dict[str, dict[int, dict[str, Any]]], start_ns: int
) -> tuple[list[MessageResult], list[tuple[int, str]], list[tuple[int, str]]]:
    """MessageResults from the trace ops and each host's receiver records (host -> msg id -> record).
    Returns them with the (message, receiver) pairs missing and delivered to a host not in ``dst``."""
    by_id: dict[int, dict[str, dict[str, Any]]] = {}
    for host, recs in records.items():
        for msg_id, rec in recs.items():
            by_id.setdefault(msg_id, {})[host] = rec
    messages, missing, wrong = [], [], []
    for op in ops:
        got = by_id.pop(op.id, {})
        delivered, latency, dups = [], {}, {}
        sent_at = op.t
        for host in [*op.dst, *sorted(h for h in got if h not in op.dst)]:
            rec = got.get(host)
            if rec is None or not rec["checksum_ok"]:
                if host in op.dst:
                    missing.append((op.id, host))
                continue
            if host not in op.dst:
                wrong.append((op.id, host))
            delivered.append(host)
            sent_at = (rec["send_ns"] - start_ns) / 1e9
            latency[host] = max(0.0, (rec["complete_ns"] - rec["send_ns"]) / 1e9)
            if rec["duplicates"]:
                dups[host] = int(rec["duplicates"])
        messages.append(
            MessageResult(
                id=op.id,
                op=op.op,
                src=op.src,
                expected=list(op.dst),
                delivered=delivered,
                bytes=op.bytes,
                sent_at=sent_at,
                latency=latency,
                duplicates=dups,
            )
        )
    # Records of ids the trace does not have: a stale or foreign sender; count them as wrong.
    wrong.extend((msg_id, host) for msg_id, hosts in sorted(by_id.items()) for host in sorted(hosts))
    return messages, missing, wrong


# ---------------------------------------------------------------------------------------------- driver


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def replay(
    topo: Topology,
    trace: str | Path,
    mode: str,
    *,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    max_datagram: int = DEFAULT_MAX_DATAGRAM,
    drain_s: float = 5.0,
    timeout_s: float = 60.0,
    gap_us: float = 0.0,
    progress: Callable[[str], None] | None = None,
) -> ReplayOutcome:
    """Replay ``trace`` over the deployed lab ``topo`` in ``mode``; saves and returns the run."""
    from orchestrator.progress import Phases, console

    if mode not in MODES:
        raise ReplayError(f"mode {mode!r} is not supported yet; choose one of {', '.join(MODES)}")
    runtime = runtime or DockerRuntime()
    say = progress or (lambda text: console.print(f"  {text}"))
    phases = Phases(f"replay {topo.name} {mode}")

    with phases.phase("prepare", f"{trace} onto lab {topo.name}"):
        plan = load_plan(topo)
        pids = node_pids(topo, runtime)
        info = trace_info(trace)
        with TraceReader(trace) as reader:
            ops = list(reader)
        reduce_ops = [op.id for op in ops if op.op == "allreduce"]
        if reduce_ops:
            raise ReplayError(
                f"{trace}: op {reduce_ops[0]} is an allreduce; replay allreduce traces with --mode ina, "
                "ring or ps (docs/allreduce.md)"
            )
        hosts = host_map(topo, plan, pids, info.hosts)
        all_hosts = host_map(topo, plan, pids, [n for n, p in plan.nodes.items() if p.role == "gpu-host"])
        agents = {n: pids[n] for n, p in plan.nodes.items() if p.role in AGENT_ROLES and n in pids}
        for name, h in all_hosts.items():
            if not ask(h.pid, "health", name).get("configured"):
                raise ReplayError(
                    f"lab {topo.name}: host {name} is not configured; run aidclab configure {topo.name}"
                )
        if mode == "host-bier":
            unnumbered = [h.name for h in hosts.values() if h.bfr_id is None]
            if unnumbered:
                raise ReplayError(f"host-bier needs BFR-ids; the plan gives none to {', '.join(unnumbered)}")
        groups: list[dict[str, Any]] = []
        op_group: dict[int, str] = {}
        if mode == "net-bier":
            groups, op_group = net_bier_groups(topo, ops)
        per_src: dict[str, list[list[Any]]] = {n: [] for n in all_hosts}
        for op in ops:
            entry = [op.id, op.t, op.bytes, list(op.dst)]
            per_src[op.src].append([*entry, op_group[op.id]] if op_group else entry)
        expected = sum(len(op.dst) for op in ops)

    if mode == "net-bier":
        from orchestrator.configure.ansible import ConfigureError, configure

        with phases.phase("groups", f"{len(groups)} (S,G) groups onto the leaves"):
            # The leaves learn (S,G) -> BFERs from static config; a re-run with the same trace changes
            # nothing (the addresses are derived deterministically).
            try:
                report = configure(topo, extra_groups=groups)
            except ConfigureError as exc:
                raise ReplayError(f"lab {topo.name}: configuring the replay's groups failed: {exc}") from exc
            say(f"configure: changed={report.changed}")
            plan = load_plan(topo)

    with phases.phase("load", f"{len(ops)} ops onto {len(all_hosts)} hosts"):
        settings: dict[str, Any] = {"max_datagram": max_datagram, "gap_us": gap_us}
        for name, h in all_hosts.items():
            mine = per_src[name]
            net: dict[str, Any] = {}
            if mode == "net-bier":
                net = {"interface": fabric_interface(plan, name), "groups": groups_received(groups, name)}
            for k, chunk in enumerate(_chunks(mine, OPS_PER_LOAD) if mine else [[]]):
                needed = {d for op in chunk for d in op[3]}
                receivers = {r: [hosts[r].loopback, hosts[r].bfr_id] for r in sorted(needed)}
                ask(
                    h.pid,
                    "replay_load",
                    name,
                    mode=mode,
                    ops=chunk,
                    receivers=receivers,
                    append=k > 0,
                    # The joins ride on the first load only, so they happen once per run.
                    **(net if k == 0 else {}),
                    **settings,
                )
        if groups:
            settings["groups"] = len(groups)

    with phases.phase("snapshot", "interface and agent counters before"):
        links_before = interface_snapshot(topo, pids)
        agents_before = agent_snapshot(agents)

    senders = {n: all_hosts[n] for n, mine in per_src.items() if mine}
    lost = Unresponsive(say)
    status: dict[str, dict[str, Any]] = {}
    started = datetime.now(UTC)
    start_ns = time.time_ns() + int(START_LEAD_S * 1e9)
    with phases.phase("run", f"{len(ops)} ops from {len(senders)} sources, {expected} deliveries expected"):
        for name, h in senders.items():
            ask(h.pid, "replay_start", name, start_ns=start_ns)
        deadline = time.monotonic() + START_LEAD_S + info.duration + timeout_s
        drain_until: float | None = None
        last = ""
        while True:
            for n, h in all_hosts.items():
                reply = lost.ask(h.pid, "replay_status", n)
                if reply is not None:
                    status[n] = reply
            sent = sum(s["sent_ops"] for s in status.values())
            delivered = sum(s["received_complete"] for s in status.values())
            # A sender that stopped answering will send no more: do not wait for it.
            done = all(n in lost.nodes or status.get(n, {}).get("done") for n in senders)
            line = f"sent {sent}/{len(ops)} ops, delivered {delivered}/{expected}"
            if line != last:
                say(line)
                last = line
            now = time.monotonic()
            if done and drain_until is None:
                drain_until = now + drain_s
            if done and delivered >= expected:
                # A short settle so late duplicates are counted too.
                time.sleep(min(0.3, drain_s))
                break
            if (drain_until is not None and now > drain_until) or now > deadline:
                say(f"stopped waiting: {line}" + ("" if done else " (senders not done: timeout)"))
                break
            time.sleep(POLL_S)
        errors = {n: s["send_errors"] for n, s in status.items() if s.get("send_errors")}
        if errors:
            say(f"send errors: {errors}")
    finished = datetime.now(UTC)

    with phases.phase("collect", "counters after, receiver records"):
        links_after = interface_snapshot(topo, pids)
        agents_after = agent_snapshot(agents, lost)
        agents_before = {n: c for n, c in agents_before.items() if n in agents_after}
        records: dict[str, dict[int, dict[str, Any]]] = {}
        for name, h in all_hosts.items():
            reply = lost.ask(h.pid, "replay_results", name, timeout=30.0)
            records[name] = {int(r["id"]): r for r in reply["records"]} if reply is not None else {}
        messages, missing, wrong = build_messages(ops, records, start_ns)
        settings.update(
            drain_s=drain_s, send_errors=errors, start_lead_s=START_LEAD_S, unresponsive=lost.nodes
        )
        result = RunResult(
            meta=new_meta(
                run_id=new_run_id(topo.name, mode),
                lab=topo.name,
                mode=mode,
                trace=info,
                started=started,
                finished=finished,
                topology_file=topo.path.resolve(),
                settings=settings,
            ),
            links=link_deltas(links_before, links_after, link_pairs(topo)),
            agents=agent_deltas(agents_before, agents_after),
            messages=messages,
        )
        run_dir = save_run(result, results_dir)
    from orchestrator.experiment.results import load_run

    outcome = ReplayOutcome(load_run(run_dir), run_dir, missing, wrong)
    m = outcome.result.metrics
    assert m is not None
    ct = "–" if m.completion_time is None else f"{m.completion_time * 1e3:.1f} ms"
    phases.summary(
        f"{m.delivery.delivered}/{m.delivery.expected} delivered, {m.delivery.duplicates} duplicates, "
        f"source egress {m.source_egress_bytes} B, completion {ct}, run {run_dir}"
    )
    return outcome
