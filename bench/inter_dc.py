"""Seed 003's inter-DC and regional scenarios (and seed 000's "source WAN egress drops from 4x to 1x") on
the interdc and regional labs, each against its baseline measured in the same run (docs/inter-dc.md):

* model-dist (regional): the model from a GPU in the source DC to a GPU in every edge site, in unicast,
  host-BIER and network-BIER: WAN egress (bytes on the DC's uplink b0 -> c1) of unicast over each BIER
  mode (the number of remote sites when the network replicates), completion in fabric time against its
  floor (the farthest receiver's propagation delay), and the most bytes the WAN held in flight;
* reliable (regional): the same distribution, reliable, with --loss on every WAN link: ACKs crossing
  the WAN toward the source per DATA packet with aggregation in the BFRs (the site borders among them)
  against end to end, retransmitted bytes per dropped byte, every chunk delivered exactly once;
* federated (regional): the edge sites' GPUs aggregate an update at the source DC, a parameter server
  there (ps) against INA at each site's border and the DC's (ina): bytes into the aggregator, completion;
* moe (interdc): one MoE layer's dispatch (workloads/moe-sample.jsonl, hosts on both sides of the DCI)
  at each DCI delay of --delays, unicast and host-BIER: completion against the DCI-less run's (that one
  at --zero-delay-scale, where so short a run is paced by its links).

Deploys its own copies (``bench-regional``, ``bench-interdc``) at the shipped labs' scale and destroys
them; regional on the Python BIER dataplane, where the BFRs aggregate the reliable transport's ACKs.
Run as root: python bench/inter_dc.py [--scenarios model-dist,reliable,federated,moe]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from aidcnet.modes import (  # noqa: E402
    BASELINES,
    COLLECTIVE_PAIR,
    HOST_BIER,
    MESSAGE_PAIR,
    MODELLED,
    RELIABLE,
    Mode,
    in_order,
)
from bench.harness import bench_lab, bench_parser, shipped_vars, workload  # noqa: E402
from orchestrator.experiment.metrics import collective_load  # noqa: E402
from orchestrator.experiment.modes.reliable import link_feedback_packets  # noqa: E402
from orchestrator.lab import relayctl  # noqa: E402
from orchestrator.lab.delay import format_duration, parse_duration  # noqa: E402
from orchestrator.lab.propagation import fabric_delays, path_delays  # noqa: E402
from orchestrator.lab.shaping import load_fabric  # noqa: E402
from orchestrator.run.driver import timing_summary  # noqa: E402

SCENARIOS = ("model-dist", "reliable", "federated", "moe")
SOURCE, SITES = "h1", ["h5", "h7", "h9", "h11"]  # one GPU in each edge site
WAN_UPLINK = "b0:eth2<->c1:eth1"
WAN_TOWARD_SOURCE = "c1:eth1"  # what the WAN sends back into the source DC: the ACKs
DCI = ("b1:eth3", "b1:eth4")
FED_WORKERS = ["h5", "h6", "h7", "h8", "h9", "h10", "h11", "h12"]


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated, of " + ", ".join(SCENARIOS)
    )
    p.add_argument("--size", default="4MiB", help="model size for model-dist and reliable (default 4MiB)")
    p.add_argument("--update", default="256KiB", help="each worker's update for federated (default 256KiB)")
    p.add_argument(
        "--loss", type=float, default=0.01, help="loss on every WAN link for reliable (default 0.01)"
    )
    p.add_argument("--delays", default="0,0.5ms,2ms,5ms", help="DCI delays for moe (default 0,0.5ms,2ms,5ms)")
    p.add_argument(
        "--zero-delay-scale", type=int, default=20000,
        help="time scale of moe's runs without DCI delay (default 20000): the layer's 74 us of fabric time "
        "at the lab's 1:1000 is 74 ms of wall time, less than our Python senders need, and the run is "
        "not faithful there",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=600.0, help="replay timeout beyond the trace, wall s")
    return p


def fabric_s(outcome: Any) -> float:
    m = outcome.result.metrics
    return m.completion_fabric_time if m.completion_fabric_time is not None else float("nan")


def wan_egress(outcome: Any) -> int:
    return sum(x.a_to_b_bytes for x in outcome.result.links if x.link == WAN_UPLINK)


def floor_s(lab: Lab, src: str, receivers: list[str]) -> float:
    """The farthest receiver's propagation delay: no completion can be sooner (plus serialisation)."""
    delays = fabric_delays(load_fabric(lab.lab_dir))
    return max(path_delays(lab.plan, delays, src, r)[1] for r in receivers)


