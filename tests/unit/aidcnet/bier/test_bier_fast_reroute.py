"""BIER fast reroute's pure part (aidcnet/bier/fast_reroute.py): bypass paths, adjacency labels, the label
stack."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.bier.fast_reroute import (
    BYPASS_TTL,
    NnhTunnel,
    adjacency_labels,
    bypass_path,
    next_next_hops,
    node_bypass_path,
    push,
    tunnel,
    usable_bypasses,
    usable_nnh_tunnels,
)
from aidcnet.bier.mpls import decode_lse
from aidcnet.bier.routing import compute_birts, undirected

# leaf-spine as the lab ships it, two hosts per leaf: hosts end paths, switches carry them
LEAVES, SPINES = ["leaf1", "leaf2", "leaf3"], ["spine1", "spine2"]
CLOS = undirected(
    [(leaf, spine) for leaf in LEAVES for spine in SPINES]
    + [("h1", "leaf1"), ("h2", "leaf1"), ("h3", "leaf2")]
)


def switch(node: str) -> bool:
    return not node.startswith("h")


def test_a_spine_reaches_its_leaf_over_another_leaf_and_spine() -> None:
    # the case with no equal-cost alternative: every other leaf forwards to leaf1 over spine1 too
    assert bypass_path(CLOS, "spine1", "leaf1", switch) == ["spine1", "leaf2", "spine2", "leaf1"]
    assert bypass_path(CLOS, "leaf1", "spine1", switch) == ["leaf1", "spine2", "leaf2", "spine1"]


def test_a_host_link_has_no_bypass_and_a_host_never_carries_one() -> None:
    assert bypass_path(CLOS, "leaf1", "h1", switch) is None
    assert bypass_path(CLOS, "h1", "leaf1", switch) is None
    # h1 and h2 both hang off leaf1: a path through either would make a host forward
    two_homed = undirected([*((a, b) for a, bs in CLOS.items() for b in bs), ("h1", "leaf2")])
    assert "h1" not in (bypass_path(two_homed, "spine1", "leaf1", switch) or [])[1:-1]


def test_not_a_neighbour_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a neighbour"):
        bypass_path(CLOS, "spine1", "spine2", switch)


def test_the_tunnel_pushes_the_inner_nodes_adjacency_labels() -> None:
    labels = adjacency_labels(CLOS, 100)
    via, stack = tunnel(["spine1", "leaf2", "spine2", "leaf1"], labels)
    assert via == "leaf2"
    assert stack == [labels["leaf2"]["spine2"], labels["spine2"]["leaf1"]]
    # a next-next hop that is a neighbour too: straight there, nothing pushed
    assert tunnel(["spine1", "leaf1"], labels) == ("leaf1", [])
    with pytest.raises(ValueError, match="two ends"):
        tunnel(["spine1"], labels)


def test_adjacency_labels_are_one_per_directed_adjacency() -> None:
    labels = adjacency_labels(CLOS, 16)
    flat = [label for nbrs in labels.values() for label in nbrs.values()]
    assert len(flat) == len(set(flat)) == sum(len(v) for v in CLOS.values())
    assert min(flat) == 16 and max(flat) == 16 + len(flat) - 1
    with pytest.raises(ValueError, match="20-bit"):
        adjacency_labels(CLOS, (1 << 20) - 3)


def test_pushed_entries_are_not_the_bottom_of_the_stack() -> None:
    wire = push([70, 71])
    assert len(wire) == 8
    for i, label in enumerate((70, 71)):
        entry = decode_lse(wire, 4 * i)
        assert (entry.label, entry.s, entry.ttl) == (label, 0, BYPASS_TTL)


def test_a_bypass_is_used_only_for_a_down_neighbour_the_birt_still_needs() -> None:
    bypasses = {"leaf1": ("leaf2", (1, 2)), "leaf2": ("leaf1", (3, 4)), "leaf3": ("leaf1", (5, 6))}
    assert usable_bypasses({"leaf1", "leaf3"}, bypasses, {"leaf1"}) == {"leaf1": ("leaf2", (1, 2))}
    # not needed any more (the BIRT moved off it): off
    assert usable_bypasses({"leaf3"}, bypasses, {"leaf1"}) == {}
    # its first hop is down too: a second failure the bypass does not survive
    assert usable_bypasses({"leaf2", "leaf3"}, bypasses, {"leaf1", "leaf3"}) == {}


@st.composite
def graphs(draw: st.DrawFn) -> tuple[dict[str, list[str]], set[str]]:
    n = draw(st.integers(3, 9))
    nodes = [f"n{i}" for i in range(n)]
    pairs = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    edges = draw(st.lists(st.sampled_from(pairs), min_size=2, max_size=len(pairs), unique=True))
    hosts = set(draw(st.lists(st.sampled_from(nodes), max_size=n // 2, unique=True)))
    return undirected(edges), hosts


def _hops(
    adj: dict[str, list[str]], a: str, b: str, transit: set[str], dead: str | None = None
) -> int | None:
    """Hops from a to b over transit inner nodes, by brute force: without the link a-b, or, with
    ``dead``, without that node at all."""
    dist = {a: 0}
    queue = deque([a])
    while queue:
        u = queue.popleft()
        if u != a and u not in transit:
            continue
        for v in adj[u]:
            cut = v == dead if dead is not None else {u, v} == {a, b}
            if cut or v in dist:
                continue
            dist[v] = dist[u] + 1
            queue.append(v)
    return dist.get(b)


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_a_bypass_avoids_its_link_is_shortest_and_its_labels_lead_to_the_neighbour(
    case: tuple[dict[str, list[str]], set[str]],
) -> None:
    adj, hosts = case
    labels = adjacency_labels(adj, 16)
    owner = {label: (node, nbr) for node, nbrs in labels.items() for nbr, label in nbrs.items()}
    transit = set(adj) - hosts
    for plr, nbrs in adj.items():
        for nbr in nbrs:
            path = bypass_path(adj, plr, nbr, lambda n: n in transit)
            best = _hops(adj, plr, nbr, transit)
            if path is None:
                assert best is None
                continue
            assert len(path) - 1 == best and path[0] == plr and path[-1] == nbr
            assert all(path[i + 1] in adj[path[i]] for i in range(len(path) - 1))
            assert all({path[i], path[i + 1]} != {plr, nbr} for i in range(len(path) - 1))
            assert set(path[1:-1]) <= transit
            # follow the packet: each node it reaches pops the top label, which names where it goes next
            here, stack = tunnel(path, labels)
            seen = [plr, here]
            for label in stack:
                node, nxt = owner[label]
                assert node == here
                here = nxt
                seen.append(here)
            assert seen == path


# A ring of five BFRs, each a BFER: from c1, c3 is two hops over c2 and three the other way, so c1's row
# for c3 has one next hop and no loop-free alternate (a ring of four would have two equal ways).
RING = [("c1", "c2"), ("c2", "c3"), ("c3", "c4"), ("c4", "c5"), ("c5", "c1")]
RING_IDS = {f"c{i}": i for i in range(1, 6)}


def test_node_protection_sends_a_dead_neighbours_downstream_to_its_next_hop_around_it() -> None:
    adj = undirected(RING)
    birts = compute_birts(adj, RING_IDS)
    assert list(birts["c1"][3]) == ["c2"] and list(birts["c1"][4]) == ["c5"]
    nnh = next_next_hops(adj, birts, "c1", "c2", lambda n: True)
    # c3 only: c2's own id has no next-next hop (its link bypass carries it)
    assert nnh == {"c3": (["c1", "c5", "c4", "c3"], [3])}
    assert node_bypass_path(adj, "c1", "c2", "c3", lambda n: True) == ["c1", "c5", "c4", "c3"]
    # no transit allowed: nothing reaches c3 without c2
    assert next_next_hops(adj, birts, "c1", "c2", lambda n: False) == {}
    with pytest.raises(ValueError, match="cannot be"):
        node_bypass_path(adj, "c1", "c2", "c2", lambda n: True)
    assert (
        next_next_hops(CLOS, compute_birts(CLOS, {"h1": 1, "h2": 2, "h3": 3}), "spine1", "leaf1", switch)
        == {}
    )


def test_a_next_next_hop_tunnel_is_used_while_its_first_hop_is_up() -> None:
    t5 = NnhTunnel("c3", 300, "c5", (7, 8), (3,))
    t9 = NnhTunnel("c9", 900, "c9", (), (9,))
    tunnels = {"c2": (t5, t9)}
    assert usable_nnh_tunnels({"c2"}, tunnels, {"c2"}) == {"c2": (t5, t9)}
    assert usable_nnh_tunnels({"c2"}, tunnels, {"c2", "c9"}) == {"c2": (t5,)}
    assert usable_nnh_tunnels({"c2"}, tunnels, set()) == {}  # not down
    assert usable_nnh_tunnels(set(), tunnels, {"c2"}) == {}  # not needed
    assert NnhTunnel("x", 16, "y", (), (1, 3, 64, 65, 200)).masks(64) == {0: 0b101 | 1 << 63, 1: 1, 3: 1 << 7}


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_node_protection_reaches_every_bfer_it_takes_without_the_dead_node_or_a_loop(
    case: tuple[dict[str, list[str]], set[str]],
) -> None:
    """For every PLR and protected neighbour N: each next-next hop's tunnel avoids N, and from the NNH the
    BFR-ids it carries are forwarded (by every node's BIRT, any ECMP choice) to their BFER without ever
    reaching N or coming back to the PLR; an id is given to at most one NNH, and only ids the PLR sends to
    N alone."""
    adj, hosts = case
    transit = set(adj) - hosts
    ids = {node: i + 1 for i, node in enumerate(sorted(adj))}
    birts = compute_birts(adj, ids)
    by_id = {i: node for node, i in ids.items()}
    for plr, nbrs in adj.items():
        for nbr in nbrs:
            seen: set[int] = set()
            for nnh, (path, bfr_ids) in next_next_hops(adj, birts, plr, nbr, lambda n: n in transit).items():
                assert path[0] == plr and path[-1] == nnh and nbr not in path
                assert set(path[1:-1]) <= transit
                assert not seen & set(bfr_ids)
                seen |= set(bfr_ids)
                for bfr_id in bfr_ids:
                    assert list(birts[plr][bfr_id]) == [nbr] and nnh in birts[nbr][bfr_id]
                    frontier, reached = {nnh}, set()
                    while frontier:  # every node the copy can reach, over every ECMP choice
                        here = frontier.pop()
                        assert here not in (nbr, plr)
                        reached.add(here)
                        if here != by_id[bfr_id]:
                            frontier |= set(birts[here][bfr_id]) - reached
                    assert by_id[bfr_id] in reached


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_a_next_next_hop_tunnel_exists_exactly_when_a_way_round_the_node_does(
    case: tuple[dict[str, list[str]], set[str]],
) -> None:
    """node_bypass_path finds a shortest path round the dead neighbour whenever there is one (its quick
    refusal of a next-next hop behind the neighbour alone never hides one)."""
    adj, hosts = case
    transit = set(adj) - hosts
    for plr, nbrs in adj.items():
        for nbr in nbrs:
            for nnh in adj:
                if nnh in (plr, nbr):
                    continue
                path = node_bypass_path(adj, plr, nbr, nnh, lambda n: n in transit)
                best = _hops(adj, plr, nnh, transit, dead=nbr)
                assert (None if path is None else len(path) - 1) == best
