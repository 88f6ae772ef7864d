"""The model's wire sizes are the bytes the agents put on a link: every replay datagram (its RoCEv2 BTH
included) wrapped as unicast/network-BIER hosts and as BFRs wrap it, counted as a veth counts a frame."""

from __future__ import annotations

import pytest

from aidcnet.bier.header import BierHeader
from aidcnet.bier.mpls import encode_bier_udp_payload
from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT, build_udp
from aidcnet.replay import build_fragments, fragment_sizes
from orchestrator.model.wire import ETHERNET_HEADER, replay_bier_frame_overhead, replay_frame_overhead

SIZES = [1, 40, 41, 8000, 8001, 20_000]


def host_packet(datagram: bytes, dst: str = "10.255.0.2") -> bytes:
    """The IPv4/UDP packet a host sends a replay datagram in (to a receiver's loopback or a group)."""
    return build_udp("10.255.0.1", dst, QP_PORT_BASE, ROCEV2_PORT, datagram)


@pytest.mark.parametrize("size", SIZES)
def test_a_plain_hop_carries_each_fragment_with_the_models_overhead(size: int) -> None:
    frames = [ETHERNET_HEADER + len(host_packet(d)) for d in build_fragments(9, size, 0)]
    assert frames == [replay_frame_overhead() + f for f in fragment_sizes(size)]


@pytest.mark.parametrize("bsl", [64, 256, 4096])
@pytest.mark.parametrize("size", SIZES)
def test_a_bier_hop_carries_each_fragment_with_the_models_overhead(size: int, bsl: int) -> None:
    header = BierHeader(bift_id=16, bitstring=1, bsl=bsl).encode()
    frames = []
    for d in build_fragments(9, size, 0):
        mpls_in_udp = encode_bier_udp_payload(header, host_packet(d, "232.1.0.1"))
        frames.append(ETHERNET_HEADER + len(build_udp("10.0.0.1", "10.0.0.2", 6635, 6635, mpls_in_udp)))
    assert frames == [replay_bier_frame_overhead(bsl) + f for f in fragment_sizes(size)]
