"""aidclab split: parts, cut links as VXLAN, VNIs, MTU, manifest and the whole lab read back."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from orchestrator.lab.labdir import DOCKER_CONNECTION, local_connection
from orchestrator.lab.split import SplitError, load_split, plan_split, write_inventory, write_split
from orchestrator.lab.topology import clab_schema, load_topology
from orchestrator.paths import LABS

LEAF_SPINE = LABS / "leaf-spine.clab.yml"


@pytest.fixture
def topo():
    return load_topology(LEAF_SPINE)


def test_default_partition_keeps_hosts_with_their_leaf_and_cuts_only_fabric_links(topo):
    plan = plan_split(topo, ["a", "b"])
    assert plan.parts["a"].nodes == ["spine1", "spine2", "leaf1", "leaf2", "h1", "h2", "h3", "h4"]
    assert plan.parts["b"].nodes == ["leaf3", "leaf4", "h5", "h6", "h7", "h8"]
    assert [str(c.link) for c in plan.cuts] == [
        "leaf3:eth1 <-> spine1:eth3",
        "leaf3:eth2 <-> spine2:eth3",
        "leaf4:eth1 <-> spine1:eth4",
        "leaf4:eth2 <-> spine2:eth4",
    ]
    assert [c.vni for c in plan.cuts] == [1004, 1005, 1006, 1007]


def test_assign_pins_a_switch_and_its_hosts_follow(topo):
    plan = plan_split(topo, ["a", "b"], assign={"leaf1": "b"})
    assert {"leaf1", "h1", "h2"} <= set(plan.parts["b"].nodes)
    # Every link either stays whole in one part or is cut: none is lost, none is doubled.
    whole = {c.link.index for c in plan.cuts}
    for link in topo.links:
        same = plan.host_of(link.a.node) == plan.host_of(link.b.node)
        assert same != (link.index in whole)


def test_vnis_unique_across_every_assignment_and_three_hosts(topo):
    plan = plan_split(topo, ["a", "b", "c"], vni_base=5000)
    vnis = [c.vni for c in plan.cuts]
    assert len(vnis) == len(set(vnis)) and all(v >= 5000 for v in vnis)
    assert all(p.nodes for p in plan.parts.values())


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"hosts": ["a"]}, "two or more distinct host names"),
        ({"hosts": ["a", "a"]}, "two or more distinct host names"),
        ({"assign": {"leaf9": "a"}}, "the lab has no node 'leaf9'"),
        ({"assign": {"leaf1": "z"}}, "'z' is not one of --hosts"),
        ({"underlay": {"a": "10.0.0.1", "b": "10.0.0.1"}}, "same underlay address"),
        ({"underlay": {"a": "nope"}}, "--underlay a=nope: not an IP address"),
        ({"vni_base": 16777210}, "must lie in 1..16777215"),
    ],
)
def test_bad_options_name_the_option(topo, kwargs, needle):
    hosts = kwargs.pop("hosts", ["a", "b"])
    with pytest.raises(SplitError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        plan_split(topo, hosts, **kwargs)


def test_inner_mtu_is_underlay_minus_vxlan_overhead(topo):
    plan = plan_split(topo, ["a", "b"], underlay_mtu=1500)
    assert {plan.inner_mtu(c.link) for c in plan.cuts} == {1450}
    v6 = plan_split(topo, ["a", "b"], underlay={"a": "fd00::1", "b": "fd00::2"}, underlay_mtu=9500)
    assert {v6.inner_mtu(c.link) for c in v6.cuts} == {9430}


def test_written_parts_pass_containerlabs_schema_and_mirror_each_other(topo, tmp_path):
    plan = plan_split(topo, ["a", "b"], underlay={"a": "10.1.0.1", "b": "10.1.0.2"})
    files = write_split(plan, tmp_path)
    assert [f.name for f in files] == [
        "leaf-spine-a.clab.yml",
        "leaf-spine-b.clab.yml",
        "leaf-spine.split.yml",
    ]
    validator = jsonschema.Draft7Validator(clab_schema())
    ends = {}
    for f in files[:2]:
        doc = yaml.safe_load(f.read_text())
        assert list(validator.iter_errors(doc)) == []
        part = load_topology(f)
        for vx in part.vxlan_links:
            ends.setdefault(vx.vni, []).append((part.name, vx.remote, str(vx.endpoint), vx.mtu))
    # Each VNI has exactly one end per part, and each end points at the other part's underlay.
    assert sorted(ends) == [1004, 1005, 1006, 1007]
    for pair in ends.values():
        assert sorted((lab, remote) for lab, remote, _ep, _mtu in pair) == [
            ("leaf-spine-a", "10.1.0.2"),
            ("leaf-spine-b", "10.1.0.1"),
        ]
        assert {mtu for *_x, mtu in pair} == {9450}
    a = load_topology(files[0])
    assert (len(a.links), len(a.vxlan_links)) == (4 + 4, 4)  # leaf1,2 to both spines + h1..h4; 4 cut ends


def test_manifest_reads_back_as_the_whole_lab_under_part_container_names(topo, tmp_path):
    plan = plan_split(topo, ["a", "b"], docker_hosts={"b": "ssh://root@10.1.0.2"})
    manifest = write_split(plan, tmp_path)[-1]
    split = load_split(manifest)
    assert set(split.whole.nodes) == set(topo.nodes) and len(split.whole.links) == len(topo.links)
    assert split.whole.container_name("spine1") == "clab-leaf-spine-a-spine1"
    assert split.whole.container_name("h8") == "clab-leaf-spine-b-h8"
    # The plan gives each interface its link's MTU: cut links carry the VXLAN inner MTU.
    cut = {c.link.index for c in plan.cuts}
    assert {lk.mtu for lk in split.whole.links if lk.index in cut} == {9450}
    assert {lk.mtu for lk in split.whole.links if lk.index not in cut} == {9500}
    inv = yaml.safe_load(write_inventory(split, tmp_path).read_text())
    hosts = {h: e for g in inv["all"]["children"].values() for h, e in g["hosts"].items()}
    assert len(hosts) == 14
    assert hosts["clab-leaf-spine-b-leaf3"]["ansible_docker_extra_args"] == "-H ssh://root@10.1.0.2"
    assert "ansible_docker_extra_args" not in hosts["clab-leaf-spine-a-leaf1"]
    # nsenter reaches this machine's containers only: a part on another Docker host goes through docker exec
    assert hosts["clab-leaf-spine-b-leaf3"]["ansible_connection"] == DOCKER_CONNECTION
    assert "ansible_connection" not in hosts["clab-leaf-spine-a-leaf1"]
    assert inv["all"]["vars"]["ansible_connection"] == local_connection()


def test_inspect_lists_the_vxlan_ends_of_every_part(topo, tmp_path, capsys):
    from orchestrator.cli.lab import _print_vxlan_links

    manifest = write_split(plan_split(topo, ["a", "b"]), tmp_path)[-1]
    _print_vxlan_links(str(manifest), load_split(manifest))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8
    assert "leaf-spine-b: leaf3:eth1 -> vxlan 198.18.0.1 vni 1004 port 14789 mtu 9450 (+50 bytes" in lines[4]


def test_local_parts_name_their_underlay_namespaces_in_the_manifest(topo, tmp_path):
    from orchestrator.lab.vxlan import local_netns

    plan = plan_split(topo, ["a", "b"], local=True)
    split = load_split(write_split(plan, tmp_path)[-1])
    assert split.local_underlay == "aidclab-leaf-spine"
    assert {p["host"]: p["underlay-netns"] for p in split.parts} == {
        "a": local_netns("aidclab-leaf-spine", "a"), "b": local_netns("aidclab-leaf-spine", "b"),
    }  # fmt: skip
    assert [p["underlay"] for p in split.parts] == ["198.18.0.1", "198.18.0.2"]
    # without --local the parts are on hosts of their own: no namespace
    plain = load_split(write_split(plan_split(topo, ["a", "b"]), tmp_path / "plain")[-1])
    assert plain.local_underlay == "" and all("underlay-netns" not in p for p in plain.parts)


@pytest.mark.parametrize(
    "kwargs", [{"underlay": {"a": "10.0.0.1"}}, {"docker_hosts": {"b": "ssh://root@10.0.0.2"}}]
)
def test_local_parts_take_no_remote_host_or_underlay_address(topo, kwargs):
    with pytest.raises(SplitError, match="--local puts every part on this machine"):
        plan_split(topo, ["a", "b"], local=True, **kwargs)
