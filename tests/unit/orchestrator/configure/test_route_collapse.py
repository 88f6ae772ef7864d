"""Routes at scale: node files carry the plan's routes collapsed (same next hops for every planned
destination, nothing else routed), and plan.yml groups them by next-hop set and reads back equal."""

from __future__ import annotations

import ipaddress

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.configure.plan import read_plan, write_plan
from orchestrator.configure.plan.routes import collapsed
from orchestrator.configure.plan.schema import PlanNextHop, PlanRoute

HOPS = [
    [PlanNextHop(via="10.0.0.1", dev="eth1", neighbor="leaf1")],
    [PlanNextHop(via="10.0.0.3", dev="eth2", neighbor="leaf2")],
    [
        PlanNextHop(via="10.0.0.1", dev="eth1", neighbor="leaf1"),
        PlanNextHop(via="10.0.0.3", dev="eth2", neighbor="leaf2"),
    ],
]


def _route(host: int, hops: int) -> PlanRoute:
    address = ipaddress.IPv4Address("10.255.0.0") + host
    return PlanRoute(to=f"n{host}", prefix=ipaddress.IPv4Network(f"{address}/32"), nexthops=HOPS[hops])


def _lookup(table, address):
    best = [(p, h) for p, h in table if address in p]
    return max(best, key=lambda item: item[0].prefixlen)[1] if best else None


@given(st.dictionaries(st.integers(0, 511), st.integers(0, len(HOPS) - 1), max_size=200))
def test_every_destination_keeps_its_next_hops_and_nothing_else_is_routed(plan_routes):
    routes = [_route(host, hops) for host, hops in sorted(plan_routes.items())]
    table = collapsed(routes)
    for route in routes:
        want = tuple((str(h.via), h.dev) for h in route.nexthops)
        assert _lookup(table, route.prefix.network_address) == want
    covered = sum(p.num_addresses for p, _ in table)
    assert covered == len(routes)  # no address beyond the planned ones, and no overlap
    assert len(table) <= len(routes)


def test_a_host_behind_one_leaf_needs_few_routes():
    # 255 loopbacks .1-.255 minus the host's own .25, all through its leaf: .1/32 .2/31 .4/30
    # .8/29 .16/29 .24/32 .26/31 .28/30 .32/27 .64/26 .128/25 = 11 prefixes instead of 254.
    routes = [_route(host, 0) for host in range(1, 256) if host != 25]
    table = collapsed(routes)
    assert [str(p) for p, _ in table] == [
        "10.255.0.1/32", "10.255.0.2/31", "10.255.0.4/30", "10.255.0.8/29", "10.255.0.16/29",
        "10.255.0.24/32", "10.255.0.26/31", "10.255.0.28/30", "10.255.0.32/27", "10.255.0.64/26",
        "10.255.0.128/25",
    ]


@pytest.mark.parametrize("name", ["leaf-spine", "superpod"])
def test_plan_file_groups_routes_by_next_hops_and_reads_back_equal(name, tmp_path):
    from tests.unit.orchestrator.configure.test_plan import lab

    plan = lab(name)
    write_plan(plan, tmp_path / "plan.yml")
    data = yaml.safe_load((tmp_path / "plan.yml").read_text())
    for node, entry in data["nodes"].items():
        hop_sets = {tuple((h.via, h.dev) for h in r.nexthops) for r in plan.nodes[node].routes}
        assert len(entry["routes"]) == len(hop_sets), node
    assert read_plan(tmp_path / "plan.yml") == plan  # what a replay's prepare reads
