"""The scale experiments' plots and tables (``aidclab model experiment``, docs/scale.md): one PNG and one
Markdown table per experiment, from the rows ``orchestrator.model.experiments`` computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aidcnet.modes import Mode
from orchestrator.model import experiments


def _table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])

    def cell(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _savings(sizes: tuple[int, ...], plt: Any) -> tuple[list[dict[str, Any]], Any, Any]:
    rows = experiments.savings(sizes)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, what, label in (
        (axes[0], "egress", "source egress: unicast / mode"),
        (axes[1], "above-leaf", "bytes between switches: unicast / mode"),
    ):
        for wl in dict.fromkeys(r["workload"] for r in rows):
            for mode, style in ((Mode.HOST_BIER, "-o"), (Mode.NET_BIER, "--s")):
                pts = [(r["gpus"], r[f"{mode} {what} x"]) for r in rows if r["workload"] == wl]
                ax.plot(*zip(*pts, strict=True), style, label=f"{wl}, {mode}")
        ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel=label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("What the sources save")
    axes[1].set_title("What the fabric above the leaves saves")
    return rows, fig, axes[1]


def _bsl(sizes: tuple[int, ...], plt: Any) -> tuple[list[dict[str, Any]], Any, Any]:
    gpus = max(s for s in sizes if s <= 8192) if any(s <= 8192 for s in sizes) else sizes[0]
    rows = experiments.bsl_overhead(gpus=gpus)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for a, style in (("topology (host order)", "--s"), ("random", "-o"), ("EP group", ":^")):
        for wl in ("MoE uniform", "broadcast 64 KiB"):
            pts = [
                (r["bsl"], r["SIs/datagram"], r["egress x"])
                for r in rows
                if r["assignment"] == a and r["workload"] == wl
            ]
            if not pts:
                continue
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{wl}, {a}")
            axes[1].plot([p[0] for p in pts], [p[2] for p in pts], style, label=f"{wl}, {a}")
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="BSL (bits)",
        ylabel="BIER packets per datagram (SIs)",
        title=f"Host-BIER packets per datagram, {gpus} GPUs",
    )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="BSL (bits)",
        ylabel="source egress: unicast / host-BIER",
        title="Savings against unicast",
    )
    axes[0].grid(True, which="both", alpha=0.3)
    return rows, fig, axes[1]


def _state(sizes: tuple[int, ...], plt: Any) -> tuple[list[dict[str, Any]], Any, Any]:
    rows = experiments.bift_state(sizes)
    fig, ax = plt.subplots(figsize=(7, 4))
    for tier in dict.fromkeys(r["tier"] for r in rows):
        pts = [(r["gpus"], r["distinct F-BMs"]) for r in rows if r["tier"] == tier]
        ax.plot(*zip(*pts, strict=True), "-o", label=tier)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="GPUs",
        ylabel="distinct (SI, F-BM, BFR-NBR) entries",
        title="BIFT state per BFR (BSL 256)",
    )
    return rows, fig, ax


EXPERIMENTS = {"savings": _savings, "bsl": _bsl, "state": _state}


def write_experiment(name: str, sizes: tuple[int, ...], out: Path) -> tuple[Path, Path, str]:
    """Run experiment ``name`` at ``sizes`` GPUs; write ``out/NAME.png`` and ``out/NAME.md``. Returns both
    paths and the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, fig, ax = EXPERIMENTS[name](sizes, plt)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    png, md = out / f"{name}.png", out / f"{name}.md"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    table = _table(rows)
    md.write_text(table)
    return png, md, table
