"""The time answer in plain words: each run against its bottleneck bound, and runs against the baseline
only when both were faithful at the same scale (docs/time-and-fidelity.md)."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.experiment.clock import Clock, format_seconds
from orchestrator.experiment.metrics import Column, Comparison, Ratios, delivery_problems
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.blocks import Block, Bullets, Heading
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section
from orchestrator.experiment.report.sections.summary import end_peer
from orchestrator.experiment.report.text import direction, fmt_bytes, than, times_phrase


def link_role(run: RunResult, end: str) -> str:
    """A link end in words: a host's uplink, a host's downlink, or a fabric link between switches, in the
    direction the summary's rows name it."""
    hosts = set(run.meta.trace.hosts)
    node = end.split(":", 1)[0]
    peer = end_peer(run, end)
    peer_node = peer.split(":", 1)[0] if peer else None
    if node in hosts:
        return f"{node}'s uplink ({end})"
    if peer_node in hosts:
        return f"{peer_node}'s downlink ({end})"
    return f"the fabric link {direction(end, peer)}"


def _run_sentence(col: Column) -> str | None:
    t, m = col.run.timing, col.metrics
    if t is None or t.scale is None:
        return f"{col.label}: links unshaped, so its times are the emulator's and are not compared."
    if not t.faithful:
        reasons = "; ".join(t.reasons)
        return f"{col.label}: not faithful at 1:{t.scale}, its times are not compared: {reasons}."
    if (problems := delivery_problems(m.delivery)) is not None:
        return (
            f"{col.label}: its links were faithful at 1:{t.scale}, but it did not deliver exactly "
            f"({problems}), so its times are not compared."
        )
    if m.completion_time is None:
        return f"{col.label}: faithful at 1:{t.scale}; nothing was delivered, so there is no completion."
    text = (
        f"{col.label}: faithful at 1:{t.scale}; completed in {Clock.of_run(col.run).time(m.completion_time)}"
    )
    if t.pace is not None:
        text += f" of fabric time, {t.pace.ratio:.2f}× the time its links need by {t.pace.by}"
        if (delay := t.pace.propagation_s) is not None:
            predicted = format_seconds(t.pace.predicted_fabric_s)
            text += f" ({predicted}, {format_seconds(delay)} of it the links' delay)"
        if t.bound is not None and not t.pace.by.startswith("the bound"):
            text += f"; the busiest was {link_role(col.run, t.bound.link)}, {fmt_bytes(t.bound.bytes)}"
    elif t.bound is not None and m.bound_ratio is not None:
        text += (
            f" of fabric time, {m.bound_ratio:.2f}× the bound set by {link_role(col.run, t.bound.link)}, "
            f"which carried {fmt_bytes(t.bound.bytes)}"
        )
    else:
        text += " of fabric time (no bottleneck bound recorded)"
    if t.confirmation is not None:
        text += f"; {t.confirmation.text}"
    return text + "."


def _bound_why(r: Ratios, mine_col: Column, base_col: Column) -> str | None:
    """Why the two completions compare as they do, from the links that bounded them."""
    mine, base = mine_col.run, base_col.run
    if mine.timing is None or base.timing is None or mine.timing.bound is None or base.timing.bound is None:
        return None
    same = link_role(mine, mine.timing.bound.link).split(" (")[0].split("'s ")[-1]
    other = link_role(base, base.timing.bound.link).split(" (")[0].split("'s ")[-1]
    if same == other == "downlink":
        return (
            f"both are bounded by a receiver's downlink, so {r.label} saves source and fabric bytes "
            "but not completion time"
        )
    if same == other == "uplink":
        load = times_phrase(mine_col.metrics.source_egress_bytes, base_col.metrics.source_egress_bytes)
        return f"both are bounded by the source's uplink, which {r.label} loads {than(load, r.baseline)}"
    return f"{r.label} is bounded by {link_role(mine, mine.timing.bound.link)}, {r.baseline} by " + (
        link_role(base, base.timing.bound.link)
    )


def _pair_sentence(r: Ratios, mine_col: Column, base_col: Column) -> str | None:
    if r.time_note:
        return f"{r.label} against {r.baseline}: completion times not compared: {r.time_note}."
    if r.completion_speedup is None:
        return None
    mine_t, base_t = mine_col.metrics.completion_fabric_time, base_col.metrics.completion_fabric_time
    assert mine_t is not None and base_t is not None
    # Less time is faster: compare the baseline's time with this one's so "faster" reads as more speed.
    pace = times_phrase(base_t, mine_t, fewer="slower", greater="faster")
    why = _bound_why(r, mine_col, base_col)
    tail = f": {why}." if why else "."
    if pace == "the same":
        return f"{r.label} finished as fast as {r.baseline} in fabric time{tail}"
    return f"{r.label} finished {pace} than {r.baseline} in fabric time{tail}"


def time_sentences(c: Comparison) -> list[str]:
    """The time answer in plain words: per run against its bound, and between runs only when both were
    faithful (docs/time-and-fidelity.md)."""
    out = [s for col in c.columns if (s := _run_sentence(col)) is not None]
    by_label = {col.label: col for col in c.columns}
    for r in c.ratios:
        if (s := _pair_sentence(r, by_label[r.label], by_label[r.baseline])) is not None:
            out.append(s)
    return out


@register
class Time(Section):
    name = "time"
    order = 40
    terminal = True

    def blocks(self, group: Group) -> list[Block]:
        return [Heading(3, "Time"), Bullets(time_sentences(group.comparison))]

    def reading(self, groups: Sequence[Group]) -> list[str]:
        return [
            "Time: links run at their bandwidth divided by the lab's time scale (1:N), so the fabric "
            "runs N times slower than the hardware it stands for; fabric time = wall time ÷ N. A run is "
            "faithful when the links, not our software, set the pace: it finished within 1.25× of the "
            "time its links need (the time model's prediction, or the busiest link's bound) or a run at "
            "a second scale confirmed its fabric time; every busy shaper drained at its rate; nothing "
            "dropped but where a fault was injected; no node held work back while its links idled; no "
            "node's CPU and not the machine's saturated. Times are compared only between faithful runs "
            "of one group. The bound is the busiest link's bytes over its rate: no schedule could "
            "finish sooner (docs/time-and-fidelity.md)."
        ]
