"""FRR interop (docs/frr-interop.md): labs/superpod-frr scaled down to 3 GPUs, plane 1's leaf L1 is FRR.

FRR learns our GPUs' link-bandwidth communities and installs weighted ECMP (vtysh and kernel agree), our
GPUs learn FRR's routes, and the documented difference shows: FRR splits evenly over a GPU's two cables
whatever their speeds (it only sees the per-neighbor sum we advertise), while our GPU caps FRR's cumulative
re-advertisement with its own min() and splits by its own link bandwidths.
"""

from __future__ import annotations

import json
import math
import time
from functools import reduce
from pathlib import Path

import yaml

from orchestrator.lab.linkset import link_set

from .conftest import agent, deployed, scale_superpod

LAB = "t-fare-frr"
GPUS = 3
LAB_VARS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "labs" / "superpod-frr.vars.yml").read_text()
)
GBPS = 1e9 / 8  # bytes/s per Gb/s: FRR shows link bandwidth as bytes/s


def vtysh_json(runtime, topo, command: str) -> dict:
    code, out = runtime.exec(topo.container_name("L1"), ["vtysh", "-c", command])
    assert code == 0, f"L1: vtysh -c {command!r}: {out}"
    return json.loads(out)


def reduced(weights: dict[str, int]) -> dict[str, int]:
    g = reduce(math.gcd, weights.values())
    return {k: v // g for k, v in weights.items()}


def frr_route(runtime, topo, prefix: str) -> dict[str, int]:
    """L1's (FRR's) installed BGP route to prefix: ``{interface: weight}``."""
    routes = vtysh_json(runtime, topo, f"show ip route {prefix} json").get(prefix, [])
    route = next((r for r in routes if r.get("protocol") == "bgp" and r.get("installed")), None)
    if route is None:
        return {}
    return {h["interfaceName"]: h.get("weight", 1) for h in route["nexthops"] if h.get("fib")}


def frr_bandwidths(runtime, topo, prefix: str) -> list[int]:
    """The link-bandwidth values (bytes/s) FRR holds for each path of prefix, from ``LB:AS:value``."""
    paths = vtysh_json(runtime, topo, f"show ip bgp {prefix} json").get("paths", [])
    out = []
    for p in paths:
        text = p.get("extendedCommunity", {}).get("string", "")
        out += [int(tok.split(":")[2].split()[0]) for tok in text.split() if tok.startswith("LB:")]
    return sorted(out)


def kernel_route(runtime, topo, node: str, prefix: str) -> dict[str, int]:
    code, out = runtime.exec(topo.container_name(node), ["ip", "-j", "route", "show", prefix])
    assert code == 0, out
    routes = json.loads(out)
    if not routes:
        return {}
    hops = routes[0].get("nexthops") or [{"dev": routes[0]["dev"], "weight": 1}]
    return {h["dev"]: h.get("weight", 1) for h in hops}


def ours(runtime, topo, node: str, prefix: str) -> dict[str, int]:
    route = agent(runtime, topo, node).bgp()["routes"].get(prefix, {})
    got: dict[str, int] = {}
    for hop in route.get("nexthops", []):
        got[hop["dev"]] = got.get(hop["dev"], 0) + hop["weight"]
    return got


def until(probe, ok, wait_s: float = 90.0):
    """``probe()`` once ``ok`` holds for it (readiness wait for BGP, not a speed check), or the last value."""
    deadline = time.monotonic() + wait_s
    while True:
        value = probe()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def test_frr_learns_our_bandwidths_and_we_learn_frrs_routes(runtime, tmp_path):
    with deployed(
        runtime, tmp_path, "superpod-frr", LAB, LAB_VARS, configured=True, edit=scale_superpod(GPUS)
    ) as topo:
        lab_dir = tmp_path / f"clab-{LAB}"
        config = {n: agent(runtime, topo, n).config() for n in ("G1", "G2")}
        g1, g2 = (f"{config[n]['loopback'].split('/')[0]}/32" for n in ("G1", "G2"))
        # L1's two cables to G2 (the Y-cable halves): the interfaces FRR should weigh.
        to_g2 = sorted(i["peer_interface"] for i in config["G2"]["interfaces"] if i.get("peer") == "L1")
        assert len(to_g2) == 2

        # FRR learned G2's loopback over both sessions, each with G2's 16G toward L1 (2 x 8G), and installs
        # weighted ECMP from it: equal weights, the same in FRR and in L1's kernel.
        frr = until(lambda: frr_route(runtime, topo, g2), lambda r: len(r) == 2)
        assert sorted(frr) == to_g2, frr
        assert len(set(frr.values())) == 1 and min(frr.values()) > 0, frr
        assert kernel_route(runtime, topo, "L1", g2) == frr
        assert frr_bandwidths(runtime, topo, g2) == [int(16 * GBPS)] * 2

        # Our GPU learned G2 through FRR (eth1, eth5 to L1) and through our leaves (eth2..eth4). Through L1 it
        # counts min(16G of its own two cables, FRR's cumulative 32G) = 16G, split 8G/8G: all five equal.
        equal = dict.fromkeys(("eth1", "eth2", "eth3", "eth4", "eth5"), 1)
        got = until(lambda: reduced(ours(runtime, topo, "G1", g2) or {"-": 1}), lambda w: w == equal)
        assert got == equal
        assert reduced(kernel_route(runtime, topo, "G1", g2)) == equal
        # ... and FRR's own loopback, which only FRR originates (AS path = L1's ASN alone).
        l1_asn = next(n["asn"] for n in config["G1"]["bgp"]["neighbors"] if n["name"] == "L1")
        routes = agent(runtime, topo, "G1").bgp()["routes"]
        from_frr = [p for p, r in routes.items() if r["as_path"] == [l1_asn]]
        assert len(from_frr) == 1, routes
        assert set(ours(runtime, topo, "G1", from_frr[0])) == {"eth1", "eth5"}

        # One cable of G1's plane-1 Y-cable drops to 4G. Our G1 splits by its own links: 8G : 4G over the
        # cables, 12G through L1 against 8G per other plane. FRR only sees G1 re-advertise 12G on both
        # sessions, and keeps splitting evenly: it has no min() and no view of the cables' speeds.
        assert link_set(runtime, lab_dir, "G1:eth5", "bandwidth", "4G")
        skewed = {"eth1": 2, "eth5": 1, "eth2": 2, "eth3": 2, "eth4": 2}
        got = until(lambda: reduced(ours(runtime, topo, "G1", g2) or {"-": 1}), lambda w: w == skewed)
        assert got == skewed
        assert reduced(kernel_route(runtime, topo, "G1", g2)) == skewed
        lbw = until(lambda: frr_bandwidths(runtime, topo, g1), lambda b: b == [int(12 * GBPS)] * 2)
        assert lbw == [int(12 * GBPS)] * 2
        frr = frr_route(runtime, topo, g1)
        assert len(frr) == 2 and len(set(frr.values())) == 1, frr
        assert kernel_route(runtime, topo, "L1", g1) == frr

        # A cable down: FRR drops that path at once (our session goes with the carrier).
        assert link_set(runtime, lab_dir, "G2:eth5", "down")
        frr = until(lambda: frr_route(runtime, topo, g2), lambda r: len(r) == 1)
        assert len(frr) == 1 and sorted(frr)[0] in to_g2, frr
