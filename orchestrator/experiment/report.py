"""Reports comparing replay runs: Markdown, self-contained HTML, PNG plots, and a terminal table.

``write_report`` groups runs by lab and trace (``orchestrator.metrics.compare_runs``), one column per
mode, and writes ``report.md`` (PNGs beside it) and ``report.html`` (the same content, PNGs inlined as
data URIs so the file can be mailed or attached to an issue on its own). Both are built from one list of
blocks, so their tables cannot drift apart. Output is byte-identical for identical input: no clock is
read here (pass ``generated_at`` to stamp a report), layouts are seeded and PNG metadata is fixed.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import matplotlib

# Headless and deterministic: the report runs on servers without a display, and Agg must be chosen
# before pyplot is imported.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
import networkx as nx
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from rich.console import Console
from rich.table import Table

from aidcnet.modes import MEMBERSHIP, RELIABLE, Mode
from aidcnet.roles import Role
from orchestrator.experiment.metrics import (
    Column,
    Comparison,
    collective_load,
    compare_runs,
    is_collective,
    is_multicast,
    receiver_latencies,
)
from orchestrator.experiment.modes.reliable import (
    ACK_KINDS,
    FEEDBACK_KINDS,
    busiest_end,
    link_feedback_packets,
)
from orchestrator.experiment.records import RunResult
from orchestrator.lab.fabric import conditions_label
from orchestrator.lab.topology import Topology
from orchestrator.units import byte_unit, format_bytes

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
# Tables longer than this show the busiest rows only; the CSVs in each run directory have them all.
MAX_LINK_ROWS = 40
MAX_COUNTER_ROWS = 40
DPI = 100
LAYOUT_SEED = 42
# PNG metadata without the matplotlib version, so a report does not change with the library.
_PNG_META = {"Software": None}


# ---------------------------------------------------------------------------------------------- formatting


def fmt_bytes(n: float | None) -> str:
    return "–" if n is None else format_bytes(n)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    if s == 0:
        return "0 s"
    if abs(s) < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if abs(s) < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.3f} s"


def fmt_ratio(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}×"


def fmt_pct(r: float | None) -> str:
    return "–" if r is None else f"{r:.1%}"


def times_phrase(mine: float, base: float, fewer: str = "less", greater: str = "more") -> str:
    """How ``mine`` compares with ``base`` in words whose direction matches the numbers: ``"1.52× more"``
    when mine is larger, ``"2.00× less"`` when smaller (the factor is always ≥ 1), ``"the same"`` when equal
    to the printed precision. Sentences built on it cannot contradict the table they summarise."""
    if base <= 0 or mine <= 0:
        return "the same" if mine == base else (greater if mine > base else fewer)
    factor = mine / base if mine >= base else base / mine
    if f"{factor:.2f}" == "1.00":
        return "the same"
    return f"{factor:.2f}× {greater if mine > base else fewer}"


def _than(phrase: str, base_text: str) -> str:
    """``phrase`` (from times_phrase) joined to what it is compared with."""
    return f"{phrase} as {base_text}" if phrase == "the same" else f"{phrase} than {base_text}"


def _natural(name: str) -> tuple[object, ...]:
    # h2 before h10, leaf2 before leaf10.
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


# ---------------------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableBlock:
    header: list[str]
    rows: list[list[str]]
    # Columns that hold literal identifiers (link ids, run ids): code spans in Markdown.
    code_columns: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Image:
    alt: str
    path: Path


Block = TableBlock | Heading | Para | Bullets | Image


def _integrity(c: Comparison, i: int) -> str:
    d = c.columns[i].metrics.delivery
    parts = []
    if d.missing:
        parts.append(f"{d.missing} missing")
    if d.wrong_receivers:
        parts.append(f"{d.wrong_receivers} wrong receiver(s)")
    if d.duplicates:
        parts.append(f"{d.duplicates} duplicate(s)")
    return ", ".join(parts) if parts else "ok"


def summary_table(c: Comparison) -> TableBlock:
    """Metric rows, one column per mode (the layout of the Markdown, HTML and terminal tables)."""
    rows: list[list[str]] = []

    def row(name: str, cells: list[str]) -> None:
        rows.append([name, *cells])

    ms = [col.metrics for col in c.columns]
    row(
        "delivered / expected",
        [f"{m.delivery.delivered}/{m.delivery.expected} ({m.delivery.ratio:.1%})" for m in ms],
    )
    row("integrity", [_integrity(c, i) for i in range(len(ms))])
    row("source egress", [fmt_bytes(m.source_egress_bytes) for m in ms])
    row("total fabric bytes", [fmt_bytes(m.total_fabric_bytes) for m in ms])
    row(
        "most-loaded link",
        [
            "–"
            if m.max_link is None
            else f"{m.max_link_from} → {_peer(m.max_link, m.max_link_from)}: {fmt_bytes(m.max_link_bytes)} "
            f"({m.max_link_share:.1%})"
            for m in ms
        ],
    )
    runs = [col.run for col in c.columns]
    if any(is_collective(r) for r in runs):
        loads = [collective_load(r) for r in runs]
        row(
            "bytes into aggregation point",
            ["–" if ld is None else f"{ld.node} ({ld.kind}): {fmt_bytes(ld.bytes_in)}" for ld in loads],
        )
        row(
            "algorithm bandwidth",
            [
                "–"
                if ld is None or ld.algorithm_bandwidth is None
                else f"{fmt_bytes(ld.algorithm_bandwidth)}/s"
                for ld in loads
            ],
        )
    row("completion time (wall)", [fmt_seconds(m.completion_time) for m in ms])
    row("time scale", [f"1:{r.timing.scale}" if r.timing and r.timing.scale else "unshaped" for r in runs])
    row("link conditions", [run_conditions(r) for r in runs])
    row("fidelity", [_fidelity_cell(r) for r in runs])
    row("completion (fabric)", [fmt_seconds(m.completion_fabric_time) for m in ms])
    row(
        "bottleneck bound (fabric)",
        [
            f"{fmt_seconds(r.timing.bound.fabric_s)} on {r.timing.bound.link}"
            if r.timing and r.timing.bound
            else "–"
            for r in runs
        ],
    )
    row("completion ÷ bound", ["–" if m.bound_ratio is None else f"{m.bound_ratio:.2f}×" for m in ms])
    row("latency p50", [fmt_seconds(m.latency.p50) for m in ms])
    row("latency p99", [fmt_seconds(m.latency.p99) for m in ms])
    row("latency max", [fmt_seconds(m.latency.max) for m in ms])
    row("slowest receiver p99", [fmt_seconds(m.message_latency.p99) for m in ms])
    return TableBlock(header=["metric", *c.labels], rows=rows)


def _fidelity_cell(run: RunResult) -> str:
    t = run.timing
    if t is None or t.scale is None:
        return "not judged (unshaped)"
    if t.faithful:
        return "faithful"
    return f"NOT faithful ({len(t.reasons)} reason{'s' if len(t.reasons) != 1 else ''})"


def link_role(run: RunResult, end: str) -> str:
    """A link end in words: a host's uplink, a host's downlink, or a fabric link between switches."""
    hosts = set(run.meta.trace.hosts)
    node = end.split(":", 1)[0]
    peer = next((e.peer for e in run.timing.ends if e.end == end), None) if run.timing else None
    peer_node = peer.split(":", 1)[0] if peer else None
    if node in hosts:
        return f"{node}'s uplink ({end})"
    if peer_node in hosts:
        return f"{peer_node}'s downlink ({end})"
    return f"the fabric link {end} → {peer or '?'}"


def time_sentences(c: Comparison) -> list[str]:
    """The time answer in plain words: per run against its bound, and between runs only when both were
    faithful (docs/time-and-fidelity.md)."""
    out = []
    for col in c.columns:
        t, m = col.run.timing, col.metrics
        if t is None or t.scale is None:
            out.append(f"{col.label}: links unshaped, so its times are the emulator's and are not compared.")
            continue
        if not t.faithful:
            reasons = "; ".join(t.reasons)
            out.append(f"{col.label}: not faithful at 1:{t.scale}, its times are not compared: {reasons}.")
            continue
        if t.bound is not None and m.completion_fabric_time is not None and m.bound_ratio is not None:
            out.append(
                f"{col.label}: faithful at 1:{t.scale}; completed in "
                f"{fmt_seconds(m.completion_fabric_time)} of fabric time, {m.bound_ratio:.2f}× the bound "
                f"set by {link_role(col.run, t.bound.link)}, which carried {fmt_bytes(t.bound.bytes)}."
            )
    by_label = {col.label: col for col in c.columns}
    for r in c.ratios:
        if r.time_note:
            out.append(f"{r.label} against {r.baseline}: completion times not compared: {r.time_note}.")
            continue
        if r.completion_speedup is None:
            continue
        mine, base = by_label[r.label].run, by_label[r.baseline].run
        assert mine.timing is not None and base.timing is not None
        if mine.timing.bound is None or base.timing.bound is None:
            continue
        same = link_role(mine, mine.timing.bound.link).split(" (")[0].split("'s ")[-1]
        other = link_role(base, base.timing.bound.link).split(" (")[0].split("'s ")[-1]
        if same == other == "downlink":
            why = (
                f"both are bounded by a receiver's downlink, so {r.label} saves source and fabric bytes "
                "but not completion time"
            )
        elif same == other == "uplink":
            mine_m, base_m = by_label[r.label].metrics, by_label[r.baseline].metrics
            load = times_phrase(mine_m.source_egress_bytes, base_m.source_egress_bytes)
            why = f"both are bounded by the source's uplink, which {r.label} loads {_than(load, r.baseline)}"
        else:
            why = f"{r.label} is bounded by {link_role(mine, mine.timing.bound.link)}, {r.baseline} by " + (
                link_role(base, base.timing.bound.link)
            )
        mine_t = by_label[r.label].metrics.completion_time
        base_t = by_label[r.baseline].metrics.completion_time
        assert mine_t is not None and base_t is not None
        # Less time is faster: compare the baseline's time with this one's so "faster" reads as more speed.
        pace = times_phrase(base_t, mine_t, fewer="slower", greater="faster")
        if pace == "the same":
            out.append(f"{r.label} finished as fast as {r.baseline} in fabric time: {why}.")
        else:
            out.append(f"{r.label} finished {pace} than {r.baseline} in fabric time: {why}.")
    return out


def _peer(link: str, sender: str | None) -> str:
    a, _, b = link.partition("<->")
    return b if sender == a else a


def ratios_table(c: Comparison) -> TableBlock | None:
    """Ratio rows, one column per mode compared with the baseline (same layout as the summary)."""
    if not c.ratios:
        return None
    rs = c.ratios
    rows = [["source egress ÷", *(fmt_ratio(r.source_egress) for r in rs)]]
    # Fan-out is a property of multicast ops: an AllReduce has none, and the rows would only mislead.
    if _multicast(c):
        rows += [
            ["theoretical fan-out", *("–" if r.fanout is None else f"{r.fanout:.2f}" for r in rs)],
            ["egress ÷ / fan-out", *(fmt_pct(r.egress_vs_fanout) for r in rs)],
        ]
    rows += [
        ["fabric bytes ÷", *(fmt_ratio(r.fabric_bytes) for r in rs)],
        ["bandwidth saved", *(fmt_pct(r.bandwidth_saved) for r in rs)],
        ["most-loaded link ÷", *(fmt_ratio(r.max_link) for r in rs)],
        ["completion speed-up", *(fmt_ratio(r.completion_speedup) for r in rs)],
    ]
    return TableBlock(header=[f"against {c.baseline}", *(r.label for r in rs)], rows=rows)


def ratio_sentences(c: Comparison) -> list[str]:
    """One sentence per mode against the baseline, built from the same byte counts the summary table
    prints, so its direction (more/less) always agrees with the table."""
    out = []
    by_label = {col.label: col for col in c.columns}
    for r in c.ratios:
        mine, base = by_label[r.label], by_label[r.baseline]
        if is_collective(mine.run) or is_collective(base.run):
            out.append(collective_sentence(r.label, mine.run, r.baseline, base.run))
            continue
        if r.source_egress is None:
            out.append(f"{r.label}: no source egress measured on one side, so no ratio.")
            continue
        mine_b, base_b = mine.metrics.source_egress_bytes, base.metrics.source_egress_bytes
        text = (
            f"{r.label}: the sources sent {fmt_bytes(mine_b)}, "
            f"{_than(times_phrase(mine_b, base_b), f'{r.baseline} ({fmt_bytes(base_b)})')}"
        )
        if is_multicast(mine.run) and r.fanout is not None and r.egress_vs_fanout is not None:
            text += (
                f"; the trace's theoretical fan-out is {r.fanout:.2f}, so {r.label} reached "
                f"{r.egress_vs_fanout:.1%} of the ideal source saving"
            )
        if r.bandwidth_saved is not None:
            verb = "saved" if r.bandwidth_saved >= 0 else "added"
            text += f"; over the whole fabric it {verb} {abs(r.bandwidth_saved):.1%} of the bytes"
        out.append(text + ".")
    return out


def collective_sentence(label: str, run: RunResult, baseline: str, base_run: RunResult) -> str:
    """A collective against its baseline by the bytes that converged on one node (the PS host, the INA
    root, or the busiest worker), with each side's node named."""
    mine, base = collective_load(run), collective_load(base_run)
    if mine is None or base is None:
        return f"{label}: no aggregation point or worker traffic measured on one side, so no comparison."
    return (
        f"{label}: {fmt_bytes(mine.bytes_in)} arrived at {mine.node} ({mine.kind}), "
        + _than(
            times_phrase(mine.bytes_in, base.bytes_in),
            f"at {base.node} ({base.kind}) under {baseline} ({fmt_bytes(base.bytes_in)})",
        )
        + "."
    )


