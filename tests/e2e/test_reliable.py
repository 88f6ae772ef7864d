"""Reliable delivery on leaf-spine (issues 15 and 38): a model-distribution trace in every reliable mode, at
0 % and at 5 % loss on every link end of the fabric (both directions of every host-leaf and leaf-spine link,
`aidclab link set ... loss`), delivered 100 % exactly once; without loss the source hears exactly the
fan-out per packet end to end, and at most one per first-hop branch when the BFRs aggregate (the issue's
first bound), which holds at 5 % loss too. The second, retransmitted bytes within 1.2x the dropped ones at
5%, is printed beside the end-to-end and unicast factors of the same lab; it is not asserted: four bench
runs before selective AGG-ACKs gave 0.99x to 1.24x, four after 0.93x to 1.05x (docs/reliability.md), too
few to call the tail.

The lab is the shipped leaf-spine on its default dataplane (eBPF: DATA forwarded in the kernel, which
reports it to the agents' aggregation; the leaves impose network-BIER in the kernel too) at its time.scale
20000. An aggregated run at 0 % is confirmed at twice the scale (time dilation's test: the same fabric
completion within 5 %, the same bytes), since its timers run in fabric time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aidcnet.modes import RELIABLE, Mode
from orchestrator.experiment.session import LabSession
from orchestrator.lab.labdir import lab_dir
from orchestrator.lab.linkset import link_set
from orchestrator.lab.shaping import fabric_lost_bytes, load_fabric
from orchestrator.workloads.trace import TraceReader
from tests.e2e.conftest import aidclab, deployed, faithful_run

LAB = "t-reliable"
HOSTS = [f"h{i}" for i in range(1, 9)]
LOSS = 0.05


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    # The default dataplane (eBPF): aggregation runs in the BFR agents from the fast path's DATA reports.
    with deployed(
        runtime, tmp_path_factory.mktemp("reliable"), "leaf-spine", LAB, {}, configured=True
    ) as topo:
        yield topo


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "model-dist.jsonl"
    aidclab(
        "workload", "model-dist", "--hosts", ",".join(HOSTS), "--size", "2MiB", "--chunk-bytes", "256KiB",
        "-o", str(path),
    )  # fmt: skip
    return path


def fabric_ends(topo) -> list[str]:
    return sorted(load_fabric(lab_dir(topo)).ends)


def lost_bytes(topo) -> int:
    return fabric_lost_bytes(load_fabric(lab_dir(topo)), topo.container_name)


def set_loss(runtime, topo, ends: list[str], p: float) -> None:
    """``aidclab link set NODE:IF --one-way loss P`` on every end, in this process (the CLI's own code
    path; 32 interpreter starts per change would cost a minute)."""
    for end in ends:
        link_set(runtime, lab_dir(topo), end, "loss", str(p), one_way=True)


def run_mode(runtime, topo, trace: Path, mode: Mode, tmp: Path, loss: float) -> dict[str, Any]:
    from orchestrator.run.driver import run_experiment

    ends = fabric_ends(topo)
    before = lost_bytes(topo)
    if loss:
        set_loss(runtime, topo, ends, loss)
    try:
        # Without loss a timer that fires says the transport erred only if the links set the pace: a run a
        # loaded machine paced goes again at twice its scale. (A lossy run is judged by its drops, which
        # a second run would add to.)
        done = (
            run_experiment(topo, trace, mode, results_dir=tmp / "results")
            if loss
            else faithful_run(topo, trace, mode, runtime=runtime, results_dir=tmp / "results")
        )
    finally:
        if loss:
            set_loss(runtime, topo, ends, 0)
    dropped = lost_bytes(topo) - before
    run = done.result
    for line in done.mode.lines:
        print(f"{mode} at {loss:.0%}: {line}")
    m = run.metrics
    assert m is not None
    rel = run.meta.settings["reliable"]
    src = rel["sources"]
    sent = src.get("sender.sent", 0)
    acks = sum(src.get(f"source.rx.{k}.packets", 0) for k in ("ack", "agg-ack", "agg-ack-partial"))
    return {
        "metrics": m,
        "sources": src,
        "receivers": rel["receivers"],
        "dropped": dropped,
        "acks_per_packet": acks / sent if sent else 0.0,
        "acks_at_sources": acks,
        "links": rel["links"],
        "first_sent_s": min(msg.sent_at for msg in run.messages),
        "fanout": m.delivery.expected / max(1, m.delivery.messages),
        # ACKs the BFRs' aggregators took in over the run, from the agents' counters (leaves and spines)
        "bfr_absorbed": bfr_counter(run, "reliable.agg.absorbed"),
        # the hosts' ACKs their BFER leaves took in for network-BIER
        "edge_absorbed": bfr_counter(run, "reliable.edge.absorbed"),
        # DATA the BFRs' eBPF fast path forwarded (or imposed) and reported to their agents
        "reported": bfr_counter(run, "reliable.report.forwarded")
        + bfr_counter(run, "reliable.report.imposed"),
        "kernel_forwarded": bfr_counter(run, "bier.forwarded"),
        "outcome": done,
    }


def bfr_counter(run, name: str) -> int:
    """An agent counter's growth over the run, summed over the BFRs (leaves and spines)."""
    return sum(deltas.get(name, 0) for node, deltas in run.agents.items() if node not in HOSTS)


