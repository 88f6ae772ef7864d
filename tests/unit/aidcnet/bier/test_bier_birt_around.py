"""A static BIRT around links that are down: equal-cost alternatives take over, nothing else changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.bift import birt_around, build_bifts

# leaf1 of leaf-spine: its hosts direct, every other BFR-id over both spines.
LEAF1 = {1: ["h1"], 2: ["h2"], 3: ["spine1", "spine2"], 4: ["spine1", "spine2"], 9: ["<self>"]}


def test_a_dead_spine_link_moves_every_row_to_the_other_spine() -> None:
    around = birt_around(LEAF1, {"spine1"})
    assert around == {1: ["h1"], 2: ["h2"], 3: ["spine2"], 4: ["spine2"], 9: ["<self>"]}
    bift = build_bifts(around, 64)[0]
    assert {nbr for _id, alts in bift.rows() for _fbm, nbr in alts} == {"h1", "h2", "spine2", "<self>"}


def test_a_row_with_no_way_around_keeps_its_next_hop() -> None:
    assert birt_around(LEAF1, {"h1", "spine1", "spine2"}) == LEAF1


def test_nothing_down_changes_nothing() -> None:
    assert birt_around(LEAF1, set()) == LEAF1


NEIGHBORS = st.sampled_from(["a", "b", "c", "d"])


@given(
    st.dictionaries(
        st.integers(1, 64), st.lists(NEIGHBORS, min_size=1, max_size=4, unique=True), max_size=20
    ),
    st.sets(NEIGHBORS),
)
def test_every_row_keeps_a_next_hop_and_uses_a_dead_one_only_when_it_has_no_other(birt, down) -> None:
    around = birt_around(birt, down)
    assert around.keys() == birt.keys()
    for bfr_id, hops in around.items():
        assert hops and set(hops) <= set(birt[bfr_id])
        alive = [h for h in birt[bfr_id] if h not in down]
        assert hops == (alive or birt[bfr_id])
