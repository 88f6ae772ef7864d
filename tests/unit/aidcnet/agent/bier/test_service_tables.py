"""The agent's BIER tables come straight from the plan's node file: labels, neighbors and BIFTs."""

from __future__ import annotations

from aidcnet.agent.bier.service import build_tables, si_count
from aidcnet.bier.forwarding import forward
from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS as LABS_DIR

LABS = LABS_DIR


def configs(lab: str, bsl: int | None = None):
    topo = load_topology(LABS / f"{lab}.clab.yml")
    lab_vars = LabVars.model_validate({"bier": {"bsl": bsl}} if bsl else {})
    return node_configs(build_plan(topo, lab_vars))


def test_leaf_tables_replicate_to_both_hosts_and_one_spine():
    leaf1 = configs("leaf-spine")["leaf1"].bier
    bifts, neighbors, local_labels = build_tables(leaf1)
    assert neighbors["h1"][1] == "eth3" and local_labels == {(0, 256, 0): leaf1.label_base}
    # BitString for h1, h2 and h3: h1 and h2 are direct neighbours, h3 sits behind a spine.
    result = forward(bifts[0], 0b111, 64, entropy=7)
    by_nbr = {nbr: bits for nbr, bits, _label in result.copies}
    assert by_nbr["h1"] == 0b001 and by_nbr["h2"] == 0b010
    spine = next(n for n in by_nbr if n.startswith("spine"))
    assert by_nbr[spine] == 0b100
    spine_cfg = configs("leaf-spine")[spine].bier
    assert {label for _n, _b, label in result.copies if _n == spine} == {spine_cfg.label_base}


def test_bsl_64_superpod_uses_two_sis():
    gpu = configs("superpod", bsl=64)["G1"].bier
    assert si_count(gpu) == 2
    bifts, _neighbors, local_labels = build_tables(gpu)
    assert set(bifts) == {0, 1}
    assert local_labels == {(0, 64, 0): gpu.label_base, (0, 64, 1): gpu.label_base + 1}


def test_a_static_bift_forwards_around_a_dead_spine_link_and_back(monkeypatch):
    import functools

    import aidcnet.agent.bier.service as svc
    from aidcnet.agent.bier.dataplane import BierDataplane

    monkeypatch.setattr(svc, "BierDataplane", functools.partial(BierDataplane, bind_addr="127.0.0.1", port=0))
    # leaf1 without host ports (no raw sockets here): rows toward other leaves' hosts keep both spines.
    leaf1 = configs("leaf-spine")["leaf1"].bier.model_copy(
        update={"host_ports": [], "edge_policy": {}, "dataplane": "python"}
    )
    service = svc.BierService(leaf1, host=False)
    spine1_port = next(n.interface for n in leaf1.neighbors if n.name == "spine1")
    everyone = (1 << 8) - 1  # h1..h8

    def next_hops() -> set[str]:
        """Where copies go over many flows' entropies."""
        bift = service.dataplane.bifts[0]
        return {nbr for e in range(32) for nbr, _b, _l in forward(bift, everyone, 64, entropy=e).copies}

    try:
        assert next_hops() == {"h1", "h2", "spine1", "spine2"}
        assert service.links_down(frozenset({spine1_port})) is True
        assert next_hops() == {"h1", "h2", "spine2"}
        copies = forward(service.dataplane.bifts[0], everyone, 64, entropy=7).copies
        assert sum(bin(bits).count("1") for _n, bits, _l in copies) == 8  # every host still gets its copy
        assert service.links_down(frozenset({spine1_port})) is False  # the same state: nothing rebuilt
        assert service.links_down(frozenset()) is True and service.static_birt == dict(leaf1.birt)
        assert service.rerouted == 2
    finally:
        service.close()


