"""FARE over BGP end to end on the SuperPoD of draft-xu-rtgwg-fare-in-sun, scaled down to a few GPUs.

The lab keeps all four planes (L1..L4) and every GPU's four 800G Y-cable ports (2 x 400G sub-links), with
``bgp.enabled`` in the lab vars: every GPU and leaf runs ExaBGP + the agent, GPUs learn each other's
loopbacks over the four planes with the link-bandwidth community, and traffic is measured with the
sending GPU's interface tx counters.
"""

from __future__ import annotations

import json
import time

from orchestrator.cli import main as cli_main
from orchestrator.lab.linkset import link_set

from .conftest import agent, aidclab, deployed, faithful_run, scale_superpod

GPUS = 3  # SUPERPOD_GPUS: enough for a sender, a receiver and a bystander; CI stays fast
PLANES = ("eth1", "eth2", "eth3", "eth4")
LAB_VARS = {
    "bandwidth": {"host": "800G", "host_sublinks": 2},
    "planes": 4,
    # A short hold time lets the test see a session expire behind a dead link without waiting long.
    "bgp": {"enabled": True, "hold_time": 3},
}


def distinct_flows(trace, qps: int = 64) -> None:
    """Renumber the trace's ops so that each pair's k-th message goes on QP k mod ``qps``. The replay
    puts receiver j of op i on QP (i + j) mod its QPs, and the generator numbers its ops 12 per chunk on 4
    GPUs: with 128 QPs a pair's 128 messages shared 32 of them (12k mod 128), 96 flows into G2 where 384
    were meant. The boot's hash key then put FARE less than 1.2x ahead on one machine in about ten (1.16x
    and 1.11x on 2026-12-05, every deploy of that boot alike, the counted bytes allowing 1.17x and 1.12x).
    The order stays the generator's; ids only need to increase."""
    from orchestrator.workloads.trace import TraceReader, TraceWriter

    with TraceReader(trace) as reader:
        header, ops = reader.header, list(reader)
    sent: dict[tuple[str, tuple[str, ...]], int] = {}
    with TraceWriter(trace, header) as writer:
        for n, op in enumerate(ops):
            k = sent[(op.src, tuple(op.dst))] = sent.get((op.src, tuple(op.dst)), -1) + 1
            writer.write(op.model_copy(update={"id": qps * n + k % qps}))


def loopback(runtime, topo, node: str) -> str:
    return agent(runtime, topo, node).config()["loopback"].split("/")[0]


def weights_when(runtime, topo, node: str, dst: str, want: dict[str, int], wait_s: float = 90.0) -> dict:
    """The node's BGP route to dst once its per-interface weights equal ``want`` (readiness wait, not a
    speed check: bench/fare.py measures convergence). Returns the last route seen either way."""
    deadline = time.monotonic() + wait_s
    route: dict = {}
    while time.monotonic() < deadline:
        route = agent(runtime, topo, node).bgp()["routes"].get(f"{dst}/32", {})
        got: dict[str, int] = {}
        for hop in route.get("nexthops", []):
            got[hop["dev"]] = got.get(hop["dev"], 0) + hop["weight"]
        if got == want:
            return route
        time.sleep(0.3)
    return route


def session_when(runtime, topo, node: str, interface: str, done, wait_s: float = 60.0) -> str:
    """The state of the node's BGP session over ``interface`` once ``done(state)`` holds (or at timeout)."""
    deadline = time.monotonic() + wait_s
    state = ""
    while time.monotonic() < deadline:
        neighbors = agent(runtime, topo, node).bgp()["neighbors"]
        state = next(n["session"] for n in neighbors if n["interface"] == interface)
        if done(state):
            return state
        time.sleep(0.5)
    return state


def shares(reply: dict) -> dict[str, float]:
    tx = reply["tx_packets"]
    total = sum(tx.values())
    return {dev: n / total for dev, n in tx.items()}


def kernel_weights(runtime, topo, node: str, dst: str) -> dict[str, int]:
    code, out = runtime.exec(
        topo.container_name(node), ["ip", "-j", "route", "show", f"{dst}/32", "proto", "bgp"]
    )
    assert code == 0, out
    routes = json.loads(out)
    assert len(routes) == 1, f"{node}: ip route show {dst}/32 proto bgp: {out}"
    hops = routes[0].get("nexthops") or [{"dev": routes[0]["dev"], "weight": 1}]
    return {h["dev"]: h.get("weight", 1) for h in hops}


