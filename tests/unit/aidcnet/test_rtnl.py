"""aidcnet.rtnl: route requests decoded by pyroute2's independent rtnetlink parser; answers from crafted
kernel messages (layouts of linux/netlink.h)."""

from __future__ import annotations

import errno
import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from aidcnet import rtnl

gateways = st.integers(0x0A000001, 0x0AFFFFFE).map(lambda n: str(ipaddress.IPv4Address(n)))
hop = st.tuples(gateways, st.integers(1, 1 << 20), st.integers(1, 256))
prefixes = st.tuples(st.integers(0, (1 << 32) - 1), st.integers(0, 32)).map(
    lambda t: str(ipaddress.IPv4Network((t[0] >> (32 - t[1]) << (32 - t[1]) if t[1] else 0, t[1])))
)


def decoded(data: bytes) -> rtmsg:
    msg = rtmsg(data)
    msg.decode()
    assert msg["header"]["length"] == len(data)
    return msg


@given(st.integers(0, (1 << 32) - 1), prefixes, st.lists(hop, min_size=1, max_size=8), st.booleans())
def test_replace_decodes_to_the_route_asked_for(seq, prefix, hops, ack) -> None:
    msg = decoded(rtnl.route_replace(seq, prefix, hops, proto=186, ack=ack))
    flags = rtnl.NLM_F_REQUEST | rtnl.NLM_F_CREATE | rtnl.NLM_F_REPLACE | (rtnl.NLM_F_ACK if ack else 0)
    assert (msg["header"]["type"], msg["header"]["flags"], msg["header"]["sequence_number"]) == (
        rtnl.RTM_NEWROUTE,
        flags,
        seq,
    )
    net = ipaddress.IPv4Network(prefix)
    assert (msg["family"], msg["dst_len"], msg["table"], msg["proto"], msg["scope"], msg["type"]) == (
        2,
        net.prefixlen,
        254,
        186,
        0,
        1,
    )
    assert msg.get_attr("RTA_DST") == str(net.network_address)
    assert msg.get_attr("RTA_TABLE") == 254
    if len(hops) == 1:
        assert (msg.get_attr("RTA_GATEWAY"), msg.get_attr("RTA_OIF")) == hops[0][:2]
        assert msg.get_attr("RTA_MULTIPATH") is None
    else:
        got = [
            (nh.get_attr("RTA_GATEWAY"), nh["oif"], nh["hops"] + 1) for nh in msg.get_attr("RTA_MULTIPATH")
        ]
        assert got == hops


@given(st.integers(0, (1 << 32) - 1), prefixes)
def test_delete_decodes_to_a_delete_of_that_prefix_and_protocol_only(seq, prefix) -> None:
    msg = decoded(rtnl.route_delete(seq, prefix, proto=186))
    assert msg["header"]["type"] == rtnl.RTM_DELROUTE
    assert msg["header"]["flags"] == rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK
    net = ipaddress.IPv4Network(prefix)
    assert (msg["dst_len"], msg["proto"], msg["table"], msg["type"]) == (net.prefixlen, 186, 254, 0)
    assert msg["scope"] == rtnl.RT_SCOPE_NOWHERE  # any scope: the protocol is the filter
    assert msg.get_attr("RTA_DST") == str(net.network_address)
    assert msg.get_attr("RTA_GATEWAY") is None


@pytest.mark.parametrize("prefix", ["10.0.0/24", "10.0.0.300/32", "10.0.0.0/33", "fd00::/64", "x"])
def test_a_bad_prefix_is_named(prefix: str) -> None:
    with pytest.raises(ValueError, match="not an IPv4 prefix"):
        rtnl.route_delete(1, prefix, proto=186)


def test_a_weight_the_kernel_cannot_hold_is_refused_naming_route_and_hop() -> None:
    hops = [("10.0.0.1", 2, 1), ("10.0.0.3", 3, 257)]
    with pytest.raises(ValueError, match=r"route 10\.9\.0\.1/32 via 10\.0\.0\.3: weight 257"):
        rtnl.route_replace(1, "10.9.0.1/32", hops, proto=186)
    with pytest.raises(ValueError, match="no next hop"):
        rtnl.route_replace(1, "10.9.0.1/32", [], proto=186)


