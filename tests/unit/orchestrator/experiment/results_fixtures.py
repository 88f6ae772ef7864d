"""Hand-made replay runs on the leaf-spine lab, shared by the results, metrics and report tests.

The story: h1 multicasts ``OPS`` messages of ``PAYLOAD`` bytes to h3, h5 and h7 (one host behind each
other leaf), so the trace's fan-out is exactly 3. In unicast h1 sends three copies, which leaf1 spreads
over both spines; with BIER h1 sends one copy, spine1 replicates it to the three leaves. So unicast
source egress is 3x BIER, and the fabric carries 12 copies against 8.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.experiment.metrics import Snapshot, agent_deltas, link_deltas, link_pairs
from orchestrator.experiment.records import (
    MachineInfo,
    MessageResult,
    RunMeta,
    RunResult,
    TimingRecord,
    TraceInfo,
)
from orchestrator.lab.topology import Topology, load_topology
from orchestrator.paths import ROOT as ROOT_DIR

REPO = ROOT_DIR
LAB_FILE = REPO / "labs" / "leaf-spine.clab.yml"
HOSTS = [f"h{i}" for i in range(1, 9)]
RECEIVERS = ["h3", "h5", "h7"]
OPS = 4
PAYLOAD = 3000
T0 = datetime(2025, 3, 14, 10, 15, 2, 123456, tzinfo=UTC)

# Copies of one message crossing each directed interface (the transmitting endpoint).
UNICAST_COPIES = {
    "h1:eth1": 3,
    "leaf1:eth1": 2,  # to spine1: copies for h3 and h5
    "leaf1:eth2": 1,  # to spine2: the copy for h7
    "spine1:eth2": 1,  # to leaf2
    "spine1:eth3": 1,  # to leaf3
    "spine2:eth4": 1,  # to leaf4
    "leaf2:eth3": 1,  # to h3
    "leaf3:eth3": 1,  # to h5
    "leaf4:eth3": 1,  # to h7
}
BIER_COPIES = {
    "h1:eth1": 1,
    "leaf1:eth1": 1,
    "spine1:eth2": 1,
    "spine1:eth3": 1,
    "spine1:eth4": 1,
    "leaf2:eth3": 1,
    "leaf3:eth3": 1,
    "leaf4:eth3": 1,
}


def topology() -> Topology:
    return load_topology(LAB_FILE)


def trace_info(**overrides: object) -> TraceInfo:
    fields: dict[str, object] = {
        "file": "workloads/fanout3.jsonl",
        "sha256": "ab" * 32,
        "generator": "hand",
        "version": 1,
        "params": {"seed": 1},
        "hosts": HOSTS,
        "ops": OPS,
        "ops_by_kind": {"multicast": OPS},
        "bytes": OPS * PAYLOAD,
        "delivered_bytes": OPS * PAYLOAD * len(RECEIVERS),
        "fanout_mean": 3.0,
        "fanout_weighted": 3.0,
        "duration": 0.003,
    }
    fields.update(overrides)
    return TraceInfo.model_validate(fields)


def machine() -> MachineInfo:
    return MachineInfo(
        hostname="testhost",
        python="3.11.2",
        implementation="CPython",
        platform="Linux-6.1-x86_64",
        machine="x86_64",
        kernel="6.1.0",
        cpu_count=2,
        memory_bytes=24 << 30,
    )


def meta(
    mode: str,
    run_id: str | None = None,
    *,
    lab: str = "leaf-spine",
    trace: TraceInfo | None = None,
    settings: dict | None = None,
) -> RunMeta:
    return RunMeta(
        run_id=run_id or f"20250314T101502.{len(mode):06d}Z-{lab}-{mode}",
        lab=lab,
        topology_file=str(LAB_FILE),
        trace=trace or trace_info(),
        mode=mode,
        started=T0,
        finished=T0 + timedelta(seconds=2),
        aidclab_version="0.1.0",
        git_commit="0123456789abcdef0123456789abcdef01234567",
        machine=machine(),
        settings=settings if settings is not None else {"rate": "1Gbit"},
    )


def snapshots(topo: Topology, copies: dict[str, int], payload: int, ops: int) -> tuple[Snapshot, Snapshot]:
    """Before/after counters: every data interface plus each node's eth0, with non-zero starting values
    and heavy management traffic, so a metric that forgot a 'before' or counted eth0 shows it."""
    peer = {}
    for link in topo.links:
        peer[str(link.a)] = str(link.b)
        peer[str(link.b)] = str(link.a)
    before: dict[str, dict[str, int]] = {}
    for i, ep in enumerate(sorted(peer)):
        before[ep] = {"rx_bytes": 1000 + i, "rx_packets": 10 + i, "tx_bytes": 2000 + i, "tx_packets": 20 + i}
    for node in topo.nodes:
        before[f"{node}:eth0"] = {"rx_bytes": 5, "rx_packets": 1, "tx_bytes": 5, "tx_packets": 1}
    after = {ep: dict(c) for ep, c in before.items()}
    for ep, n in copies.items():
        nbytes = n * payload * ops
        packets = n * ops
        after[ep]["tx_bytes"] += nbytes
        after[ep]["tx_packets"] += packets
        after[peer[ep]]["rx_bytes"] += nbytes
        after[peer[ep]]["rx_packets"] += packets
    for node in topo.nodes:
        after[f"{node}:eth0"]["tx_bytes"] += 10**9
        after[f"{node}:eth0"]["rx_bytes"] += 10**9
    return before, after


def messages(base_latency: float, step: float = 0.001) -> list[MessageResult]:
    out = []
    for i in range(OPS):
        lat = {r: base_latency * (1 + j) + i * 1e-5 for j, r in enumerate(RECEIVERS)}
        out.append(
            MessageResult(
                id=i,
                op="multicast",
                src="h1",
                expected=RECEIVERS,
                delivered=RECEIVERS,
                bytes=PAYLOAD,
                sent_at=i * step,
                latency=lat,
            )
        )
    return out


def faithful(scale: int = 20000) -> TimingRecord:
    """The timing of a run on shaped links that the counters judged faithful."""
    return TimingRecord(scale=scale, faithful=True)


def run(
    mode: str, topo: Topology | None = None, timing: TimingRecord | None = None, **meta_kw: object
) -> RunResult:
    topo = topo or topology()
    copies = UNICAST_COPIES if mode == "unicast" else BIER_COPIES
    before, after = snapshots(topo, copies, PAYLOAD, OPS)
    agents_before = {"leaf1": {"bier.rx": 5}, "spine1": {"bier.rx": 0}}
    agents_after = {"leaf1": {"bier.rx": 5 + OPS, "bier.tx": 1}, "spine1": {"bier.rx": OPS}}
    return RunResult(
        meta=meta(mode, **meta_kw),  # type: ignore[arg-type]
        links=link_deltas(before, after, link_pairs(topo)),
        agents=agent_deltas(agents_before, agents_after) if mode != "unicast" else {},
        messages=messages(0.002 if mode == "unicast" else 0.001),
        timing=timing,
    )


def leaf_spine_runs(timing: TimingRecord | None = None) -> list[RunResult]:
    topo = topology()
    return [run("net-bier", topo, timing), run("unicast", topo, timing)]
