"""Plan feature bgp: sessions per link on the plan's ASNs, FARE settings, and what the node files carry."""

from __future__ import annotations

import pytest

from aidcnet.config import parse_config
from orchestrator.configure.plan import PlanError, build_plan, node_config
from orchestrator.lab.topology import load_topology
from tests.unit.orchestrator.configure.test_plan import LABS, lab_vars, leaf_spine_doc, plan_of

SUPERPOD_BGP = {"bandwidth": {"host": "800G", "host_sublinks": 2}, "planes": 4, "bgp": {"enabled": True}}


@pytest.fixture(scope="module")
def superpod():
    return build_plan(load_topology(LABS / "superpod.clab.yml"), lab_vars(SUPERPOD_BGP))


def test_gpu_host_has_one_session_per_plane_and_no_static_routes(superpod) -> None:
    g1 = node_config(superpod, "G1")
    assert g1.routes == []
    assert g1.bgp.transit is False and g1.bgp.mode == "per-flow" and g1.bgp.link_bandwidth == "transitive"
    assert [(n.name, n.interface) for n in g1.bgp.neighbors] == [(f"L{p}", f"eth{p}") for p in range(1, 5)]
    assert [n.asn for n in g1.bgp.neighbors] == [superpod.nodes[f"L{p}"].asn for p in range(1, 5)]
    eth1 = next(i for i in g1.interfaces if i.name == "eth1")
    # Sessions on the link addresses, both ends agreeing.
    assert g1.bgp.neighbors[0].local_address == eth1.ipv4.ip
    assert eth1.bandwidth_bps == 800e9
    l1 = node_config(superpod, "L1")
    assert len(l1.bgp.neighbors) == 64 and l1.bgp.transit is True
    back = next(n for n in l1.bgp.neighbors if n.name == "G1")
    assert back.address == eth1.ipv4.ip and back.asn == superpod.nodes["G1"].asn
    # The node file round-trips through the agent's own parser.
    assert parse_config(g1.model_dump(mode="json")) == g1


def test_disabled_by_default_keeps_static_routes_and_only_the_asn() -> None:
    plan = build_plan(load_topology(LABS / "superpod.clab.yml"), lab_vars({"planes": 4}))
    g1 = node_config(plan, "G1")
    assert g1.routes and g1.bgp.neighbors == [] and g1.bgp.asn == plan.nodes["G1"].asn


def test_settings_from_vars() -> None:
    plan = plan_of(
        leaf_spine_doc(2, 2, 1),
        {"bgp": {"enabled": True, "mode": "per-packet", "link_bandwidth": "non-transitive", "hold_time": 30}},
    )
    cfg = node_config(plan, "h1")
    assert (cfg.bgp.mode, cfg.bgp.link_bandwidth, cfg.bgp.hold_time) == ("per-packet", "non-transitive", 30)
    # Leaf-spine: spines share one ASN (RFC 7938), a leaf peers with each spine.
    spines = [n for n in node_config(plan, "leaf1").bgp.neighbors if n.name.startswith("spine")]
    assert len(spines) == 2 and len({n.asn for n in spines}) == 1


def test_bier_over_bgp_turns_bgp_on_and_refuses_a_contradiction() -> None:
    plan = plan_of(leaf_spine_doc(1, 2, 1), {"bier": {"bift": "bgp"}})
    assert plan.bgp.enabled and node_config(plan, "leaf1").bgp.neighbors
    with pytest.raises(PlanError, match=r"bgp.enabled = False contradicts .*bier.bift = bgp"):
        plan_of(leaf_spine_doc(1, 2, 1), {"bier": {"bift": "bgp"}, "bgp": {"enabled": False}})


def test_bad_mode_names_the_key() -> None:
    with pytest.raises(Exception, match="mode"):
        lab_vars({"bgp": {"mode": "per-byte"}})


def test_one_end_of_each_agent_session_connects(superpod) -> None:
    """docs/fare.md "Who connects": the switch towards a GPU host, the higher BGP Identifier between
    switches; the other end only listens."""
    leaf_spine = plan_of(leaf_spine_doc(2, 2, 1), {"bgp": {"enabled": True}})
    host_ends = switch_ends = 0
    for plan in (superpod, leaf_spine):
        ends = {
            (name, n.name): n.passive
            for name in plan.nodes
            if (cfg := node_config(plan, name)).bgp is not None
            for n in cfg.bgp.neighbors
        }
        for (node, peer), passive in ends.items():
            assert passive != ends[(peer, node)], f"{node}-{peer}: both ends {passive=}"
            roles = (plan.nodes[node].role, plan.nodes[peer].role)
            if "gpu-host" in roles:
                assert passive == (roles[0] == "gpu-host"), (node, peer)
                host_ends += 1
            else:
                assert passive == (plan.nodes[node].loopback.ip < plan.nodes[peer].loopback.ip), (node, peer)
                switch_ends += 1
    assert host_ends and switch_ends


def test_sessions_with_third_party_speakers_keep_our_end_connecting(tmp_path) -> None:
    import yaml

    from orchestrator.configure.plan import node_configs
    from orchestrator.paths import ROOT

    path = tmp_path / "superpod-peers.clab.yml"
    path.write_text((ROOT / "labs" / "superpod-peers.clab.yml").read_text())
    peers_vars = yaml.safe_load((ROOT / "labs" / "superpod-peers.vars.yml").read_text()) or {}
    plan = build_plan(load_topology(path), lab_vars(peers_vars))
    configs = node_configs(plan)
    third_party = {"frr", "gobgp", "bird"}
    sessions = [n for c in configs.values() if c.bgp for n in c.bgp.neighbors]
    toward = [n for n in sessions if configs[n.name].role in third_party]
    assert toward and not any(n.passive for n in toward)
