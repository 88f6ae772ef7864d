"""The node file model: good files load, bad ones are rejected with the field path."""

from __future__ import annotations

import pytest

from aidcnet.config import ConfigError, dump_config, load_config, parse_config
from aidcnet.netstate import (
    RTPROT_AIDCNET,
    KernelState,
    desired_state,
    diff_state,
    link_peers,
    managed_interfaces,
)
from tests.unit.node_files import bgp_knobs, bier_knobs, igmp_knobs

GOOD = {
    "version": 1,
    "node": "leaf1",
    "role": "bfr",
    "loopback": "10.255.0.3/32",
    "interfaces": [
        {"name": "eth1", "ipv4": "10.0.0.0/31", "peer": "spine1", "peer_interface": "eth1", "mtu": 9500},
        {"name": "eth2", "ipv4": "10.0.0.2/31", "peer": "spine2", "peer_interface": "eth1"},
    ],
    "routes": [
        {
            "prefix": "10.255.0.4/32",
            "nexthops": [{"via": "10.0.0.1", "dev": "eth1"}, {"via": "10.0.0.3", "dev": "eth2"}],
        },
        {"prefix": "10.255.0.1/32", "nexthops": [{"via": "10.0.0.1", "dev": "eth1"}]},
    ],
    "bier": {"bfr_id": 9, **bier_knobs()},
}


def bad(**changes) -> list[str]:
    data = {**GOOD, **changes}
    with pytest.raises(ConfigError) as info:
        parse_config(data, "node.yml")
    assert info.value.source == "node.yml"
    return info.value.problems


def test_good_file_round_trips(tmp_path):
    config = parse_config(GOOD)
    assert config.bier is not None and config.bier.bsl == 256 and config.bier.bift == "static"
    path = tmp_path / "node.yml"
    path.write_text(dump_config(config))
    assert load_config(path) == config
    assert dump_config(load_config(path)) == dump_config(config)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"version": 2}, "version: version 2 is not supported"),
        ({"loopback": "10.255.0.3/24"}, "loopback: loopback 10.255.0.3/24 must be a /32"),
        ({"loopback": "10.255.0.300/32"}, "loopback:"),
        ({"role": "router"}, "role:"),
        ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
        ({"bier": {"bfr_id": 0, **bier_knobs()}}, "bier.bfr_id:"),
        ({"bier": {"bfr_id": 1, **bier_knobs(bsl=100)}}, "bier.bsl:"),
    ],
)
def test_bad_values_name_their_field(change, expected):
    problems = bad(**change)
    assert any(p.startswith(expected.split(" ")[0]) and expected in p for p in problems), problems


def test_bad_interface_values():
    interfaces = [{**GOOD["interfaces"][0], "mtu": 10}, GOOD["interfaces"][1]]
    (p,) = bad(interfaces=interfaces)
    assert p.startswith("interfaces.0.mtu:")
    (p,) = bad(interfaces=[{"name": "eth0"}])
    assert "eth0 is not a data interface" in p
    (p,) = bad(interfaces=[GOOD["interfaces"][0], GOOD["interfaces"][0]], routes=[])
    assert "eth1 listed more than once" in p


def test_route_through_unknown_interface():
    routes = [{"prefix": "10.9.9.9/32", "nexthops": [{"via": "10.0.0.1", "dev": "eth7"}]}]
    (p,) = bad(routes=routes)
    assert "routes.0.nexthops.0.dev: eth7 is not one of this node's interfaces" in p


