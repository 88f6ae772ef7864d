"""The time scale a lab and trace need on this machine (``time.scale: auto``): pure choice, no I/O.

A run is faithful when the links, not our software, set its pace (docs/time-and-fidelity.md). Our software
costs CPU per packet: a host agent's Python per datagram it sends or receives, a BFR per copy it forwards,
and the kernel per link hop. At time scale ``s`` a trace whose packets the fabric carries in ``T`` seconds
of fabric time is carried in ``s × T`` seconds of wall time, so every node's packets-per-wall-second, and
the CPU they cost, shrink as ``1 / s``. The smallest scale at which

* every node's agent stays within :data:`AGENT_HEADROOM` of the one core it can use, and so does the
  lab's delay relay (one process holding every packet of every delayed link, docs/delay.md),
* the whole lab stays within :data:`HEADROOM` of the machine's cores, and
* the run lasts at least :data:`MIN_WALL_S` of wall time (long enough for the verdict's counters to see
  a node held back; a shorter run can only be judged on invariance),
* the datagrams the hosts issue at one moment cost the machine's cores less wall time than the verdict
  lets a node hold its work back (``fidelity.HELD_LIMIT_SHARE`` of the run): every sender hands its
  datagrams to its socket at once, so on a big lab a sender may get a core only after all the others,

is the one to use. The per-packet costs come from a calibration of this machine on this lab
(:class:`Calibration`, ``clab-<lab>/calibration.json``, :mod:`orchestrator.run.calibrate`); the
packets and the fabric time come from the time model's prediction of the trace (:class:`Demand`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aidcnet.roles import Role
from aidcnet.timescale import TimeScale
from orchestrator.experiment.fidelity import HELD_LIMIT_S, HELD_LIMIT_SHARE

# The whole machine may use at most this share of its cores: the rest absorbs bursts (a MoE step's sends
# all come at once) and the sampling, Docker and the orchestrator itself.
HEADROOM = 0.5
# A node's agent may use at most this share of its one core. It is less than the machine's because a
# Python sender must be on time, not only keep up on average: it shares the cores with every other agent
# and the kernel, and a moment it waits for one is a moment its link idles. Measured on a 2-core machine
# (model distribution's source, the lab using 42% of the machine): at 40% of its core (1:3000) the source
# left its link idle 0.18-1.06 s of 3.4-4.5 s in 3 of 13 runs here, and in 3 runs of one CI; at 20-24%
# (1:5000, 1:6000) in none of 4.
AGENT_HEADROOM = 0.25
# A run shorter than this (wall) is too short for the verdict's counters (0.1 s samples, a 0.5 s CPU
# window) to see a node held back.
MIN_WALL_S = 1.0
# Scales are rounded up to 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten: a user reads
# 1:25000, not 1:23817, and a scale a little above the need costs a little wall time only.
NICE = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 1


class Calibration(BaseModel):
    """What this machine's software costs per packet on one lab, measured by a calibration run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = CALIBRATION_VERSION
    lab: str
    measured: str  # ISO time of the calibration run
    dataplane: str  # the BFRs' dataplane when measured (ebpf, python): a BFR's cost depends on it
    cores: int = Field(ge=1)
    # CPU seconds (wall clock, one core = 1 s/s) per packet: a host agent per datagram it sends or
    # receives; a BFR's agent per copy it forwards (near 0 on eBPF: the kernel forwards); all the lab's
    # nodes together per packet on a link (agents and the kernel's forwarding charged to them).
    host_cpu_per_packet_s: float = Field(ge=0)
    bfr_cpu_per_packet_s: float = Field(ge=0)
    machine_cpu_per_hop_s: float = Field(ge=0)
    # The delay relay's CPU per packet it held (its own process, in no node's cgroup); None when the lab
    # had no delayed link when calibrated.
    relay_cpu_per_packet_s: float | None = Field(default=None, ge=0)
    run_id: str | None = None  # the calibration run, for the record

    def describe(self) -> str:
        relay = self.relay_cpu_per_packet_s
        return (
            f"calibrated {self.measured} on {self.lab} ({self.dataplane} BFRs, {self.cores} cores): a host "
            f"agent {self.host_cpu_per_packet_s * 1e6:.1f} µs of CPU per datagram, a BFR "
            f"{self.bfr_cpu_per_packet_s * 1e6:.1f} µs per copy, the whole lab "
            f"{self.machine_cpu_per_hop_s * 1e6:.1f} µs per packet on a link"
            + ("" if relay is None else f", the delay relay {relay * 1e6:.1f} µs per packet it holds")
        )