def peak_in_flight(lab: Lab) -> int:
    status = relayctl.status(lab.lab_dir) or {"ends": {}}
    return max((e["max_in_flight_bytes"] for e in status["ends"].values()), default=0)


def delivered_once(outcome: Any) -> str:
    d = outcome.result.metrics.delivery
    return f"{d.delivered}/{d.expected} delivered, {d.duplicates} duplicates"


def model_dist(lab: Lab, args: argparse.Namespace, tmp: Path) -> list[str]:
    trace = workload(tmp / "model-dist-sites.jsonl", "model-dist", "--hosts", ",".join([SOURCE, *SITES]),
                     "--size", args.size, "--chunk-bytes", "256KiB", "--chunk-interval", "0")  # fmt: skip
    floor = floor_s(lab, SOURCE, SITES)
    egress, lines = {}, []
    for mode in in_order(MODELLED):
        relayctl.reset_peaks(lab.lab_dir)
        outcome = lab.replay(trace, mode, timeout_s=args.timeout)
        egress[mode] = wan_egress(outcome)
        lines.append(
            f"  model-dist {mode}: {delivered_once(outcome)}; WAN egress {egress[mode]} B; done in "
            f"{fabric_s(outcome) * 1e3:.3f} ms fabric (floor {floor * 1e3:.3f} ms: farthest site's delay); "
            f"{peak_in_flight(lab)} B at most in flight on a WAN link{timing_summary(outcome.result)}"
        )
    for mode in in_order(MODELLED - BASELINES):
        lines.append(f"model-dist: WAN egress unicast / {mode} = {egress[Mode.UNICAST] / egress[mode]:.3f} "
                     f"({len(SITES)} remote sites; seed 000: 4x -> 1x)")  # fmt: skip
    return lines


def set_wan_loss(lab: Lab, p: float) -> None:
    for end in sorted(load_fabric(lab.lab_dir).delayed_ends()):
        lab.link_set(end, "loss", str(p), one_way=True)


