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

from .conftest import agent, deployed, scale_superpod

GPUS = 3  # SUPERPOD_GPUS: enough for a sender, a receiver and a bystander; CI stays fast
PLANES = ("eth1", "eth2", "eth3", "eth4")
LAB_VARS = {
    "bandwidth": {"host": "800G", "host_sublinks": 2},
    "planes": 4,
    # A short hold time lets the test see a session expire behind a dead link without waiting long.
    "bgp": {"enabled": True, "hold_time": 3},
}


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
