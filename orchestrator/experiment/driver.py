"""The experiment driver: play a trace over a deployed, configured lab in one mode and record the run.

Every mode goes through the same steps once (``orchestrator/experiment/modes/base.py``): prepare (open
the lab, read the trace, let the mode check both and configure what it needs) → load (the mode tells
each agent its part) → counters before → run → counters after → collect (the mode judges what was
delivered) → save ``results/<run-id>/`` (docs/results-format.md).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.experiment.fault_runner import FaultRunner
from orchestrator.experiment.metrics import agent_deltas, compute_metrics, link_deltas, link_pairs
from orchestrator.experiment.modes import mode_class
from orchestrator.experiment.modes.base import ExperimentMode, ModeOutcome, RunOptions
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.results import (
    DEFAULT_RESULTS_DIR,
    load_run,
    new_meta,
    new_run_id,
    save_run,
    trace_info,
)
from orchestrator.experiment.scale_search import DEFAULT_MAX_RUNS, Trial, find_scale
from orchestrator.experiment.session import ExperimentError, LabSession, Snapshot
from orchestrator.experiment.watch import FabricWatch
from orchestrator.lab.fabric import FABRIC_FILE
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.topology import Topology
from orchestrator.workloads.trace import TraceOp, TraceReader

if TYPE_CHECKING:
    from orchestrator.progress import Phases


@dataclass
class RunOutcome:
    result: RunResult
    run_dir: Path
    mode: ModeOutcome = field(repr=False)

    @property
    def missing(self) -> list[tuple[int, str]]:
        return self.mode.missing

    @property
    def wrong(self) -> list[tuple[int, str]]:
        return self.mode.wrong

    @property
    def ok(self) -> bool:
        d = self.result.metrics.delivery if self.result.metrics else None
        return (
            not self.missing
            and not self.wrong
            and self.mode.problem is None
            and d is not None
            and d.duplicates == 0
        )


def run_experiment(
    topo: Topology,
    trace: str | Path,
    mode: str,
    options: RunOptions | None = None,
    *,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    progress: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Replay ``trace`` over the deployed lab ``topo`` in ``mode``; saves and returns the run."""
    from orchestrator.progress import Phases, console

    spec = mode_class(mode)(options)
    say = progress or (lambda text: console.print(f"  {text}", highlight=False))
    phases = Phases(f"replay {topo.name} {spec.name}")
    trace = Path(trace)

    with phases.phase("prepare", f"{trace} onto lab {topo.name}"):
        info = trace_info(trace)
        with TraceReader(trace) as reader:
            ops = list(reader)
        spec.check_trace(ops, trace)
        session = LabSession.open(topo, runtime)
        session.lost.say = say
        spec.prepare(session, ops, say)
        faults = FaultRunner.for_run(spec, session, topo, runtime)
        watch = FabricWatch(session)
        if (line := watch.wait_quiet().describe()) is not None:
            say(line)
    links_before, agents_before = load_and_snapshot(spec, session, ops, phases, watch)
    started = datetime.now(UTC)
    with phases.phase("run", f"{len(ops)} ops in mode {spec.name}"), watch, faults:
        spec.run(session, ops, say)
    finished = datetime.now(UTC)
    with phases.phase("collect", "counters after, deliveries judged"):
        links_after = session.interface_snapshot()
        agents_after = faults.counters_after(session.agent_snapshot(session.lost))
        agents_before = {n: c for n, c in agents_before.items() if n in agents_after}
        outcome = spec.collect(session, ops)
        faults.judge(outcome, session.plan.time.scale)
        result = RunResult(
            meta=new_meta(
                run_id=new_run_id(topo.name, spec.name),
                lab=topo.name,
                mode=spec.name,
                trace=info,
                started=started,
                finished=finished,
                topology_file=Path(topo.path).resolve(),
                settings={**outcome.settings, **fabric_settings(session, watch)},
            ),
            links=link_deltas(links_before, links_after, link_pairs(topo)),
            agents=(agents := agent_deltas(agents_before, agents_after)),
            messages=outcome.messages,
            timing=(timing := watch.finish(agents)),
        )
        metrics = compute_metrics(result)  # once: save_run keeps metrics it is given
        if timing is not None:
            timing = timing.noting_completion(metrics.completion_time)
        result = result.model_copy(update={"metrics": metrics, "timing": timing})
        run_dir = save_run(result, results_dir)
        for name, text in outcome.files.items():
            (run_dir / name).write_text(text)
        if watch.fabric is not None:
            # the rates, queues and faults the run saw, as the lab dir had them
            shutil.copyfile(watch.lab_dir / FABRIC_FILE, run_dir / FABRIC_FILE)
    done = RunOutcome(load_run(run_dir), run_dir, outcome)
    m = done.result.metrics
    assert m is not None
    ct = "–" if m.completion_time is None else f"{m.completion_time * 1e3:.1f} ms"
    phases.summary(
        f"{m.delivery.delivered}/{m.delivery.expected} delivered, {m.delivery.duplicates} duplicates, "
        f"source egress {m.source_egress_bytes} B, completion {ct}{timing_summary(done.result)}, "
        f"run {run_dir}"
    )
    return done