def test_fare_weights_follow_link_events(runtime, tmp_path):
    name = "t-fare-e2e"
    with deployed(
        runtime, tmp_path, "superpod", name, LAB_VARS, configured=True, edit=scale_superpod(GPUS)
    ) as topo:
        lab_dir = tmp_path / f"clab-{name}"
        g2 = loopback(runtime, topo, "G2")

        # All planes up, 800G each: G1 reaches G2 over all four leaves with equal weights, in BGP and kernel.
        equal = dict.fromkeys(PLANES, 1)
        route = weights_when(runtime, topo, "G1", g2, equal)
        assert {h["dev"]: h["weight"] for h in route["nexthops"]} == equal, route
        assert kernel_weights(runtime, topo, "G1", g2) == equal
        # L1 re-advertises G2's loopback with min(its link to G2, what G2 sent) = 800G.
        l1 = agent(runtime, topo, "L1").bgp()["routes"][f"{g2}/32"]
        assert l1["advertised_bw"] == "800G" and len(l1["nexthops"]) == 1

        before = agent(runtime, topo, "G1").fare_send(g2, mode="per-flow", flows=4000)
        for dev, share in shares(before).items():
            assert abs(share - 0.25) < 0.05, (dev, before)

        # One 400G sub-link of G2's plane-2 Y-cable fails: plane 2 carries half of what the others do.
        assert link_set(runtime, lab_dir, "G2:eth2", "bandwidth", "400G")
        halved = {"eth1": 2, "eth2": 1, "eth3": 2, "eth4": 2}
        route = weights_when(runtime, topo, "G1", g2, halved)
        assert {h["dev"]: h["weight"] for h in route["nexthops"]} == halved, route
        assert kernel_weights(runtime, topo, "G1", g2) == halved
        l2 = agent(runtime, topo, "L2").bgp()["routes"][f"{g2}/32"]
        assert l2["advertised_bw"] == "400G"
        # A bystander's route to G2 re-weights too (FARE propagates), while G1's route to G3 is untouched.
        g3 = loopback(runtime, topo, "G3")
        assert weights_when(runtime, topo, "G3", g2, halved)["nexthops"]
        assert kernel_weights(runtime, topo, "G1", g3) == equal

        packet = agent(runtime, topo, "G1").fare_send(g2, mode="per-packet", packets=7000)
        tx = packet["tx_packets"]
        others = sum(tx[d] for d in ("eth1", "eth3", "eth4")) / 3
        assert abs(tx["eth2"] / others - 0.5) <= 0.5 * 0.05, packet
        flow = agent(runtime, topo, "G1").fare_send(g2, mode="per-flow", flows=4000)
        got = shares(flow)
        for dev, w in halved.items():
            assert abs(got[dev] - w / 7) < 0.05, (dev, flow)
        assert got["eth2"] < shares(before)["eth2"] * 0.75, (before, flow)

        # G1's plane-3 port fails: G1 withdraws plane 3 toward everyone at once, and no traffic goes there.
        # Through the CLI, as a user types it (the lab dir is found in the working directory).
        assert cli_main(["link", "set", "G1:eth3", "down"]) == 0
        without3 = {"eth1": 2, "eth2": 1, "eth4": 2}
        route = weights_when(runtime, topo, "G1", g2, without3)
        assert {h["dev"]: h["weight"] for h in route["nexthops"]} == without3, route
        assert kernel_weights(runtime, topo, "G1", g2) == without3
        down = agent(runtime, topo, "G1").fare_send(g2, mode="per-flow", flows=2000)
        assert down["tx_packets"]["eth3"] == 0, down
        assert sum(down["tx_packets"].values()) >= 2000

        # The session over the dead link then expires (hold time 3 s here): the routes must come back by a
        # new session (ExaBGP re-sends its adj-RIB-out, ours included) once the link is up again.
        assert session_when(runtime, topo, "G1", "eth3", lambda state: state != "up") != "up"

        # Restored: the plane comes back, and so does the full bandwidth.
        assert link_set(runtime, lab_dir, "G1:eth3", "up")
        assert session_when(runtime, topo, "G1", "eth3", lambda state: state == "up") == "up"
        assert link_set(runtime, lab_dir, "G2:eth2", "bandwidth", "800G")
        route = weights_when(runtime, topo, "G1", g2, equal)
        assert {h["dev"]: h["weight"] for h in route["nexthops"]} == equal, route


A2A_GPUS = 4


