"""Hold a model run against a measured replay run: every difference, each naming the link, tier or node.

Exact link directions (no kernel hash on them) must match the kernel counters to the byte and packet;
hashed ones are compared through the tier sums, which no hash can move. Source egress and the agents'
BIER counters (copies made, packets imposed, forwarded, delivered) must match exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.experiment.records import RunResult
from orchestrator.model.counts import ModelRun, tier_sums

# Agent counters the model predicts; a replay's agents count much more (control, config, ...).
MODELLED_PREFIXES = ("bier.", "net-bier.", "ina.")


def differences(
    model: ModelRun, run: RunResult, tiers: dict[str, int | None], counters: Iterable[str] | None = None
) -> list[str]:
    """Human-readable differences; empty when the model equals the run."""
    out: list[str] = []
    measured = {lc.link: lc for lc in run.links}
    endpoints: list[tuple[str, str]] = []
    mb: list[float] = []
    mp: list[float] = []
    for lk in model.links:
        lc = measured.get(lk.link)
        if lc is None:
            out.append(f"link {lk.link}: in the model, not in the run's links")
            continue
        endpoints.append((lk.a, lk.b))
        for d, frm in (("a_to_b", lk.a), ("b_to_a", lk.b)):
            real = (getattr(lc, f"{d}_bytes"), getattr(lc, f"{d}_packets"))
            mine = (getattr(lk, f"{d}_bytes"), getattr(lk, f"{d}_packets"))
            mb.append(real[0])
            mp.append(real[1])
            if getattr(lk, f"{d}_exact") and real != mine:
                out.append(
                    f"link {lk.link} from {frm}: measured {real[0]} B / {real[1]} packets, "
                    f"model {mine[0]} B / {mine[1]} packets"
                )
    import numpy as np

    real_tiers = tier_sums(endpoints, tiers, np.array(mb), np.array(mp))
    for key in sorted(set(real_tiers) | set(model.tier_sums)):
        r = real_tiers.get(key, [0, 0])
        m = model.tier_sums.get(key, [0, 0])
        if r != m:
            out.append(f"tier {key}: measured {r[0]} B / {r[1]} packets, model {m[0]} B / {m[1]} packets")
    metrics = run.metrics
    if metrics is not None:
        real = (metrics.source_egress_bytes, metrics.source_egress_packets)
        mine = (model.source_egress_bytes, model.source_egress_packets)
        if real != mine:
            out.append(
                f"source egress: measured {real[0]} B / {real[1]} packets, model {mine[0]} B / {mine[1]}"
            )
    wanted = set(counters) if counters is not None else None
    for node, cs in model.agents.items():
        for name, value in cs.items():
            if wanted is not None and name not in wanted:
                continue
            if not name.startswith(MODELLED_PREFIXES):
                continue
            got = run.agents.get(node, {}).get(name, 0)
            if got != value:
                out.append(f"node {node} counter {name}: measured {got}, model {value}")
    return out
