"""The membership modes side by side (docs/igmp.md): how fast a new receiver got its first packet, what
was delivered outside a membership, and the control traffic counted against the data."""

from __future__ import annotations

from aidcnet.modes import MEMBERSHIP, Mode
from orchestrator.experiment.clock import Clock, format_seconds, wall
from orchestrator.experiment.metrics import Column, Comparison
from orchestrator.experiment.report.blocks import Block, Heading, Para, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.text import NONE, fmt_bytes, fmt_pct


def membership_table(c: Comparison) -> TableBlock | None:
    """The membership modes side by side (docs/igmp.md): how fast a new receiver got its first packet,
    what was delivered outside a membership, and the control traffic counted against the data. net-bier
    stands beside them as the configured reference (its groups are pushed before the run)."""
    from orchestrator.experiment.membership import control_overhead

    cols = [col for col in c.columns if col.run.meta.mode in {*MEMBERSHIP, Mode.NET_BIER}]
    if not any(col.run.meta.mode in MEMBERSHIP for col in cols):
        return None

    rows: list[list[str]] = []
    members = [col.run.meta.settings.get("membership") or {} for col in cols]
    control = [control_overhead(col.run.agents) for col in cols]
    data = [col.metrics.source_egress_bytes for col in cols]
    rows.append(["receiver-set changes", *(str(m.get("changes", "–")) for m in members)])
    rows.append(["lead (wall)", *(format_seconds(col.run.meta.settings.get("lead_s")) for col in cols)])
    for key, name in (("latency_p50_s", "p50"), ("latency_p99_s", "p99"), ("latency_max_s", "max")):
        rows.append([f"membership latency {name}", *(_recorded_time(m, key) for m in members)])
    rows.append(["new receivers timed", *(str(m.get("latency_samples", "–")) for m in members)])
    rows += _control_plane_rows(cols)
    rows.append(["wrong deliveries", *(str(m.get("wrong", "–")) for m in members)])
    rows.append(["missed deliveries", *(str(m.get("missed", "–")) for m in members)])
    for kind in ("igmp from hosts", "queries", "overlay reports", "proxy reports"):
        rows.append(
            [
                f"{kind} (packets / bytes)",
                *(_packets_bytes(o.get(kind)) for o in control),
            ]
        )
    rows.append(["control bytes", *(fmt_bytes(o["total"]["bytes"]) for o in control)])
    rows.append(["source data bytes", *(fmt_bytes(d) for d in data)])
    rows.append(
        [
            "control ÷ data",
            *(fmt_pct(o["total"]["bytes"] / d) if d else "–" for o, d in zip(control, data, strict=True)),
        ]
    )
    return TableBlock(header=["memberships", *(col.label for col in cols)], rows=rows)


def _recorded_time(membership: dict, key: str) -> str:
    """A membership latency as the run recorded it: fabric seconds, or wall seconds on an unshaped lab
    (its ``time`` says which; orchestrator.experiment.membership converted it)."""
    value = membership.get(key)
    if value is None:
        return NONE
    return format_seconds(value) if membership.get("time") == "fabric" else wall(value)


def _control_plane_rows(cols: list[Column]) -> list[list[str]]:
    """The leaves' modelled control plane per run and whether its membership latency is a router's."""
    from orchestrator.experiment.membership import control_plane, latency_is, latency_verdict

    cells: list[tuple[str, str, str]] = []
    for col in cols:
        settings, timing = col.run.meta.settings, col.run.timing
        if col.run.meta.mode not in MEMBERSHIP:
            cells.append(("–", "–", "–"))
            continue
        cp = control_plane(col.run.agents)
        cost = float(settings.get("control_cost_s") or 0)
        per_record = float(settings.get("control_cost_record_s") or 0)
        # The agents time the queue on the wall clock, in nanoseconds.
        wait = Clock.of_run(col.run).time(cp["wait_ns"] / cp["served"] / 1e9 if cp["served"] else None)
        why = latency_verdict(cost, cp, None if timing is None else timing.faithful)
        model = f"{cost * 1e6:.3f} µs fabric" if cost else "not modelled"
        if cost and per_record:
            model += f" + {per_record * 1e6:.3f} µs per group record"
        cells.append(
            (
                model,
                f"{cp['served']}, {cp['late']} late, {wait} mean queueing",
                latency_is(why),
            )
        )
    names = ("control plane per message", "control messages served", "membership latency is")
    return [[name, *(cell[i] for cell in cells)] for i, name in enumerate(names)]


@register
class Memberships(Section):
    name = "memberships"
    order = 50

    def blocks(self, group: Group) -> list[Block]:
        """The Memberships section of a group, or nothing when it has no igmp or proxy run."""
        return membership_blocks(group.comparison)


def membership_blocks(c: Comparison) -> list[Block]:
    mt = membership_table(c)
    if mt is None:
        return []
    note = (
        "Membership latency: from the moment an op's receivers are known at the source (its scheduled t, "
        "when the igmp receivers join or the proxy source reports) to the first packet at each new "
        "receiver, in fabric time when the lab is shaped (else in wall time, labelled). Wrong: packets "
        "received outside a membership; missed: members that never got theirs. Control traffic is "
        "counted by the agents (IGMP heard on "
        "host ports, queries, IGMP over BIER to the BFIRs), never estimated (docs/igmp.md)."
    )
    return [Heading(3, "Memberships"), mt, Para(note)]


def _packets_bytes(counted: dict[str, int] | None) -> str:
    if not counted:
        return "0"
    # The FHR counts the proxy reports it took, not their bytes (those are in the hosts' IGMP).
    if not counted["bytes"]:
        return str(counted["packets"])
    return f"{counted['packets']} / {fmt_bytes(counted['bytes'])}"
