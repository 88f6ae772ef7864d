"""The lab plan on the shipped labs and small synthetic ones: allocation rules, pins, routes, configs."""

from __future__ import annotations

import ipaddress
import itertools
import random
from functools import cache
from typing import Any

import pytest
import yaml

from aidcnet.config import parse_config
from orchestrator.configure.plan import (
    LabPlan,
    LabVars,
    PlanError,
    build_plan,
    dump_plan,
    load_vars,
    node_configs,
    vars_path_for,
    write_plan,
)
from orchestrator.configure.plan.context import load_defaults, natural_sorted
from orchestrator.lab.topology import Topology, load_topology, parse_topology
from orchestrator.paths import LABS as LABS_DIR

LABS = LABS_DIR
VARS_FILE = "labs/x.vars.yml"

# --- helpers shared with test_plan_conflicts.py and test_plan_properties.py --------------------------


def leaf_spine_doc(spines: int, leaves: int, hosts_per_leaf: int, seed: int | None = None) -> dict[str, Any]:
    """A containerlab document of a 3-stage leaf-spine; ``seed`` shuffles the link list."""
    nodes: dict[str, Any] = {}
    links: list[dict[str, Any]] = []
    for s in range(1, spines + 1):
        nodes[f"spine{s}"] = {"group": "switch"}
    for leaf in range(1, leaves + 1):
        nodes[f"leaf{leaf}"] = {"group": "switch"}
        for s in range(1, spines + 1):
            links.append({"endpoints": [f"leaf{leaf}:eth{s}", f"spine{s}:eth{leaf}"]})
    h = 0
    for leaf in range(1, leaves + 1):
        for port in range(hosts_per_leaf):
            h += 1
            nodes[f"h{h}"] = {"group": "gpu"}
            links.append({"endpoints": [f"h{h}:eth1", f"leaf{leaf}:eth{spines + 1 + port}"]})
    if seed is not None:
        random.Random(seed).shuffle(links)
    return {
        "name": "x",
        "topology": {
            "defaults": {"kind": "linux"},
            "groups": {
                "switch": {"image": "aidclab/bfr:latest"},
                "gpu": {"image": "aidclab/gpu-host:latest"},
                "frr": {"image": "quay.io/frrouting/frr:9.1.0", "labels": {"aidclab-role": "frr"}},
                "plain": {"image": "alpine:3"},
            },
            "nodes": nodes,
            "links": links,
        },
    }


def topo_of(doc: dict[str, Any]) -> Topology:
    return parse_topology(doc, "labs/x.clab.yml")


def lab_vars(doc: dict[str, Any] | None = None) -> LabVars:
    return LabVars.model_validate(doc or {}).with_source(VARS_FILE)


def plan_of(doc: dict[str, Any], vars_doc: dict[str, Any] | None = None) -> LabPlan:
    return build_plan(topo_of(doc), lab_vars(vars_doc))


def fresh(name: str) -> LabPlan:
    return build_plan(load_topology(LABS / f"{name}.clab.yml"))


@cache
def lab(name: str) -> LabPlan:
    """Shared by the read-only tests: the superpod plan takes a fraction of a second to build."""
    return fresh(name)


def route_to(plan: LabPlan, src: str, dst: str):
    matches = [r for r in plan.nodes[src].routes if r.to == dst]
    assert len(matches) <= 1
    return matches[0] if matches else None


def address_of(plan: LabPlan, node: str, neighbor: str) -> list[ipaddress.IPv4Address]:
    """``neighbor``'s addresses on the links between ``node`` and ``neighbor``."""
    out = []
    for link in plan.links:
        for mine, theirs in ((link.a, link.b), (link.b, link.a)):
            if mine.node == node and theirs.node == neighbor:
                assert theirs.address is not None
                out.append(theirs.address.ip)
    return out


# --- determinism --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["leaf-spine", "ina-fig1", "superpod"])
def test_dump_is_byte_identical_across_runs(name):
    first = dump_plan(fresh(name))
    second = dump_plan(fresh(name))
    assert first == second
    if name != "superpod":  # 1.2 MB of YAML: parsing it back costs more than it tells
        # Round trip: the dump is the plan, not a lossy summary of it.
        assert LabPlan.model_validate(yaml.load(first, Loader=yaml.CSafeLoader)) == lab(name)


