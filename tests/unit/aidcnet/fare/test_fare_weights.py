"""FARE per-node rules: min() rule, SuperPoD failure cases, kernel weights, WECMP, spraying."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.fare.bandwidth import parse_bandwidth
from aidcnet.fare.linkbw import float32
from aidcnet.fare.weights import (
    KERNEL_MAX_WEIGHT,
    NextHopInput,
    RouteView,
    SmoothWeightedRoundRobin,
    advertised_bandwidth,
    changed_prefixes,
    compute_route,
    flow_shares,
    kernel_weights,
    path_bandwidth,
    path_bandwidths,
    select_next_hop,
)

G400 = parse_bandwidth("400G")
G800 = parse_bandwidth("800G")
PLANES = ("L1", "L2", "L3", "L4")
# RoCEv2 QPs typically draw source ports from the dynamic range; 10k flows.
PORTS = range(49152, 49152 + 10_000)
SHARE_TOLERANCE = 0.02  # absolute; ~4.5 sigma of a binomial share over 10k flows


# --- the min() rule -------------------------------------------------------------------------


def test_path_bandwidth_is_min_of_links_and_received() -> None:
    assert path_bandwidth(2 * G400, G400) == G400
    assert path_bandwidth(G400, G800) == G400
    assert path_bandwidth(G800, None) == G800  # no community: links are the only cap
    assert path_bandwidth(G800, 0.0) == 0.0


def test_advertised_is_sum_over_ecmp_next_hops() -> None:
    bws = path_bandwidths(
        [
            NextHopInput("A", (G400, G400), received_bw=G400),  # min(800G, 400G) = 400G
            NextHopInput("B", (G400,), received_bw=G800),  # min(400G, 800G) = 400G
            NextHopInput("C", (), received_bw=G800),  # all links down
        ]
    )
    assert bws == {"A": G400, "B": G400, "C": 0.0}
    assert advertised_bandwidth(bws) == 2 * G400


def test_advertised_none_when_nothing_usable() -> None:
    assert advertised_bandwidth({}) is None
    assert advertised_bandwidth({"A": 0.0}) is None
    route = compute_route([NextHopInput("A", (), G800)])
    assert route.advertised_bw is None
    assert route.weights == {}


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: path_bandwidth(-1.0, None), "link bandwidth sum -1.0"),
        (lambda: path_bandwidth(1.0, math.nan), "received bandwidth nan"),
        (lambda: NextHopInput("A", (G400, -5.0)).path_bw, "link bandwidth -5.0"),
        (lambda: NextHopInput("", (G400,)), "neighbor ''"),
        (
            lambda: path_bandwidths([NextHopInput("A", ()), NextHopInput("A", ())]),
            "neighbor 'A' appears twice",
        ),
        (lambda: kernel_weights({"A": math.inf}), "path bandwidth of 'A' inf"),
        (lambda: kernel_weights({"A": 1.0}, max_weight=257), "max_weight 257"),
    ],
)
def test_errors_name_the_bad_field(call: object, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        call()  # type: ignore[operator]
    assert needle in str(info.value)


# --- the seed draft's SuperPoD: GPU with 4 planes of 800G (Y-cable of 2 x 400G) ------------


def leaf_view_of_destination(links_to_dst: tuple[float, ...]) -> float | None:
    """What leaf L_k advertises for the destination GPU's loopback (GPU sends no community)."""
    return compute_route([NextHopInput("G2", links_to_dst, received_bw=None)]).advertised_bw


def source_route(
    src_links: dict[str, tuple[float, ...]], dst_links: dict[str, tuple[float, ...]]
) -> RouteView:
    """The source GPU G1's route to G2 across the planes that still have a route."""
    next_hops = []
    for plane in PLANES:
        received = leaf_view_of_destination(dst_links[plane])
        if received is None:
            continue  # the leaf withdrew G2: no BGP path via that plane
        next_hops.append(NextHopInput(plane, src_links[plane], received_bw=received))
    return compute_route(next_hops)


def healthy() -> dict[str, tuple[float, ...]]:
    return {plane: (G400, G400) for plane in PLANES}


