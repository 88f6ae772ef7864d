"""RIB, multipath selection, FARE weights and advertisements of aidcnet.bgp.rib (no I/O)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bgp.rib import (
    AS_TRANS,
    Announcement,
    Link,
    Path,
    RawAttribute,
    Rib,
    advertisements,
    bier_view,
    community_asn,
    kernel_routes,
    select,
)
from aidcnet.fare.linkbw import LinkBandwidth

G = 1e9 / 8  # bytes/s per Gb/s
GPU1, GPU2, GPU3 = 4200000000, 4200000001, 4200000002
LEAVES = {f"L{p}": 65099 + p for p in range(1, 5)}
DST = "10.255.0.6/32"


def gpu_links(bw: dict[str, float] | None = None, down: tuple[str, ...] = ()) -> dict[str, Link]:
    """GPU1 of the SuperPoD: ethP toward leaf LP (peer 10.0.0.(2P-1)), 800G per port."""
    links = {}
    for p in range(1, 5):
        dev = f"eth{p}"
        peer = f"10.0.0.{2 * p - 1}"
        links[peer] = Link(peer, f"L{p}", dev, LEAVES[f"L{p}"], (bw or {}).get(dev, 800 * G), dev not in down)
    return links


def rib_from_leaves(received: dict[str, float | None], prefix: str = DST, origin: int = GPU2) -> Rib:
    rib = Rib()
    for p in range(1, 5):
        bw = received.get(f"L{p}", 800 * G)
        if f"L{p}" in received and bw is None:
            continue
        rib.update(Path(prefix, f"10.0.0.{2 * p - 1}", (LEAVES[f"L{p}"], origin), bw))
    return rib


def weights(selected, prefix: str = DST) -> dict[str, int]:
    return {dev: w for _via, dev, w in selected[prefix].nexthops}


def test_issue_vector_as65001_400g_transitive() -> None:
    ann = Announcement("10.255.0.1/32", (65001,), 400 * G)
    assert "extended-community [ 0x0004FDE9513A43B7 ]" in ann.text(65001, transitive=True)
    assert "extended-community [ 0x4004FDE9513A43B7 ]" in ann.text(65001, transitive=False)
    assert LinkBandwidth.decode(bytes.fromhex("0004FDE9513A43B7")) == LinkBandwidth(65001, 400 * G, True)


def test_all_planes_up_equal_weights_and_sum_advertised() -> None:
    sel = select(rib_from_leaves({}), gpu_links(), GPU1)
    assert weights(sel) == {"eth1": 1, "eth2": 1, "eth3": 1, "eth4": 1}
    assert sel[DST].advertised_bw == pytest.approx(3200 * G)
    assert [p.peer for p in sel[DST].paths] == ["10.0.0.1", "10.0.0.3", "10.0.0.5", "10.0.0.7"]


def test_multipath_relax_across_different_neighbor_as() -> None:
    # The four paths have four different first ASNs: plain BGP multipath would keep one.
    sel = select(rib_from_leaves({}), gpu_links(), GPU1)
    assert len({p.as_path[0] for p in sel[DST].paths}) == 4


def test_far_end_sub_link_failure_halves_that_plane() -> None:
    sel = select(rib_from_leaves({"L2": 400 * G}), gpu_links(), GPU1)
    assert weights(sel) == {"eth1": 2, "eth2": 1, "eth3": 2, "eth4": 2}
    assert sel[DST].advertised_bw == pytest.approx(2800 * G)


def test_ecmp_weighting_ignores_the_halved_plane_but_advertises_the_same() -> None:
    fare = select(rib_from_leaves({"L2": 400 * G}), gpu_links(), GPU1)
    ecmp = select(rib_from_leaves({"L2": 400 * G}), gpu_links(), GPU1, weighting="ecmp")
    assert weights(ecmp) == {"eth1": 1, "eth2": 1, "eth3": 1, "eth4": 1}
    assert ecmp[DST].advertised_bw == fare[DST].advertised_bw
    # a plane with no bandwidth left is still dropped: ecmp equalises the usable paths only
    gone = select(rib_from_leaves({"L1": None, "L4": 0.0}), gpu_links(), GPU1, weighting="ecmp")
    assert weights(gone) == {"eth2": 1, "eth3": 1}


def test_near_end_bandwidth_caps_what_was_received() -> None:
    sel = select(rib_from_leaves({}), gpu_links(bw={"eth3": 400 * G}), GPU1)
    assert weights(sel) == {"eth1": 2, "eth2": 2, "eth3": 1, "eth4": 2}


def test_link_down_removes_its_paths_at_once() -> None:
    sel = select(rib_from_leaves({}), gpu_links(down=("eth3",)), GPU1)
    assert weights(sel) == {"eth1": 1, "eth2": 1, "eth4": 1}


def test_withdrawn_plane_and_zero_bandwidth_are_dropped() -> None:
    sel = select(rib_from_leaves({"L1": None, "L4": 0.0}), gpu_links(), GPU1)
    assert weights(sel) == {"eth2": 1, "eth3": 1}


def test_nothing_usable_means_no_route() -> None:
    sel = select(rib_from_leaves({}), gpu_links(down=("eth1", "eth2", "eth3", "eth4")), GPU1)
    assert sel == {}


def test_own_asn_in_path_is_a_loop() -> None:
    rib = Rib()
    rib.update(Path(DST, "10.0.0.1", (65100, GPU1), 800 * G))
    assert select(rib, gpu_links(), GPU1) == {}


def test_shortest_as_path_wins_and_equal_lengths_share() -> None:
    rib = Rib()
    rib.update(Path(DST, "10.0.0.1", (65100, GPU2), 800 * G))
    rib.update(Path(DST, "10.0.0.3", (65101, 65000, 65102, GPU2), 800 * G))
    sel = select(rib, gpu_links(), GPU1)
    assert weights(sel) == {"eth1": 1}


def test_parallel_links_to_one_neighbor_add_up() -> None:
    # Two links to L1 (eth1, eth5), 400G each, L1 advertised 800G: node path bw 800G vs L2's 400G link.
    links = {
        "10.0.0.1": Link("10.0.0.1", "L1", "eth1", 65100, 400 * G),
        "10.0.0.9": Link("10.0.0.9", "L1", "eth5", 65100, 400 * G),
        "10.0.0.3": Link("10.0.0.3", "L2", "eth2", 65101, 400 * G),
    }
    rib = Rib()
    for peer, asn in (("10.0.0.1", 65100), ("10.0.0.9", 65100), ("10.0.0.3", 65101)):
        rib.update(Path(DST, peer, (asn, GPU2), 800 * G))
    sel = select(rib, links, GPU1)
    assert weights(sel) == {"eth1": 1, "eth5": 1, "eth2": 1}
    assert sel[DST].advertised_bw == pytest.approx(1200 * G)


def test_received_none_does_not_cap() -> None:
    sel = select(_no_community_rib(), gpu_links(), GPU1)
    assert weights(sel) == {"eth1": 1, "eth2": 1, "eth3": 1, "eth4": 1}
    assert sel[DST].advertised_bw == pytest.approx(3200 * G)


def _no_community_rib() -> Rib:
    rib = Rib()
    for p in range(1, 5):
        rib.update(Path(DST, f"10.0.0.{2 * p - 1}", (LEAVES[f"L{p}"], GPU2), None))
    return rib


def test_rib_update_withdraw_and_peer_down() -> None:
    rib = Rib()
    path = Path(DST, "10.0.0.1", (65100, GPU2), 800 * G)
    assert rib.update(path) and not rib.update(path)
    assert rib.paths(DST) == [path]
    assert rib.withdraw("10.0.0.1", DST) and not rib.withdraw("10.0.0.1", DST)
    rib.update(path)
    assert rib.clear_peer("10.0.0.1") and rib.prefixes() == set()


def test_kernel_routes_shape() -> None:
    sel = select(rib_from_leaves({"L2": 400 * G}), gpu_links(), GPU1)
    assert kernel_routes(sel)[DST] == (
        ("10.0.0.1", "eth1", 2),
        ("10.0.0.3", "eth2", 1),
        ("10.0.0.5", "eth3", 2),
        ("10.0.0.7", "eth4", 2),
    )


# --- advertisements ---------------------------------------------------------------------------------------


def leaf_links(bw_g2: float = 800 * G) -> dict[str, Link]:
    """Leaf L1 (AS 65100): eth1 to G1 (peer 10.0.0.0), eth2 to G2 (peer 10.0.0.8)."""
    return {
        "10.0.0.0": Link("10.0.0.0", "G1", "eth1", GPU1, 800 * G),
        "10.0.0.8": Link("10.0.0.8", "G2", "eth2", GPU2, bw_g2),
    }


def test_leaf_readvertises_min_of_link_and_received() -> None:
    rib = Rib()
    rib.update(Path(DST, "10.0.0.8", (GPU2,), 800 * G))
    for link_bw, expected in ((800 * G, 800 * G), (400 * G, 400 * G)):
        links = leaf_links(link_bw)
        sel = select(rib, links, 65100)
        ads = advertisements(sel, links, 65100, {"10.255.0.1/32": ""}, transit=True)
        to_g1 = ads["10.0.0.0"][DST]
        assert to_g1.as_path == (65100, GPU2) and to_g1.link_bw == pytest.approx(expected)
        # Not back to G2: its AS is in the path (it would drop it as a loop).
        assert DST not in ads["10.0.0.8"]
    # And a lower received bandwidth wins over the link: min().
    rib.update(Path(DST, "10.0.0.8", (GPU2,), 200 * G))
    sel = select(rib, leaf_links(), 65100)
    assert advertisements(sel, leaf_links(), 65100, {}, True)["10.0.0.0"][DST].link_bw == pytest.approx(
        200 * G
    )


def test_originated_loopback_carries_the_link_bandwidth_per_neighbor() -> None:
    links = gpu_links(bw={"eth2": 400 * G})
    ads = advertisements({}, links, GPU1, {"10.255.0.5/32": "attribute [ 0x29 0xc0 0x00 ]"}, transit=False)
    assert set(ads) == set(links)
    assert ads["10.0.0.3"]["10.255.0.5/32"].link_bw == pytest.approx(400 * G)
    assert ads["10.0.0.1"]["10.255.0.5/32"].link_bw == pytest.approx(800 * G)
    assert ads["10.0.0.1"]["10.255.0.5/32"].as_path == (GPU1,)
    assert "attribute [ 0x29 0xc0 0x00 ]" in ads["10.0.0.1"]["10.255.0.5/32"].text(AS_TRANS, True)


def test_gpu_host_is_a_stub_and_a_down_link_gets_nothing() -> None:
    sel = select(rib_from_leaves({}), gpu_links(down=("eth4",)), GPU1)
    ads = advertisements(sel, gpu_links(down=("eth4",)), GPU1, {"10.255.0.5/32": ""}, transit=False)
    assert "10.0.0.7" not in ads
    assert all(set(routes) == {"10.255.0.5/32"} for routes in ads.values())


def test_optional_transitive_attributes_pass_through_partial_flag_dropped() -> None:
    bier = RawAttribute(41, 0xE0, "0001000C")
    other = RawAttribute(99, 0x80, "ff")  # optional non-transitive: not ours to pass on
    rib = Rib()
    rib.update(Path(DST, "10.0.0.8", (GPU2,), 800 * G, (bier, other)))
    sel = select(rib, leaf_links(), 65100)
    ann = advertisements(sel, leaf_links(), 65100, {}, transit=True)["10.0.0.0"][DST]
    assert ann.extra == "attribute [ 0x29 0xc0 0x0001000c ]"
    assert bier_view(sel) == {DST: (["10.0.0.8"], "0001000c")}


def test_community_asn_uses_as_trans_for_4_octet() -> None:
    assert community_asn(65001) == 65001 and community_asn(GPU1) == AS_TRANS == 23456


@given(
    st.dictionaries(
        st.sampled_from(["L1", "L2", "L3", "L4"]),
        st.sampled_from([0.0, 100 * G, 200 * G, 400 * G, 800 * G]),
        min_size=1,
    ),
    st.sets(st.sampled_from(["eth1", "eth2", "eth3", "eth4"])),
)
def test_weights_proportional_to_min_of_link_and_received(received, down) -> None:
    links = gpu_links(down=tuple(down))
    sel = select(rib_from_leaves(received), links, GPU1)
    expected = {}
    for p in range(1, 5):
        bw = received.get(f"L{p}", 800 * G)
        if f"eth{p}" not in down and bw > 0:
            expected[f"eth{p}"] = min(bw, 800 * G)
    if not expected:
        assert sel == {}
        return
    got = weights(sel)
    assert set(got) == set(expected)
    top = max(expected.values())
    for dev, bw in expected.items():
        # All bandwidths are 100G multiples: the weights reproduce the ratios exactly.
        assert got[dev] / max(got.values()) == pytest.approx(bw / top)
    assert sel[DST].advertised_bw == pytest.approx(sum(expected.values()))