def test_link_order_does_not_change_node_allocations():
    ordered = plan_of(leaf_spine_doc(2, 4, 2))
    for seed in range(5):
        shuffled = plan_of(leaf_spine_doc(2, 4, 2, seed=seed))
        assert shuffled.links != ordered.links
        for name, node in ordered.nodes.items():
            other = shuffled.nodes[name]
            assert (other.loopback, other.bfr_id, other.asn, other.tier) == (
                node.loopback,
                node.bfr_id,
                node.asn,
                node.tier,
            ), name


# --- addressing ---------------------------------------------------------------------------------------


def test_loopbacks_in_node_order_and_links_in_link_order_low_to_a():
    plan = lab("leaf-spine")
    names = list(plan.nodes)
    assert names[:2] == ["spine1", "spine2"]
    for i, name in enumerate(names):
        assert plan.nodes[name].loopback == ipaddress.IPv4Interface(f"10.255.0.{i + 1}/32")
    for i, link in enumerate(plan.links):
        assert link.subnet == ipaddress.IPv4Network(f"10.0.0.{2 * i}/31")
        assert link.a.address == ipaddress.IPv4Interface(f"10.0.0.{2 * i}/31")
        assert link.b.address == ipaddress.IPv4Interface(f"10.0.0.{2 * i + 1}/31")
    assert plan.links[0].a.node == "leaf1"


def test_pools_from_vars():
    plan = plan_of(
        leaf_spine_doc(1, 1, 1), {"pools": {"loopback": "192.168.7.0/24", "links": "172.16.4.0/30"}}
    )
    assert plan.nodes["spine1"].loopback == ipaddress.IPv4Interface("192.168.7.1/32")
    assert [str(link.subnet) for link in plan.links] == ["172.16.4.0/31", "172.16.4.2/31"]


# --- ASNs (RFC 7938 §5.2.1) ----------------------------------------------------------------------------


def test_leaf_spine_asn_shape():
    plan = lab("leaf-spine")
    spines = {plan.nodes[s].asn for s in ("spine1", "spine2")}
    assert spines == {65000}
    leaves = [plan.nodes[f"leaf{i}"].asn for i in range(1, 5)]
    hosts = [plan.nodes[f"h{i}"].asn for i in range(1, 9)]
    assert leaves == [65100, 65101, 65102, 65103]
    assert hosts == list(range(4200000000, 4200000008))
    assert len(set(leaves + hosts) | spines) == 4 + 8 + 1
    assert [plan.nodes[n].tier for n in ("h1", "leaf1", "spine1")] == [0, 1, 2]


def test_five_stage_clusters_get_their_own_asn():
    # ina-fig1: s5 and s6 are tier 2 in different pods; sharing an ASN would make s6 drop s5's routes
    # (AS_PATH loop), so each pod's tier-2 set has its own ASN and s7 (the top) another one.
    plan = lab("ina-fig1")
    asn = {n: plan.nodes[n].asn for n in ("s5", "s6", "s7")}
    assert asn == {"s7": 65000, "s5": 65001, "s6": 65002}
    assert [plan.nodes[n].tier for n in ("w1", "s1", "s5", "s7")] == [0, 1, 2, 3]


def test_asn_pins_honoured_and_skipped_by_automatic_numbering():
    plan = plan_of(
        leaf_spine_doc(2, 3, 1),
        {"nodes": {"spine2": {"asn": 64999}, "leaf1": {"asn": 65101}, "h3": {"asn": 4200000000}}},
    )
    # The unpinned spine follows its cluster's pinned member.
    assert plan.nodes["spine1"].asn == plan.nodes["spine2"].asn == 64999
    assert [plan.nodes[f"leaf{i}"].asn for i in (1, 2, 3)] == [65101, 65100, 65102]
    assert [plan.nodes[f"h{i}"].asn for i in (1, 2, 3)] == [4200000001, 4200000002, 4200000000]


def test_asn_ranges_from_vars():
    plan = plan_of(leaf_spine_doc(1, 2, 1), {"asn": {"leaves": {"first": 64600, "last": 64601}}})
    assert [plan.nodes["leaf1"].asn, plan.nodes["leaf2"].asn] == [64600, 64601]


