"""aidcnet.rtnl: route requests decoded by pyroute2's independent rtnetlink parser; answers from crafted
kernel messages (layouts of linux/netlink.h)."""

from __future__ import annotations

import errno
import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
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