def test_a_spine_with_no_way_around_switches_its_dead_links_copies_to_the_bypass(monkeypatch):
    """spine1's only next hop toward the hosts of leaf1 is leaf1: with that link down, their rows have no
    alternative, so fast reroute turns on the plan's bypass (over leaf2 and spine2) and they keep leaf1 (the
    row of spine2, reached over every leaf, drops leaf1 as before)."""
    import functools

    import aidcnet.agent.bier.service as svc
    from aidcnet.agent.bier.dataplane import BierDataplane

    monkeypatch.setattr(svc, "BierDataplane", functools.partial(BierDataplane, bind_addr="127.0.0.1", port=0))
    cfgs = configs("leaf-spine")
    spine1 = cfgs["spine1"].bier.model_copy(update={"edge_policy": {}, "dataplane": "python"})
    assert spine1.bypass["leaf1"].via == "leaf2"
    assert spine1.bypass["leaf1"].labels == [
        cfgs["leaf2"].bier.adjacency_labels["spine2"],
        cfgs["spine2"].bier.adjacency_labels["leaf1"],
    ]
    port = next(n.interface for n in spine1.neighbors if n.name == "leaf1")
    service = svc.BierService(spine1, host=False)
    try:
        h1, h2 = cfgs["h1"].bier.bfr_id, cfgs["h2"].bier.bfr_id
        assert service.links_down(frozenset({port})) is True
        assert service.dataplane.bypassed == ["leaf1"]
        rows = dict(service.dataplane.bifts[0].rows())
        assert [nbr for _fbm, nbr in rows[h1] + rows[h2]] == ["leaf1", "leaf1"]
        assert "leaf1" not in {nbr for _fbm, nbr in rows[cfgs["spine2"].bier.bfr_id]}
        assert service.bift_rows()["fast_reroute"]["on"] == ["leaf1"]
        assert service.links_down(frozenset({port})) is False
        assert service.links_down(frozenset()) is True and service.dataplane.bypassed == []
        assert (service.bypass_switches, service.rerouted) == (2, 2)
    finally:
        service.close()
    # off in the plan: no bypass, and the dead link's copies are lost as before
    plain = spine1.model_copy(update={"bypass": {}, "adjacency_labels": {}})
    service = svc.BierService(plain, host=False)
    try:
        service.links_down(frozenset({port}))
        assert service.dataplane.bypassed == [] and service.bypass_switches == 0
    finally:
        service.close()


def test_the_wire_format_docs_bypass_example_is_what_the_plan_gives_spine1():
    """docs/bier-wire-format.md, "A fast-reroute bypass": the bytes it prints for spine1's bypass to leaf1."""
    from aidcnet.bier.fast_reroute import push
    from aidcnet.bier.mpls import encode_lse

    cfgs = configs("leaf-spine")
    bypass = cfgs["spine1"].bier.bypass["leaf1"]
    assert (bypass.via, bypass.labels, cfgs["leaf1"].bier.label_base) == ("leaf2", [45, 58], 24)
    assert push(bypass.labels).hex(" ") == "00 02 d0 40 00 03 a0 40"
    assert encode_lse(24, 0, 1, 63).hex(" ") == "00 01 81 3f"


def test_the_wire_format_docs_node_protection_example_is_what_the_plan_gives_r1():
    """docs/bier-wire-format.md, "Node protection": the bytes it prints for r1's tunnel to r3 round r2."""
    from aidcnet.bier.fast_reroute import push
    from aidcnet.bier.mpls import encode_lse

    cfgs = configs("ring5")
    (tunnel,) = cfgs["r1"].bier.nnh_bypass["r2"]
    assert (tunnel.nnh, tunnel.via, tunnel.labels, tunnel.bfr_ids) == ("r3", "r5", [45, 41], [3, 8])
    assert (cfgs["h3"].bier.bfr_id, cfgs["r3"].bier.bfr_id, tunnel.label_base) == (3, 8, 23)
    assert push(tunnel.labels).hex(" ") == "00 02 d0 40 00 02 90 40"
    assert encode_lse(23, 0, 1, 63).hex(" ") == "00 01 71 3f"


