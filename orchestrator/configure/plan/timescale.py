"""Time scale and link shaping: what each veth really carries (docs/time-and-fidelity.md).

The emulation runs ``time.scale`` times slower than the fabric it stands for, so that no node's software
is ever the bottleneck: each link end is shaped to ``bandwidth_bps / scale`` with a queue limit in bytes
(``bandwidth.queue``, or a pin ``links.<node:iface>.queue``). Bytes are not scaled: a queue of Q bytes
delays a packet Q / bandwidth of fabric time, which is what the real port buffer would do.
"""

from __future__ import annotations

import argparse
from typing import Any

from aidcnet.timescale import TimeScale, TimeScaleError
from orchestrator.configure.plan.context import Context, Source, link_pins, problem
from orchestrator.configure.plan.schema import LabPlan, PlanTime

AUTO = "auto"
# With time.scale: auto, configure shapes the links at this scale (400G at 20 Mbit/s): each replay then
# reshapes them to what its trace needs on this machine.
AUTO_START = 20000
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
    auto = scale == AUTO
    if auto:
        scale = AUTO_START
    try:
        time_scale = TimeScale.of(scale)
    except TimeScaleError as exc:
        raise problem(scale_src, str(exc)) from None
    scale = time_scale.value
    default_queue, default_queue_src = ctx.setting("bandwidth.queue")
    default_q = queue_bytes(default_queue, default_queue_src)
    pins = link_pins(ctx, "queue")
    plan.time = PlanTime(scale=scale, auto=auto)
    for index, link in enumerate(plan.links):
        link.queue_bytes = queue_bytes(*pins[index]) if index in pins else default_q
        if scale is None:
            link.shaped_bps = 0  # unshaped: the veth runs as fast as the nodes send
            continue
        why = time_scale.check_link(link.bandwidth_bps)
        if why is not None:
            raise problem(scale_src, f"link {link.a}--{link.b} at {link.bandwidth} over scale {scale}: {why}")
        link.shaped_bps = time_scale.veth_bps(link.bandwidth_bps)
    return plan
