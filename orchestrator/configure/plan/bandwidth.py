"""Link bandwidth: what FARE advertises (bytes/s in the community, bits/s in node configs).

Per link, the first that is set wins: a pin on either end (``links.<node:iface>.bandwidth``), the host
default for links with a GPU host at one end (``bandwidth.host``), the fabric default
(``bandwidth.default``). Sub-links work the same way; a port's bandwidth is split evenly across them.
"""

from __future__ import annotations

from typing import Any

from aidcnet.fare.bandwidth import BandwidthError, bytes_to_bits, format_bandwidth, parse_bandwidth
from orchestrator.configure.plan.context import Context, Source, link_pins, problem
from orchestrator.configure.plan.schema import LabPlan


def _bits(value: Any, src: Source) -> int:
    try:
        bits = round(bytes_to_bits(parse_bandwidth(value)))
    except BandwidthError as exc:
        raise problem(src, str(exc)) from None
    if bits <= 0:
        raise problem(src, f"bandwidth {value!r} must be above zero")
    return bits


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    bw_pins = link_pins(ctx, "bandwidth")
    sub_pins = link_pins(ctx, "sublinks")
    default_bw, default_bw_src = ctx.setting("bandwidth.default")
    default_sub, _ = ctx.setting("bandwidth.sublinks")
    host_bw, host_bw_src = ctx.setting("bandwidth.host")
    host_sub, _ = ctx.setting("bandwidth.host_sublinks")
    # Parse the defaults even when no link uses them: a typo in the vars should not wait for a lab
    # shape that happens to need it.
    default_bits = _bits(default_bw, default_bw_src)
    host_bits = _bits(host_bw, host_bw_src) if host_bw is not None else None

    for index, link in enumerate(plan.links):
        to_host = ctx.is_host(link.a.node) or ctx.is_host(link.b.node)
        if index in bw_pins:
            value, src = bw_pins[index]
            bits = _bits(value, src)
        elif to_host and host_bits is not None:
            bits = host_bits
        else:
            bits = default_bits
        if index in sub_pins:
            sublinks = sub_pins[index][0]
        elif to_host and host_sub is not None:
            sublinks = host_sub
        else:
            sublinks = default_sub
        link.bandwidth = format_bandwidth(bits / 8)
        link.bandwidth_bps = bits
        link.sublinks = sublinks
        link.sublink_bandwidth_bps = round(bits / sublinks)
    return plan