def membership_table(c: Comparison) -> TableBlock | None:
    """The membership modes side by side (docs/igmp.md): how fast a new receiver got its first packet,
    what was delivered outside a membership, and the control traffic counted against the data. net-bier
    stands beside them as the configured reference (its groups are pushed before the run)."""
    from orchestrator.experiment.membership import control_overhead

    cols = [col for col in c.columns if col.run.meta.mode in {*MEMBERSHIP, Mode.NET_BIER}]
    if not any(col.run.meta.mode in MEMBERSHIP for col in cols):
        return None

    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v * 1e3:.3f} ms"

    rows: list[list[str]] = []
    members = [col.run.meta.settings.get("membership") or {} for col in cols]
    control = [control_overhead(col.run.agents) for col in cols]
    data = [col.metrics.source_egress_bytes for col in cols]
    rows.append(["receiver-set changes", *(str(m.get("changes", "–")) for m in members)])
    rows.append(["lead (wall)", *(ms(col.run.meta.settings.get("lead_s")) for col in cols)])
    for key, name in (("latency_p50_s", "p50"), ("latency_p99_s", "p99"), ("latency_max_s", "max")):
        rows.append(
            [
                f"membership latency {name}",
                *(f"{ms(m.get(key))} {m['time']}" if m.get(key) is not None else "–" for m in members),
            ]
        )
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


