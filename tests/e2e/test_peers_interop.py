"""GoBGP and BIRD interop (docs/interop.md): labs/superpod-peers scaled down to 2 GPUs; plane 1's leaf L1 is
GoBGP (Debian gobgpd), plane 2's leaf L2 is BIRD 2 (Debian bird2), planes 3 and 4 are ours.

Sessions come up over both cables of each GPU, routes go both ways, and what each peer does with our
link-bandwidth community shows (measured first in netns by scripts/interop/peers-netns.sh):

- GoBGP decodes it (its RIB shows the bandwidth), passes the best path's value on unchanged but always as
  the non-transitive type 0x40, installs nothing in the kernel (no FIB without zebra), weighs nothing.
- BIRD keeps it as an opaque extended community, passes the transitive one on unchanged, installs equal-weight
  ECMP in the kernel whatever the bandwidths.
- Our GPU on the far side caps each peer's value with its own min() and weighs by it, so a cable that halves
  behind GoBGP or BIRD moves our weights but not theirs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aidcnet.fare.linkbw import LinkBandwidth
from orchestrator.lab import peer_show
from orchestrator.lab.linkset import link_set

from .conftest import agent, deployed, scale_superpod
from .test_frr_interop import kernel_route, ours, reduced, until

LAB = "t-fare-peers"
GPUS = 2
LAB_VARS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "labs" / "superpod-peers.vars.yml").read_text()
)
GBPS = 1e9 / 8  # bytes/s per Gb/s: the community carries bytes/s
BIRD_CTL = "/run/bird/bird.ctl"


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("peers")
    with deployed(
        runtime, tmp, "superpod-peers", LAB, LAB_VARS, configured=True, edit=scale_superpod(GPUS)
    ) as topo:
        yield topo, tmp / f"clab-{LAB}"


def run(runtime, topo, node: str, argv: list[str]) -> str:
    code, out = runtime.exec(topo.container_name(node), argv)
    assert code == 0, f"{node}: {' '.join(argv)}: {out}"
    return out


def loopback(runtime, topo, node: str) -> str:
    return f"{agent(runtime, topo, node).config()['loopback'].split('/')[0]}/32"


def gobgp_established(runtime, topo) -> int:
    return peer_show.gobgp_established(run(runtime, topo, "L1", ["gobgp", "neighbor"]))


def bird_established(runtime, topo) -> int:
    out = run(runtime, topo, "L2", ["birdc", "-s", BIRD_CTL, "show", "protocols"])
    return peer_show.bird_established(out)


def gobgp_paths(runtime, topo, prefix: str) -> list[LinkBandwidth]:
    """The link-bandwidth community of each path GoBGP holds for prefix, as GoBGP decoded it."""
    rib = run(runtime, topo, "L1", ["gobgp", "global", "rib", "-a", "ipv4", "-j"])
    return peer_show.gobgp_link_bandwidths(rib, prefix)


def bird_paths(runtime, topo, prefix: str) -> list[LinkBandwidth]:
    """The link-bandwidth community of each path BIRD holds for prefix (BIRD keeps it as raw octets)."""
    out = run(runtime, topo, "L2", ["birdc", "-s", BIRD_CTL, "show", "route", "for", prefix, "all"])
    return peer_show.bird_link_bandwidths(out)


def test_sessions_come_up_on_every_cable(runtime, lab):
    topo, _ = lab
    # 2 GPUs x 2 cables to each of L1 (GoBGP) and L2 (BIRD).
    assert until(lambda: gobgp_established(runtime, topo), lambda n: n == 2 * GPUS) == 2 * GPUS
    assert until(lambda: bird_established(runtime, topo), lambda n: n == 2 * GPUS) == 2 * GPUS
    sessions = {n["interface"]: n["session"] for n in agent(runtime, topo, "G1").bgp()["neighbors"]}
    assert sessions == dict.fromkeys(("eth1", "eth2", "eth3", "eth4", "eth5", "eth6"), "up"), sessions


def test_routes_go_both_ways(runtime, lab):
    topo, _ = lab
    g2 = loopback(runtime, topo, "G2")
    # The peers learned G2's loopback over both of G2's cables, with G2's community: 16G toward each leaf.
    sixteen = LinkBandwidth(23456, 16 * GBPS, transitive=True)
    assert until(lambda: gobgp_paths(runtime, topo, g2), lambda p: len(p) == 2) == [
        LinkBandwidth(23456, 16 * GBPS, transitive=False)  # GoBGP shows every link bandwidth as type 0x40
    ] * 2
    assert until(lambda: bird_paths(runtime, topo, g2), lambda p: len(p) == 2) == [sixteen] * 2
    # Our GPU learned each peer's own loopback (AS path = the peer's ASN alone) over both its cables to it.
    asns = {n["name"]: n["asn"] for n in agent(runtime, topo, "G1").config()["bgp"]["neighbors"]}
    for leaf, cables in (("L1", {"eth1", "eth5"}), ("L2", {"eth2", "eth6"})):
        routes = until(
            lambda leaf=leaf: agent(runtime, topo, "G1").bgp()["routes"],
            lambda r, leaf=leaf: any(v["as_path"] == [asns[leaf]] for v in r.values()),
        )
        own = [p for p, r in routes.items() if r["as_path"] == [asns[leaf]]]
        assert len(own) == 1, (leaf, routes)
        assert set(ours(runtime, topo, "G1", own[0])) == cables


def test_bird_installs_equal_ecmp_and_gobgp_installs_nothing(runtime, lab):
    topo, _ = lab
    g2 = loopback(runtime, topo, "G2")
    to_l2 = sorted(
        i["peer_interface"]
        for i in agent(runtime, topo, "G2").config()["interfaces"]
        if i.get("peer") == "L2"
    )
    bird = until(lambda: kernel_route(runtime, topo, "L2", g2), lambda r: len(r) == 2)
    assert sorted(bird) == to_l2 and set(bird.values()) == {1}, bird
    # gobgpd alone has no FIB: the route stays in its RIB (docs/interop.md).
    assert gobgp_paths(runtime, topo, g2)
    assert kernel_route(runtime, topo, "L1", g2) == {}


def test_a_degraded_cable_behind_each_peer_moves_our_weights_not_theirs(runtime, lab):
    topo, lab_dir = lab
    g2 = loopback(runtime, topo, "G2")
    # Before: G1 reaches G2 over 6 cables, each worth 8G: through L1 and L2 min(16G of G1's two cables,
    # the 16G the peer passed on) split 8G/8G, through L3 and L4 8G each.
    equal = dict.fromkeys(("eth1", "eth2", "eth3", "eth4", "eth5", "eth6"), 1)
    assert until(lambda: reduced(ours(runtime, topo, "G1", g2) or {"-": 1}), lambda w: w == equal) == equal

    # G2's second cable to L1 (GoBGP) and to L2 (BIRD) drop to 4G: G2 advertises 12G on both its sessions
    # to each peer; each passes 12G on to G1, whose min() then gives 12G through each peer, 6G per cable.
    assert link_set(runtime, lab_dir, "G2:eth5", "bandwidth", "4G")
    assert link_set(runtime, lab_dir, "G2:eth6", "bandwidth", "4G")
    twelve = LinkBandwidth(23456, 12 * GBPS, transitive=True)
    assert until(lambda: bird_paths(runtime, topo, g2), lambda p: p == [twelve] * 2) == [twelve] * 2
    assert until(
        lambda: gobgp_paths(runtime, topo, g2), lambda p: p == [LinkBandwidth(23456, 12 * GBPS)] * 2
    ) == [LinkBandwidth(23456, 12 * GBPS)] * 2
    skewed = {"eth1": 3, "eth5": 3, "eth2": 3, "eth6": 3, "eth3": 4, "eth4": 4}
    got = until(lambda: reduced(ours(runtime, topo, "G1", g2) or {"-": 1}), lambda w: w == skewed)
    assert got == skewed
    assert reduced(kernel_route(runtime, topo, "G1", g2)) == skewed
    # BIRD's own ECMP to G2 stays equal over the 8G and the 4G cable: it does not weigh by the community.
    bird = kernel_route(runtime, topo, "L2", g2)
    assert len(bird) == 2 and set(bird.values()) == {1}, bird