def test_all_to_all_finishes_sooner_with_fare_than_with_ecmp_over_a_halved_y_cable(runtime, tmp_path):
    """Seed 004's claim, measured: on the shaped SuperPoD (800G at 1:20000 = 40 Mbit/s per GPU port),
    with one sub-link of G2's plane-2 Y-cable down (that port at 400G), an all-to-all among the GPUs
    finishes sooner when the senders weight the planes 2:1:2:2 (FARE) than with equal-cost ECMP.

    The model: G2 receives 3 x size over four planes. ECMP puts a quarter on the half-speed port:
    (3/4 x size) / (B/2); FARE puts a seventh there and two sevenths on each full one: (3/7 x size) /
    (B/2) on every port. Predicted speed-up 7/4 = 1.75 (the same holds for what G2 sends)."""
    import yaml

    from orchestrator.configure.ansible import configure
    from orchestrator.experiment.modes.base import RunOptions

    name = "t-fare-a2a"
    trace = tmp_path / "a2a.jsonl"
    gpus = ",".join(f"G{g}" for g in range(1, A2A_GPUS + 1))
    aidclab(
        "workload",
        "all-to-all",
        "--hosts",
        gpus,
        "--size",
        "2MiB",
        "--chunk-bytes",
        "16KiB",
        "-o",
        str(trace),
    )
    distinct_flows(trace)
    runs = {}
    with deployed(
        runtime, tmp_path, "superpod", name, LAB_VARS, configured=True, edit=scale_superpod(A2A_GPUS)
    ) as topo:
        lab_dir = tmp_path / f"clab-{name}"
        g2 = loopback(runtime, topo, "G2")
        for weighting in ("fare", "ecmp"):
            if weighting == "ecmp":
                doc = {**LAB_VARS, "bgp": {**LAB_VARS["bgp"], "weights": "ecmp"}}
                (tmp_path / f"{name}.vars.yml").write_text(yaml.safe_dump(doc))
                assert configure(topo).ok  # re-applies the plan's shapers: the half port is set again below
            assert link_set(runtime, lab_dir, "G2:eth2", "bandwidth", "400G")
            want = (
                {"eth1": 2, "eth2": 1, "eth3": 2, "eth4": 2}
                if weighting == "fare"
                else dict.fromkeys(PLANES, 1)
            )
            route = weights_when(runtime, topo, "G1", g2, want)
            assert {h["dev"]: h["weight"] for h in route["nexthops"]} == want, (weighting, route)
            # 64 flows per sender and receiver (each pair's messages spread over all 64 QPs by
            # distinct_flows), 192 into G2: enough for the kernel's per-flow hash to follow the weights
            # within some percent. With one flow per message (128 QPs) the ECMP run lost 10 to 24 of 1536
            # deliveries in most runs, silently (2026-12-05; found, not fixed: docs/fare.md).
            runs[weighting] = faithful_run(
                topo, trace, "unicast", RunOptions(qps=64), runtime=runtime, results_dir=tmp_path / "results"
            )
    for weighting, outcome in runs.items():
        t, m = outcome.result.timing, outcome.result.metrics
        assert outcome.ok and t is not None and m is not None, weighting
        assert t.faithful, (weighting, t.reasons)
        assert outcome.result.meta.settings["bgp_weights"] == weighting
        assert t.bound is not None, weighting
    fare, ecmp = (runs[w].result for w in ("fare", "ecmp"))
    # Fabric times: each weighting may have run at its own automatic scale.
    measured = ecmp.metrics.completion_fabric_time / fare.metrics.completion_fabric_time  # type: ignore[union-attr,operator]
    bound = ecmp.timing.bound.fabric_s / fare.timing.bound.fabric_s  # type: ignore[union-attr]
    fare_us, ecmp_us = (r.metrics.completion_fabric_time * 1e6 for r in (fare, ecmp))  # type: ignore[union-attr]
    print(
        f"all-to-all on {A2A_GPUS} GPUs, G2:eth2 at 400G: FARE {fare_us:.1f} µs, ECMP {ecmp_us:.1f} µs "
        f"fabric time: FARE {measured:.2f}x sooner; the bounds of the counted bytes predict {bound:.2f}x, "
        "the ideal shares 1.75x"
    )
    # Hash noise moves a plane's share by some percent: FARE is clearly ahead, near what the bytes predict.
    assert measured > 1.2, measured
    assert abs(measured / bound - 1) < 0.25, (measured, bound)