@dataclass(frozen=True)
class Demand:
    """What a trace asks of the lab, from the time model: its completion in fabric time, the packets each
    node's software handles (hosts: sent + received datagrams; BFRs: copies forwarded), the packets on
    all links together, the datagrams a reliable mode's feedback adds to each node's agent (in Python,
    whatever the dataplane: :func:`feedback_datagrams`), the INA datagrams each INA switch's agent
    aggregates (in Python too), and the packets the delay relay holds (those sent on a delayed link
    end)."""

    fabric_s: float
    host_packets: Mapping[str, int] = field(default_factory=dict)
    bfr_packets: Mapping[str, int] = field(default_factory=dict)
    link_packets: int = 0
    feedback_packets: Mapping[str, int] = field(default_factory=dict)
    relay_packets: int = 0
    aggregated_packets: Mapping[str, int] = field(default_factory=dict)
    # The copies (a datagram per fragment and receiver) the other hosts issue at the busiest moment before
    # the one that issues the most has a core (Prediction.issued_at_once: all of them but that host's own,
    # which keep its own link busy).
    issued_at_once: int = 0

    def python_datagrams(self, node: str) -> int:
        """The datagrams ``node``'s agent handles in Python beside its role's own packets."""
        return self.feedback_packets.get(node, 0) + self.aggregated_packets.get(node, 0)


def feedback_datagrams(
    sent: Mapping[str, int], received: Mapping[str, int], copies: Mapping[str, int], feedback: str
) -> dict[str, int]:
    """The datagrams a reliable mode's feedback adds to each node's agent, as upper bounds, from the DATA
    the model moves: ``sent`` and ``received`` per host, ``copies`` each BFR sends on. ``feedback`` as
    :data:`aidcnet.modes.RELIABLE` names it: ``e2e`` (every receiver answers the source itself), ``hop``
    or ``net`` (the BFRs aggregate).

    * A receiver sends an ACK for each DATA it receives (measured end to end: 7.000 per packet for 7).
    * End to end, a source takes in all the ACKs of its DATA: its share of them, by the DATA it sent.
      Aggregated, at most one per DATA per first-hop branch (measured: 0.5 on leaf-spine), counted as one.
    * Aggregated, a BFR's agent takes a report of each DATA it forwards (the eBPF fast path's, or its own
      forwarding on the Python dataplane) and about one feedback datagram per copy it sent down: two per
      copy. End to end, a BFR routes the ACKs in its kernel and its agent does nothing more.

    The feedback's hops on the links are left out: the kernel forwards them, at a cost the calibration's
    per-hop figure (mostly our agents' Python) would overstate many times over."""
    out = dict(received)
    total_sent, total_acks = sum(sent.values()), sum(received.values())
    for host, n in sent.items():
        if not n:
            continue
        taken = round(total_acks * n / total_sent) if feedback == "e2e" else n
        out[host] = out.get(host, 0) + taken
    if feedback != "e2e":
        for bfr, n in copies.items():
            out[bfr] = out.get(bfr, 0) + 2 * n
    return {node: n for node, n in out.items() if n}


def demand_of(
    prediction: Any,
    roles: Mapping[str, str],
    feedback: str | None = None,
    delays: Mapping[str, float] | None = None,
) -> Demand:
    """The demand of a trace from the time model's prediction of it
    (:class:`orchestrator.model.timing.Prediction`): every host's datagrams sent and received, every
    other agent's packets sent on (a BFR's or an INA switch's copies), the INA datagrams each switch
    aggregates (``prediction.aggregated``), every link's packets; ``roles``:
    node -> its role; ``feedback``: a reliable mode's kind of feedback (:func:`feedback_datagrams`), which
    the model leaves out; ``delays``: each link end's delay, whose packets the relay holds where it is
    not 0."""
    sent: dict[str, int] = {}
    received: dict[str, int] = {}
    bfrs: dict[str, int] = {}
    links = 0
    for node, load in prediction.nodes().items():
        out = round(load.packets)
        links += out
        if roles.get(node) == Role.GPU_HOST:
            sent[node] = out
            received[node] = round(load.received_mean_pps * prediction.completion_s)
        elif out:
            bfrs[node] = out
    hosts = {node: sent[node] + received[node] for node in sent}
    extra = feedback_datagrams(sent, received, bfrs, feedback) if feedback else {}
    held = 0
    if delays and any(delays.values()):
        held = round(sum(n for end, n in prediction.link_packets.items() if delays.get(end)))
    aggregated = {n: k for n, k in prediction.aggregated.items() if k and roles.get(n) != Role.GPU_HOST}
    at_once = prediction.issued_at_once
    others = sum(at_once.values()) - max(at_once.values(), default=0)
    return Demand(prediction.completion_s, hosts, bfrs, links, extra, held, aggregated, others)


@dataclass(frozen=True)
class Choice:
    time_scale: TimeScale
    why: tuple[str, ...]  # every bound that was considered, the deciding one first

    def describe(self) -> str:
        return f"time scale auto: {self.time_scale.label} ({'; '.join(self.why)})"


def igmp_scales(timers_fabric_s: Mapping[str, float]) -> tuple[int, int, str]:
    """The scales at which a lab's IGMP timers (fabric seconds, the plan's igmp section) fit their 8-bit
    codes on the wall clock: (lowest, highest, why), whole numbers; none fits when lowest > highest."""
    from aidcnet.igmp.router import WIRE_TIMERS, wire_scale_range

    low, high = wire_scale_range(timers_fabric_s)
    shown = ", ".join(f"{name} {timers_fabric_s[name] * 1e6:g} µs" for name, _unit in WIRE_TIMERS)
    why = f"the IGMP timers ({shown} of fabric time) must fit their codes on the wall clock"
    return math.ceil(low - 1e-9), math.floor(high + 1e-9), why


