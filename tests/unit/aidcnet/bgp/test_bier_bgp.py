"""BIRT and BIFT from BGP best paths (RFC 9793 §4): the static plan's tables, re-converging on failure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.agent.bier.service import build_tables
from aidcnet.bgp.bier_attribute import BierAttribute, BierTlv
from aidcnet.bgp.bier_routes import BgpPath, bgp_paths, birt_from_bgp, loopback_attribute
from aidcnet.bier.forwarding import forward
from aidcnet.bier.routing import compute_birts, undirected
from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS as LABS_DIR
from tests.unit.node_files import bier_knobs

LABS = LABS_DIR


def leaf_spine(bift: str):
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    return node_configs(build_plan(topo, LabVars.model_validate({"bier": {"bift": bift}})))


def bgp_view(configs, node: str, dead: frozenset[str] = frozenset()) -> dict[str, BgpPath]:
    """What BGP would hand ``node``: each BFR loopback with the static plan's multipath next hops (the
    ECMP shortest paths BGP's multipath selects in a Clos) minus those through ``dead`` neighbours, and
    the attribute its owner originates. A prefix with no next hop left is withdrawn."""
    me = configs[node]
    addr_of = {str(n.address): n.name for n in me.bier.neighbors}
    routes = {}
    for other in configs.values():
        if other.bier is None or other.node == node:
            continue
        # node files carry collapsed routes (disjoint prefixes): the one holding the loopback
        route = next((r for r in me.routes if other.loopback.ip in r.prefix), None)
        if route is None:
            continue
        hops = tuple(str(h.via) for h in route.nexthops if addr_of.get(str(h.via)) not in dead)
        if not hops:
            continue
        attr = loopback_attribute(other.bier)
        routes[str(other.loopback.network)] = BgpPath(hops, attr)
    return routes


def test_loopback_attribute_is_the_rfc9793_vector() -> None:
    from aidcnet.config import Bier

    bier = Bier(bfr_id=5, **bier_knobs(sub_domain=0, bsl=256), label_base=1000, si_count=1)
    attr = loopback_attribute(bier)
    assert attr.encode().hex() == "0001000c0000050000020004013003e8"
    assert BierAttribute.decode(attr.encode()) == attr
    # docs/bier.md's example: h5 of leaf-spine (labels from 20), whole path attribute.
    h5 = leaf_spine("bgp")["h5"].bier
    assert (h5.bfr_id, h5.label_base, h5.si_count) == (5, 20, 1)
    assert loopback_attribute(h5).encode_path_attribute().hex() == "c029100001000c000005000002000401300014"


def test_bgp_paths_reads_the_rib_view_shape() -> None:
    attr = BierAttribute((BierTlv(sub_domain_id=0, bfr_id=3),))
    view = {
        "10.255.0.3/32": (["10.0.0.1", "10.0.0.3"], attr.encode().hex()),
        "10.255.0.4/32": (["10.0.0.1"], None),
        "10.255.0.5/32": (["10.0.0.3"], "0x" + attr.encode().hex()),
        "10.255.0.6/32": BgpPath(("10.0.0.1",)),
    }
    paths, problems = bgp_paths(view)
    assert problems == []
    assert paths["10.255.0.3/32"] == BgpPath(("10.0.0.1", "10.0.0.3"), attr)
    assert paths["10.255.0.4/32"] == BgpPath(("10.0.0.1",), None)
    assert paths["10.255.0.5/32"].bier == attr
    assert paths["10.255.0.6/32"] is view["10.255.0.6/32"]


def test_a_malformed_attribute_spoils_only_its_own_route() -> None:
    good = BierAttribute((BierTlv(sub_domain_id=0, bfr_id=3),)).encode().hex()
    view = {
        "10.255.0.3/32": (["10.0.0.1"], good),
        "10.255.0.4/32": (["10.0.0.1"], "0001 0010 00"),  # not hex
        "10.255.0.5/32": (["10.0.0.1"], "000100100000050000"),  # BIER TLV Length overruns
    }
    paths, problems = bgp_paths(view)
    assert paths["10.255.0.3/32"].bier is not None
    assert paths["10.255.0.4/32"] == BgpPath(("10.0.0.1",), None)
    assert paths["10.255.0.5/32"] == BgpPath(("10.0.0.1",), None)
    assert len(problems) == 2 and all("malformed BIER attribute ignored" in p for p in problems)
    assert "10.255.0.5/32" in problems[1] and "overruns" in problems[1]
    assert birt_from_bgp(7, 0, paths, {"10.0.0.1": "s1"}).birt == {3: ["s1"]}


@pytest.mark.parametrize("node", ["leaf1", "spine2", "h3"])
def test_birt_from_bgp_equals_the_static_plan_birt(node: str) -> None:
    static = leaf_spine("static")
    bgp = leaf_spine("bgp")
    assert bgp[node].bier.bift == "bgp" and bgp[node].bier.birt == {}
    assert bgp[node].bier.si_count == static[node].bier.si_count == 1
    addresses = {str(n.address): n.name for n in bgp[node].bier.neighbors}
    result = birt_from_bgp(bgp[node].bier.bfr_id, 0, bgp_view(static, node), addresses)
    assert result.problems == []
    assert result.birt == static[node].bier.birt
    # And therefore identical BIFTs, through the same build_tables the static mode uses.
    assert repr(build_tables(bgp[node].bier, result.birt)[0]) == repr(build_tables(static[node].bier)[0])


def test_spine_failure_moves_every_remote_bfer_to_the_other_spine() -> None:
    static = leaf_spine("static")
    leaf1 = leaf_spine("bgp")["leaf1"].bier
    addresses = {str(n.address): n.name for n in leaf1.neighbors}
    before = birt_from_bgp(leaf1.bfr_id, 0, bgp_view(static, "leaf1"), addresses).birt
    after = birt_from_bgp(leaf1.bfr_id, 0, bgp_view(static, "leaf1", frozenset({"spine1"})), addresses).birt
    by_id = {c.bier.bfr_id: name for name, c in static.items() if c.bier}
    h3 = static["h3"].bier.bfr_id
    assert before[h3] == ["spine1", "spine2"]
    assert after[h3] == ["spine2"]
    assert by_id[static["spine1"].bier.bfr_id] == "spine1" and static["spine1"].bier.bfr_id not in after
    assert all("spine1" not in hops for hops in after.values())
    # Forwarding to every host behind other leaves now leaves through spine2 only.
    bifts, _n, _l = build_tables(leaf1, after)
    remote = [static[h].bier.bfr_id for h in ("h3", "h4", "h5", "h6", "h7", "h8")]
    bits = sum(1 << (i - 1) for i in remote)
    copies = forward(bifts[0], bits, 64, entropy=3).copies
    assert [(nbr, bs) for nbr, bs, _label in copies] == [("spine2", bits)]


def _tlv_path(bfr_id: int, nexthops: tuple[str, ...], sd: int = 0) -> BgpPath:
    return BgpPath(nexthops, BierAttribute((BierTlv(sub_domain_id=sd, bfr_id=bfr_id),)))


def test_ignored_routes_are_reported_not_guessed() -> None:
    addresses = {"10.0.0.1": "s1", "10.0.0.3": "s2"}
    routes = {
        "10.255.0.9/32": _tlv_path(4, ("10.0.0.1",)),
        "10.255.0.2/32": _tlv_path(4, ("10.0.0.3",)),  # same BFR-ID: the lower prefix wins
        "10.255.0.3/32": _tlv_path(7, ("10.0.0.1",)),  # our own BFR-ID from elsewhere
        "10.255.0.4/32": _tlv_path(8, ("10.0.0.1", "192.0.2.1")),  # one next hop is no BFR
        "10.255.0.5/32": _tlv_path(0, ("10.0.0.1",)),  # BFR-ID 0: no BFR-ID configured
        "10.255.0.6/32": _tlv_path(9, ("10.0.0.1",), sd=1),  # another sub-domain
        "10.255.0.7/32": BgpPath(("10.0.0.1",)),  # a plain route
        "10.255.0.8/32": _tlv_path(10, ("192.0.2.1",)),  # reachable only through a non-BFR
    }
    result = birt_from_bgp(7, 0, routes, addresses)
    assert result.birt == {4: ["s2"], 8: ["s1"]}
    assert result.prefixes == {4: "10.255.0.2/32", 8: "10.255.0.4/32", 10: "10.255.0.8/32"}
    text = "\n".join(result.problems)
    assert "10.255.0.9/32 advertises BFR-ID 4, already advertised by 10.255.0.2/32" in text
    assert "10.255.0.3/32 advertises BFR-ID 7, which is this BFR's own" in text
    assert "next hop 192.0.2.1 is not a BFR neighbour" in text
    assert len(result.problems) == 4


@st.composite
def graphs(draw):
    n = draw(st.integers(2, 8))
    nodes = [f"n{i}" for i in range(n)]
    edges = draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes)), max_size=16))
    edges = [(a, b) for a, b in edges if a != b]
    ids = draw(st.permutations(range(1, n + 1)))
    return undirected(edges, nodes), dict(zip(nodes, ids, strict=True))


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_property_bgp_with_shortest_multipaths_gives_the_static_birt(graph) -> None:
    """If BGP's multipath next hops are the equal-cost shortest paths (RFC 7938 in a Clos), the BIRT
    derived from BGP is exactly the one the static plan computes."""
    adjacency, bfr_ids = graph
    static = compute_birts(adjacency, bfr_ids)
    addr = {node: f"10.0.{i}.1" for i, node in enumerate(adjacency)}
    for node, birt in static.items():
        routes = {}
        for dest, bfr_id in bfr_ids.items():
            hops = birt[bfr_id]
            if dest == node or hops == ("<null>",):
                continue
            routes[f"10.255.0.{bfr_id}/32"] = _tlv_path(bfr_id, tuple(addr[h] for h in hops))
        got = birt_from_bgp(bfr_ids[node], 0, routes, {addr[v]: v for v in adjacency[node]})
        expected = {i: list(h) for i, h in birt.items() if h not in (("<self>",), ("<null>",))}
        assert got.birt == expected and got.problems == []


def test_dataplane_swaps_in_bgp_tables_and_rejects_inconsistent_ones() -> None:
    from aidcnet.agent.bier.dataplane import BierDataplane

    static = leaf_spine("static")
    leaf1 = leaf_spine("bgp")["leaf1"].bier
    addresses = {str(n.address): n.name for n in leaf1.neighbors}
    bifts, neighbors, labels = build_tables(leaf1, {})
    dp = BierDataplane(leaf1.bfr_id, leaf1.bsl, 0, bifts, neighbors, labels, bind_addr="127.0.0.1", port=0)
    try:
        h3 = static["h3"].bier.bfr_id
        assert dp.bifts[0].entries[h3] is None  # nothing learned yet: h3's bit has no row
        birt = birt_from_bgp(leaf1.bfr_id, 0, bgp_view(static, "leaf1"), addresses).birt
        new_bifts, _n, new_labels = build_tables(leaf1, birt)
        dp.set_bifts(new_bifts, new_labels)
        assert {nbr for _f, nbr, _l in dp.bifts[0].entries[h3]} == {"spine1", "spine2"}
        label = new_labels[(0, leaf1.bsl, 0)]
        assert dp.tables[label] is dp.bifts[0]
        with pytest.raises(ValueError, match="no local BIER-MPLS label"):
            dp.set_bifts(new_bifts, {})
        # The failed swap changed nothing.
        assert dp.tables[label] is dp.bifts[0] and dp.bifts[0] is new_bifts[0]
    finally:
        dp.close()


def test_bier_service_apply_bgp_rebuilds_only_on_change(monkeypatch) -> None:
    import functools

    import aidcnet.agent.bier.service as svc
    from aidcnet.agent.bier.dataplane import BierDataplane

    # The service's own dataplane, on an ephemeral loopback port instead of UDP 6635.
    monkeypatch.setattr(svc, "BierDataplane", functools.partial(BierDataplane, bind_addr="127.0.0.1", port=0))
    static = leaf_spine("static")
    spine1 = leaf_spine("bgp")["spine1"].bier  # a spine: no host ports, so no raw sockets
    service = svc.BierService(spine1, host=False)
    try:
        h3 = static["h3"].bier.bfr_id
        assert service.bift_rows()["bift_mode"] == "bgp" and service.bifts[0].entries[h3] is None
        view = {
            p: (list(path.nexthops), path.bier.encode().hex())
            for p, path in bgp_view(static, "spine1").items()
        }
        assert service.apply_bgp(view) is True
        assert {nbr for _f, nbr, _l in service.dataplane.bifts[0].entries[h3]} == {"leaf2"}
        assert service.apply_bgp(view) is False  # same best paths: nothing rebuilt
        view["10.255.99.1/32"] = (["10.0.0.0"], "zz")
        assert service.apply_bgp(view) is False
        assert service.bift_rows()["bgp_problems"] == [
            "10.255.99.1/32: malformed BIER attribute ignored: non-hexadecimal number found in fromhex() "
            "arg at position 0"
        ]
        rows = service.bift_rows()
        assert rows["bgp_prefixes"][str(h3)] == str(static["h3"].loopback.network)
    finally:
        service.close()


@pytest.mark.parametrize("bgp_first", [True, False])
def test_fast_reroute_keeps_the_rows_bgp_loses_to_a_dead_link_on_the_bypass(
    monkeypatch, bgp_first: bool
) -> None:
    """spine1 over BGP loses leaf1: BGP withdraws the hosts behind leaf1 (no other path: back through
    another leaf meets the spines' own AS), and whether the agent hears that before or after the carrier,
    their rows keep leaf1 through the bypass for BGP_BYPASS_HOLD_S; a row BGP gives again wins."""
    import functools
    import time

    import aidcnet.agent.bier.service as svc
    from aidcnet.agent.bier.dataplane import BierDataplane

    monkeypatch.setattr(svc, "BierDataplane", functools.partial(BierDataplane, bind_addr="127.0.0.1", port=0))
    static = leaf_spine("static")
    spine1 = leaf_spine("bgp")["spine1"].bier
    port = next(n.interface for n in spine1.neighbors if n.name == "leaf1")
    h1 = static["h1"].bier.bfr_id

    def view(dead: frozenset[str] = frozenset()) -> dict:
        return {
            p: (list(x.nexthops), x.bier.encode().hex()) for p, x in bgp_view(static, "spine1", dead).items()
        }

    def h1_hops() -> list[str] | None:
        alts = service.dataplane.bifts[0].entries[h1]
        return None if alts is None else [nbr for _f, nbr, _l in alts]

    service = svc.BierService(spine1, host=False)
    try:
        service.apply_bgp(view())
        assert h1_hops() == ["leaf1"] and service.dataplane.bypassed == []
        steps = [
            lambda: service.apply_bgp(view(frozenset({"leaf1"}))),
            lambda: service.links_down(frozenset({port})),
        ]
        for step in steps if bgp_first else steps[::-1]:
            step()
        assert h1_hops() == ["leaf1"] and service.dataplane.bypassed == ["leaf1"]
        assert service.bgp_birt is not None and h1 not in service.bgp_birt.birt  # BGP's own view: gone
        # not for ever: after the hold the row goes with BGP's (the others have moved off spine1 by then,
        # and a leaf1 that died whole is behind no bypass)
        assert service.hold_expired(now=time.monotonic() + svc.BGP_BYPASS_HOLD_S / 2) is False
        assert service.hold_expired(now=time.monotonic() + svc.BGP_BYPASS_HOLD_S) is True
        assert h1_hops() is None and service.dataplane.bypassed == []
        # the link back: BGP again, and the bypass off
        service.links_down(frozenset())
        service.apply_bgp(view())
        assert h1_hops() == ["leaf1"] and service.dataplane.bypassed == []
    finally:
        service.close()
    # without fast reroute the row goes with BGP's withdrawal
    plain = svc.BierService(spine1.model_copy(update={"bypass": {}, "adjacency_labels": {}}), host=False)
    try:
        service = plain
        plain.apply_bgp(view())
        plain.links_down(frozenset({port}))
        plain.apply_bgp(view(frozenset({"leaf1"})))
        assert h1_hops() is None
    finally:
        plain.close()


def test_rows_kept_for_bypass() -> None:
    from aidcnet.bier.fast_reroute import rows_kept_for_bypass

    bypasses = {"leaf1": {"leaf2"}, "leaf3": {"leaf1"}}  # each one's tunnels' first hops
    last = {1: ["leaf1"], 2: ["leaf1", "leaf4"], 3: ["leaf3"], 4: ["leaf4"]}
    birt = {4: ["leaf4"]}
    # 1 and 2 were lost through leaf1: kept on it; 3's bypass leaves through leaf1, down too: not kept
    assert rows_kept_for_bypass(birt, last, {"leaf1", "leaf3"}, bypasses) == {
        4: ["leaf4"],
        1: ["leaf1"],
        2: ["leaf1"],
    }
    assert rows_kept_for_bypass(birt, last, set(), bypasses) == birt
    # a row the underlay gives again is the underlay's
    assert rows_kept_for_bypass({1: ["leaf9"]}, last, {"leaf1"}, bypasses)[1] == ["leaf9"]
    # node protection: one tunnel of leaf3's whose first hop is up is enough to keep its row
    assert rows_kept_for_bypass(birt, last, {"leaf1", "leaf3"}, {"leaf3": {"leaf1", "leaf4"}})[3] == ["leaf3"]