def test_unreadable_and_non_mapping_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yml")
    (tmp_path / "list.yml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_config(tmp_path / "list.yml")
    (tmp_path / "broken.yml").write_text("version: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yml")


def test_desired_state_and_diff():
    config = parse_config(GOOD)
    want = desired_state(config)
    assert ("lo", "10.255.0.3/32") in want.addresses and ("eth2", "10.0.0.2/31") in want.addresses
    assert want.routes["10.255.0.4/32"] == (("10.0.0.1", "eth1", 1), ("10.0.0.3", "eth2", 1))
    assert want.mtus == {"eth1": 9500}
    managed = managed_interfaces(config)
    current = KernelState(
        addresses=frozenset({("eth1", "10.0.0.0/31"), ("eth1", "10.9.0.0/31"), ("eth0", "172.20.20.3/24")}),
        routes={"10.255.0.1/32": (("10.0.0.1", "eth1", 1),), "10.255.0.99/32": (("10.0.0.1", "eth1", 1),)},
        mtus={"eth1": 1500},
    )
    d = diff_state(want, current, managed)
    assert d.add_addresses == [("eth2", "10.0.0.2/31"), ("lo", "10.255.0.3/32")]
    # the stale data address goes; eth0 (management) is never ours to touch
    assert d.remove_addresses == [("eth1", "10.9.0.0/31")]
    assert list(d.replace_routes) == ["10.255.0.4/32"]
    assert d.remove_routes == ["10.255.0.99/32"]
    assert d.set_mtus == {"eth1": 9500}
    converged = KernelState(want.addresses, dict(want.routes), dict(want.mtus))
    assert diff_state(want, converged, managed).empty
    assert RTPROT_AIDCNET == 245


def test_link_peers_are_the_other_address_of_each_slash_31():
    data = {**GOOD, "interfaces": [
        {"name": "eth1", "ipv4": "10.0.0.0/31"},
        {"name": "eth2", "ipv4": "10.0.0.3/31"},
        {"name": "eth3", "ipv4": "10.0.1.1/24"},  # not point-to-point: no single peer
        {"name": "eth4"},
    ]}
    data.pop("routes", None)
    config = parse_config(data)
    assert link_peers(config) == [("eth1", "10.0.0.0", "10.0.0.1"), ("eth2", "10.0.0.3", "10.0.0.2")]


def test_smallest_queue_is_what_the_sockets_size_to():
    data = {**GOOD, "interfaces": [
        {"name": "eth1", "queue_bytes": 4 << 20}, {"name": "eth2", "queue_bytes": 1 << 20}, {"name": "eth3"},
    ]}
    data.pop("routes", None)
    assert parse_config(data).smallest_queue_bytes == 1 << 20
    assert parse_config({**data, "interfaces": [{"name": "eth1"}]}).smallest_queue_bytes is None


def test_igmp_section_is_checked_against_bier_and_the_wire():
    bier = {"bfr_id": 9, "host_ports": ["eth1"], **bier_knobs()}
    ok = parse_config({**GOOD, "bier": bier, "igmp": igmp_knobs(ports=[{"name": "eth1", "proxy": True}])})
    assert ok.igmp is not None and ok.igmp.ports[0].querier and ok.igmp.groups == ["static", "igmp", "proxy"]
    assert parse_config(__import__("yaml").safe_load(dump_config(ok))) == ok
    (problem,) = bad(bier=bier, igmp=igmp_knobs(ports=[{"name": "eth2"}]))
    assert "igmp.ports.0.name: eth2 is not in bier.host_ports" in problem
    (problem,) = bad(bier=None, igmp=igmp_knobs())
    assert "igmp: needs a bier section" in problem
    (problem,) = bad(
        bier=bier, igmp=igmp_knobs(query_response_interval=10, query_interval=125, time_scale=1000)
    )
    assert problem.startswith("igmp:") and "query_response_interval" in problem and "time_scale" in problem
    (problem,) = bad(bier=bier, igmp=igmp_knobs(groups=["static", "pim"]))
    assert problem.startswith("igmp.groups.1")
    (problem,) = bad(bier=bier, igmp=igmp_knobs(bfirs=[0]))
    assert "outside 1..65535" in problem
    # The plan writes every knob; the node side guesses none (their defaults are the lab's, in one place).
    unset = {k: v for k, v in igmp_knobs().items() if k != "robustness"}
    assert bad(bier=bier, igmp=unset) == ["igmp.robustness: Field required"]


def test_show_config_never_carries_a_tcp_md5_secret():
    from aidcnet.config import SECRET_SHOWN, shown_config

    neighbor = {"name": "spine1", "address": "10.0.0.1", "local_address": "10.0.0.0", "interface": "eth1",
                "asn": 65000}  # fmt: skip
    bgp = {"asn": 65100, "router_id": "10.255.0.3", **bgp_knobs()}
    signed = {**neighbor, "md5_password": "s3cret-Bgp!"}
    config = parse_config({**GOOD, "bgp": {**bgp, "neighbors": [signed]}})
    shown = shown_config(config)
    assert shown["bgp"]["neighbors"][0]["md5_password"] == SECRET_SHOWN
    assert "s3cret-Bgp!" not in repr(shown) and "s3cret-Bgp!" not in repr(config)
    assert config.bgp.neighbors[0].md5_password == "s3cret-Bgp!"  # the agent still has it
    unsigned = parse_config({**GOOD, "bgp": {**bgp, "neighbors": [neighbor]}})
    assert shown_config(unsigned) == unsigned.model_dump(mode="json", exclude_none=True)


def test_a_peers_file_is_a_node_file_without_the_agents_sections():
    """An interop peer's node file (its Ansible role renders the daemon's config from it) names a role the
    agent does not play; BIER, INA and IGMP run in the agent, so such a file carries none of them."""
    peer = {k: v for k, v in GOOD.items() if k != "bier"}
    assert parse_config({**peer, "role": "gobgp"}).role == "gobgp"
    problems = bad(role="gobgp")
    assert problems == ["role: gobgp is not one of the agent's roles (bfr, ina-switch, gpu-host); only their "
                        "nodes take bier"]
    assert bad(role="Not A Role") and bad(role="")