# --- BIER ---------------------------------------------------------------------------------------------


def test_ina_fig1_workers_are_bits_1_to_8():
    plan = lab("ina-fig1")
    assert [plan.nodes[f"w{i}"].bfr_id for i in range(1, 9)] == list(range(1, 9))
    # Then the leaves, then the upper tiers.
    assert [plan.nodes[f"s{i}"].bfr_id for i in range(1, 8)] == list(range(9, 16))
    assert plan.bier.model_dump() == {
        "sub_domain": 0,
        "bsl": 256,
        "bift": "static",
        "dataplane": "ebpf",
        "edge_policy": True,
        "fast_reroute": True,
        "tenants": {},
        "si_count": 1,
        "groups": [],
    }


def test_leaf_spine_hosts_are_1_to_8_then_leaves_then_spines():
    plan = lab("leaf-spine")
    assert [plan.nodes[f"h{i}"].bfr_id for i in range(1, 9)] == list(range(1, 9))
    assert [plan.nodes[f"leaf{i}"].bfr_id for i in range(1, 5)] == [9, 10, 11, 12]
    assert [plan.nodes[f"spine{i}"].bfr_id for i in (1, 2)] == [13, 14]


def test_bfr_ids_follow_natural_name_order_not_file_order():
    doc = leaf_spine_doc(1, 1, 0)
    nodes = doc["topology"]["nodes"]
    for i, name in enumerate(["h10", "h2", "h1"]):
        nodes[name] = {"group": "gpu"}
        doc["topology"]["links"].append({"endpoints": [f"{name}:eth1", f"leaf1:eth{10 + i}"]})
    plan = plan_of(doc)
    assert [plan.nodes[n].bfr_id for n in ("h1", "h2", "h10")] == [1, 2, 3]
    assert natural_sorted(["G10", "G2", "G1", "L1"]) == ["G1", "G2", "G10", "L1"]


def test_superpod_gpus_first_natural_order():
    plan = lab("superpod")
    assert [plan.nodes[f"G{i}"].bfr_id for i in range(1, 65)] == list(range(1, 65))
    assert [plan.nodes[f"L{i}"].bfr_id for i in range(1, 5)] == [65, 66, 67, 68]


def test_bfr_id_pins_honoured_and_skipped():
    plan = plan_of(leaf_spine_doc(1, 2, 2), {"nodes": {"h3": {"bfr_id": 1}, "leaf1": {"bfr_id": 500}}})
    assert [plan.nodes[f"h{i}"].bfr_id for i in (1, 2, 3, 4)] == [2, 3, 1, 4]
    assert plan.nodes["leaf1"].bfr_id == 500
    assert plan.nodes["leaf2"].bfr_id == 5


def test_bier_settings_from_vars():
    bier_vars = {"sub_domain": 3, "bsl": 64, "bift": "bgp", "dataplane": "python"}
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"bier": bier_vars})
    assert plan.bier.model_dump() == {
        **bier_vars,
        "edge_policy": True,
        "fast_reroute": True,
        "tenants": {},
        "si_count": 1,
        "groups": [],
    }
    config = node_configs(plan)["h1"]
    assert config.bier is not None
    assert (config.bier.sub_domain, config.bier.bsl, config.bier.bift, config.bier.dataplane) == (
        3,
        64,
        "bgp",
        "python",
    )


def test_frr_and_linux_nodes_get_no_bfr_id_and_linux_no_config():
    doc = leaf_spine_doc(1, 1, 1)
    doc["topology"]["nodes"]["edge"] = {"group": "frr"}
    doc["topology"]["nodes"]["tap"] = {"group": "plain"}
    doc["topology"]["links"] += [
        {"endpoints": ["edge:eth1", "spine1:eth9"]},
        {"endpoints": ["tap:eth1", "leaf1:eth9"]},
    ]
    plan = plan_of(doc)
    assert plan.nodes["edge"].role == "frr" and plan.nodes["edge"].bfr_id is None
    assert plan.nodes["edge"].asn is not None and plan.nodes["edge"].loopback is not None
    assert plan.nodes["tap"].role == "linux"
    assert (plan.nodes["tap"].loopback, plan.nodes["tap"].asn, plan.nodes["tap"].bfr_id) == (None, None, None)
    configs = node_configs(plan)
    assert "tap" not in configs and "edge" in configs
    # The link to the linux node is still addressed, so the managed end has an interface.
    assert "eth9" in [i.name for i in configs["leaf1"].interfaces]
    assert all(r.to != "tap" for r in plan.nodes["leaf1"].routes)