def test_the_bypasses_are_planned_once_and_read_back_from_plan_yml(tmp_path):
    """The plan computes every BFR's adjacency labels and bypasses (they depend on the whole lab), and a node
    file made from plan.yml read back carries the same ones; with fast reroute off the plan has none."""
    from orchestrator.configure.plan import read_plan, write_plan

    topo = load_topology(LABS / "leaf-spine.clab.yml")
    plan = build_plan(topo, LabVars.model_validate({}))
    assert plan.nodes["spine1"].bier_bypass["leaf1"].labels == [45, 58]
    write_plan(plan, tmp_path / "plan.yml")
    again = node_configs(read_plan(tmp_path / "plan.yml"))
    for name, cfg in node_configs(plan).items():
        if cfg.bier is not None:
            assert (again[name].bier.bypass, again[name].bier.adjacency_labels) == (
                cfg.bier.bypass,
                cfg.bier.adjacency_labels,
            ), name
    ring = build_plan(load_topology(LABS / "ring5.clab.yml"), LabVars.model_validate({}))
    write_plan(ring, tmp_path / "ring.yml")
    assert (
        node_configs(read_plan(tmp_path / "ring.yml"))["r1"].bier.nnh_bypass
        == ring.nodes["r1"].bier_nnh_bypass
    )
    assert ring.nodes["r1"].bier_nnh_bypass["r2"]
    off = build_plan(topo, LabVars.model_validate({"bier": {"fast_reroute": False}}))
    assert not any(n.bier_bypass or n.bier_adjacency_labels or n.bier_nnh_bypass for n in off.nodes.values())


def test_the_ring_plans_node_protection_and_a_dead_neighbour_switches_it_on(monkeypatch):
    """On labs/ring.clab.yml r1 reaches r3 and h3 over r2 alone: the plan gives r1 a tunnel to r3 round
    the other side (r5, r4) for their BFR-ids, and r2 going down at r1 turns it on beside r2's link bypass."""
    import functools

    import pytest

    import aidcnet.agent.bier.service as svc
    from aidcnet.agent.bier.dataplane import BierDataplane
    from aidcnet.config import Bier

    monkeypatch.setattr(svc, "BierDataplane", functools.partial(BierDataplane, bind_addr="127.0.0.1", port=0))
    cfgs = configs("ring5")
    # no host port: the network-BIER edge wants a real interface for it, and this test is the transit
    r1 = cfgs["r1"].bier.model_copy(
        update={"edge_policy": {}, "dataplane": "python", "host_ports": [], "flows": [], "members": []}
    )
    (to_r3,) = r1.nnh_bypass["r2"]
    assert (to_r3.nnh, to_r3.via, to_r3.label_base) == ("r3", "r5", cfgs["r3"].bier.label_base)
    assert to_r3.labels == [cfgs["r5"].bier.adjacency_labels["r4"], cfgs["r4"].bier.adjacency_labels["r3"]]
    assert to_r3.bfr_ids == sorted([cfgs["r3"].bier.bfr_id, cfgs["h3"].bier.bfr_id])
    # no BFR on leaf-spine, the superpod or regional has a row that needs one
    assert not any(
        c.bier and c.bier.nnh_bypass for lab in ("leaf-spine", "regional") for c in configs(lab).values()
    )
    port = next(n.interface for n in r1.neighbors if n.name == "r2")
    service = svc.BierService(r1, host=False)
    try:
        assert service.links_down(frozenset({port})) is True
        assert service.dataplane.bypassed == ["r2"] and service.active_nnh["r2"][0].nnh == "r3"
        assert service.bift_rows()["fast_reroute"]["nnh_bypass"]["r2"][0]["via"] == "r5"
        assert service.links_down(frozenset()) is True and service.dataplane.bypassed == []
    finally:
        service.close()
    # a node file whose tunnel leaves through the node it protects, or gives a BFR-id to two, is refused
    bad = r1.model_dump()
    bad["nnh_bypass"]["r2"][0]["via"] = "r2"
    with pytest.raises(ValueError, match="must avoid r2"):
        Bier.model_validate(bad)
    bad = r1.model_dump()
    bad["nnh_bypass"]["r2"].append({**bad["nnh_bypass"]["r2"][0], "nnh": "r4"})
    with pytest.raises(ValueError, match="sent to two next-next hops"):
        Bier.model_validate(bad)
    bad = r1.model_dump()
    bad["nnh_bypass"]["r2"][0]["labels"] = []
    with pytest.raises(ValueError, match="pushes labels exactly when"):
        Bier.model_validate(bad)