def _control_plane_rows(cols: list[Column]) -> list[list[str]]:
    """The leaves' modelled control plane per run and whether its membership latency is a router's."""
    from orchestrator.experiment.membership import control_plane, latency_is, latency_verdict

    cells: list[tuple[str, str, str]] = []
    for col in cols:
        settings, timing = col.run.meta.settings, col.run.timing
        if col.run.meta.mode not in MEMBERSHIP:
            cells.append(("–", "–", "–"))
            continue
        scale = timing.scale if timing is not None and timing.scale else 1
        cp = control_plane(col.run.agents)
        cost = float(settings.get("control_cost_s") or 0)
        per_record = float(settings.get("control_cost_record_s") or 0)
        wait = cp["wait_ns"] / cp["served"] / scale / 1e3 if cp["served"] else 0.0
        why = latency_verdict(cost, cp, None if timing is None else timing.faithful)
        model = f"{cost * 1e6:.3f} µs fabric" if cost else "not modelled"
        if cost and per_record:
            model += f" + {per_record * 1e6:.3f} µs per group record"
        cells.append(
            (
                model,
                f"{cp['served']}, {cp['late']} late, {wait:.3f} µs fabric mean queueing",
                latency_is(why),
            )
        )
    names = ("control plane per message", "control messages served", "membership latency is")
    return [[name, *(cell[i] for cell in cells)] for i, name in enumerate(names)]