def test_superpod_all_planes_up() -> None:
    route = source_route(healthy(), healthy())
    assert route.weights == {"L1": 1, "L2": 1, "L3": 1, "L4": 1}
    assert route.advertised_bw == pytest.approx(parse_bandwidth("3.2T"))


def test_superpod_source_port_failed_removes_plane() -> None:
    src = healthy()
    src["L3"] = ()  # the 800G port on plane 3 is down: both sub-links gone
    route = source_route(src, healthy())
    assert route.weights == {"L1": 1, "L2": 1, "L4": 1}
    assert route.advertised_bw == pytest.approx(parse_bandwidth("2.4T"))


def test_superpod_destination_port_failed_withdraws_plane() -> None:
    dst = healthy()
    dst["L3"] = ()
    assert leaf_view_of_destination(dst["L3"]) is None
    route = source_route(healthy(), dst)
    assert "L3" not in route.weights
    assert route.weights == {"L1": 1, "L2": 1, "L4": 1}


def test_superpod_destination_y_cable_sub_link_failed_halves_plane() -> None:
    dst = healthy()
    dst["L2"] = (G400,)  # one 400G sub-cable of G2's plane-2 Y-cable is broken
    assert leaf_view_of_destination(dst["L2"]) == G400
    route = source_route(healthy(), dst)
    assert route.weights == {"L1": 2, "L2": 1, "L3": 2, "L4": 2}
    assert route.advertised_bw == pytest.approx(parse_bandwidth("2.8T"))


def test_superpod_source_y_cable_sub_link_failed_halves_plane() -> None:
    src = healthy()
    src["L2"] = (G400,)  # the min() takes the local side this time
    route = source_route(src, healthy())
    assert route.weights == {"L1": 2, "L2": 1, "L3": 2, "L4": 2}


def test_superpod_flow_shares_follow_weights() -> None:
    weights = {"L1": 2, "L2": 1, "L3": 2, "L4": 2}
    shares = flow_shares(PORTS, weights)
    for plane, w in weights.items():
        assert shares[plane] == pytest.approx(w / 7, abs=SHARE_TOLERANCE), plane


def test_superpod_sub_link_failure_moves_only_flows_off_the_degraded_plane() -> None:
    before = {port: select_next_hop(port, {"L1": 1, "L2": 1, "L3": 1, "L4": 1}) for port in PORTS}
    after = {port: select_next_hop(port, {"L1": 2, "L2": 1, "L3": 2, "L4": 2}) for port in PORTS}
    moved = [port for port in PORTS if before[port] != after[port]]
    assert moved, "halving L2 must move some flows"
    # QPs on unaffected planes keep their established paths (seed draft §3).
    assert all(before[port] == "L2" for port in moved)
    # About half of L2's quarter moves: 1/4 - 1/7 of all flows.
    assert len(moved) / len(PORTS) == pytest.approx(1 / 4 - 1 / 7, abs=SHARE_TOLERANCE)


def test_superpod_plane_failure_moves_only_its_flows() -> None:
    full = {"L1": 1, "L2": 1, "L3": 1, "L4": 1}
    before = {port: select_next_hop(port, full) for port in PORTS}
    after = {port: select_next_hop(port, {"L1": 1, "L2": 1, "L4": 1}) for port in PORTS}
    for port in PORTS:
        if before[port] != "L3":
            assert after[port] == before[port]
        else:
            assert after[port] != "L3"


# --- kernel weights -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bws", "expected"),
    [
        ({"a": G800, "b": G800, "c": G400}, {"a": 2, "b": 2, "c": 1}),
        ({"a": G800, "b": G800}, {"a": 1, "b": 1}),
        ({"a": 3.0, "b": 1.0, "c": 2.0}, {"a": 3, "b": 1, "c": 2}),
        ({"a": G800, "b": 0.0, "c": G400}, {"a": 2, "c": 1}),
        ({"a": 1.0, "b": 1000.0}, {"a": 1, "b": 256}),  # clamped: thin path kept at 1
        ({"a": 0.0}, {}),
        ({}, {}),
    ],
)
def test_kernel_weights(bws: dict[str, float], expected: dict[str, int]) -> None:
    assert kernel_weights(bws) == expected