# --- planes -------------------------------------------------------------------------------------------


def test_superpod_has_four_planes_one_leaf_each():
    plan = lab("superpod")
    assert [(p.id, p.switches) for p in plan.planes] == [(1, ["L1"]), (2, ["L2"]), (3, ["L3"]), (4, ["L4"])]
    for i in range(1, 65):
        assert plan.nodes[f"G{i}"].planes == [1, 2, 3, 4]
    for p in range(1, 5):
        assert plan.nodes[f"L{p}"].planes == [p]
    for link in plan.links:
        # Gn:ethP <-> LP:ethn: the GPU's port number is its plane.
        assert link.a.node.startswith("G") and link.plane == int(link.a.interface.removeprefix("eth"))


def test_superpod_gpu_ports_are_800g_as_two_400g_sublinks():
    plan = lab("superpod")
    assert {(x.bandwidth, x.bandwidth_bps, x.sublinks, x.sublink_bandwidth_bps) for x in plan.links} == {
        ("800G", 800_000_000_000, 2, 400_000_000_000)
    }


def test_superpod_every_gpu_has_four_interfaces():
    configs = node_configs(lab("superpod"))
    for i in range(1, 65):
        config = configs[f"G{i}"]
        assert [x.name for x in config.interfaces] == ["eth1", "eth2", "eth3", "eth4"]
        assert [x.peer for x in config.interfaces] == ["L1", "L2", "L3", "L4"]
        assert all(x.bandwidth_bps == 800e9 for x in config.interfaces)


def test_leaf_spine_is_one_plane():
    plan = lab("leaf-spine")
    assert len(plan.planes) == 1
    assert plan.planes[0].switches == ["leaf1", "leaf2", "leaf3", "leaf4", "spine1", "spine2"]


def test_planes_pinned_as_switch_lists():
    plan = plan_of(leaf_spine_doc(2, 2, 1), {"planes": [["spine2", "leaf2"], ["spine1", "leaf1"]]})
    assert [p.switches for p in plan.planes] == [["spine2", "leaf2"], ["spine1", "leaf1"]]
    assert plan.nodes["h1"].planes == [2] and plan.nodes["h2"].planes == [1]
    # leaf1-spine2 crosses planes, so it belongs to neither.
    crossing = [x for x in plan.links if {x.a.node, x.b.node} == {"leaf1", "spine2"}]
    assert crossing[0].plane is None


def test_plane_count_assertion_must_match_wiring():
    assert len(plan_of(leaf_spine_doc(2, 2, 1), {"planes": 1}).planes) == 1
    with pytest.raises(PlanError) as info:
        plan_of(leaf_spine_doc(2, 2, 1), {"planes": 4})
    msg = str(info.value)
    assert VARS_FILE in msg and "planes = 4" in msg and "labs/x.clab.yml" in msg and "different switch" in msg


# --- routes -------------------------------------------------------------------------------------------


def test_leaf_spine_full_mesh_of_loopback_routes():
    plan = lab("leaf-spine")
    assert plan.unreachable.count == 0
    for src in plan.nodes:
        assert {r.to for r in plan.nodes[src].routes} == set(plan.nodes) - {src}, src
        for route in plan.nodes[src].routes:
            assert route.prefix == plan.nodes[route.to].loopback.network


def test_leaf_spine_hosts_route_via_their_leaf():
    plan = lab("leaf-spine")
    for dst in plan.nodes:
        if dst == "h1":
            continue
        route = route_to(plan, "h1", dst)
        assert [(h.neighbor, h.dev) for h in route.nexthops] == [("leaf1", "eth1")]
        assert [h.via for h in route.nexthops] == address_of(plan, "h1", "leaf1")