def reliable_run(lab: Lab, trace: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    set_wan_loss(lab, args.loss)
    try:
        outcome = lab.replay(trace, mode, timeout_s=args.timeout)
    finally:
        set_wan_loss(lab, 0.0)
    rel = outcome.result.meta.settings["reliable"]
    src, links = rel["sources"], rel["links"]
    sent = src.get("sender.sent", 0) or float("nan")
    dropped = sum(v["lost_bytes"] for v in links.values()) or float("nan")
    return {
        "wan_acks": link_feedback_packets(links.get(WAN_TOWARD_SOURCE, {})) / sent,
        "source_acks": sum(src.get(f"source.rx.{k}.packets", 0) for k in ("ack", "agg-ack")) / sent,
        "retx_per_drop": src.get("sender.retransmitted-bytes", 0) / dropped,
        "once": delivered_once(outcome),
        "fabric_s": fabric_s(outcome),
        "timing": timing_summary(outcome.result),
    }


def reliable(lab: Lab, args: argparse.Namespace, tmp: Path) -> list[str]:
    trace = workload(tmp / "reliable-sites.jsonl", "model-dist", "--hosts", ",".join([SOURCE, *SITES]),
                     "--size", args.size, "--chunk-bytes", "256KiB", "--chunk-interval", "0")  # fmt: skip
    runs = {mode: reliable_run(lab, trace, mode, args) for mode in in_order(HOST_BIER & RELIABLE.keys())}
    lines = [
        f"  {mode} at {args.loss:.0%} WAN loss: {r['once']}; ACKs per DATA packet {r['wan_acks']:.3f} across "
        f"the WAN, {r['source_acks']:.3f} at the source; {r['retx_per_drop']:.2f} retransmitted bytes per "
        f"dropped byte; completion {r['fabric_s'] * 1e3:.3f} ms fabric{r['timing']}"
        for mode, r in runs.items()
    ]
    agg, e2e = runs[Mode.RELIABLE_HOST_BIER], runs[Mode.RELIABLE_HOST_BIER_E2E]
    ratio = e2e["wan_acks"] / agg["wan_acks"]
    lines.append(f"reliable: WAN ACKs per DATA packet, end to end / aggregated at the BFRs = "
                 f"{e2e['wan_acks']:.3f} / {agg['wan_acks']:.3f} = {ratio:.2f}x")  # fmt: skip
    return lines


def federated(lab: Lab, args: argparse.Namespace, tmp: Path) -> list[str]:
    trace = workload(
        tmp / "federated.jsonl", "allreduce", "--hosts", ",".join(FED_WORKERS), "--size", args.update
    )
    loads, lines = {}, []
    for mode in COLLECTIVE_PAIR:
        outcome = lab.replay(trace, mode, timeout_s=args.timeout)
        load = collective_load(outcome.result)
        loads[mode] = load.bytes_in if load else 0
        where = f"{load.node} ({load.kind})" if load else "?"
        lines.append(
            f"  federated {mode}: {'exact' if outcome.ok else 'NOT exact'}; {loads[mode]} B into {where}; "
            f"completion {fabric_s(outcome) * 1e3:.3f} ms fabric{timing_summary(outcome.result)}"
        )
    ratio = loads[Mode.PS] / max(loads[Mode.INA], 1)
    lines.append(f"federated: bytes into the aggregator, PS / INA = {ratio:.2f}x "
                 f"({len(FED_WORKERS)} workers in {len(FED_WORKERS) // 2} sites)")  # fmt: skip
    return lines


def moe(lab: Lab, args: argparse.Namespace, _tmp: Path) -> list[str]:
    trace = ROOT / "workloads" / "moe-sample.jsonl"
    lines, base = [], {}
    for text in args.delays.split(","):
        delay = parse_duration(text)
        for end in DCI:
            lab.link_set(end, "delay", text)
        for mode in MESSAGE_PAIR:
            with lab.at_scale(args.zero_delay_scale) if delay == 0 else contextlib.nullcontext():
                outcome = lab.replay(trace, mode, timeout_s=args.timeout)
            took = fabric_s(outcome)
            base.setdefault(mode, took)
            lines.append(
                f"  moe {mode} at DCI {format_duration(delay)}: {delivered_once(outcome)}; completion "
                f"{took * 1e3:.3f} ms fabric = {took / base[mode]:.1f}x the first delay's"
                f"{timing_summary(outcome.result)}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    import tempfile

    args = parser().parse_args(argv)
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {', '.join(unknown)}; of {', '.join(SCENARIOS)}")
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-inter-dc-") as tmp:
        for lab_name, scenarios in (
            ("regional", ("model-dist", "reliable", "federated")),
            ("interdc", ("moe",)),
        ):
            todo = [s for s in scenarios if s in wanted]
            if not todo:
                continue
            lab_vars = shipped_vars(lab_name)
            if lab_name == "regional":
                lab_vars.setdefault("bier", {})["dataplane"] = "python"
            with bench_lab(lab_name, f"{args.name_prefix}{lab_name}", vars=lab_vars) as lab:
                lab.wait_routes(timeout=300)
                for scenario in todo:
                    got = {
                        "model-dist": model_dist,
                        "reliable": reliable,
                        "federated": federated,
                        "moe": moe,
                    }[scenario](lab, args, Path(tmp))
                    print("\n".join(got), flush=True)
                    lines += got
    print("\n".join(line for line in lines if not line.startswith("  ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