def nice_ceiling(x: float) -> int:
    """The smallest 'nice' whole number (:data:`NICE` times a power of ten) at or above ``x``."""
    if x <= 1:
        return 1
    power = 10 ** math.floor(math.log10(x))
    for step in (*NICE, 10.0):
        candidate = math.ceil(round(step * power, 9))
        if candidate >= x - 1e-9:
            return candidate
    raise AssertionError("unreachable: 10 x power is above x")


def choose_scale(
    demand: Demand, calibration: Calibration, floor: int = 1, floors: Sequence[tuple[int, str]] = ()
) -> Choice:
    """The smallest nice scale that keeps every node within :data:`AGENT_HEADROOM`, the machine within
    :data:`HEADROOM` and the run at least :data:`MIN_WALL_S` long; ``floor``: the smallest the links allow
    (tc's TBF); ``floors``: other smallest scales the lab needs, each with why (its IGMP timers' codes)."""
    if demand.fabric_s <= 0:
        raise ValueError("a trace predicted to take no fabric time has no scale to choose")
    floors = [(floor, "tc's TBF must shape the fastest link"), *floors]
    needs: list[tuple[float, str]] = [(float(f), why) for f, why in floors]
    for role, packets, cost, aggregating in (
        ("host", demand.host_packets, calibration.host_cpu_per_packet_s, ()),
        ("BFR", demand.bfr_packets, calibration.bfr_cpu_per_packet_s, demand.aggregated_packets),
    ):
        # A node's own packets at its role's cost, its feedback and INA datagrams at a host agent's (Python).
        nodes = {*packets, *aggregating}
        python_s = calibration.host_cpu_per_packet_s
        cpu = {node: packets.get(node, 0) * cost + demand.python_datagrams(node) * python_s for node in nodes}
        if cpu and max(cpu.values()) > 0:
            node = max(cpu, key=lambda name: (cpu[name], name))
            more, ina = demand.feedback_packets.get(node, 0), demand.aggregated_packets.get(node, 0)
            said = (
                f"{packets.get(node, 0)} packets"
                + (f" and {more} datagrams of feedback" if more else "")
                + (f" and aggregates {ina} INA datagrams" if ina else "")
            )
            needs.append(
                (
                    cpu[node] / (AGENT_HEADROOM * demand.fabric_s),
                    f"{role} {node} handles {said} in {demand.fabric_s * 1e6:.1f} µs of fabric time, "
                    f"{cpu[node]:.3f} s of CPU here: at most {AGENT_HEADROOM:.0%} of its core",
                )
            )
    relay_s = demand.relay_packets * (calibration.relay_cpu_per_packet_s or 0.0)
    if relay_s > 0:
        needs.append(
            (
                relay_s / (AGENT_HEADROOM * demand.fabric_s),
                f"the delay relay holds {demand.relay_packets} packets in {demand.fabric_s * 1e6:.1f} µs of "
                f"fabric time, {relay_s:.3f} s of CPU here: at most {AGENT_HEADROOM:.0%} of its core",
            )
        )
    feedback = sum(demand.feedback_packets.values()) + sum(demand.aggregated_packets.values())
    cpu_s = (
        demand.link_packets * calibration.machine_cpu_per_hop_s
        + feedback * calibration.host_cpu_per_packet_s
        + relay_s
    )
    if cpu_s > 0:
        kinds = "feedback and aggregation" if demand.aggregated_packets else "feedback"
        also = f" and its agents {feedback} datagrams of {kinds}" if feedback else ""
        also += " and the relay's holding them" if relay_s > 0 else ""
        needs.append(
            (
                cpu_s / (HEADROOM * calibration.cores * demand.fabric_s),
                f"the lab moves {demand.link_packets} packets over its links{also}, {cpu_s:.3f} s of CPU "
                f"here: at most {HEADROOM:.0%} of {calibration.cores} cores",
            )
        )
    burst_s = demand.issued_at_once * calibration.host_cpu_per_packet_s / calibration.cores
    if burst_s > HELD_LIMIT_S:
        needs.append(
            (
                burst_s / (HELD_LIMIT_SHARE * demand.fabric_s),
                f"the hosts issue {demand.issued_at_once} copies at one moment besides the busiest one's, "
                f"{burst_s:.3f} s of {calibration.cores} cores here: a sender may wait for them at most "
                f"{HELD_LIMIT_SHARE:.0%} of the run",
            )
        )
    needs.append(
        (
            MIN_WALL_S / demand.fabric_s,
            f"a run of {demand.fabric_s * 1e6:.1f} µs of fabric time lasts at least {MIN_WALL_S:g} s (wall)",
        )
    )
    needs.sort(key=lambda need: -need[0])
    scale = max(*(f for f, _why in floors), nice_ceiling(needs[0][0]))
    why = tuple(f"{text} (from 1:{math.ceil(need)})" for need, text in needs)
    return Choice(TimeScale(scale), why)
