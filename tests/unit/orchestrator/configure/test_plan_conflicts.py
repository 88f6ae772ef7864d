"""Every plan conflict is a PlanError that names both sides of the conflict and the file(s) they are in."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from orchestrator.configure.plan import PlanError
from orchestrator.configure.plan.context import Context, Source
from tests.unit.orchestrator.configure.test_plan import VARS_FILE, lab_vars, leaf_spine_doc, plan_of, topo_of

TOPO_FILE = "labs/x.clab.yml"


def error_of(vars_doc: dict[str, Any], doc: dict[str, Any] | None = None) -> str:
    with pytest.raises(PlanError) as info:
        plan_of(doc or leaf_spine_doc(2, 2, 2), vars_doc)
    return str(info.value)


def nodes(**pins: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": pins}


def links(**pins: dict[str, Any]) -> dict[str, Any]:
    # "leaf1__eth1" stands for "leaf1:eth1", which is not a Python keyword argument.
    return {"links": {k.replace("__", ":"): v for k, v in pins.items()}}


# --- BFR-IDs ------------------------------------------------------------------------------------------


def test_duplicate_bfr_id_names_both_pins():
    msg = error_of(nodes(h1={"bfr_id": 3}, h2={"bfr_id": 3}))
    assert msg == f"{VARS_FILE}: nodes.h2.bfr_id = 3 clashes with nodes.h1.bfr_id = 3"


@pytest.mark.parametrize("bad", [0, -1, 65536, 10**6])
def test_bfr_id_outside_the_sub_domain(bad):
    msg = error_of({"bier": {"sub_domain": 2}, **nodes(h1={"bfr_id": bad})})
    assert msg.startswith(f"{VARS_FILE}: nodes.h1.bfr_id:")
    assert f"BFR-ID {bad} is outside 1..65535 of sub-domain 2" in msg


def test_bfr_id_on_a_node_that_is_not_a_bfr():
    doc = leaf_spine_doc(1, 1, 1)
    doc["topology"]["nodes"]["edge"] = {"group": "frr"}
    doc["topology"]["links"].append({"endpoints": ["edge:eth1", "spine1:eth9"]})
    msg = error_of(nodes(edge={"bfr_id": 5}), doc)
    assert msg.startswith(f"{VARS_FILE}: nodes.edge.bfr_id:") and "frr node, not a BFR" in msg


# --- addresses ----------------------------------------------------------------------------------------


def test_duplicate_loopback_pins():
    msg = error_of(nodes(h1={"loopback": "10.1.1.1"}, leaf2={"loopback": "10.1.1.1/32"}))
    # Pins are claimed in node order: leaf2 comes before h1 in the file.
    assert msg == (
        f"{VARS_FILE}: nodes.h1.loopback = 10.1.1.1/32 is the same as nodes.leaf2.loopback = 10.1.1.1/32"
    )


def test_loopback_inside_a_pinned_link_subnet():
    msg = error_of({**nodes(h1={"loopback": "10.0.0.1/32"}), **links(leaf1__eth1={"subnet": "10.0.0.0/31"})})
    assert msg == (
        f"{VARS_FILE}: nodes.h1.loopback = 10.0.0.1/32 lies inside links.leaf1:eth1.subnet = 10.0.0.0/31"
    )


def test_overlapping_link_subnet_pins_on_different_links():
    msg = error_of(links(leaf1__eth1={"subnet": "10.7.0.0/31"}, spine2__eth2={"subnet": "10.7.0.0/31"}))
    assert "links.leaf1:eth1.subnet = 10.7.0.0/31" in msg and "links.spine2:eth2.subnet = 10.7.0.0/31" in msg
    assert msg.startswith(VARS_FILE)


def test_both_ends_of_one_link_disagree():
    msg = error_of(links(leaf1__eth1={"subnet": "10.7.0.0/31"}, spine1__eth1={"subnet": "10.7.0.2/31"}))
    assert msg == (
        f"{VARS_FILE}: links.leaf1:eth1.subnet = 10.7.0.0/31 disagrees with the other end's "
        "links.spine1:eth1.subnet = 10.7.0.2/31"
    )
    msg = error_of(links(leaf1__eth1={"bandwidth": "100G"}, spine1__eth1={"bandwidth": "200G"}))
    assert "links.leaf1:eth1.bandwidth = 100G" in msg and "links.spine1:eth1.bandwidth = 200G" in msg


def with_mgmt_subnet(doc: dict[str, Any], subnet: str = "172.20.20.0/24") -> dict[str, Any]:
    """A lab whose own management subnet the file sets (left open, deploy chooses it)."""
    return {**doc, "mgmt": {"ipv4-subnet": subnet}}


def test_pin_inside_the_management_subnet_names_the_topology_file():
    msg = error_of(nodes(h1={"loopback": "172.20.20.9"}), with_mgmt_subnet(leaf_spine_doc(2, 2, 2)))
    assert msg == (
        f"{VARS_FILE}: nodes.h1.loopback = 172.20.20.9/32 lies inside mgmt.ipv4-subnet = 172.20.20.0/24 "
        f"({TOPO_FILE})"
    )


def test_pool_overlapping_the_management_subnet_is_stepped_over():
    plan = plan_of(with_mgmt_subnet(leaf_spine_doc(1, 1, 0)), {"pools": {"links": "172.20.20.0/23"}})
    assert str(plan.links[0].subnet) == "172.20.21.0/31"
    with pytest.raises(PlanError) as info:
        plan_of(with_mgmt_subnet(leaf_spine_doc(1, 2, 0)), {"pools": {"links": "172.20.20.0/24"}})
    assert str(info.value).startswith(f"{VARS_FILE}: pools.links: 172.20.20.0/24 is exhausted")


@pytest.mark.parametrize(
    ("vars_doc", "where", "what"),
    [
        (nodes(h1={"loopback": "10.1.1.0/24"}), "nodes.h1.loopback", "must be a /32"),
        (links(leaf1__eth1={"subnet": "10.1.1.0/30"}), "links.leaf1:eth1.subnet", "must be a /31"),
    ],
)
def test_wrong_prefix_lengths(vars_doc, where, what):
    msg = error_of(vars_doc)
    assert msg.startswith(f"{VARS_FILE}: {where}:") and what in msg


def test_loopback_pool_exhausted():
    # 4 + 4 nodes; a /29 has 6 usable loopbacks once its network and broadcast addresses are skipped.
    msg = error_of({"pools": {"loopback": "10.9.9.0/29"}})
    assert msg.startswith(f"{VARS_FILE}: pools.loopback: 10.9.9.0/29 is exhausted")
    assert "loopback of h3" in msg and "2 of 8 nodes still need one" in msg


def test_link_pool_exhausted_names_the_link():
    msg = error_of({"pools": {"links": "10.9.9.0/30"}})
    assert msg.startswith(f"{VARS_FILE}: pools.links: 10.9.9.0/30 is exhausted")
    assert "leaf2:eth1 <-> spine1:eth2" in msg


def test_defaults_are_attributed_to_their_feature_file():
    ctx = Context(topo=topo_of(leaf_spine_doc(1, 1, 1)), vars=lab_vars({"bier": {"bsl": 64}}))
    assert ctx.setting("pools.loopback") == (
        ipaddress.IPv4Network("10.255.0.0/16"),
        Source("orchestrator/configure/plan/addressing.yml", "pools.loopback"),
    )
    assert ctx.setting("bier.bsl") == (64, Source(VARS_FILE, "bier.bsl"))
    expected = Source("orchestrator/configure/plan/bier.yml", "bier.sub_domain")
    assert ctx.setting("bier.sub_domain") == (0, expected)


def test_overlapping_pools_interleave_without_clashing():
    plan = plan_of(leaf_spine_doc(1, 2, 1), {"pools": {"links": "10.255.0.0/16"}})
    loopbacks = [n.loopback.network for n in plan.nodes.values()]
    subnets = [link.subnet for link in plan.links]
    every = loopbacks + subnets
    assert all(not x.overlaps(y) for i, x in enumerate(every) for y in every[i + 1 :])
    # Loopbacks come first (.1 to .5); the first /31 clear of them is .6.
    assert [str(x) for x in loopbacks] == [f"10.255.0.{i}/32" for i in range(1, 6)]
    assert str(subnets[0]) == "10.255.0.6/31"


# --- BIER settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bsl", [0, 32, 100, 192, 8192])
def test_bsl_must_be_an_rfc8296_length(bsl):
    msg = error_of({"bier": {"bsl": bsl}})
    assert msg.startswith(f"{VARS_FILE}: bier.bsl: BSL {bsl} is not a BitString length RFC 8296")
    assert "64, 128, 256, 512, 1024, 2048, 4096" in msg


# --- pins that name nothing ---------------------------------------------------------------------------


def test_pin_for_an_unknown_node():
    msg = error_of(nodes(h99={"bfr_id": 4}))
    assert msg.startswith(f"{VARS_FILE}: nodes.h99: no node 'h99' in {TOPO_FILE}")


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("h99:eth1", f"no node 'h99' in {TOPO_FILE}"),
        (
            "leaf1:eth9",
            f"leaf1 has no link on interface 'eth9' in {TOPO_FILE} (its links: eth1, eth2, eth3, eth4)",
        ),
        ("leaf1", "a link is keyed by one of its ends as 'node:interface', e.g. 'leaf1:eth1'"),
    ],
)
def test_link_pin_for_an_unknown_interface(key, what):
    msg = error_of({"links": {key: {"bandwidth": "1G"}}})
    assert msg == f"{VARS_FILE}: links.{key}: {what}"


def test_plane_pin_errors():
    msg = error_of({"planes": [["leaf1"], ["h1"]]})
    assert msg.startswith(f"{VARS_FILE}: planes.1.0: h1 is a gpu-host, not a switch")
    msg = error_of({"planes": [["leaf1", "spine1"], ["leaf2", "spine1"]]})
    assert msg == f"{VARS_FILE}: planes.1.1 = spine1 is already in planes.0.1 = spine1"
    msg = error_of({"planes": [["leaf1"], ["nope"]]})
    assert msg.startswith(f"{VARS_FILE}: planes.1.0: no node 'nope' in {TOPO_FILE}")


def test_bad_bandwidth_names_where_it_came_from():
    msg = error_of(links(h1__eth1={"bandwidth": "10GB/s"}))
    assert msg.startswith(f"{VARS_FILE}: links.h1:eth1.bandwidth: bad bandwidth '10GB/s'")
    msg = error_of({"bandwidth": {"default": "0"}})
    assert msg.startswith(f"{VARS_FILE}: bandwidth.default: bandwidth '0' must be above zero")


def test_asn_range_exhausted():
    msg = error_of({"asn": {"leaves": {"first": 65100, "last": 65100}}})
    assert msg == f"{VARS_FILE}: asn.leaves: ASN range 65100-65100 is exhausted at leaf2; widen it"


def test_pins_on_linux_nodes_are_refused():
    doc = leaf_spine_doc(1, 1, 1)
    doc["topology"]["nodes"]["tap"] = {"group": "plain"}
    doc["topology"]["links"].append({"endpoints": ["tap:eth1", "leaf1:eth9"]})
    for key in ("loopback", "asn"):
        value = "10.3.3.3" if key == "loopback" else 65000
        msg = error_of(nodes(tap={key: value}), doc)
        assert msg.startswith(f"{VARS_FILE}: nodes.tap.{key}: tap is a linux node"), msg
