"""Time scale and link shaping: what each veth really carries (docs/time-and-fidelity.md).

The emulation runs ``time.scale`` times slower than the fabric it stands for, so that no node's software
is ever the bottleneck: each link end is shaped to ``bandwidth_bps / scale`` with a queue limit in bytes
(``bandwidth.queue``, or a pin ``links.<node:iface>.queue``). Bytes are not scaled: a queue of Q bytes
delays a packet Q / bandwidth of fabric time, which is what the real port buffer would do.
"""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.configure.plan.context import Context, Source, link_pins, problem
from orchestrator.configure.plan.model import LabPlan, PlanTime

# tc's TBF carries the rate as 32-bit bytes/s (TCA_TBF_PARMS; pyroute2 sends no RATE64).
MAX_SHAPED_BPS = (2**32 - 1) * 8
# A queue must hold at least one jumbo frame or the shaper drops everything that size.
MIN_QUEUE_BYTES = 9600


def queue_bytes(value: Any, src: Source) -> int:
    from orchestrator.units import parse_size

    try:
        size = parse_size(str(value))
    except argparse.ArgumentTypeError as exc:
        raise problem(src, str(exc)) from None
    if size < MIN_QUEUE_BYTES:
        raise problem(src, f"queue {value!r} is below {MIN_QUEUE_BYTES} bytes: it must hold one jumbo frame")
    return size


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    scale, scale_src = ctx.setting("time.scale")
    if scale == "off":
        scale = None
    default_queue, default_queue_src = ctx.setting("bandwidth.queue")
    default_q = queue_bytes(default_queue, default_queue_src)
    pins = link_pins(ctx, "queue")
    plan.time = PlanTime(scale=scale)
    for index, link in enumerate(plan.links):
        link.queue_bytes = queue_bytes(*pins[index]) if index in pins else default_q
        if scale is None:
            link.shaped_bps = 0  # unshaped: the veth runs as fast as the nodes send
            continue
        shaped = max(1, round(link.bandwidth_bps / scale))
        if shaped > MAX_SHAPED_BPS:
            raise problem(
                scale_src,
                f"link {link.a}--{link.b} at {link.bandwidth} over scale {scale} is {shaped / 1e9:.1f} "
                f"Gbit/s on the veth, above the {MAX_SHAPED_BPS / 1e9:.1f} Gbit/s tc's TBF can shape; "
                f"raise time.scale to at least {-(-link.bandwidth_bps // MAX_SHAPED_BPS)}",
            )
        link.shaped_bps = shaped
    return plan
