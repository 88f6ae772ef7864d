"""Static BIRT computation (RFC 8279 §6.2–6.3): BFS, all equal-cost next hops, determinism."""

from __future__ import annotations

import pytest

from aidcnet.bier.bift import NULL, SELF
from aidcnet.bier.routing import compute_birts, distances_to, undirected


def test_square_has_two_equal_cost_next_hops() -> None:
    #   A - B
    #   |   |
    #   C - D
    adj = undirected([("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")])
    birts = compute_birts(adj, {"A": 1, "B": 2, "C": 3, "D": 4})
    assert birts["A"] == {1: (SELF,), 2: ("B",), 3: ("C",), 4: ("B", "C")}
    assert birts["D"][1] == ("B", "C")


def test_leaf_spine_ecmp() -> None:
    edges = [(leaf, spine) for leaf in ("l1", "l2", "l3") for spine in ("s2", "s1")]
    birts = compute_birts(undirected(edges), {"l1": 1, "l2": 2, "l3": 3})
    assert birts["l1"][2] == ("s1", "s2")  # sorted, independent of edge order
    assert birts["s1"] == {1: ("l1",), 2: ("l2",), 3: ("l3",)}  # spines are transit BFRs


def test_unreachable_is_null() -> None:
    adj = {"A": ["B"], "B": ["A"], "C": []}
    birts = compute_birts(adj, {"A": 1, "C": 2})
    assert birts["A"][2] == (NULL,)
    assert birts["C"][1] == (NULL,)
    assert birts["C"][2] == (SELF,)


def test_directed_edges_respected() -> None:
    # A -> B -> C -> A ring: A reaches C only through B
    adj = {"A": ["B"], "B": ["C"], "C": ["A"]}
    assert distances_to(adj, "C") == {"C": 0, "B": 1, "A": 2}
    assert compute_birts(adj, {"C": 7})["A"] == {7: ("B",)}


def test_deterministic_regardless_of_input_order() -> None:
    edges = [("a", "b"), ("b", "c"), ("a", "d"), ("d", "c"), ("c", "e")]
    ids = {"a": 1, "c": 2, "e": 3}
    one = compute_birts(undirected(edges), ids)
    two = compute_birts(undirected(list(reversed(edges))), dict(reversed(list(ids.items()))))
    assert one == two
    assert one["a"][3] == ("b", "d")


@pytest.mark.parametrize(
    ("adj", "ids", "match"),
    [
        ({"A": ["Z"]}, {}, "'Z'"),
        ({"A": ["A"]}, {}, "itself"),
        ({"A": []}, {"B": 1}, "'B'"),
        ({"A": [], "B": []}, {"A": 1, "B": 1}, "both"),
        ({"A": []}, {"A": 0}, "invalid BFR-id"),
    ],
)
def test_bad_input(adj: dict[str, list[str]], ids: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_birts(adj, ids)