def _answer(seq: int, error: int, request: bytes = b"", message: str = "", capped: bool = True) -> bytes:
    """An NLMSG_ERROR as the kernel's netlink_ack() builds it."""
    flags = (rtnl.NLM_F_CAPPED if capped else 0) | (rtnl.NLM_F_ACK_TLVS if message else 0)
    echoed = request if (error and not capped) else request[:16]
    body = struct.pack("=i", error) + echoed + b"\0" * (-len(echoed) % 4)
    if message:
        text = message.encode() + b"\0"
        body += struct.pack("=HH", 4 + len(text), rtnl.NLMSGERR_ATTR_MSG) + text + b"\0" * (-len(text) % 4)
    return struct.pack("=IHHII", 16 + len(body), rtnl.NLMSG_ERROR, flags, seq, 0) + body


def test_answers_acks_failures_and_the_kernels_reason() -> None:
    request = rtnl.route_replace(7, "10.9.0.1/32", [("10.0.0.1", 2, 1)], proto=186)
    noise = struct.pack("=IHHII", 20, rtnl.RTM_NEWROUTE, 0, 99, 0) + b"\0" * 4
    data = (
        _answer(5, 0, request)
        + noise
        + _answer(7, -errno.ENETUNREACH, request, "Nexthop has invalid gateway")
        + _answer(8, -errno.ESRCH, request, capped=False)
        + _answer(9, -errno.EINVAL, request, "bad weight", capped=False)
    )
    assert rtnl.parse_answers(data) == [
        rtnl.Answer(5, 0),
        rtnl.Answer(7, errno.ENETUNREACH, "Nexthop has invalid gateway"),
        rtnl.Answer(8, errno.ESRCH),
        rtnl.Answer(9, errno.EINVAL, "bad weight"),
    ]


def test_a_truncated_answer_is_an_error_not_a_silent_loss() -> None:
    data = _answer(5, -errno.EEXIST, message="exists")
    with pytest.raises(ValueError, match="runs past"):
        rtnl.parse_answers(data[:-4])


def _newlink(index: int, flags: int, name: str | None, kind: int = rtnl.RTM_NEWLINK) -> bytes:
    # Encoded by pyroute2, an independent encoder of the same layout.
    msg = ifinfmsg()
    msg["header"]["type"] = kind
    msg["index"], msg["flags"] = index, flags
    msg["attrs"] = [("IFLA_MTU", 1500), *([("IFLA_IFNAME", name)] if name else []), ("IFLA_TXQLEN", 1000)]
    msg.encode()
    return bytes(msg.data)


names = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=15)
links = st.tuples(st.integers(1, (1 << 31) - 1), st.integers(0, (1 << 32) - 1), names)


@given(st.lists(links, max_size=6))
def test_link_states_are_what_pyroute2_encoded(announced) -> None:
    data = b"".join(_newlink(index, flags, name) for index, flags, name in announced)
    assert rtnl.parse_link_states(data) == (
        [rtnl.LinkState(name, index, flags, mtu=1500) for index, flags, name in announced],
        False,
    )


def test_link_states_skip_other_messages_and_see_the_end_of_a_dump() -> None:
    done = struct.pack("=IHHII", 20, rtnl.NLMSG_DONE, 2, 1, 0) + b"\0" * 4
    data = (
        _newlink(2, 0x1 | 0x10000, "eth1")
        + _newlink(3, 0x1, None)  # no name: skipped
        + _newlink(4, 0x1, "eth2", kind=17)  # RTM_DELLINK: not a state
        + _newlink(5, 0x1, "eth3")
        + done
    )
    states, end = rtnl.parse_link_states(data)
    assert end
    assert [(s.name, s.index, s.running) for s in states] == [("eth1", 2, True), ("eth3", 5, False)]
    with pytest.raises(ValueError, match="runs past"):
        rtnl.parse_link_states(data[:-30])


def test_the_dump_request_is_a_get_link_dump() -> None:
    msg = ifinfmsg(rtnl.link_dump_request(9))
    msg.decode()
    assert (msg["header"]["type"], msg["header"]["flags"], msg["header"]["sequence_number"]) == (18, 0x301, 9)
    assert (msg["header"]["length"], msg["family"], msg["index"]) == (32, 0, 0)


addresses = st.integers(0x01000000, 0xDFFFFFFF).map(lambda n: str(ipaddress.IPv4Address(n)))


