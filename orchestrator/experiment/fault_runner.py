"""Applies a run's faults (``orchestrator.lab.fault_spec``) at their moments, from a thread beside the
mode's run: ``aidclab link set`` for a link fault, the agent's ``restart`` for a node. Each is recorded with
when it began and when it had taken effect (a restarted agent answering, configured, again)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.bier import bier_adjacency
from orchestrator.configure.plan.context import natural_key
from orchestrator.experiment.faults import (
    Detection,
    FailureDomain,
    FaultRecord,
    bfd_detections,
    counters_across_restarts,
    fault_lines,
    late_faults,
    reroutes,
    unexplained_downs,
    unexplained_line,
    unprotected,
)
from orchestrator.experiment.session import LabSession
from orchestrator.lab.fault_spec import Fault, check_targets, expand_nodes, schedule
from orchestrator.lab.linkset import Runtime

if TYPE_CHECKING:
    from orchestrator.experiment.modes.base import ExperimentMode, ModeOutcome
    from orchestrator.lab.topology import Topology

# A restarted agent has this long to answer its health check configured again.
RESTART_TIMEOUT_S = 60.0
HEALTH_POLL_S = 0.05


class FaultRunner:
    """``with FaultRunner.for_run(spec, session, topo, runtime):`` runs them; ``records`` after."""

    def __init__(
        self, faults: list[Fault], session: LabSession, runtime: Runtime, lab_dir: Path, start_lead_s: float
    ):
        self.records = [FaultRecord(f) for f in faults]
        self.session = session
        self.runtime = runtime
        self.lab_dir = lab_dir
        self.start_lead_s = start_lead_s  # from the run step's start to the run's zero (the mode's)
        self.zero = 0.0  # wall time of the run's zero, set as the run step begins (__enter__)
        self.unexplained: list[Detection] = []  # BFD downs on links no fault touched (judge)
        self.end_s: float | None = None  # the run step's end, seconds after the zero (__exit__)
        # node -> the counters its agent answered each restart with (the run's share spans restarts).
        self.segments: dict[str, list[dict[str, int]]] = {}
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)

    @classmethod
    def for_run(
        cls, spec: ExperimentMode, session: LabSession, topo: Topology, runtime: Runtime | None
    ) -> FaultRunner:
        """The run's faults: the lab's own (``faults:`` in its vars, through the plan) and the run's
        (``spec.options.faults``), in time order, checked against the lab before anything is loaded."""
        from orchestrator.lab.labdir import lab_dir
        from orchestrator.lab.runtime.docker import DockerRuntime

        faults = sorted([*schedule(session.plan.faults), *spec.options.faults], key=lambda f: f.at_s)
        check_targets(faults, {n: str(p.role) for n, p in session.plan.nodes.items()}, topo.name)
        ports = {
            f.node: sorted((local.interface for _l, local, _r in topo.links_of(f.node)), key=natural_key)
            for f in faults
            if f.kind == "node"
        }
        faults = expand_nodes(faults, ports)
        if faults and runtime is None:
            runtime = DockerRuntime()
        return cls(faults, session, runtime, lab_dir(topo), spec.start_lead_s)  # type: ignore[arg-type]

    def __enter__(self) -> FaultRunner:
        self.zero = time.time() + self.start_lead_s
        if self.records:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end_s = self._now()
        self._cancel.set()
        if self._thread.is_alive():
            self._thread.join()

    def _now(self) -> float:
        return time.time() - self.zero

    def _run(self) -> None:
        for record in self.records:
            due = self.session.time_scale.wall_s(record.fault.at_s)
            if self._cancel.wait(max(0.0, due - self._now())):
                return  # the run is over: this fault and the later ones never happened
            record.started_s = self._now()
            try:
                record.lines = self._apply(record)
                record.done_s = self._now()
            except Exception as exc:  # recorded and judged by the run, never a crash of the driver
                record.error = f"{type(exc).__name__}: {exc}"

    def _apply(self, record: FaultRecord) -> list[str]:
        fault = record.fault
        if fault.kind == "link":
            from orchestrator.lab.linkset import link_set

            action, *values = fault.words
            lines = link_set(self.runtime, self.lab_dir, fault.target, action, values, one_way=fault.one_way)
            record.effect_s = self._now()
            return lines
        return self._restart(record)

    def _restart(self, record: FaultRecord) -> list[str]:
        node = record.fault.node
        agent = self.session.agent(node)
        old = agent.restart()  # its counters come with the answer, as it stopped counting
        record.effect_s = self._now()
        self.segments.setdefault(node, []).append(
            {k: int(v) for k, v in old["counters"].items() if isinstance(v, int)}
        )
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(HEALTH_POLL_S)
            try:
                health = agent.health(timeout=1.0)
            except Exception:
                continue  # not serving yet
            # A fresh agent: its uptime is below the old one's at the restart (which only grew after).
            if health.get("uptime_s", old["uptime_s"]) < old["uptime_s"] and health.get("configured"):
                return [f"{node}: agent restarted (pid {health.get('pid')}), configured again"]
        raise TimeoutError(f"{node}: the agent did not come back configured within {RESTART_TIMEOUT_S:g} s")

    # -- after the run ---------------------------------------------------------------------------------
    def _bfd_events(self) -> dict[str, list[dict]] | None:
        """Every BFD session change the agents kept, per node; None when the lab runs no BFD."""
        from aidcnet.agent.control import Op
        from aidcnet.roles import AGENT_ROLES

        bfd = self.session.plan.bfd
        if bfd is None or not bfd.enabled:
            return None
        events: dict[str, list[dict]] = {}
        for node, plan_node in self.session.plan.nodes.items():
            if plan_node.role not in AGENT_ROLES:
                continue
            try:
                events[node] = self.session.agent(node).call(Op.BFD)["events"]
            except Exception:  # a node without sessions (or gone) has nothing to say
                events[node] = []
        return events

    def _link_faults(self) -> list[tuple[FaultRecord, list[tuple[str, str]], float | None]]:
        """Every link fault that began, with its link's two ends that run an agent ((node, interface)) and
        when the next fault on that link began (or the run's end): the window that fault's reactions fall
        in."""
        import json

        from orchestrator.lab.linkset import link_ends, parse_endpoint

        links = [r for r in self.records if r.fault.kind == "link" and r.started_s is not None]
        if not links:
            return []
        data_path = self.lab_dir / "topology-data.json"
        data = json.loads(data_path.read_text())
        out = []
        for k, r in enumerate(links):
            node, interface = parse_endpoint(r.fault.target)
            ends = [
                (e.node, e.interface)
                for e in link_ends(data, node, interface, str(data_path))
                if e.runs_agent
            ]
            later = [o.started_s for o in links[k + 1 :] if o.fault.target == r.fault.target]
            out.append((r, ends, later[0] if later else self.end_s))
        return out

    def downed_ports(self) -> dict[str, set[str]]:
        """node -> its interfaces that a link fault took down during the run (both ends of the link): what
        was lost there is the fault's (fidelity.fault_port_losses)."""
        out: dict[str, set[str]] = {}
        for r, ends, _until in self._link_faults():
            if r.fault.action == "down":
                for node, interface in ends:
                    out.setdefault(node, set()).add(interface)
        return out

    def _detections(self, events: dict[str, list[dict]]) -> set[tuple[str, str]]:
        """What each link fault's two ends' sessions did (docs/bfd.md); returns the ends they touched."""
        touched: set[tuple[str, str]] = set()
        for r, ends, until in self._link_faults():
            touched.update(ends)
            r.detections = bfd_detections(r, ends, events, self.zero, until)
        return touched

    def _reroutes(self) -> None:
        """What each link fault's two ends' fast-reroute bypasses did (docs/bier.md, "Fast reroute")."""
        plan = self.session.plan
        if plan.bier is None or not plan.bier.fast_reroute:
            return
        adjacency = bier_adjacency(plan)
        bypassed = {name: set(plan.nodes[name].bier_bypass) for name in adjacency}
        events: dict[str, list[dict]] = {}
        first_copies: dict[str, list[dict]] = {}
        for r, ends, until in self._link_faults():
            if len(ends) != 2:
                continue
            (a, _), (b, _) = ends
            for end in (a, b):
                if end not in events:
                    try:
                        fast_reroute = self.session.agent(end).bift()["fast_reroute"]
                    except Exception:  # no BIER there (or gone): nothing switched
                        fast_reroute = {}
                    events[end] = fast_reroute.get("events", [])
                    first_copies[end] = fast_reroute.get("first_copies", [])
            r.reroutes = reroutes(r, [(a, b), (b, a)], events, self.zero, until, first_copies)
            r.unprotected = unprotected(r, [(a, b), (b, a)], adjacency, bypassed)

    def counters_after(self, after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """The agents' counters after the run as the deltas need them: a restarted agent counted from zero
        again, so its counters before each restart are added back."""
        out = dict(after)
        for node, segments in self.segments.items():
            if node in out:
                out[node] = counters_across_restarts(segments, out[node])
        return out

    def late_reasons(self, time_scale: TimeScale) -> list[str]:
        """Why the run is not faithful on account of its faults' timing: any that took effect late
        (:func:`late_faults`), and BFD sessions that went down on links no fault touched (found by
        :meth:`judge`: the run's forwarding changed for our software's sake, not the links'); none before
        the run step has ended."""
        if self.end_s is None:
            return []
        unexplained = [unexplained_line(self.unexplained, time_scale)] if self.unexplained else []
        return [*late_faults(self.records, self.end_s, time_scale), *unexplained]

    def judge(self, outcome: ModeOutcome, time_scale: TimeScale) -> None:
        """The faults into the run's record (``settings.faults``), lines and verdict: a fault that failed or
        never happened leaves the run other than the one asked for."""
        events = self._bfd_events()
        touched = self._detections(events) if events is not None else set()
        self._reroutes()
        if events is not None:
            downs = unexplained_downs(events, touched, self.zero, self.end_s)
            if downs:
                outcome.settings["bfd_unexplained"] = [d.to_dict() for d in downs]
                self.unexplained = downs  # a reason of the verdict (late_reasons), which prints it
        if not self.records:
            return
        outcome.settings["faults"] = [r.to_dict() for r in self.records]
        outcome.lines.extend(fault_lines(self.records, time_scale))
        if outcome.messages:  # a run of messages: who the faults cost anything (an AllReduce is judged whole)
            domain = FailureDomain.of(outcome.messages)
            outcome.settings["failure_domain"] = domain.to_dict()
            outcome.lines.append(domain.describe(time_scale))
        problems = [p for r in self.records if (p := r.problem()) is not None]
        if problems and outcome.problem is None:
            outcome.problem = problems[0]