def load_and_snapshot(
    spec: ExperimentMode, session: LabSession, ops: list[TraceOp], phases: Phases, watch: FabricWatch
) -> tuple[Snapshot, Snapshot]:
    """The agents get their part, then the counters before: (interfaces, agents). A run that fails here
    never starts, so its watch gives back what it holds."""
    try:
        with phases.phase("load", f"{len(ops)} ops onto the agents"):
            spec.load(session, ops)
        with phases.phase("snapshot", "interface and agent counters before"):
            return session.interface_snapshot(), session.agent_snapshot()
    except BaseException:
        watch.close()
        raise


def fabric_settings(session: LabSession, watch: FabricWatch | None = None) -> dict[str, Any]:
    """What of the lab's configuration a comparison must tell apart: FARE or ECMP next-hop weights, and
    the link conditions in force when the run started (docs/results-format.md, settings.conditions)."""
    bgp = session.plan.bgp
    out: dict[str, Any] = {"bgp_weights": bgp.weights} if bgp.enabled else {}
    if watch is not None:
        out["conditions"] = watch.fabric.conditions() if watch.fabric is not None else None
    return out


def timing_summary(result: RunResult) -> str:
    """The run's clock in words: fabric time next to wall time, the bound, and the verdict."""
    timing, m = result.timing, result.metrics
    if timing is None or m is None:
        return ""
    if timing.scale is None:
        return " (wall time: links unshaped, not judged for fidelity)"
    parts = []
    if m.completion_fabric_time is not None:
        parts.append(f"= {m.completion_fabric_time * 1e6:.1f} µs fabric at scale 1:{timing.scale}")
    if timing.bound is not None and m.bound_ratio is not None:
        parts.append(f"{m.bound_ratio:.2f}× the bound of {timing.bound.link}")
    parts.append(timing.verdict_text)
    return " (" + ", ".join(parts) + ")"


def search_scale(
    topo: Topology,
    trace: str | Path,
    mode: str,
    options: RunOptions | None = None,
    *,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    max_runs: int = DEFAULT_MAX_RUNS,
    progress: Callable[[str], None] | None = None,
) -> list[Trial]:
    """The smallest faithful time scale for ``trace`` in ``mode`` on the deployed lab: a few runs, the
    links reshaped between them, the lab's own scale put back at the end (every run is saved)."""
    from orchestrator.configure.plan.timescale import MAX_SHAPED_BPS
    from orchestrator.lab import labdir
    from orchestrator.lab.shaping import apply_fabric, load_fabric

    say = progress or (lambda text: print(f"  {text}"))
    lab_dir = labdir.lab_dir(topo)
    original = load_fabric(lab_dir)
    if original.scale is None:
        raise ExperimentError(
            f"lab {topo.name} is not shaped (time.scale off): set time.scale in its vars and configure it, "
            "then search from there"
        )
    floor = max(1, -(-max(e.bandwidth_bps for e in original.ends.values()) // MAX_SHAPED_BPS))

    def run_at(scale: int) -> Trial:
        apply_fabric(original.with_scale(scale), lab_dir, topo.container_name)
        done = run_experiment(topo, trace, mode, options, runtime=runtime, results_dir=results_dir)
        timing, m = done.result.timing, done.result.metrics
        reasons = list(timing.reasons) if timing else []
        if not done.ok:
            reasons.append("the run was not exact (missing, wrong or duplicate deliveries)")
        faithful = bool(timing and timing.faithful) and done.ok
        return Trial(
            scale,
            faithful,
            m.completion_time if m else None,
            str(done.run_dir),
            reasons,
            m.bound_ratio if m else None,
        )

    try:
        return find_scale(original.scale, run_at, floor=floor, max_runs=max_runs, say=say)
    finally:
        apply_fabric(original, lab_dir, topo.container_name)