def test_leaf_to_leaf_uses_both_spines():
    plan = lab("leaf-spine")
    route = route_to(plan, "leaf1", "leaf2")
    assert [h.neighbor for h in route.nexthops] == ["spine1", "spine2"]
    assert [h.via for h in route.nexthops] == address_of(plan, "leaf1", "spine1") + address_of(
        plan, "leaf1", "spine2"
    )
    # Host to a host behind another leaf: one hop to its leaf, which then has two.
    assert len(route_to(plan, "leaf1", "h3").nexthops) == 2
    # Same leaf: straight down, never over a spine.
    assert [h.neighbor for h in route_to(plan, "leaf1", "h2").nexthops] == ["h2"]


def test_superpod_gpu_to_gpu_over_all_four_planes():
    plan = lab("superpod")
    for src in (f"G{i}" for i in range(1, 65)):
        routes = {r.to: r for r in plan.nodes[src].routes}
        for dst in (f"G{i}" for i in range(1, 65)):
            if dst == src:
                continue
            hops = routes[dst].nexthops
            assert [(h.neighbor, h.dev) for h in hops] == [(f"L{p}", f"eth{p}") for p in range(1, 5)]


def test_gpu_hosts_never_transit():
    # In the superpod the leaves share no switch: leaf-to-leaf traffic would have to cross a GPU.
    plan = lab("superpod")
    assert route_to(plan, "L1", "L2") is None
    assert plan.unreachable.count == 12
    assert "L1 -> L2" in plan.unreachable.pairs
    for route in plan.nodes["L1"].routes:
        assert all(h.neighbor == route.to for h in route.nexthops)


def test_parallel_links_are_separate_next_hops():
    doc = leaf_spine_doc(1, 2, 0)
    doc["topology"]["links"].append({"endpoints": ["leaf1:eth7", "spine1:eth7"]})
    plan = plan_of(doc)
    route = route_to(plan, "leaf1", "leaf2")
    assert [(h.neighbor, h.dev) for h in route.nexthops] == [("spine1", "eth1"), ("spine1", "eth7")]


# --- node configs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["leaf-spine", "ina-fig1", "superpod"])
def test_every_node_config_validates(name):
    plan = lab(name)
    configs = node_configs(plan)
    assert set(configs) == set(plan.nodes)
    for node, config in configs.items():
        again = parse_config(config.model_dump(mode="json"), source=node)
        assert again == config
        assert again.bgp is not None and again.bgp.router_id == plan.nodes[node].loopback.ip
        assert again.bier is not None and again.bier.bfr_id == plan.nodes[node].bfr_id
        # Collapsed: every planned destination keeps its next hops, and nothing else is routed.
        routed = {ip: [(str(h.via), h.dev) for h in r.nexthops] for r in again.routes for ip in r.prefix}
        planned = {
            r.prefix.network_address: [(str(h.via), h.dev) for h in r.nexthops]
            for r in plan.nodes[node].routes
        }
        assert routed == planned, node
        assert len(again.routes) <= len(plan.nodes[node].routes)


def test_node_config_interfaces_carry_peer_mtu_and_bandwidth():
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"links": {"h1:eth1": {"bandwidth": "100G"}}})
    leaf = node_configs(plan)["leaf1"]
    by_name = {i.name: i for i in leaf.interfaces}
    assert by_name["eth1"].peer == "spine1" and by_name["eth1"].peer_interface == "eth1"
    assert by_name["eth2"].peer == "h1" and by_name["eth2"].bandwidth_bps == 100e9
    assert by_name["eth1"].bandwidth_bps == 400e9 and by_name["eth1"].mtu == 9500


# --- pins ---------------------------------------------------------------------------------------------


def test_pinned_loopback_inside_pool_is_avoided():
    plan = plan_of(leaf_spine_doc(1, 2, 1), {"nodes": {"h2": {"loopback": "10.255.0.2"}}})
    assert plan.nodes["h2"].loopback == ipaddress.IPv4Interface("10.255.0.2/32")
    assert plan.nodes["spine1"].loopback == ipaddress.IPv4Interface("10.255.0.1/32")
    assert plan.nodes["leaf1"].loopback == ipaddress.IPv4Interface("10.255.0.3/32")
    loopbacks = [n.loopback for n in plan.nodes.values()]
    assert len(set(loopbacks)) == len(loopbacks)


