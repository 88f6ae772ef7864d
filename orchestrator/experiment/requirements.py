"""Seed 001's gap analysis (its Table 1) scored from runs: one row per requirement of AI multicast, one
column per technology the testbed runs, each cell a figure counted in a run of the same trace on the same
lab, or why there is none (docs/requirements.md).

The draft scores PIM, mLDP, SR-P2MP and BIER as Good, Moderate or Poor on interactivity, reliability,
dynamics, sparseness and simplicity, and names failure detection, recovery and the failure domain beside
them. Here each word becomes a measurement:

* interactivity: feedback packets that reach the source per DATA packet (the MP2P direction; a
  best-effort mode has none);
* reliability: the share of (message, receiver) pairs delivered in the mode's run with the most loss
  (its clean run when it ran under none);
* dynamics: the first packet after a receiver-set change (membership latency p99, fabric time), or why
  the mode needs no signalling;
* sparseness: bytes on the fabric's links per payload byte delivered (header and replication together);
* simplicity: control packets and bytes on the wire over the run (IGMP, proxy and overlay reports);
* failure: the deliveries a run with a link fault missed, and how many receivers missed any (the
  failure domain). When the receivers had data again is not here: a run records when each message was
  sent and delivered, not each packet, and a trace whose ops all start at once sends every message
  before a fault mid-transfer.

Pure: built from :class:`RunResult` records; the report's ``requirements`` section renders it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aidcnet.modes import HOST_BIER, MEMBERSHIP, MESSAGE, PER_RECEIVER, RELIABLE, Mode
from orchestrator.experiment.clock import Clock, format_seconds, wall
from orchestrator.experiment.conditions import Conditions
from orchestrator.experiment.faults import FailureDomain
from orchestrator.experiment.membership import control_overhead
from orchestrator.experiment.metrics import metrics_of
from orchestrator.experiment.modes.reliable import FEEDBACK_KINDS
from orchestrator.experiment.records import RunResult
from orchestrator.units import format_bytes

# The technologies a column stands for: seed 001's names where they match a mode.
TECHNOLOGY: dict[Mode, str] = {
    Mode.UNICAST: "unicast (ingress replication)",
    Mode.HOST_BIER: "host-BIER",
    Mode.NET_BIER: "network-BIER, static groups",
    Mode.IGMP: "network-BIER with IGMP",
    Mode.PROXY: "network-BIER with Receiver Proxy Report",
    Mode.RELIABLE_UNICAST: "reliable unicast",
    Mode.RELIABLE_HOST_BIER_E2E: "reliable host-BIER, end-to-end ACKs",
    Mode.RELIABLE_HOST_BIER: "reliable BIER, ACKs aggregated (host)",
    Mode.RELIABLE_NET_BIER: "reliable BIER, ACKs aggregated (network)",
}

ROWS = (
    "interactivity: feedback at the source per DATA packet",
    "reliability: delivered in the run with most loss",
    "dynamics: first packet after a receiver-set change (p99)",
    "sparseness: fabric bytes per payload byte delivered",
    "simplicity: control traffic on the wire",
    "failure: loss after a link fault (failure domain)",
)

# What seed 001 scores and no run here can measure, with what is missing (docs/requirements.md).
NOT_MEASURED: dict[str, str] = {
    "PIM-SM, PIM-SSM": (
        "FRR's pimd programs the kernel's multicast routing (CONFIG_IP_MROUTE); without it pimd opens no "
        "mroute socket and neither hears IGMP nor forwards (the pim-sm and pim-ssm modes wait for a "
        "kernel that has it)"
    ),
    "BIDIR-PIM": "FRR has no BIDIR-PIM",
    "mLDP, SR-P2MP": "both forward MPLS; the lab kernel routes no MPLS (CONFIG_MPLS_ROUTING)",
}


@dataclass(frozen=True)
class Column:
    """One technology's cells, in :data:`ROWS` order, and the runs they came from."""

    mode: Mode
    name: str
    cells: tuple[str, ...]
    runs: tuple[str, ...]


def is_clean(c: Conditions) -> bool:
    return c.changed == 0


def worst_loss(c: Conditions) -> float:
    return max((p for _end, p in c.loss), default=0.0)


def link_faults(c: Conditions) -> list[tuple[str, float]]:
    """The run's faults that change a link (``AT link NODE:IF ...``), as the run wrote them."""
    return [(text, at) for text, at in c.faults if text.split()[1:2] == ["link"]]


