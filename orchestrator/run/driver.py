"""The experiment driver: play a trace over a deployed, configured lab in one mode and record the run.

Every mode goes through the same steps once (``orchestrator/experiment/modes/base.py``): prepare (open
the lab, read the trace, let the mode check both and configure what it needs) → load (the mode tells
each agent its part) → counters before → run → counters after → collect (the mode judges what was
delivered) → save ``results/<run-id>/`` (docs/results-format.md).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aidcnet.modes import MEMBERSHIP, RELIABLE, Mode
from aidcnet.timescale import TimeScale
from orchestrator.experiment.clock import format_seconds, wall
from orchestrator.experiment.fault_runner import FaultRunner
from orchestrator.experiment.fidelity import (
    CONFIRM_FACTOR,
    CONFIRM_LINK_BYTES,
    CONFIRM_LINK_BYTES_MEMBERSHIP,
    CONFIRM_STEPS,
    Confirmation,
    unfinished_reasons,
    unresponsive_reasons,
    without,
)
from orchestrator.experiment.metrics import agent_deltas, compute_metrics, link_deltas, link_pairs
from orchestrator.experiment.modes import mode_class
from orchestrator.experiment.modes.base import ExperimentMode, ModeOutcome, RunOptions
from orchestrator.experiment.records import ConfirmationRecord, RunResult
from orchestrator.experiment.results import (
    DEFAULT_RESULTS_DIR,
    amend_timing,
    load_run,
    new_meta,
    new_run_id,
    save_run,
    trace_info,
)
from orchestrator.experiment.scale_search import DEFAULT_MAX_RUNS, Trial, find_scale
from orchestrator.experiment.session import ExperimentError, LabSession, Snapshot
from orchestrator.experiment.watch import FabricWatch, wait_machine_settled
from orchestrator.lab import labdir, relayctl
from orchestrator.lab.fabric import FABRIC_FILE
from orchestrator.lab.rescale import at_scale, rescale
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.shaping import machine_cpu_s
from orchestrator.lab.topology import Topology
from orchestrator.run.autoscale import Calibration
from orchestrator.run.calibrate import (
    BFRS_RUN,
    HOSTS_RUN,
    STEPS,
    calibration_trace,
    costs,
    load_calibration,
    save_calibration,
)
from orchestrator.run.prediction import Predicted, predict_run
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
    mode: Mode,
    options: RunOptions | None = None,
    *,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    progress: Callable[[str], None] | None = None,
    auto_scale: bool = True,
) -> RunOutcome:
    """Replay ``trace`` over the deployed lab ``topo`` in ``mode``; saves and returns the run. On a lab
    with ``time.scale: auto`` the run first reshapes the lab to the scale its trace needs, unless
    ``auto_scale`` is False (a calibration, a confirmation or a scale search sets the scale itself)."""
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
        predicted = prediction_of(spec, session, ops, say)
        if auto_scale and session.plan.time.auto and predicted is not None:
            choose_time_scale(session, predicted, runtime, say, RELIABLE.get(spec.name))
        # after the prepare and any calibration, just before the run: nothing else may pace it
        if (line := wait_machine_settled(os.cpu_count() or 1, machine_cpu_s).describe()) is not None:
            say(line)
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
        faults.judge(outcome, session.time_scale)
        late = late_reasons(session, faults)
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
            timing=watch.finish(
                agents, due_spans(outcome, finished.timestamp()), late, faults.downed_ports()
            ),
        )
        run_dir = save_judged(result, predicted, outcome, watch, results_dir)
    done = RunOutcome(load_run(run_dir), run_dir, outcome)
    m = done.result.metrics
    assert m is not None
    ct = wall(m.completion_time)
    phases.summary(
        f"{m.delivery.delivered}/{m.delivery.expected} delivered, {m.delivery.duplicates} duplicates, "
        f"source egress {m.source_egress_bytes} B, completion {ct}{timing_summary(done.result)}, "
        f"run {run_dir}"
    )
    return done


def save_judged(
    result: RunResult,
    predicted: Predicted | None,
    outcome: ModeOutcome,
    watch: FabricWatch,
    results_dir: str | Path,
) -> Path:
    """The run with its metrics, its timing set against its prediction, saved with the mode's files and
    the fabric it ran on; its directory."""
    metrics = compute_metrics(result)  # once: save_run keeps metrics it is given
    timing = result.timing
    if timing is not None:
        timing = timing.paced(
            metrics.completion_time,
            None if predicted is None else predicted.fabric_s,
            "" if predicted is None else predicted.by,
            None if predicted is None else predicted.propagation_s,
        )
    outcome.lines.extend(watch.fault_losses)  # what the faults cost at the ports they took down
    run_dir = save_run(result.model_copy(update={"metrics": metrics, "timing": timing}), results_dir)
    for name, text in outcome.files.items():
        (run_dir / name).write_text(text)
    if watch.fabric is not None:
        # the rates, queues and faults the run saw, as the lab dir had them
        shutil.copyfile(watch.lab_dir / FABRIC_FILE, run_dir / FABRIC_FILE)
    return run_dir


def choose_time_scale(
    session: LabSession,
    predicted: Predicted,
    runtime: DockerRuntime | None,
    say: Callable[[str], None],
    feedback: str | None = None,
) -> None:
    """``time.scale: auto``: the smallest scale at which this trace stays faithful on this machine, from
    the lab's calibration (measured first when there is none); links and agents are reshaped to it.
    ``feedback``: a reliable mode's kind (:data:`aidcnet.modes.RELIABLE`), whose ACKs and DATA reports
    the agents handle beside what the model predicts."""
    from aidcnet.igmp.router import WIRE_TIMERS
    from orchestrator.run.autoscale import choose_scale, demand_of, igmp_scales

    topo = session.topo
    calibration = load_calibration(topo, session.plan.bier.dataplane)
    delayed = any(session.delays.values())
    if calibration is None:
        say(f"time scale auto: lab {topo.name} is not calibrated on this machine yet; calibrating first")
        calibration = calibrate(topo, runtime, say=say)
    elif delayed and calibration.relay_cpu_per_packet_s is None:
        say(f"time scale auto: lab {topo.name} has delayed links, and its calibration has no cost of the "
            "delay relay; calibrating again")  # fmt: skip
        calibration = calibrate(topo, runtime, say=say)
    roles = {name: node.role for name, node in session.plan.nodes.items()}
    fastest = max(link.bandwidth_bps for link in session.plan.links)
    floors, ceiling = [], None
    igmp = session.plan.igmp
    if igmp.enabled:
        # The leaves' queries carry the timers in 8-bit codes of wall time: a scale outside this range
        # is one the agents refuse to take.
        low, ceiling, why = igmp_scales({name: getattr(igmp, name) for name, _unit in WIRE_TIMERS})
        floors.append((low, why))
    demand = demand_of(predicted.prediction, roles, feedback, session.delays)
    choice = choose_scale(demand, calibration, TimeScale.minimum_for(fastest), floors)
    say(choice.describe())
    if ceiling is not None and choice.time_scale.factor > ceiling:
        raise ExperimentError(
            f"lab {topo.name}: time scale auto chose 1:{choice.time_scale.factor}, above the 1:{ceiling} at "
            f"which its IGMP timers still fit their codes ({floors[0][1]}); set the igmp timers in the "
            "vars so that they fit, or pin time.scale (docs/igmp.md)"
        )
    if choice.time_scale != session.time_scale:
        rescale(labdir.lab_dir(topo), topo.container_name, session.agents, choice.time_scale)
        session.time_scale = choice.time_scale


def prediction_of(
    spec: ExperimentMode, session: LabSession, ops: list[TraceOp], say: Callable[[str], None]
) -> Predicted | None:
    """The time model's completion of the run, said to the user; None (said too) where the model cannot
    predict the mode or the lab as it is (the run is then set against its busiest link's bound)."""
    from orchestrator.lab.shaping import load_fabric
    from orchestrator.model.exact import ModelError

    if not session.time_scale.shaped:
        return None
    try:
        conditions = load_fabric(labdir.lab_dir(session.topo)).conditions()
        predicted = predict_run(spec, session, ops, conditions)
    except ModelError as exc:
        say(f"no prediction: {exc}; the run is set against its busiest link's bound")
        return None
    if predicted is None:
        say(f"no prediction: the time model does not cover {spec.name}; the run is set against its bound")
    else:
        say(predicted.describe())
    return predicted


def late_reasons(session: LabSession, faults: FaultRunner) -> list[str]:
    """What the driver itself found spoils the run's times: a fault that took effect late, a node whose
    agent stopped answering, a sender still sending when the run gave up."""
    return [
        *faults.late_reasons(session.time_scale),
        *unresponsive_reasons(session.lost.nodes),
        *unfinished_reasons(session.unfinished),
    ]


def due_spans(outcome: ModeOutcome, run_end_s: float) -> dict[str, list[tuple[float, float]]]:
    """Per sending host, [(due, last datagram handed to the kernel)] of each op in wall-clock seconds, from
    the agents' own accounts: the time each had data due and not yet sent (an op never sent is due to the
    end of the run), less the spans a reliable source's protocol let it send nothing (it waited on the
    fabric's answers)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for host, times in outcome.op_times.items():
        for t in times:
            end = run_end_s if t.last_ns is None else t.last_ns / 1e9
            out.setdefault(host, []).append((t.due_ns / 1e9, max(end, t.due_ns / 1e9)))
    for host, waits in outcome.protocol_waits.items():
        if host in out:
            out[host] = without(out[host], waits)
    return out


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
        parts.append(f"= {format_seconds(m.completion_fabric_time)} fabric at scale 1:{timing.scale}")
    if timing.pace is not None:
        predicted = format_seconds(timing.pace.predicted_fabric_s)
        parts.append(f"{timing.pace.ratio:.2f}× the {predicted} predicted by {timing.pace.by}")
        if timing.pace.propagation_s is not None:
            parts.append(f"{format_seconds(timing.pace.propagation_s)} of it the links' delay")
    elif timing.bound is not None and m.bound_ratio is not None:
        parts.append(f"{m.bound_ratio:.2f}× the bound of {timing.bound.link}")
    parts.append(timing.verdict_text)
    return " (" + ", ".join(parts) + ")"


def confirm(
    topo: Topology,
    trace: str | Path,
    mode: str,
    first: RunOutcome,
    options: RunOptions | None = None,
    *,
    factor: float = CONFIRM_FACTOR,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    progress: Callable[[str], None] | None = None,
) -> tuple[RunOutcome, Confirmation | None]:
    """Time dilation's test of ``first``: the same trace at ``factor`` times its scale must give the same
    fabric completion (within fidelity.CONFIRM_TOLERANCE) and the same bytes. Both runs' verdicts take the
    outcome (their run.json is amended); the lab is put back at its scale. Returns the second run and the
    comparison (None when either run has no fabric completion to compare)."""
    session = LabSession.open(topo, runtime)
    # the run's own scale, which a climb (confirm_rising) leaves behind the lab's
    first_timing = first.result.timing
    scale = session.time_scale if first_timing is None else TimeScale.of(first_timing.scale)
    lab_dir = labdir.lab_dir(topo)
    second_scale = scale.times(factor)
    (progress or print)(f"confirming at {second_scale.label} (the run was at {scale.label})")
    with at_scale(lab_dir, topo.container_name, session.agents, second_scale):
        second = run_experiment(
            topo, trace, mode, options, runtime=runtime, results_dir=results_dir, auto_scale=False
        )
    runs = (first, second)
    fabric = [o.result.metrics.completion_fabric_time if o.result.metrics else None for o in runs]
    timings = [o.result.timing for o in runs]
    if None in fabric or None in timings:
        return second, None
    check = Confirmation(
        scales=(scale.factor, second_scale.factor),
        fabric_s=(fabric[0], fabric[1]),  # type: ignore[arg-type]
        payload_bytes=tuple(_metric(o.result, "payload_delivered_bytes") for o in runs),  # type: ignore[arg-type]
        link_bytes=tuple(_metric(o.result, "total_fabric_bytes") for o in runs),  # type: ignore[arg-type]
        link_tolerance=CONFIRM_LINK_BYTES_MEMBERSHIP if mode in MEMBERSHIP else CONFIRM_LINK_BYTES,
    )
    for here, there, timing in ((first, second, timings[0]), (second, first, timings[1])):
        record = ConfirmationRecord(
            scale=there.result.timing.scale,  # type: ignore[union-attr]
            run_id=there.result.run_id,
            completion_fabric_s=there.result.metrics.completion_fabric_time,  # type: ignore[union-attr]
            off=check.off,
            same_bytes=check.same_bytes,
            confirmed=check.confirmed,
            text=check.describe(),
        )
        here.result = amend_timing(here.run_dir, timing.confirmed_by(record))  # type: ignore[union-attr]
    return second, check


def confirm_rising(
    topo: Topology,
    trace: str | Path,
    mode: str,
    first: RunOutcome,
    options: RunOptions | None = None,
    *,
    steps: int = CONFIRM_STEPS,
    factor: float = CONFIRM_FACTOR,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[RunOutcome], Confirmation | None]:
    """Time dilation's test, climbing: ``first`` held to a run at ``factor`` times its scale (:func:`confirm`)
    and, when the two disagree, the more dilated one held in turn to a run at ``factor`` times *its* scale, up
    to ``steps`` comparisons. A disagreement says the less dilated run was paced by something other than its
    links (the software, a busy machine), so the more dilated one is the better account and the one worth
    confirming; the refuted run stays refuted. Returns every run, ``first`` included, and the last
    comparison (None when a run had no fabric completion to compare)."""
    if steps < 1:
        raise ValueError(f"confirm steps must be 1 or more, not {steps}")
    runs: list[RunOutcome] = [first]
    for step in range(steps):
        second, check = confirm(
            topo,
            trace,
            mode,
            runs[-1],
            options,
            factor=factor,
            runtime=runtime,
            results_dir=results_dir,
            progress=progress,
        )
        runs.append(second)
        if check is None or check.confirmed:
            break
        if step + 1 < steps:
            (progress or print)(f"{check.describe()}: climbing")
    return runs, check


def _metric(result: RunResult, name: str) -> int:
    return 0 if result.metrics is None else int(getattr(result.metrics, name))


def search_scale(
    topo: Topology,
    trace: str | Path,
    mode: Mode,
    options: RunOptions | None = None,
    *,
    runtime: DockerRuntime | None = None,
    results_dir: str | Path = DEFAULT_RESULTS_DIR,
    max_runs: int = DEFAULT_MAX_RUNS,
    progress: Callable[[str], None] | None = None,
) -> list[Trial]:
    """The smallest faithful time scale for ``trace`` in ``mode`` on the deployed lab: a few runs, the
    links and the agents rescaled between them (each run converts its times with its own scale), the
    lab's own scale put back at the end (every run is saved)."""
    from orchestrator.lab.shaping import load_fabric

    say = progress or (lambda text: print(f"  {text}"))
    lab_dir = labdir.lab_dir(topo)
    original = load_fabric(lab_dir)
    session = LabSession.open(topo, runtime)
    if not original.time_scale.shaped:
        raise ExperimentError(
            f"lab {topo.name} is not shaped (time.scale off): set time.scale in its vars and configure it, "
            "then search from there"
        )
    floor = TimeScale.minimum_for(max(e.bandwidth_bps for e in original.ends.values()))

    def run_at(scale: int) -> Trial:
        rescale(lab_dir, topo.container_name, session.agents, TimeScale(scale))
        done = run_experiment(
            topo, trace, mode, options, runtime=runtime, results_dir=results_dir, auto_scale=False
        )
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
        return find_scale(original.time_scale.factor, run_at, floor=floor, max_runs=max_runs, say=say)
    finally:
        rescale(lab_dir, topo.container_name, session.agents, original.time_scale)


def calibrate(
    topo: Topology, runtime: DockerRuntime | None = None, say: Callable[[str], None] = print
) -> Calibration:
    """Replay the calibration trace in unicast and host-BIER on the configured lab, keep what it cost."""
    session = LabSession.open(topo, runtime)
    hosts = session.gpu_hosts()
    if len(hosts) < 2:
        raise ExperimentError(f"lab {topo.name} has {len(hosts)} GPU host(s): calibration needs two")
    work = labdir.lab_dir(topo) / "calibration"
    work.mkdir(parents=True, exist_ok=True)
    trace = calibration_trace(hosts, work / "trace.jsonl")
    runs = []
    relay_before = relayctl.status(labdir.lab_dir(topo))
    for mode in (HOSTS_RUN, BFRS_RUN):
        say(f"calibration: {mode} replay of a {STEPS}-step MoE dispatch over {len(hosts)} hosts")
        done = run_experiment(topo, trace, mode, runtime=runtime, results_dir=work / "runs", auto_scale=False)
        runs.append(done.result)
    relay_after = relayctl.status(labdir.lab_dir(topo))
    relay = None
    if relay_before and relay_after:
        # A relay that held nothing here (no delayed link on the calibration's paths) costs nothing here;
        # 0 rather than None, or every automatic run would calibrate again.
        relay = relayctl.cpu_per_packet_s(relay_before, relay_after) or 0.0
    roles = {name: node.role for name, node in session.plan.nodes.items()}
    result = costs(runs, roles, topo.name, session.plan.bier.dataplane, relay)
    save_calibration(topo, result)
    say(result.describe())
    return result
