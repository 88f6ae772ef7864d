"""The plots writer: PNGs of a group drawn with matplotlib, and the step that draws a document's plots.

Deterministic: layouts are seeded and PNG metadata is fixed, so identical runs give identical files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

# Headless and deterministic: the report runs on servers without a display, and Agg must be chosen
# before pyplot is imported.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
import networkx as nx
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize

from aidcnet.roles import Role
from orchestrator.experiment.clock import Clock, second_unit
from orchestrator.experiment.metrics import Comparison, receiver_latencies
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report.blocks import Block, Image, Plot
from orchestrator.experiment.report.text import natural
from orchestrator.units import byte_unit, format_bytes

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology

DPI = 100
LAYOUT_SEED = 42
# PNG metadata without the matplotlib version, so a report does not change with the library.
_PNG_META = {"Software": None}


def draw(blocks: Sequence[Block], out_dir: Path) -> list[Block]:
    """``blocks`` with every :class:`Plot` drawn into ``out_dir`` and replaced by the :class:`Image` of it."""
    out: list[Block] = []
    for b in blocks:
        if isinstance(b, Plot):
            path = out_dir / b.filename
            b.draw(path)
            out.append(Image(b.alt, path))
        else:
            out.append(b)
    return out


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
    present = sorted((h for h in g if h in hosts), key=natural)
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
            nodes.sort(key=natural)
        else:

            def bary(n: str, level: int = level) -> float:
                below = [index[m] for m in g[n] if dist[m] == level - 1]
                return sum(below) / len(below) if below else math.inf

            nodes.sort(key=lambda n: (bary(n), natural(n)))
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
    if base is not None and c.fanout and c.multicast:
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


@dataclass(frozen=True)
class LatencySeries:
    """What the latency CDF draws: each run's receiver latencies on its clock, in one unit."""

    xlabel: str
    series: list[tuple[str, list[float]]]


def latency_series(c: Comparison) -> LatencySeries:
    """Every run's (message, receiver) latencies, sorted, in fabric time on a shaped lab (wall time,
    labelled, on an unshaped one: a group's runs share their conditions, time scale included)."""
    clocks = [Clock.of_run(col.run) for col in c.columns]
    values = [
        sorted(s for x in receiver_latencies(col.run.messages) if (s := k.seconds(x)) is not None)
        for col, k in zip(c.columns, clocks, strict=True)
    ]
    size, unit = second_unit(max([0.0, *(v for xs in values for v in xs)]))
    series = [(col.label, [x / size for x in xs]) for col, xs in zip(c.columns, values, strict=True) if xs]
    clock = clocks[0] if clocks else Clock()
    return LatencySeries(clock.axis("latency per receiver", unit), series)


def plot_latency_cdf(c: Comparison, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    drawn = latency_series(c)
    for label, xs in drawn.series:
        n = len(xs)
        ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=f"{label} (n={n})")
    positive = [v for _, xs in drawn.series for v in xs if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")
    if drawn.series:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no deliveries recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(drawn.xlabel)
    ax.set_ylabel("fraction of deliveries")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{c.lab} / {c.trace}\nlatency CDF", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


STEP_COLOURS = {"compute": "#4c9a2a", "network": "#3b75af", "barrier": "#e0a030"}


def plot_step_timeline(runs: list[tuple[str, dict | None, Clock]], title: str, path: Path) -> Path:
    """Each run's closed-loop step, one row per GPU: compute, network and barrier spans over the step
    (``settings.step``), on the run's clock; one panel per run, one time axis for all."""
    runs = [(label, step, clock) for label, step, clock in runs if step]
    longest = max([1e-12, *(step["step_s"] for _, step, _ in runs)])
    size, unit = second_unit(longest)
    gpus = max([1, *(len(step["gpus"]) for _, step, _ in runs)])
    row_h = 0.22 if gpus <= 32 else max(0.02, 7.0 / gpus)
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(10, max(2.2, 0.9 + row_h * gpus) * len(runs)), squeeze=False, sharex=True
    )
    for ax, (label, step, clock) in zip(axes[:, 0], runs, strict=True):
        names = sorted(step["gpus"], key=natural)
        for y, name in enumerate(names):
            for start, end, kind, *_ in step["gpus"][name]["spans"]:
                ax.broken_barh([(start / size, (end - start) / size)], (y - 0.4, 0.8),
                               facecolors=STEP_COLOURS.get(kind, "#999999"), linewidth=0)  # fmt: skip
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names if len(names) <= 40 else [""] * len(names), fontsize=7)
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.invert_yaxis()
        ax.set_title(f"{label}: step {clock.shown(step['step_s'])}, GPU utilisation "
                     f"{step.get('utilisation', 0.0):.0%}", fontsize=9)  # fmt: skip
        ax.set_xlabel(clock.axis("time since the step's zero", unit))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STEP_COLOURS.values()]
    fig.legend(handles, list(STEP_COLOURS), loc="upper right", ncols=3, fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return _save(fig, path)