def membership_blocks(c: Comparison) -> list[Block]:
    """The Memberships section of a group, or nothing when it has no igmp or proxy run."""
    mt = membership_table(c)
    if mt is None:
        return []
    note = (
        "Membership latency: from the moment an op's receivers are known at the source (its scheduled t, "
        "when the igmp receivers join or the proxy source reports) to the first packet at each new "
        "receiver, in fabric time when the lab is shaped. Wrong: packets received outside a membership; "
        "missed: members that never got theirs. Control traffic is counted by the agents (IGMP heard on "
        "host ports, queries, IGMP over BIER to the BFIRs), never estimated (docs/igmp.md)."
    )
    return [Heading(3, "Memberships"), mt, Para(note)]


_RELIABILITY_ROWS = (
    "feedback",
    "DATA packets sent first",
    "ACKs at the sources per DATA packet",
    "NACKs at the sources per DATA packet",
    "feedback bytes at the sources",
    "feedback packets on the links",
    "most feedback on one link end",
    "retransmitted payload bytes",
    "bytes the fabric dropped",
    "retransmitted ÷ dropped",
    "receivers declared failed",
)


def _reliability_column(rel: dict[str, object]) -> list[str]:
    """One reliable run's cells, in :data:`_RELIABILITY_ROWS` order, from ``settings["reliable"]``."""
    src: dict[str, int] = rel.get("sources") or {}  # type: ignore[assignment]
    links: dict[str, dict[str, int]] | None = rel.get("links")  # type: ignore[assignment]
    sent = src.get("sender.sent", 0)

    def per_sent(kinds: tuple[str, ...]) -> str:
        got = sum(src.get(f"source.rx.{k}.packets", 0) for k in kinds)
        return f"{got / sent:.3f}" if sent else "–"

    fb_bytes = sum(src.get(f"source.rx.{k}.bytes", 0) for k in FEEDBACK_KINDS)
    retx = src.get("sender.retransmitted-bytes", 0)
    on_links, busiest, lost = "–", "–", None
    if links is not None:  # runs recorded before the link-fault programs counted feedback have none
        on_links = str(sum(link_feedback_packets(v) for v in links.values()))
        lost = sum(v["lost_bytes"] for v in links.values())
        if (most := busiest_end(links)) is not None:
            busiest = f"{most[0]}: {most[1]}"
    return [
        str(rel.get("feedback", "–")),
        str(sent),
        per_sent(ACK_KINDS),
        per_sent(("nack",)),
        fmt_bytes(fb_bytes),
        on_links,
        busiest,
        fmt_bytes(retx),
        "–" if lost is None else fmt_bytes(lost),
        f"{retx / lost:.2f}x" if lost else "–",
        str(src.get("sender.receivers-failed", 0)),
    ]


def reliability_table(c: Comparison) -> TableBlock | None:
    """The reliable modes side by side (docs/reliability.md): the ACKs each source heard per DATA packet
    (the implosion, or what aggregation left of it), the feedback on the links, and what was resent
    against what the fabric dropped. All counted by the agents and the link-fault programs."""
    cols = [col for col in c.columns if col.run.meta.mode in RELIABLE]
    if not cols:
        return None
    cells = [_reliability_column(col.run.meta.settings.get("reliable") or {}) for col in cols]
    rows = [[name, *(column[k] for column in cells)] for k, name in enumerate(_RELIABILITY_ROWS)]
    return TableBlock(header=["reliability", *(col.label for col in cols)], rows=rows)


def feedback_links_table(c: Comparison) -> TableBlock | None:
    """ACK, NACK and AGG-ACK packets per link end (what that end sent), the busiest first: where an
    implosion is carried, and where aggregation stopped it."""
    cols = [col for col in c.columns if col.run.meta.mode in RELIABLE]
    per_end: dict[str, list[int]] = {}
    for i, col in enumerate(cols):
        ls = (col.run.meta.settings.get("reliable") or {}).get("links") or {}
        for end, counts in ls.items():
            if link_feedback_packets(counts):
                per_end.setdefault(end, [0] * len(cols))[i] = link_feedback_packets(counts)
    if not per_end:
        return None
    names = sorted(per_end, key=lambda n: (-max(per_end[n]), n))[:MAX_LINK_ROWS]
    rows = [[n, *(str(v) for v in per_end[n])] for n in names]
    return TableBlock(
        header=["link end (sends)", *(col.label for col in cols)], rows=rows, code_columns=frozenset({0})
    )


