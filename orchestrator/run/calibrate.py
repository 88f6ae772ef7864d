"""Calibrate this machine on a lab: what its software costs per packet (``aidclab calibrate LAB``).

Two replays of a small MoE dispatch over every GPU host of the lab (unicast, then host-BIER, so the BFRs
replicate) at the lab's own scale. From each node's cgroup CPU seconds, the machine's busy seconds and the
packets the links counted, three costs (:class:`orchestrator.run.autoscale.Calibration`):

* a host agent's CPU per datagram it sent or received;
* a BFR agent's CPU per copy it forwarded (on eBPF BFRs the kernel forwards and this is near zero);
* the whole lab's CPU per packet on a link (every node's cgroup together: the kernel's forwarding is
  mostly charged to the nodes whose packets it handles). Not the machine's busy time: whatever else runs
  on the machine would be counted as the lab's cost.

On a lab with delayed links, a fourth: the delay relay's CPU per packet it held (its own process, in no
node's cgroup; docs/delay.md), from its status before and after the runs.

Idle CPU of the agents (timers, keepalives) is counted in: the costs err high, and a scale chosen from
them errs long. The result is kept in ``clab-<lab>/calibration.json``; ``time.scale: auto`` reads it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from aidcnet.modes import Mode
from aidcnet.roles import Role
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.session import ExperimentError
from orchestrator.lab import labdir
from orchestrator.lab.topology import Topology
from orchestrator.paths import CACHE
from orchestrator.run.autoscale import CALIBRATION_FILE, Calibration

# Tokens per host per step of the calibration's MoE dispatch: enough packets that per-packet costs rise
# above the agents' idle CPU, few enough that a 256-host lab calibrates in a minute.
TOKENS_PER_HOST = 16
STEPS = 2
# The hosts' costs from a run where the kernel routes (no BFR copies); the BFRs' from one where they
# replicate.
HOSTS_RUN = Mode.UNICAST
BFRS_RUN = Mode.HOST_BIER


def calibration_path(topo: Topology) -> Path:
    return labdir.lab_dir(topo) / CALIBRATION_FILE


def machine_calibration_path(dataplane: str) -> Path:
    """This machine's last calibration on a lab with ``dataplane`` BFRs: a new lab starts from it (the
    per-packet costs are the machine's and the dataplane's, not the lab's)."""
    return CACHE / f"calibration-{dataplane}.json"


def _read(path: Path, lab: str) -> Calibration | None:
    if not path.exists():
        return None
    try:
        return Calibration.model_validate_json(path.read_text())
    except ValueError as exc:
        raise ExperimentError(f"{path}: not a calibration ({exc}); run aidclab calibrate {lab}") from None


def load_calibration(topo: Topology, dataplane: str) -> Calibration | None:
    """The lab's calibration for its dataplane; else this machine's last one for that dataplane, kept in
    the lab dir from then on; else None."""
    mine = _read(calibration_path(topo), topo.name)
    if mine is not None and mine.dataplane == dataplane:
        return mine
    machine = _read(machine_calibration_path(dataplane), topo.name)
    if machine is not None:
        calibration_path(topo).write_text(machine_calibration_path(dataplane).read_text())
    return machine


def calibration_trace(hosts: list[str], path: Path) -> Path:
    from orchestrator.workloads.moe import MoEParams, generate

    experts = max(8, 8 * len(hosts))
    params = MoEParams(hosts=tuple(hosts), steps=STEPS, tokens_per_host=TOKENS_PER_HOST, experts=experts)
    generate(params).write(path)
    return path


def node_packets(result: RunResult) -> dict[str, int]:
    """Packets each node's interfaces sent and received over a run (both directions of its links)."""
    out: dict[str, int] = {}
    for link in result.links:
        a, b = link.a.split(":", 1)[0], link.b.split(":", 1)[0]
        packets = link.a_to_b_packets + link.b_to_a_packets
        out[a] = out.get(a, 0) + packets
        out[b] = out.get(b, 0) + packets
    return out


def forwarded(result: RunResult) -> dict[str, int]:
    """Packets each node sent over a run (what a BFR forwarded)."""
    out: dict[str, int] = {}
    for link in result.links:
        a, b = link.a.split(":", 1)[0], link.b.split(":", 1)[0]
        out[a] = out.get(a, 0) + link.a_to_b_packets
        out[b] = out.get(b, 0) + link.b_to_a_packets
    return out


def costs(
    runs: list[RunResult],
    roles: dict[str, Role],
    lab: str,
    dataplane: str,
    relay_cpu_per_packet_s: float | None = None,
) -> Calibration:
    """The three per-packet costs from calibration runs (pure: the runs' records only), and the delay
    relay's as measured over them (``orchestrator.lab.relayctl.cpu_per_packet_s``; None without one)."""
    host_cpu = host_pkts = bfr_cpu = bfr_pkts = machine_cpu = hops = 0.0
    cores = 1
    for run in runs:
        t = run.timing
        if t is None or t.machine_cpu_s is None:
            raise ExperimentError(
                f"calibration run {run.run_id} has no CPU record: the lab's links must be shaped "
                "(time.scale) to calibrate"
            )
        cores = t.cores or cores
        machine_cpu += sum(node.cpu_s for node in t.nodes.values())
        hops += sum(link.a_to_b_packets + link.b_to_a_packets for link in run.links)
        packets, sent = node_packets(run), forwarded(run)
        for node, timing in t.nodes.items():
            if roles.get(node) == Role.GPU_HOST:
                host_cpu += timing.cpu_s
                host_pkts += packets.get(node, 0)
            elif roles.get(node) in (Role.BFR, Role.INA_SWITCH):
                bfr_cpu += timing.cpu_s
                bfr_pkts += sent.get(node, 0)
    if not host_pkts or not hops:
        raise ExperimentError(f"calibration of {lab}: the runs moved no packets")
    return Calibration(
        lab=lab,
        measured=datetime.now(UTC).isoformat(timespec="seconds"),
        dataplane=dataplane,
        cores=cores,
        host_cpu_per_packet_s=host_cpu / host_pkts,
        bfr_cpu_per_packet_s=bfr_cpu / bfr_pkts if bfr_pkts else 0.0,
        machine_cpu_per_hop_s=machine_cpu / hops,
        relay_cpu_per_packet_s=relay_cpu_per_packet_s,
        run_id=runs[-1].run_id,
    )


def save_calibration(topo: Topology, result: Calibration) -> None:
    """Keep a calibration in the lab dir and as this machine's last one for its dataplane."""
    text = json.dumps(result.model_dump(mode="json"), indent=2) + "\n"
    calibration_path(topo).write_text(text)
    machine_calibration_path(result.dataplane).parent.mkdir(parents=True, exist_ok=True)
    machine_calibration_path(result.dataplane).write_text(text)
