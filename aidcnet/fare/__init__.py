"""FARE (Fully Adaptive Routing Ethernet) pure logic: link-bandwidth community, bandwidth
strings, and the per-node rules that turn received bandwidth into advertised bandwidth and
weighted-ECMP next-hop weights. No I/O here: the BGP agent around ExaBGP calls into it."""

from aidcnet.fare.bandwidth import BandwidthError, format_bandwidth, parse_bandwidth
from aidcnet.fare.linkbw import LinkBandwidth, LinkBandwidthDecodeError, effective_bandwidth
from aidcnet.fare.weights import (
    NextHopInput,
    RouteView,
    SmoothWeightedRoundRobin,
    changed_prefixes,
    compute_route,
    flow_shares,
    kernel_weights,
    select_next_hop,
)

__all__ = [
    "BandwidthError",
    "LinkBandwidth",
    "LinkBandwidthDecodeError",
    "NextHopInput",
    "RouteView",
    "SmoothWeightedRoundRobin",
    "changed_prefixes",
    "compute_route",
    "effective_bandwidth",
    "flow_shares",
    "format_bandwidth",
    "kernel_weights",
    "parse_bandwidth",
    "select_next_hop",
]