def reliability_blocks(c: Comparison) -> list[Block]:
    """The Reliability section of a group, or nothing when it has no reliable run."""
    rt = reliability_table(c)
    if rt is None:
        return []
    note = (
        "ACKs at the sources: feedback packets that arrived at the sources' reliable service per DATA "
        "packet they first sent (end-to-end ACKs: one per receiver; aggregated: one per first-hop "
        "branch). Feedback on the links and the bytes the fabric dropped are counted on the wire by the "
        "link-fault program of every link end (docs/reliability.md)."
    )
    blocks: list[Block] = [Heading(3, "Reliability"), rt, Para(note)]
    ft = feedback_links_table(c)
    if ft is not None:
        blocks += [Heading(3, "Feedback packets per link end"), ft]
    return blocks


def _packets_bytes(counted: dict[str, int] | None) -> str:
    if not counted:
        return "0"
    # The FHR counts the proxy reports it took, not their bytes (those are in the hosts' IGMP).
    if not counted["bytes"]:
        return str(counted["packets"])
    return f"{counted['packets']} / {fmt_bytes(counted['bytes'])}"


def links_table(c: Comparison) -> TableBlock:
    per_link: dict[str, list[int | None]] = {}
    for i, col in enumerate(c.columns):
        for lc in col.run.links:
            per_link.setdefault(lc.link, [None] * len(c.columns))[i] = lc.total_bytes
    names = list(per_link)
    if len(names) > MAX_LINK_ROWS:
        names = sorted(names, key=lambda n: (-max(v or 0 for v in per_link[n]), names.index(n)))[
            :MAX_LINK_ROWS
        ]
        names.sort(key=list(per_link).index)
    rows = [[n, *(fmt_bytes(v) for v in per_link[n])] for n in names]
    return TableBlock(header=["link", *c.labels], rows=rows, code_columns=frozenset({0}))


def counters_table(c: Comparison) -> TableBlock | None:
    totals: dict[str, list[int]] = {}
    for i, col in enumerate(c.columns):
        for counters in col.run.agents.values():
            for name, v in counters.items():
                totals.setdefault(name, [0] * len(c.columns))[i] += v
    names = sorted(n for n, vs in totals.items() if any(vs))
    if not names:
        return None
    if len(names) > MAX_COUNTER_ROWS:
        names = sorted(sorted(names, key=lambda n: -max(totals[n]))[:MAX_COUNTER_ROWS])
    rows = [[n, *(str(v) for v in totals[n])] for n in names]
    return TableBlock(header=["counter (sum over nodes)", *c.labels], rows=rows, code_columns=frozenset({0}))


def runs_table(c: Comparison) -> TableBlock:
    rows = []
    for col in c.columns:
        m = col.run.meta
        mem = m.machine.memory_bytes
        rows.append(
            [
                col.label,
                m.run_id,
                m.started.isoformat(timespec="seconds"),
                fmt_seconds(m.duration),
                m.aidclab_version,
                (m.git_commit or "–")[:12],
                f"{m.machine.cpu_count or '?'} CPU, {fmt_bytes(mem) if mem else '?'} RAM, "
                f"kernel {m.machine.kernel}, Python {m.machine.python}",
            ]
        )
    return TableBlock(
        header=["mode", "run id", "started (UTC)", "duration", "aidclab", "commit", "machine"],
        rows=rows,
        code_columns=frozenset({1}),
    )


# ---------------------------------------------------------------------------------------------- plots


def _hosts(c: Comparison, topology: Topology | None) -> set[str]:
    hosts: set[str] = set()
    for col in c.columns:
        hosts.update(col.run.meta.trace.hosts)
    if topology is not None:
        from orchestrator.lab.roles import role_of

        for node in topology.nodes.values():
            try:
                if role_of(node).name == Role.GPU_HOST:
                    hosts.add(node.name)
            except ValueError:
                continue
    return hosts


def fabric_graph(c: Comparison, topology: Topology | None) -> nx.Graph:
    """Nodes and links of the lab: from the topology when it is this lab's, else from the link ids."""
    g = nx.Graph()
    if topology is not None and topology.name == c.lab:
        g.add_nodes_from(topology.nodes)
        g.add_edges_from((lk.a.node, lk.b.node) for lk in topology.links)
    for col in c.columns:
        g.add_edges_from((lc.a_node, lc.b_node) for lc in col.run.links)
    return g


def layered_layout(g: nx.Graph, hosts: set[str]) -> dict[str, tuple[float, float]]:
    """Hosts at the bottom, then one row per hop away from them (leaf, spine, ...).

    Each row is ordered by the mean position of its neighbours in the row below (ties by natural
    name), so a leaf sits over its hosts. Falls back to a seeded spring layout when no host is in the
    graph or some node cannot reach one.
    """
    present = sorted((h for h in g if h in hosts), key=_natural)
    if not present:
        return _spring(g)
    dist = nx.multi_source_dijkstra_path_length(g, present)
    if len(dist) != len(g):
        return _spring(g)
    layers: dict[int, list[str]] = {}
    for node, d in dist.items():
        layers.setdefault(int(d), []).append(node)
    pos: dict[str, tuple[float, float]] = {}
    index: dict[str, float] = {}
    for level in sorted(layers):
        nodes = layers[level]
        if level == 0:
            nodes.sort(key=_natural)
        else:

            def bary(n: str, level: int = level) -> float:
                below = [index[m] for m in g[n] if dist[m] == level - 1]
                return sum(below) / len(below) if below else math.inf

            nodes.sort(key=lambda n: (bary(n), _natural(n)))
        k = len(nodes)
        for i, n in enumerate(nodes):
            index[n] = (i + 0.5) / k
            pos[n] = (index[n], float(level))
    return pos