def test_pinned_link_subnet_from_either_end_gives_low_address_to_a():
    plan = plan_of(leaf_spine_doc(1, 2, 0), {"links": {"spine1:eth2": {"subnet": "10.0.0.0/31"}}})
    pinned = plan.links[1]
    assert (pinned.a.node, pinned.b.node) == ("leaf2", "spine1")
    assert pinned.subnet == ipaddress.IPv4Network("10.0.0.0/31")
    assert pinned.a.address == ipaddress.IPv4Interface("10.0.0.0/31")
    # The unpinned link steps over the pinned /31.
    assert plan.links[0].subnet == ipaddress.IPv4Network("10.0.0.2/31")


def test_both_ends_may_pin_the_same_value():
    pin = {"subnet": "10.9.0.0/31", "bandwidth": "25G", "sublinks": 4}
    plan = plan_of(leaf_spine_doc(1, 1, 0), {"links": {"leaf1:eth1": pin, "spine1:eth1": pin}})
    link = plan.links[0]
    assert (str(link.subnet), link.bandwidth, link.sublinks, link.sublink_bandwidth_bps) == (
        "10.9.0.0/31",
        "25G",
        4,
        6_250_000_000,
    )


def test_host_and_default_bandwidth():
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"bandwidth": {"default": "1.6T", "host": "200G"}})
    fabric, host = plan.links
    assert (fabric.bandwidth, fabric.bandwidth_bps) == ("1.6T", 1_600_000_000_000)
    assert (host.bandwidth, host.bandwidth_bps, host.sublinks) == ("200G", 200_000_000_000, 1)


# --- the vars file ------------------------------------------------------------------------------------


def test_vars_path_is_beside_the_topology():
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    assert vars_path_for(topo) == LABS / "leaf-spine.vars.yml"


def test_missing_or_empty_vars_file_means_defaults(tmp_path):
    missing = load_vars(tmp_path / "none.vars.yml")
    assert missing.model_dump() == LabVars().model_dump() and missing.source.endswith("none.vars.yml")
    empty = tmp_path / "empty.vars.yml"
    empty.write_text("# nothing pinned\n")
    assert load_vars(empty).model_dump() == LabVars().model_dump()


def test_vars_file_errors_name_file_and_field_path(tmp_path):
    path = tmp_path / "x.vars.yml"
    path.write_text("nodes:\n  h1:\n    bfr_id: one\n")
    with pytest.raises(PlanError) as info:
        load_vars(path)
    assert str(path) in str(info.value) and "nodes.h1.bfr_id" in str(info.value)
    path.write_text("pool:\n  loopback: 10.0.0.0/8\n")
    with pytest.raises(PlanError) as info:
        load_vars(path)
    assert "pool" in str(info.value) and "Extra inputs" in str(info.value)
    path.write_text("pools:\n  links: 10.0.0.1/16\n")
    with pytest.raises(PlanError, match=r"pools\.links"):
        load_vars(path)
    path.write_text("- a list\n")
    with pytest.raises(PlanError, match="must be a mapping"):
        load_vars(path)


def test_shipped_vars_files_load_and_leaf_spine_example_is_all_defaults():
    assert load_vars(LABS / "leaf-spine.vars.yml").model_dump() == LabVars().model_dump()
    superpod = load_vars(LABS / "superpod.vars.yml")
    assert superpod.planes == 4 and superpod.bandwidth.host == "800G"
    # Past the header, every commented line is a key with its default: uncommented, they must validate
    # and equal the defaults, so the example cannot drift from orchestrator/configure/plan/*.yml.
    text = (LABS / "leaf-spine.vars.yml").read_text()
    body = text.split("\n\n", 1)[1]
    uncommented = yaml.safe_load(
        "\n".join(line.removeprefix("#").removeprefix(" ") for line in body.splitlines())
    )
    assert set(uncommented) == set(LabVars.model_fields)
    # nodes, links and faults are examples (their default is none), every other key its default.
    examples = {"nodes", "links", "faults"}
    example = LabVars.model_validate({k: v for k, v in uncommented.items() if k not in examples})
    defaults = load_defaults().values
    assert example.model_dump(exclude=examples) == defaults.model_dump(exclude=examples)
    LabVars.model_validate(uncommented)


