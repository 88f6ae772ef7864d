"""The agent's batched route programming against a real kernel, in namespaces ``f64-<pid>-<n>``: the table
it leaves is the one the one-request-per-route path leaves, and after a link event it re-routes without
reading the table back. Needs root and iproute2 (fabric_netns fails the test naming what is missing)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aidcnet.agent.kernel import (
    KernelError,
    RouteTable,
    apply_diff,
    apply_routes,
    apply_routes_per_request,
    read_state,
)
from aidcnet.netstate import KernelState, NextHops, diff_state
from tests.dataplane.netlab import in_netns
from tests.unit.fabric_netns import make_uplinks, wait_carrier

PROTO = 186
UPLINKS = [(f"10.64.{i}.1", f"up{i}") for i in range(4)]
PREFIXES = [f"10.200.0.{k}/32" for k in range(1, 9)] + ["10.201.0.0/24", "10.202.0.0/16"]


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, str]]:
    with make_uplinks("f64", 4) as pair:
        yield pair


def kernel_table(ns: str) -> list[dict]:
    """Everything ``ip`` shows of our routes: protocol, scope, type, flags, next hops and weights."""
    out = subprocess.run(
        ["ip", "-n", ns, "-j", "-d", "route", "show", "table", "main", "proto", str(PROTO)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(json.loads(out), key=lambda r: r["dst"])


def flush(ns: str) -> None:
    subprocess.run(["ip", "-n", ns, "route", "flush", "proto", str(PROTO)], check=True)


next_hops = st.lists(
    st.tuples(st.sampled_from(UPLINKS), st.integers(1, 256)), min_size=1, max_size=4, unique_by=lambda h: h[0]
).map(lambda hops: tuple(sorted((via, dev, w) for (via, dev), w in hops)))
tables = st.dictionaries(st.sampled_from(PREFIXES), next_hops, max_size=len(PREFIXES))


def single_weight(routes: dict[str, NextHops]) -> dict[str, NextHops]:
    # A one-hop route carries no weight in the kernel: read back, it has weight 1.
    return {p: ((h[0][0], h[0][1], 1),) if len(h) == 1 else h for p, h in routes.items()}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=tables, after=tables)
def test_batched_change_leaves_the_table_the_per_route_change_leaves(node, before, after) -> None:
    ns, _far = node
    diff = diff_state(KernelState(routes=after), KernelState(routes=before), set())
    results = []
    for apply in (apply_routes, apply_routes_per_request):
        flush(ns)
        with in_netns(ns):
            apply_routes_per_request(before, [], PROTO)
            apply(diff.replace_routes, diff.remove_routes, PROTO)
            routes = read_state(set(), proto=PROTO).routes
        results.append((routes, kernel_table(ns)))
    (batched, batched_ip), (per_route, per_route_ip) = results
    assert batched == per_route == single_weight(after)
    assert batched_ip == per_route_ip


def test_link_down_reroutes_every_prefix_without_reading_the_table(node) -> None:
    ns, far = node
    flush(ns)
    four = tuple((via, dev, 2) for via, dev in UPLINKS)
    three = tuple(h for h in four if h[1] != "up3")
    with in_netns(ns):
        table = RouteTable(PROTO)
        table.program({**dict.fromkeys(PREFIXES[:8], four), "10.201.0.0/24": (("10.64.3.1", "up3", 1),)})
        assert table.dumps == 1  # the agent's start: what is there already
    subprocess.run(["ip", "-n", far, "link", "set", "dn3", "down"], check=True)
    try:
        wait_carrier(ns, "up3", False)
        with in_netns(ns):
            table.links_changed({"up3"})
            # Down on our side too: the kernel flushes the one-hop route through up3 before we delete it.
            subprocess.run(["ip", "link", "set", "up3", "down"], check=True)
            wanted = dict.fromkeys(PREFIXES[:8], three)
            diff = table.program(wanted)
            assert read_state(set(), proto=PROTO).routes == wanted
        assert (len(diff.replace_routes), diff.remove_routes, table.dumps) == (8, ["10.201.0.0/24"], 1)
        assert all(len(r["nexthops"]) == 3 for r in kernel_table(ns))
    finally:
        subprocess.run(["ip", "-n", far, "link", "set", "dn3", "up"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "up3", "up"], check=True)
    wait_carrier(ns, "up3", True)
    with in_netns(ns):
        table.links_changed({"up3"})
        table.program(dict.fromkeys(PREFIXES[:8], four))
        assert read_state(set(), proto=PROTO).routes == dict.fromkeys(PREFIXES[:8], four)
    assert table.dumps == 1


def test_a_refused_route_is_named_with_the_kernels_reason_and_the_rest_still_applied(node) -> None:
    ns, _far = node
    flush(ns)
    good = {p: (("10.64.0.1", "up0", 1),) for p in PREFIXES[:3]}
    bad = {"10.200.0.4/32": (("10.99.0.1", "up1", 1),)}  # no such gateway on up1
    with in_netns(ns):
        table = RouteTable(PROTO)
        with pytest.raises(KernelError, match=r"route 10\.200\.0\.4/32 via 10\.99\.0\.1 dev up1.*gateway"):
            table.program({**good, **bad})
        assert read_state(set(), proto=PROTO).routes == good
        # Refused twice: the table was read back once more before the second try.
        assert (table.dumps, table.resyncs, table.installed) == (2, 1, None)
        table.program(good)
        assert table.dumps == 3


def test_a_missing_interface_is_named(node) -> None:
    ns, _far = node
    with in_netns(ns), pytest.raises(KernelError, match="interface up9 does not exist"):
        apply_routes({"10.200.0.1/32": (("10.64.0.1", "up9", 1),)}, [], PROTO)


def test_a_link_that_flapped_between_two_applies_gets_its_flushed_routes_back(node) -> None:
    """Down and up in one burst of netlink events: the wanted routes are the same as before, but the
    kernel flushed the routes through the link while it was down."""
    ns, _far = node
    flush(ns)
    wanted = {"10.201.0.0/24": (("10.64.3.1", "up3", 1),), "10.200.0.1/32": (("10.64.0.1", "up0", 1),)}
    with in_netns(ns):
        table = RouteTable(PROTO)
        table.program(wanted)
        subprocess.run(["ip", "link", "set", "up3", "down"], check=True)
        assert "10.201.0.0/24" not in read_state(set(), proto=PROTO).routes
        subprocess.run(["ip", "link", "set", "up3", "up"], check=True)
        table.links_changed({"up3"})
        diff = table.program(wanted)
        assert read_state(set(), proto=PROTO).routes == wanted
    assert (list(diff.replace_routes), table.dumps) == (["10.201.0.0/24"], 1)
    wait_carrier(ns, "up3", True)


def pyroute2_state(managed: set[str], proto: int) -> KernelState:
    """What read_state returned while it read the kernel with pyroute2: the independent reference."""
    import ipaddress
    import socket

    from pyroute2 import IPRoute

    addresses, mtus, routes = set(), {}, {}
    with IPRoute() as ipr:
        names = {msg["index"]: msg.get_attr("IFLA_IFNAME") for msg in ipr.get_links()}
        for msg in ipr.get_links():
            if msg.get_attr("IFLA_IFNAME") in managed:
                mtus[msg.get_attr("IFLA_IFNAME")] = msg.get_attr("IFLA_MTU")
        for msg in ipr.get_addr(family=socket.AF_INET):
            addr = msg.get_attr("IFA_ADDRESS")
            if names.get(msg["index"]) in managed and not ipaddress.ip_address(addr).is_loopback:
                addresses.add((names[msg["index"]], f"{addr}/{msg['prefixlen']}"))
        for msg in ipr.get_routes(family=socket.AF_INET, proto=proto):
            prefix = f"{msg.get_attr('RTA_DST') or '0.0.0.0'}/{msg['dst_len']}"
            multipath = msg.get_attr("RTA_MULTIPATH")
            if multipath:
                routes[prefix] = tuple(
                    sorted((nh.get_attr("RTA_GATEWAY"), names[nh["oif"]], nh["hops"] + 1) for nh in multipath)
                )
            else:
                routes[prefix] = ((msg.get_attr("RTA_GATEWAY"), names[msg.get_attr("RTA_OIF")], 1),)
    return KernelState(frozenset(addresses), routes, mtus)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(routes=tables, mtu=st.integers(1280, 9000), extra=st.integers(1, 250))
def test_read_state_reads_what_pyroute2_reads(node, routes, mtu, extra) -> None:
    ns, _far = node
    flush(ns)
    managed = {"up0", "up1", "up3", "lo"}
    subprocess.run(["ip", "-n", ns, "link", "set", "up1", "mtu", str(mtu)], check=True)
    subprocess.run(["ip", "-n", ns, "addr", "replace", f"10.99.{extra}.1/24", "dev", "up3"], check=True)
    try:
        with in_netns(ns):
            apply_routes_per_request(routes, [], PROTO)
            assert read_state(managed, PROTO) == pyroute2_state(managed, PROTO)
            assert read_state(managed, PROTO).mtus["up1"] == mtu
    finally:
        subprocess.run(["ip", "-n", ns, "addr", "del", f"10.99.{extra}.1/24", "dev", "up3"], check=True)


def test_apply_diff_changes_addresses_and_mtus_and_names_what_the_kernel_refused(node) -> None:
    ns, _far = node
    flush(ns)
    managed = {"up2", "up3"}
    with in_netns(ns):
        before = read_state(managed, PROTO)
        want = KernelState(
            frozenset({("up2", "10.64.2.0/31"), ("up2", "10.98.0.1/24"), ("up3", "10.64.3.0/31")}),
            {"10.201.0.0/24": (("10.98.0.7", "up2", 1),)},
            {"up2": 9000, "up3": 1500},
        )
        apply_diff(diff_state(want, before, managed), PROTO)
        assert read_state(managed, PROTO) == want
        shown = json.loads(subprocess.run(["ip", "-j", "addr", "show", "up2"], capture_output=True,
                                          text=True, check=True).stdout)[0]
        assert shown["mtu"] == 9000 and "UP" in shown["flags"]
        assert {(a["local"], a["prefixlen"]) for a in shown["addr_info"] if a["family"] == "inet"} == {
            ("10.64.2.0", 31), ("10.98.0.1", 24)
        }
        # And back: the address and the route go, the MTU returns.
        apply_diff(diff_state(before, read_state(managed, PROTO), managed), PROTO)
        assert read_state(managed, PROTO) == before
        too_big = KernelState(before.addresses, {}, {**before.mtus, "up3": 70000})
        with pytest.raises(KernelError, match=r"kernel refused to set mtu 70000 on up3: .*errno 22"):
            apply_diff(diff_state(too_big, before, managed), PROTO)