def _spring(g: nx.Graph) -> dict[str, tuple[float, float]]:
    raw = nx.spring_layout(g, seed=LAYOUT_SEED)
    return {n: (float(x), float(y)) for n, (x, y) in raw.items()}


def _edge_bytes(run: RunResult) -> dict[frozenset[str], int]:
    # Parallel links between the same two nodes share one drawn edge, so their bytes add up.
    out: dict[frozenset[str], int] = {}
    for lc in run.links:
        key = frozenset((lc.a_node, lc.b_node))
        out[key] = out.get(key, 0) + lc.total_bytes
    return out


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, metadata=_PNG_META)
    plt.close(fig)
    return path


def plot_heatmap(c: Comparison, topology: Topology | None, path: Path) -> Path:
    g = fabric_graph(c, topology)
    hosts = _hosts(c, topology)
    pos = layered_layout(g, hosts)
    per_run = [_edge_bytes(col.run) for col in c.columns]
    vmax = max([1, *(v for eb in per_run for v in eb.values())])
    # One scale for every panel, so the same colour means the same bytes in every mode; in display units
    # so the colour bar gets round ticks.
    divisor, unit = byte_unit(vmax)
    norm = Normalize(vmin=0, vmax=vmax / divisor)
    cmap = matplotlib.colormaps["YlOrRd"]
    n = len(c.columns)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    widest = max([1, *(sum(1 for p in pos.values() if p[1] == y) for y in {p[1] for p in pos.values()})])
    panel_w = min(9.0, max(4.5, 0.3 * widest))
    panel_h = max(3.5, 1.1 * len({p[1] for p in pos.values()}) + 1.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_w * ncols + 1.2, panel_h * nrows), squeeze=False)
    label_size = 8 if widest <= 16 else 4
    edges = list(g.edges())
    for i, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if i >= n:
            continue
        col = c.columns[i]
        eb = per_run[i]
        measured = [e for e in edges if frozenset(e) in eb]
        idle = [e for e in measured if eb[frozenset(e)] == 0]
        busy = [e for e in measured if eb[frozenset(e)] > 0]
        unknown = [e for e in edges if frozenset(e) not in eb]
        if unknown:
            nx.draw_networkx_edges(g, pos, edgelist=unknown, ax=ax, edge_color="#cccccc", style="dotted")
        if idle:
            nx.draw_networkx_edges(g, pos, edgelist=idle, ax=ax, edge_color="#dddddd", width=0.8)
        if busy:
            values = [eb[frozenset(e)] for e in busy]
            nx.draw_networkx_edges(
                g,
                pos,
                edgelist=busy,
                ax=ax,
                edge_color=[cmap(norm(v / divisor)) for v in values],
                width=[1.0 + 5.0 * v / vmax for v in values],
            )
        host_nodes = [v for v in g if v in hosts]
        other = [v for v in g if v not in hosts]
        nx.draw_networkx_nodes(
            g, pos, nodelist=other, ax=ax, node_shape="s", node_color="#b0c4de", node_size=260
        )
        nx.draw_networkx_nodes(g, pos, nodelist=host_nodes, ax=ax, node_color="#d8f0d8", node_size=200)
        nx.draw_networkx_labels(g, pos, ax=ax, font_size=label_size)
        ax.set_title(
            f"{col.label}: {format_bytes(col.metrics.total_fabric_bytes)} on the fabric", fontsize=10
        )
    sm = ScalarMappable(norm=norm, cmap=cmap)
    cb = fig.colorbar(sm, ax=axes.ravel().tolist(), fraction=0.03, pad=0.02)
    cb.set_label(f"{unit} on link (both directions)")
    fig.suptitle(f"{c.lab} / {c.trace}: bytes per link")
    return _save(fig, path)