def test_kernel_weights_irrational_ratio_is_close() -> None:
    w = kernel_weights({"a": 3.0, "b": math.pi})
    assert w["a"] / w["b"] == pytest.approx(3 / math.pi, rel=1e-3)
    assert max(w.values()) <= KERNEL_MAX_WEIGHT


def test_kernel_weights_smaller_cap() -> None:
    assert kernel_weights({"a": 1.0, "b": 1000.0}, max_weight=16) == {"a": 1, "b": 16}


bw_maps = st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4", "n5", "n6"]),
    st.floats(min_value=0.0, max_value=1e13, allow_nan=False, allow_infinity=False),
    max_size=6,
)


def _share_error(weights: dict[str, int], bws: dict[str, float]) -> float:
    total_w = sum(weights.values())
    total_bw = sum(bws[nh] for nh in weights)
    return sum(abs(weights[nh] / total_w - bws[nh] / total_bw) for nh in weights)


@given(bw_maps)
def test_kernel_weights_properties(bws: dict[str, float]) -> None:
    weights = kernel_weights(bws)
    assert set(weights) == {nh for nh, bw in bws.items() if bw > 0}
    assert all(1 <= w <= KERNEL_MAX_WEIGHT for w in weights.values())
    if weights:
        # Never worse than plain rounding at the full scale of 256.
        top = max(bws.values())
        naive = {nh: max(1, round(bws[nh] * KERNEL_MAX_WEIGHT / top)) for nh in weights}
        assert _share_error(weights, bws) <= _share_error(naive, bws) + 1e-9


@given(st.lists(st.integers(1, 16), min_size=1, max_size=5), st.integers(1, 10))
def test_kernel_weights_recover_integer_ratios(ratios: list[int], factor: int) -> None:
    g = math.gcd(*ratios)
    bws = {f"n{i}": r * factor * G400 for i, r in enumerate(ratios)}
    assert kernel_weights(bws) == {f"n{i}": r // g for i, r in enumerate(ratios)}


# --- per-flow selection ---------------------------------------------------------------------


def test_select_is_deterministic_and_salted() -> None:
    weights = {"L1": 1, "L2": 1, "L3": 1, "L4": 1}
    picks = [select_next_hop(port, weights) for port in PORTS]
    assert picks == [select_next_hop(port, dict(reversed(weights.items()))) for port in PORTS]
    salted = [select_next_hop(port, weights, salt=b"leaf1") for port in PORTS]
    assert salted != picks


def test_select_never_picks_zero_weight() -> None:
    weights = {"a": 0, "b": 3}
    assert {select_next_hop(port, weights) for port in range(2000)} == {"b"}


@pytest.mark.parametrize(
    ("port", "weights", "needle"),
    [
        (70000, {"a": 1}, "src_port 70000"),
        (-1, {"a": 1}, "src_port -1"),
        (1, {"a": 0}, "no next hop with a positive weight"),
        (1, {}, "no next hop with a positive weight"),
        (1, {"a": -2}, "next hop 'a' is -2"),
        (1, {"a": 1.5}, "next hop 'a' is 1.5"),
    ],
)
def test_select_errors(port: int, weights: dict[str, int], needle: str) -> None:
    with pytest.raises(ValueError) as info:
        select_next_hop(port, weights)
    assert needle in str(info.value)


def test_flow_shares_empty_ports() -> None:
    with pytest.raises(ValueError, match="src_ports is empty"):
        flow_shares([], {"a": 1})


@pytest.mark.parametrize(
    "weights",
    [
        {"a": 1, "b": 1},
        {"a": 3, "b": 1},
        {"a": 1, "b": 2, "c": 4},
        {"L1": 256, "L2": 1},
    ],
)
def test_flow_shares_follow_weights(weights: dict[str, int]) -> None:
    shares = flow_shares(PORTS, weights)
    total = sum(weights.values())
    assert set(shares) == set(weights)
    assert sum(shares.values()) == pytest.approx(1.0)
    for nh, w in weights.items():
        assert shares[nh] == pytest.approx(w / total, abs=SHARE_TOLERANCE), nh


# --- per-packet spraying --------------------------------------------------------------------


def test_swrr_nginx_sequence() -> None:
    # The sequence from nginx's smooth weighted round-robin description for weights 5,1,1.
    sprayer = SmoothWeightedRoundRobin({"a": 5, "b": 1, "c": 1})
    assert [next(sprayer) for _ in range(7)] == ["a", "a", "b", "a", "c", "a", "a"]


def test_swrr_interleaves_superpod_planes() -> None:
    sprayer = SmoothWeightedRoundRobin({"L1": 2, "L2": 1, "L3": 2, "L4": 2})
    window = [next(sprayer) for _ in range(7)]
    assert window == ["L1", "L3", "L4", "L2", "L1", "L3", "L4"]
    # No plane is used twice in a row inside the window.
    assert all(x != y for x, y in itertools.pairwise(window))


def test_swrr_update_drops_a_failed_plane() -> None:
    sprayer = SmoothWeightedRoundRobin({"L1": 1, "L2": 1, "L3": 1, "L4": 1})
    for _ in range(5):
        next(sprayer)
    sprayer.update({"L1": 1, "L2": 1, "L3": 0, "L4": 1})
    assert sprayer.weights == {"L1": 1, "L2": 1, "L4": 1}
    assert Counter(next(sprayer) for _ in range(300)) == {"L1": 100, "L2": 100, "L4": 100}


def test_swrr_rejects_no_usable_next_hop() -> None:
    with pytest.raises(ValueError, match="no next hop"):
        SmoothWeightedRoundRobin({"a": 0})


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, 20), min_size=1).filter(
        lambda w: any(v > 0 for v in w.values())
    ),
    st.integers(1, 3),
)
def test_swrr_exact_counts_per_window(weights: dict[str, int], rounds: int) -> None:
    sprayer = SmoothWeightedRoundRobin(weights)
    total = sum(weights.values())
    for _ in range(rounds):
        counts = Counter(next(sprayer) for _ in range(total))
        assert counts == {nh: w for nh, w in weights.items() if w > 0}