def test_build_plan_reads_the_vars_file_beside_the_topology(tmp_path):
    doc = leaf_spine_doc(1, 1, 1)
    (tmp_path / "x.clab.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "x.vars.yml").write_text("nodes:\n  h1:\n    bfr_id: 7\n")
    plan = build_plan(load_topology(tmp_path / "x.clab.yml"))
    assert plan.nodes["h1"].bfr_id == 7 and plan.vars == str(tmp_path / "x.vars.yml")


def test_write_plan_only_when_changed(tmp_path):
    plan = plan_of(leaf_spine_doc(1, 1, 1))
    out = tmp_path / "clab-x" / "plan.yml"
    assert write_plan(plan, out) is True
    assert out.read_text() == dump_plan(plan)
    assert write_plan(plan, out) is False
    assert write_plan(plan_of(leaf_spine_doc(1, 1, 2)), out) is True


def test_bier_labels_and_static_birt_follow_unicast_routes():
    from orchestrator.configure.plan import node_configs

    configs = node_configs(lab("leaf-spine"))
    leaf1, h1 = configs["leaf1"].bier, configs["h1"].bier
    assert leaf1 is not None and h1 is not None
    bases = [c.bier.label_base for c in configs.values() if c.bier]
    assert len(set(bases)) == len(bases) and min(bases) >= 16
    by_name = {n.name: n for n in leaf1.neighbors}
    assert set(by_name) == {"h1", "h2", "spine1", "spine2"}
    assert by_name["spine1"].label_base == configs["spine1"].bier.label_base
    # leaf1 reaches h3 (BFR-id 3, behind leaf2) over both spines: an ECMP BIRT entry.
    assert leaf1.birt[3] == ["spine1", "spine2"]
    assert leaf1.birt[1] == ["h1"] and leaf1.bfr_id not in leaf1.birt
    # A host reaches every other BFR through its leaf only.
    assert set(h1.birt) == set(range(2, 15)) and {tuple(v) for v in h1.birt.values()} == {("leaf1",)}


def test_bsl_64_with_more_than_64_bfrs_uses_two_sis_and_two_labels_each():
    plan = build_plan(load_topology(LABS / "superpod.clab.yml"), lab_vars({"bier": {"bsl": 64}}))
    assert plan.bier.si_count == 2
    bases = sorted(n.bier_label_base for n in plan.nodes.values() if n.bier_label_base is not None)
    assert all(b2 - b1 == 2 for b1, b2 in itertools.pairwise(bases))


def test_network_bier_groups_become_flows_and_memberships():
    from orchestrator.configure.plan import node_configs

    topo = load_topology(LABS / "leaf-spine.clab.yml")
    plan = build_plan(
        topo, lab_vars({"bier": {"groups": [{"group": "239.1.1.1", "receivers": ["h2", "h3", "h4"]}]}})
    )
    configs = node_configs(plan)
    leaf1, leaf2, leaf3 = (configs[f"leaf{i}"].bier for i in (1, 2, 3))
    assert leaf1.host_ports == ["eth3", "eth4"]
    (flow,) = leaf1.flows
    assert str(flow.group) == "239.1.1.1" and flow.source is None
    assert flow.bfers == sorted([leaf1.bfr_id, leaf2.bfr_id])
    assert [(str(m.group), m.interfaces) for m in leaf1.members] == [("239.1.1.1", ["eth4"])]  # h2 only
    assert [m.interfaces for m in leaf2.members] == [["eth3", "eth4"]]
    assert leaf3.members == [] and leaf3.flows == [flow]
    assert configs["h1"].bier.host_ports == [] and configs["spine1"].bier.host_ports == []


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"group": "10.1.1.1", "receivers": ["h1"]}, "bier.groups.0.group: 10.1.1.1 is not a routable"),
        ({"group": "224.0.0.5", "receivers": ["h1"]}, "bier.groups.0.group: 224.0.0.5 is not a routable"),
        (
            {"group": "239.1.1.1", "receivers": ["spine1"]},
            "bier.groups.0.receivers: 'spine1' is not a gpu-host",
        ),
        ({"group": "239.1.1.1", "source": "h9", "receivers": ["h1"]}, "bier.groups.0.source: 'h9' is not"),
    ],
)
def test_bad_groups_name_their_field(group, message):
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    with pytest.raises(PlanError, match=message.replace(".", r"\.")):
        build_plan(topo, lab_vars({"bier": {"groups": [group]}}))