def plot_egress(c: Comparison, path: Path) -> Path:
    labels = c.labels
    values = [col.metrics.source_egress_bytes for col in c.columns]
    divisor, unit = byte_unit(max([1, *values]))
    scaled = [v / divisor for v in values]
    fig, ax = plt.subplots(figsize=(max(5.5, 1.3 * len(labels) + 2.5), 4))
    bars = ax.bar(labels, scaled, color="#4c72b0")
    for bar, v in zip(bars, values, strict=True):
        x = bar.get_x() + bar.get_width() / 2
        ax.annotate(format_bytes(v), (x, v / divisor), ha="center", va="bottom", fontsize=8)
    base = next((col for col in c.columns if col.label == c.baseline), None)
    if base is not None and c.fanout and _multicast(c):
        # Where a perfect multicast mode would land: the unicast egress divided by the fan-out.
        ideal = base.metrics.source_egress_bytes / c.fanout / divisor
        ax.axhline(
            ideal,
            color="#c44e52",
            linestyle="--",
            linewidth=1,
            label=f"{base.label} ÷ theoretical fan-out {c.fanout:.2f}",
        )
        ax.legend(fontsize=8, loc="upper right")
    ax.set_ylim(0, max([1e-9, *scaled]) * 1.25)
    ax.set_ylabel(f"{unit} sent by the sources")
    ax.set_title(f"{c.lab} / {c.trace}\nsource egress per mode", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_latency_cdf(c: Comparison, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    all_values: list[float] = []
    for col in c.columns:
        xs = sorted(receiver_latencies(col.run.messages))
        if not xs:
            continue
        all_values.extend(xs)
        n = len(xs)
        ax.step(
            [x * 1e3 for x in xs], [(i + 1) / n for i in range(n)], where="post", label=f"{col.label} (n={n})"
        )
    positive = [v for v in all_values if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")
    if all_values:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no deliveries recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("latency per receiver (ms)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{c.lab} / {c.trace}\nlatency CDF", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------- document


def run_conditions(run: RunResult) -> str:
    """The link settings a run recorded (loss, links down, bandwidth changes, time scale), in words, and
    the faults it had mid-run (docs/faults.md)."""
    label = conditions_label(run.meta.settings.get("conditions"))
    faults = run.meta.settings.get("faults") or []
    if faults:
        label += "; faults: " + ", ".join(
            f"{' '.join(f['fault'].split()[1:])} at {f['at_s']:g} s" for f in faults
        )
    return label


def conditions_heading(c: Comparison) -> str:
    """The group's heading; a comparison of runs made under different link conditions says so."""
    heading = f"{c.lab} / {c.trace}"
    labels = {run_conditions(col.run) for col in c.columns}
    if len(labels) > 1:
        heading += " (runs under different link conditions: see the 'link conditions' row)"
    return heading


def _multicast(c: Comparison) -> bool:
    return any(is_multicast(col.run) for col in c.columns)


def _trace_line(c: Comparison) -> str:
    t = c.columns[0].run.meta.trace
    kinds = ", ".join(f"{k} {v}" for k, v in t.ops_by_kind.items())
    text = (
        f"Trace `{t.name}` (generator {t.generator}): {t.ops} ops ({kinds}) over {len(t.hosts)} hosts, "
        f"{format_bytes(t.bytes)} sent once per op, {format_bytes(t.delivered_bytes)} delivered in total."
    )
    if _multicast(c):
        fanout = "–" if c.fanout is None else f"{c.fanout:.2f}"
        text += f" Theoretical fan-out (receivers per multicast op, weighted by bytes): {fanout}."
    return text


def build_blocks(
    runs: Sequence[RunResult],
    topology: Topology | None,
    out_dir: Path,
    *,
    title: str,
    generated_at: datetime | None,
) -> list[Block]:
    comparisons = compare_runs(runs)
    blocks: list[Block] = [Heading(1, title)]
    stamp = f", generated {generated_at.isoformat(timespec='seconds')}" if generated_at else ""
    blocks.append(Para(f"{len(runs)} run(s) in {len(comparisons)} lab/trace group(s){stamp}."))
    for gi, c in enumerate(comparisons, 1):
        prefix = f"g{gi}-{_slug(c.lab)}"
        blocks.append(Heading(2, conditions_heading(c)))
        blocks.append(Para(_trace_line(c)))
        blocks.append(Heading(3, "Summary"))
        blocks.append(summary_table(c))
        blocks.append(Heading(3, f"Ratios against {c.baseline or Mode.UNICAST}"))
        rt = ratios_table(c)
        if rt is None:
            blocks.append(
                Para(
                    "No unicast run in this group, so there is no baseline for the ratios; replay the same "
                    "trace with --mode unicast and report both runs together."
                )
            )
        else:
            blocks.append(rt)
            blocks.append(Bullets(ratio_sentences(c)))
        blocks.append(Heading(3, "Time"))
        blocks.append(Bullets(time_sentences(c)))
        blocks += [*membership_blocks(c), *reliability_blocks(c)]
        blocks.append(Heading(3, "Plots"))
        blocks.append(
            Image(
                "bytes per link over the topology",
                plot_heatmap(c, topology, out_dir / f"{prefix}-heatmap.png"),
            )
        )
        blocks.append(Image("source egress per mode", plot_egress(c, out_dir / f"{prefix}-egress.png")))
        blocks.append(Image("latency CDF per mode", plot_latency_cdf(c, out_dir / f"{prefix}-latency.png")))
        lt = links_table(c)
        blocks.append(Heading(3, "Bytes per link (both directions)"))
        if len(lt.rows) < len({lc.link for col in c.columns for lc in col.run.links}):
            blocks.append(
                Para(f"The {MAX_LINK_ROWS} busiest links; links.csv in each run directory has all.")
            )
        blocks.append(lt)
        ct = counters_table(c)
        if ct is not None:
            blocks.append(Heading(3, "Agent counters (sum over nodes, non-zero only)"))
            blocks.append(ct)
        blocks.append(Heading(3, "Runs"))
        blocks.append(runs_table(c))
    blocks.append(Heading(2, "How to read this report"))
    blocks.append(
        Bullets(
            [
                "Source egress: bytes the trace's source hosts transmitted on their data interfaces "
                "(kernel veth counters, headers included). Total fabric bytes: every data link, both "
                "directions; eth0 (management) never counts.",
                "Source egress ÷: unicast's source egress divided by the mode's. With multicast it should "
                "approach the theoretical fan-out; 'egress ÷ / fan-out' is how close it came (header "
                "overheads differ).",
                "Time: links run at their bandwidth divided by the lab's time scale (1:N), so the fabric "
                "runs N times slower than the hardware it stands for; fabric time = wall time ÷ N. A run is "
                "faithful when the counters show the links, not our software, set the pace (every busy "
                "shaper drained at its rate, nothing dropped but where a fault was injected, no node's CPU "
                "saturated). Times are compared only between faithful runs at the same scale. The bound is "
                "the busiest link's bytes over its rate: no schedule could finish sooner "
                "(docs/time-and-fidelity.md).",
                "Completion time: last delivery minus first send. Latencies are per (message, receiver), "
                "nearest-rank percentiles; 'slowest receiver' is per message, the receiver a collective "
                "waits for.",
                "Definitions and file formats: docs/results-format.md.",
            ]
        )
    )
    return blocks


def _md_cell(text: str, code: bool) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if code and text != "–" else text.replace("<", "\\<")


def render_markdown(blocks: Sequence[Block], out_dir: Path) -> str:
    out: list[str] = []
    for b in blocks:
        match b:
            case Heading():
                out.append(f"{'#' * b.level} {b.text}\n")
            case Para():
                out.append(b.text + "\n")
            case Bullets():
                out.append("\n".join(f"- {i}" for i in b.items) + "\n")
            case Image():
                out.append(f"![{b.alt}]({b.path.relative_to(out_dir).as_posix()})\n")
            case TableBlock():
                lines = ["| " + " | ".join(_md_cell(h, False) for h in b.header) + " |"]
                lines.append("|" + "|".join("---" for _ in b.header) + "|")
                for row in b.rows:
                    cells = [_md_cell(v, i in b.code_columns) for i, v in enumerate(row)]
                    lines.append("| " + " | ".join(cells) + " |")
                out.append("\n".join(lines) + "\n")
    return "\n".join(out)


_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f3f7; }
tr:nth-child(even) td { background: #fafafa; }
code { font-size: 0.95em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
"""


def _inline_md(text: str) -> str:
    # Paragraphs only ever use `code` spans; escape first so the span markup is the only HTML added.
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(blocks: Sequence[Block], title: str) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for b in blocks:
        match b:
            case Heading():
                out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
            case Para():
                out.append(f"<p>{_inline_md(b.text)}</p>")
            case Bullets():
                out.append("<ul>" + "".join(f"<li>{_inline_md(i)}</li>" for i in b.items) + "</ul>")
            case Image():
                data = base64.b64encode(b.path.read_bytes()).decode("ascii")
                out.append(f'<img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">')
            case TableBlock():
                rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.header) + "</tr>"]
                for row in b.rows:
                    cells = [
                        f"<td><code>{html.escape(v)}</code></td>"
                        if i in b.code_columns
                        else f"<td>{html.escape(v)}</td>"
                        for i, v in enumerate(row)
                    ]
                    rows.append("<tr>" + "".join(cells) + "</tr>")
                out.append("<table>" + "".join(rows) + "</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(
    runs: Sequence[RunResult],
    topology: Topology | None,
    out_dir: str | Path,
    *,
    title: str = "aidclab report",
    generated_at: datetime | None = None,
) -> tuple[Path, Path]:
    """Write report.md, report.html and the PNGs into ``out_dir``; return (md path, html path)."""
    if not runs:
        raise ValueError("no runs to report; pass at least one run id, run directory or 'latest'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    blocks = build_blocks(runs, topology, out, title=title, generated_at=generated_at)
    md_path = out / REPORT_MD
    html_path = out / REPORT_HTML
    md_path.write_text(render_markdown(blocks, out), encoding="utf-8")
    html_path.write_text(render_html(blocks, title), encoding="utf-8")
    return md_path, html_path


# ---------------------------------------------------------------------------------------------- terminal


def _rich_table(title: str, block: TableBlock) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for i, h in enumerate(block.header):
        table.add_column(h, style="cyan" if i == 0 else None, overflow="fold")
    for row in block.rows:
        table.add_row(*row)
    return table


def print_summary(runs: Sequence[RunResult], console: Console | None = None) -> None:
    """The summary and ratio tables of every lab/trace group, for the terminal."""
    console = console or Console(highlight=False)
    for c in compare_runs(runs):
        fanout = "–" if c.fanout is None else f"{c.fanout:.2f}"
        title = conditions_heading(c) + (f" (theoretical fan-out {fanout})" if _multicast(c) else "")
        console.print(_rich_table(title, summary_table(c)))
        rt = ratios_table(c)
        if rt is not None:
            console.print(_rich_table(f"ratios against {c.baseline}", rt))
            for line in ratio_sentences(c):
                console.print(f"  {line}")
            for line in time_sentences(c):
                console.print(f"  {line}")
        else:
            console.print(
                "  no unicast run in this group: no ratios (replay the trace with --mode unicast too)"
            )