def assert_no_timer_fired_without_loss(name: str, res: dict[str, Any]) -> None:
    """Without loss no retransmission timer fires, when the links set the run's pace. A run whose verdict
    names something else (the late-transport check: the agent's loop was held past its timers; a busy
    machine) may have fired one for what was only late, which says nothing of the transport: then the count
    is printed, not judged. A timer that fires in a run judged faithful fails the test."""
    fired = res["sources"].get("sender.retransmitted", 0)
    timing = res["outcome"].result.timing
    if timing is not None and timing.faithful is False:
        print(f"0% loss, {name}: {fired} retransmitted in a run not faithful ({'; '.join(timing.reasons)})")
        return
    assert fired == 0, (name, fired, timing and timing.notes)


def check_exactly_once(topo, trace: Path, mode: Mode, res: dict[str, Any]) -> None:
    d = res["metrics"].delivery
    assert d.missing == 0 and d.duplicates == 0 and d.wrong_receivers == 0, (mode, d)
    assert d.delivered == d.expected > 0
    assert res["sources"].get("sender.receivers-failed", 0) == 0
    # Every delivery is of this run: a copy of an earlier run's DATA taken for this run's would carry the
    # earlier send time (on CI: a record stamped 12 s before the run began, completion 15.7 s in a 4 s run).
    assert res["first_sent_s"] >= 0, (mode, res["first_sent_s"])
    # The receivers' own records: one good copy each, never a duplicate given to the application.
    session = LabSession.open(topo)
    with TraceReader(trace) as reader:
        ops = list(reader)
    for host in {dst for op in ops for dst in op.dst}:
        for rec in session.agent(host).replay_results():
            assert rec["checksum_ok"] and rec["duplicates"] == 0 and rec["bad"] == 0, (mode, host, rec)


@pytest.fixture(scope="module")
def lossy_runs(runtime, lab, trace, tmp_path_factory) -> dict[Mode, dict[str, Any]]:
    """Each reliable mode once at 5% loss on every link end, shared by the tests that judge them."""
    tmp = tmp_path_factory.mktemp("lossy")
    return {mode: run_mode(runtime, lab, trace, mode, tmp, LOSS) for mode in RELIABLE}


@pytest.mark.parametrize("mode", list(RELIABLE))
def test_every_reliable_mode_delivers_exactly_once_at_five_percent_loss_on_every_link(
    lab, trace, lossy_runs, mode
):
    res = lossy_runs[mode]
    assert res["dropped"] > 0, "the fault must have dropped something"
    # The run's own per-end count (start to collect) lies within the drops around the whole experiment.
    assert 0 < sum(v["lost_bytes"] for v in res["links"].values()) <= res["dropped"]
    check_exactly_once(lab, trace, mode, res)
    retx = res["sources"].get("sender.retransmitted-bytes", 0)
    print(
        f"{mode} at 5%: retransmitted {retx} B at the sources, fabric dropped {res['dropped']} B "
        f"(every packet, every link): {retx / res['dropped']:.2f}x; "
        f"ACKs at the sources per packet {res['acks_per_packet']:.3f}"
    )
    assert retx > 0


@pytest.mark.parametrize("mode", [Mode.RELIABLE_HOST_BIER, Mode.RELIABLE_NET_BIER])
def test_aggregation_keeps_one_ack_per_first_hop_branch_at_five_percent_loss(lossy_runs, mode):
    """With loss the aggregated source still hears at most one ACK per packet for its one first-hop
    branch (selective AGG-ACKs for what is held above a hole, one AGG-ACK per two windows, partials only
    for receivers that stay silent), against about the fan-out end to end. Over network-BIER the branch
    is the source's leaf, which speaks for the BFER leaves, which speak for their hosts."""
    agg = lossy_runs[mode]
    e2e = lossy_runs[Mode.RELIABLE_HOST_BIER_E2E]
    print(
        f"5% loss, ACKs at the sources per DATA packet: {mode} {agg['acks_per_packet']:.3f}, "
        f"end to end {e2e['acks_per_packet']:.3f}"
    )
    first_hop_branches = 1
    assert 0 < agg["acks_per_packet"] <= first_hop_branches < e2e["acks_per_packet"]
    # The BFRs aggregated behind the eBPF fast path: DATA reported, none of it forwarded by Python.
    assert agg["reported"] > 0 and agg["kernel_forwarded"] > 0
    nacks = sum(agg["sources"].get(f"source.rx.{k}.packets", 0) for k in ("nack", "agg-nack"))
    repaired = agg["sources"].get("sender.repaired-sequences", 0)
    print(f"5% loss, {mode}: NACKs at the source {nacks} for {repaired} sequences repaired")
    assert agg["sources"].get("source.rx.nack.packets", 0) == 0, "a receiver's NACK passed unmerged"


