"""Properties of the plan over random leaf-spine sizes, link orders and loopback pins."""

from __future__ import annotations

import ipaddress
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aidcnet.config import parse_config
from orchestrator.configure.plan import node_configs
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, plan_of

MGMT = ipaddress.IPv4Network("172.20.20.0/24")
LOOPBACK_POOL = ipaddress.IPv4Network("10.255.0.0/16")

shapes = st.tuples(
    st.integers(min_value=1, max_value=4),  # spines
    st.integers(min_value=1, max_value=6),  # leaves
    st.integers(min_value=0, max_value=3),  # hosts per leaf
    st.none() | st.integers(min_value=0, max_value=2**16),  # link shuffle seed
)


@st.composite
def shapes_with_pins(draw):
    spines, leaves, per_leaf, seed = draw(shapes)
    names = [f"spine{i}" for i in range(1, spines + 1)] + [f"leaf{i}" for i in range(1, leaves + 1)]
    names += [f"h{i}" for i in range(1, leaves * per_leaf + 1)]
    pinned = draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
    # Low offsets land exactly where automatic allocation would otherwise put other nodes.
    offsets = draw(st.lists(st.integers(1, 40), min_size=len(pinned), max_size=len(pinned), unique=True))
    pins = {
        n: {"loopback": str(LOOPBACK_POOL.network_address + o)} for n, o in zip(pinned, offsets, strict=True)
    }
    return (spines, leaves, per_leaf, seed), pins


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes_with_pins())
def test_addresses_never_clash_and_switches_are_fully_routed(case):
    (spines, leaves, per_leaf, seed), pins = case
    doc = {**leaf_spine_doc(spines, leaves, per_leaf, seed=seed), "mgmt": {"ipv4-subnet": str(MGMT)}}
    plan = plan_of(doc, {"nodes": pins})

    for name, pin in pins.items():
        assert str(plan.nodes[name].loopback) == f"{pin['loopback']}/32"
    claimed = [n.loopback.network for n in plan.nodes.values()] + [link.subnet for link in plan.links]
    claimed.sort()
    for prev, cur in itertools.pairwise(claimed):
        assert not prev.overlaps(cur), (prev, cur)
    assert not any(net.overlaps(MGMT) for net in claimed)
    for link in plan.links:
        assert link.a.address.ip + 1 == link.b.address.ip
        assert link.a.address.network == link.b.address.network == link.subnet

    switches = [n for n, node in plan.nodes.items() if node.role != "gpu-host"]
    for src in switches:
        routes = {r.to: r for r in plan.nodes[src].routes}
        for dst in switches:
            if dst == src:
                continue
            assert dst in routes, (src, dst)
            hops = routes[dst].nexthops
            if src.startswith("leaf") and dst.startswith("leaf"):
                assert [h.neighbor for h in hops] == [f"spine{i}" for i in range(1, spines + 1)]
            if src.startswith("spine") and dst.startswith("spine"):
                assert [h.neighbor for h in hops] == [f"leaf{i}" for i in range(1, leaves + 1)]
            # ECMP next hops are distinct links, each to a switch, never a host.
            assert len({(h.dev, h.via) for h in hops}) == len(hops)
            assert all(not h.neighbor.startswith("h") for h in hops)
    assert plan.unreachable.count == 0

    bfr_ids = sorted(n.bfr_id for n in plan.nodes.values())
    assert bfr_ids == list(range(1, len(plan.nodes) + 1))
    for name, config in node_configs(plan).items():
        parse_config(config.model_dump(mode="json"), source=name)


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_link_order_never_moves_node_allocations(shape):
    spines, leaves, per_leaf, seed = shape
    ordered = plan_of(leaf_spine_doc(spines, leaves, per_leaf))
    shuffled = plan_of(leaf_spine_doc(spines, leaves, per_leaf, seed=seed))
    for name, node in ordered.nodes.items():
        other = shuffled.nodes[name]
        assert (node.loopback, node.bfr_id, node.asn, node.planes) == (
            other.loopback,
            other.bfr_id,
            other.asn,
            other.planes,
        )
        # The same next-hop neighbours, whatever the link (and so address) numbering.
        assert [(r.to, sorted(h.neighbor for h in r.nexthops)) for r in node.routes] == [
            (r.to, sorted(h.neighbor for h in r.nexthops)) for r in other.routes
        ]