@given(st.lists(st.tuples(st.integers(1, 1 << 20), addresses, st.integers(0, 32)), max_size=6))
def test_addresses_are_what_pyroute2_encoded(announced) -> None:
    data = b""
    for index, addr, prefixlen in announced:
        msg = ifaddrmsg()
        msg["header"]["type"] = 20
        msg["family"], msg["prefixlen"], msg["index"] = 2, prefixlen, index
        msg["attrs"] = [("IFA_ADDRESS", addr), ("IFA_LOCAL", addr), ("IFA_LABEL", "eth1")]
        msg.encode()
        data += bytes(msg.data)
    assert rtnl.parse_addresses(data + _done()) == (
        [rtnl.AddressState(index, addr, prefixlen) for index, addr, prefixlen in announced],
        True,
    )


def _done() -> bytes:
    return struct.pack("=IHHII", 20, rtnl.NLMSG_DONE, 2, 1, 0) + b"\0" * 4


def _route(prefix: str, hops, proto: int = 186, table: int = 254, rtype: int = 1) -> bytes:
    # Our encoder, then the header patched the way a dump answer differs from a request.
    data = bytearray(rtnl.route_replace(0, prefix, [(v, i, w) for v, i, w in hops], proto=proto))
    data[16 + 4] = min(table, 255)
    data[16 + 7] = rtype
    if table != 254:
        data = data.replace(
            struct.pack("=HHI", 8, rtnl.RTA_TABLE, 254), struct.pack("=HHI", 8, rtnl.RTA_TABLE, table)
        )
    return bytes(data)


@given(prefixes, st.lists(hop, min_size=1, max_size=8), st.integers(1, 255))
def test_routes_read_back_what_was_encoded(prefix, hops, proto) -> None:
    states, done = rtnl.parse_routes(_route(prefix, hops, proto) + _done())
    want = tuple(hops) if len(hops) > 1 else ((hops[0][0], hops[0][1], 1),)
    assert done and states == [rtnl.RouteState(str(ipaddress.IPv4Network(prefix)), proto, want)]


def test_routes_of_other_tables_and_types_are_skipped() -> None:
    hops = [("10.0.0.1", 2, 1)]
    data = (
        _route("10.1.0.0/16", hops, table=1000)
        + _route("10.2.0.0/16", hops, table=255)
        + _route("10.3.0.0/16", hops, rtype=2)  # local
        + _route("10.4.0.0/16", hops)
    )
    assert [r.prefix for r in rtnl.parse_routes(data)[0]] == ["10.4.0.0/16"]


def test_requests_decode_in_pyroute2_as_ip_would_send_them() -> None:
    link = ifinfmsg(rtnl.link_set(3, 7, mtu=9000))
    link.decode()
    assert (link["header"]["type"], link["header"]["flags"], link["header"]["sequence_number"]) == (16, 5, 3)
    assert (link["index"], link["flags"], link["change"], link.get_attr("IFLA_MTU")) == (7, 1, 1, 9000)
    down = ifinfmsg(rtnl.link_set(4, 7, up=False))
    down.decode()
    assert (down["flags"], down["change"], down.get_attr("IFLA_MTU")) == (0, 1, None)
    for request, kind, flags in (
        (rtnl.addr_replace(5, 9, "10.0.0.2/31"), 20, 0x1 | 0x4 | 0x400 | 0x100),
        (rtnl.addr_delete(5, 9, "10.0.0.2/31"), 21, 0x1 | 0x4),
    ):
        msg = ifaddrmsg(request)
        msg.decode()
        assert (msg["header"]["type"], msg["header"]["flags"], msg["header"]["length"]) == (
            kind,
            flags,
            len(request),
        )
        assert (msg["family"], msg["prefixlen"], msg["index"], msg["scope"]) == (2, 31, 9, 0)
        assert msg.get_attr("IFA_LOCAL") == msg.get_attr("IFA_ADDRESS") == "10.0.0.2"
    dump = ifaddrmsg(rtnl.addr_dump_request(1))
    dump.decode()
    assert (dump["header"]["type"], dump["header"]["flags"], dump["family"]) == (22, 0x301, 2)
    routes = rtmsg(rtnl.route_dump_request(1))
    routes.decode()
    assert (routes["header"]["type"], routes["header"]["flags"], routes["family"]) == (26, 0x301, 2)