def interactivity(mode: Mode, run: RunResult | None) -> str:
    if mode not in RELIABLE:
        return "none: best effort, no receiver feedback"
    if run is None:
        return "no run"
    src = (run.meta.settings.get("reliable") or {}).get("sources") or {}
    sent = int(src.get("sender.sent", 0))
    if not sent:
        return "no DATA sent"
    per = sum(int(src.get(f"source.rx.{k}.packets", 0)) for k in FEEDBACK_KINDS) / sent
    return f"{per:.3f} ({RELIABLE[mode]} feedback, {sent} DATA packets)"


def reliability(run: RunResult | None) -> str:
    """The share delivered in ``run``: the mode's lossiest, or its clean run when it ran under no loss."""
    if run is None:
        return "no run"
    d = metrics_of(run).delivery
    if not d.expected:
        return "no deliveries recorded"
    loss = worst_loss(Conditions.of(run))
    under = f"at {loss:.2%} loss per link end" if loss else "with no loss (no run under loss)"
    return f"{d.delivered / d.expected:.2%} of {d.expected} {under}"


def dynamics(mode: Mode, run: RunResult | None) -> str:
    if mode in PER_RECEIVER or mode in HOST_BIER:
        return "no signalling: the source names each packet's receivers"
    if mode not in MEMBERSHIP:
        return "none: groups configured before the run"
    if run is None:
        return "no run"
    m = run.meta.settings.get("membership") or {}
    p99 = m.get("latency_p99_s")
    if p99 is None:
        return "no receiver timed"
    shown = format_seconds(p99) + " fabric" if m.get("time") == "fabric" else wall(p99)
    if run.timing is not None and not run.timing.faithful:
        shown += " (run not faithful)"
    return f"{shown} over {m.get('latency_samples', 0)} new receivers"


def sparseness(run: RunResult | None) -> str:
    m = metrics_of(run) if run else None
    if m is None or not m.payload_delivered_bytes:
        return "no run" if m is None else "nothing delivered"
    return f"{m.total_fabric_bytes / m.payload_delivered_bytes:.2f}"


def simplicity(run: RunResult | None) -> str:
    if run is None:
        return "no run"
    total = control_overhead(run.agents)["total"]
    return f"{total['packets']} packets, {format_bytes(total['bytes'])}"


def failure(run: RunResult | None) -> str:
    if run is None:
        return "no run with a link fault"
    faults = link_faults(Conditions.of(run))
    domain = FailureDomain.of(run.messages)
    text = (
        f"{sum(domain.missed.values())} of {sum(domain.owed.values())} deliveries missed, by "
        f"{len(domain.missed)} of {domain.receivers} receivers ({faults[0][0]})"
    )
    if not domain.outages:
        return text
    receiver, outage = max(
        domain.outages.items(), key=lambda item: math.inf if item[1].for_s is None else item[1].for_s
    )
    if outage.for_s is None:
        return f"{text}; {receiver} had none of {outage.source}'s after its misses"
    return f"{text}; longest without: {receiver}, {Clock.of_run(run).time(outage.for_s)} of {outage.source}'s"


def newest(runs: Iterable[RunResult]) -> RunResult | None:
    return max(runs, key=lambda r: r.meta.run_id, default=None)


def column(mode: Mode, runs: Sequence[RunResult]) -> Column:
    """A technology's cells from its runs of one trace: the clean run (the newest) for the figures of
    a run as it should go, the run with most loss for reliability, a link-fault run for failure."""
    conditions = [(run, Conditions.of(run)) for run in runs]
    clean = newest(r for r, c in conditions if is_clean(c))
    lossy = max(
        ((r, c) for r, c in conditions if worst_loss(c) > 0),
        key=lambda rc: (worst_loss(rc[1]), rc[0].meta.run_id),
        default=None,
    )
    faulted = newest(r for r, c in conditions if link_faults(c))
    cells = (
        interactivity(mode, clean),
        reliability(lossy[0] if lossy else clean),
        dynamics(mode, clean),
        sparseness(clean),
        simplicity(clean),
        failure(faulted),
    )
    used = tuple(r.meta.run_id for r in (clean, lossy[0] if lossy else None, faulted) if r is not None)
    return Column(mode, TECHNOLOGY[mode], cells, tuple(dict.fromkeys(used)))


def requirement_columns(runs: Iterable[RunResult]) -> list[Column]:
    """One column per message mode among ``runs`` (all of one lab and trace), in the modes' order."""
    by_mode: dict[Mode, list[RunResult]] = {}
    for run in runs:
        mode = Mode(run.meta.mode)
        if mode in MESSAGE:
            by_mode.setdefault(mode, []).append(run)
    return [column(mode, by_mode[mode]) for mode in Mode if mode in by_mode]