# --- update on change -----------------------------------------------------------------------


def test_changed_prefixes() -> None:
    old = {
        "10.0.0.1/32": RouteView(G800, {"L1": 1, "L2": 1}),
        "10.0.0.2/32": RouteView(G800, {"L1": 1, "L2": 1}),
        "10.0.0.3/32": RouteView(G800, {"L1": 1, "L2": 1}),
        "10.0.0.4/32": RouteView(G800, {"L1": 1}),
        "10.0.0.9/32": RouteView(G400, {"L1": 1}),
    }
    new = {
        "10.0.0.1/32": RouteView(G800, {"L1": 1, "L2": 1}),  # unchanged
        "10.0.0.2/32": RouteView(G400 * 3, {"L1": 1, "L2": 1}),  # bandwidth changed
        "10.0.0.3/32": RouteView(G800, {"L1": 2, "L2": 1}),  # weights changed
        "10.0.0.4/32": RouteView(G800 * (1 + 1e-9), {"L1": 1}),  # below float32 precision
        "10.0.0.5/32": RouteView(G400, {"L1": 1}),  # new prefix
        # 10.0.0.9/32 gone: withdraw
    }
    assert changed_prefixes(old, new) == {"10.0.0.2/32", "10.0.0.3/32", "10.0.0.5/32", "10.0.0.9/32"}
    assert changed_prefixes(new, new) == set()


def test_changed_prefixes_bandwidth_to_none() -> None:
    old = {"p": RouteView(G800, {"a": 1})}
    new = {"p": RouteView(None, {})}
    assert changed_prefixes(old, new) == {"p"}


def test_route_view_compares_by_value() -> None:
    a = RouteView(float32(G800), {"x": 1, "y": 2})
    b = RouteView(float32(G800), {"y": 2, "x": 1})
    assert a == b
    assert hash(a) == hash(b)