def test_aggregation_absorbs_the_ack_implosion_at_the_source(runtime, lab, trace, tmp_path):
    """No loss: end to end, the source hears every receiver for every packet (exactly the fan-out per
    packet); aggregated, the BFRs absorb the ACKs and the source hears at most one per first-hop branch
    (h1 has one uplink). Both runs follow the lossy ones on the same lab and reuse their flow ids: the
    driver makes every node forget the earlier runs' aggregation windows first (before it did not, the
    windows the 5% runs left open sent partials into these runs: 1.038 and, on a loaded CI machine,
    4.7 ACKs per packet aggregated, 19.4 end to end)."""
    agg = run_mode(runtime, lab, trace, Mode.RELIABLE_HOST_BIER, tmp_path, 0.0)
    net = run_mode(runtime, lab, trace, Mode.RELIABLE_NET_BIER, tmp_path, 0.0)
    e2e = run_mode(runtime, lab, trace, Mode.RELIABLE_HOST_BIER_E2E, tmp_path, 0.0)
    check_exactly_once(lab, trace, Mode.RELIABLE_HOST_BIER, agg)
    check_exactly_once(lab, trace, Mode.RELIABLE_NET_BIER, net)
    check_exactly_once(lab, trace, Mode.RELIABLE_HOST_BIER_E2E, e2e)
    print(
        f"0% loss, ACKs at the sources per DATA packet: aggregated {agg['acks_per_packet']:.3f}, "
        f"network-BIER aggregated {net['acks_per_packet']:.3f}, "
        f"end to end {e2e['acks_per_packet']:.3f} (fan-out {e2e['fanout']:.2f}); "
        f"ratio {e2e['acks_per_packet'] / max(agg['acks_per_packet'], 1e-9):.2f}"
    )
    assert e2e["acks_per_packet"] == e2e["fanout"]  # the implosion: every receiver, every packet
    first_hop_branches = 1
    for name, res in (("aggregated", agg), ("network-BIER", net), ("end to end", e2e)):
        assert_no_timer_fired_without_loss(name, res)
    for res in (agg, net):
        assert 0 < res["acks_per_packet"] <= first_hop_branches < e2e["acks_per_packet"]
        assert res["bfr_absorbed"] > 0
    assert e2e["bfr_absorbed"] == 0
    # Network-BIER: the BFER leaves took their hosts' ACKs in (not one reached the source).
    assert net["edge_absorbed"] > 0 and net["sources"].get("source.rx.ack.packets", 0) == 0
    # On the wire: the link end that sends to the source (its leaf's port) carried exactly the ACKs the
    # source's service counted, by the link-fault program's own count; and the end-to-end ACKs crossed
    # far more link ends than the aggregated ones.
    (toward_source,) = [n for n, e in load_fabric(lab_dir(lab)).ends.items() if e.peer.startswith("h1:")]
    for res in (agg, e2e):
        on_link = res["links"].get(toward_source, {})
        assert on_link.get("ack", 0) + on_link.get("agg-ack", 0) == res["acks_at_sources"], on_link
    total = {name: sum(sum(v[k] for k in ("ack", "nack", "agg-ack")) for v in r["links"].values())
             for name, r in (("aggregated", agg), ("e2e", e2e))}  # fmt: skip
    print(f"0% loss, feedback packets on all link ends: {total}")
    assert total["aggregated"] < total["e2e"]
    # Time dilation's test: the aggregated run again at twice the scale (links and agents rescaled
    # together) takes the same fabric time, its timers being in fabric time, and moves the same bytes.
    from orchestrator.experiment.fidelity import CONFIRM_TOLERANCE
    from orchestrator.run.driver import confirm

    first = agg["outcome"]
    _second, check = confirm(lab, trace, Mode.RELIABLE_HOST_BIER, first, results_dir=tmp_path / "x2")
    assert check is not None
    print(f"0% loss, {Mode.RELIABLE_HOST_BIER} at two scales: {check.describe()}")
    # The same fabric time (and bytes) at both scales when the links pace the run: one the sampler saw
    # paced by a busy machine's CPU takes the same wall time at both, and its timers fire for what is only
    # late (measured on a saturated machine: 131 µs against 57 µs of fabric time, end to end 97 against
    # 52), which says nothing of the transport's timers.
    timing = first.result.timing
    if timing is not None and timing.faithful:
        assert check.off <= CONFIRM_TOLERANCE and check.same_bytes, check.describe()
