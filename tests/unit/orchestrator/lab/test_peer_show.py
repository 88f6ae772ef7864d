"""Reading GoBGP's and BIRD's CLI output into link-bandwidth communities and session counts. The inputs in
peer_outputs/ are what gobgp 3.10.0 and birdc 2.0.12 printed in scripts/interop/peers-netns.sh: ExaBGP sent
10.255.0.5 with 20G/10G (type 0x00) over two sessions, .6 the same as type 0x40, .8 400G (0x00) on one."""

from __future__ import annotations

from pathlib import Path

from aidcnet.fare.linkbw import LinkBandwidth
from orchestrator.lab.peer_show import (
    bird_established,
    bird_link_bandwidths,
    gobgp_established,
    gobgp_link_bandwidths,
)

OUT = Path(__file__).parent / "peer_outputs"
GBPS = 1e9 / 8


def lbw(gbps: float, transitive: bool) -> LinkBandwidth:
    return LinkBandwidth(23456, gbps * GBPS, transitive=transitive)


def test_gobgp_rib_json_gives_each_paths_bandwidth_always_as_type_0x40() -> None:
    rib = (OUT / "gobgp-rib.json").read_text()
    # GoBGP lists both types as 0x40: what it sent on was 0x40 too (docs/interop.md).
    assert sorted(gobgp_link_bandwidths(rib, "10.255.0.5/32"), key=lambda b: b.bytes_per_s) == [
        lbw(10, False),
        lbw(20, False),
    ]
    assert sorted(gobgp_link_bandwidths(rib, "10.255.0.6/32"), key=lambda b: b.bytes_per_s) == [
        lbw(10, False),
        lbw(20, False),
    ]
    # 400G is above 2^32 bytes/s: GoBGP's text output wraps it (23456:2755358720), its JSON does not.
    assert gobgp_link_bandwidths(rib, "10.255.0.8/32") == [lbw(400, False)]
    assert gobgp_link_bandwidths(rib, "10.255.0.99/32") == []
    assert gobgp_link_bandwidths("", "10.255.0.5/32") == []


def test_bird_show_route_gives_the_raw_community_back_with_its_type() -> None:
    got = bird_link_bandwidths((OUT / "birdc-route-10.255.0.5.txt").read_text())
    assert got == [lbw(20, True), lbw(10, True)]
    got = bird_link_bandwidths((OUT / "birdc-route-10.255.0.6.txt").read_text())
    assert got == [lbw(20, False), lbw(10, False)]
    # BIRD keeps the float bits, so 400G is exact (to float32) where GoBGP and FRR wrap.
    assert bird_link_bandwidths((OUT / "birdc-route-10.255.0.8.txt").read_text()) == [lbw(400, True)]


def test_bird_ignores_other_extended_communities_on_the_same_line() -> None:
    line = "\tBGP.ext_community: (rt, 65000, 1) (unknown 0x4, 23456, 1326777081) (unknown 0x2, 1, 2)"
    assert bird_link_bandwidths(line) == [lbw(20, True)]


def test_session_tables() -> None:
    assert gobgp_established((OUT / "gobgp-neighbor.txt").read_text()) == 3
    assert bird_established((OUT / "birdc-show-protocols.txt").read_text()) == 3
    idle = "Peer AS Up/Down State |#Received Accepted\n10.9.1.0 65001 never Active | 0 0\n"
    assert gobgp_established(idle) == 0
    assert bird_established("G1_eth1    BGP        ---        start  22:00:43.798  Connect\n") == 0
