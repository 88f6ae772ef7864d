"""The join path decomposed from the agents' stamps (orchestrator/experiment/join_path.py): each
segment recovered exactly, transit scaled to fabric time and processing left on the wall clock, the
verdict when processing dominates, and what cannot be matched."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.experiment.join_path import igmp_path, join_path_line, proxy_path

S, G = "10.255.1.1", "239.101.0.1"
ATTACH = {"h1": ("l1", 1), "h2": ("l2", 2), "h3": ("l2", 2)}
CHANNEL = {0: (S, G)}
SOURCE_LEAF = {0: "l1"}
MS = 1_000_000


def _igmp(join, to_leaf, leaf, overlay, bfir, to_first, scale=None):
    heard = join + to_leaf
    sent = heard + leaf
    received = sent + overlay
    installed = received + bfir
    stamps = {
        "l2": {"leaf": [[S, G, True, heard, sent]], "bfir": []},
        "l1": {"leaf": [], "bfir": [[2, S, G, True, received, installed]]},
    }
    return igmp_path(
        {"h2": [[0, join, None]]},
        CHANNEL,
        ATTACH,
        SOURCE_LEAF,
        stamps,
        {(0, "h2"): installed + to_first},
        scale,
    )


def test_igmp_segments_in_fabric_and_wall_time() -> None:
    path = _igmp(10 * MS, 40 * MS, 3 * MS, 60 * MS, 2 * MS, 500 * MS, scale=1000)
    (s,) = path.samples
    assert (s.host_to_leaf, s.leaf, s.overlay, s.bfir, s.to_first) == (
        40 * MS,
        3 * MS,
        60 * MS,
        2 * MS,
        500 * MS,
    )
    d = path.to_dict()
    assert d["transit_time"] == "fabric"
    assert d["transit_p50_s"] == pytest.approx(100e-3 / 1000)  # scaled
    assert d["processing_p50_wall_s"] == pytest.approx(5e-3)  # not scaled
    assert d["installed_to_first_p50_s"] == pytest.approx(500e-3 / 1000)
    assert d["processing_share"] == pytest.approx(5 / 105) and not d["processing_dominated"]
    assert "transit dominated" in join_path_line("igmp", d)


def test_processing_that_outweighs_transit_is_called_out() -> None:
    d = _igmp(0, 1 * MS, 900 * MS, 1 * MS, 300 * MS, 0).to_dict()
    assert d["processing_dominated"] and d["transit_time"] == "wall"
    assert "NOT faithful for membership latency" in join_path_line("igmp", d)


def test_a_join_the_leaf_knew_already_is_shared_and_a_lost_report_unmatched() -> None:
    stamps = {
        "l2": {"leaf": [[S, G, True, 100, 150], [S, G, True, 120, None]], "bfir": []},
        "l1": {"leaf": [], "bfir": [[2, S, G, True, 170, 180]]},
    }
    joins = {"h2": [[0, 90, None]], "h3": [[0, 110, None]], "h1": [[0, 100, None]]}
    path = igmp_path(joins, CHANNEL, ATTACH, SOURCE_LEAF, stamps, {}, None)
    # h2: heard 100 sent 150 received 170; h3: its join at l2 changed nothing; h1 (l1): nothing heard
    assert [(s.host, s.host_to_leaf, s.bfir) for s in path.samples] == [("h2", 10, 10)]
    assert path.shared == 1 and path.unmatched == 1
    assert path.samples[0].to_first is None


def test_a_stamp_before_the_join_or_after_the_leave_is_not_taken() -> None:
    stamps = {"l2": {"leaf": [[S, G, True, 50, 60], [S, G, True, 300, 310]], "bfir": []}, "l1": {"bfir": []}}
    path = igmp_path({"h2": [[0, 100, 200]]}, CHANNEL, ATTACH, SOURCE_LEAF, stamps, {}, None)
    assert path.samples == [] and path.unmatched == 1


def test_proxy_segments() -> None:
    stamps = {"l1": {"leaf": [], "bfir": [[2, S, G, True, 1_200, 1_500], [1, S, G, True, 1_200, 1_400]]}}
    reports = {"h1": [[0, True, 1_000], [0, False, 9_000]]}
    path = proxy_path(
        reports, {0: ["h2", "h3"]}, CHANNEL, ATTACH, SOURCE_LEAF, stamps, {(0, "h2"): 2_000}, None
    )
    assert [(s.host, s.host_to_leaf, s.leaf, s.overlay, s.bfir, s.to_first) for s in path.samples] == [
        ("h2", 200, None, None, 300, 500),
        ("h3", 200, None, None, 300, None),
    ]


seg = st.integers(0, 10**10)


@given(seg, seg, seg, seg, seg, seg, st.sampled_from([None, 1, 20000]))
def test_every_segment_is_recovered(join, to_leaf, leaf, overlay, bfir, to_first, scale) -> None:
    path = _igmp(join, to_leaf, leaf, overlay, bfir, to_first, scale)
    (s,) = path.samples
    assert (s.host_to_leaf, s.leaf, s.overlay, s.bfir, s.to_first) == (to_leaf, leaf, overlay, bfir, to_first)
    d = path.to_dict()
    assert d["transit_p50_s"] == pytest.approx((to_leaf + overlay) / 1e9 / (scale or 1))
    assert d["processing_p50_wall_s"] == pytest.approx((leaf + bfir) / 1e9)
    total = to_leaf + overlay + leaf + bfir
    assert d["processing_dominated"] == (total > 0 and (leaf + bfir) / total > 0.5)
