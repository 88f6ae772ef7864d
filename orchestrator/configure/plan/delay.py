"""Propagation delay per link (docs/delay.md): what a fibre adds after the port has serialised a packet.

Per link, the first that is set wins: a pin on either end (``links.<node:iface>.delay``), the default of
the link's class (``delay.host``, ``delay.fabric``, ``delay.dci``). A link is ``host`` when a GPU host is
at one end, ``dci`` when its two ends are in different sites (nodes labelled :data:`SITE_LABEL` with
different values; a node without the label is in no site and never makes a DCI link), ``fabric``
otherwise. Jitter likewise: ``links.<end>.jitter`` or ``delay.jitter``, and only on a delayed link.
"""

from __future__ import annotations

from typing import Any

from orchestrator.configure.plan.context import Context, Source, link_pins, problem
from orchestrator.configure.plan.schema import LabPlan
from orchestrator.lab.delay import DelayError, LinkDelay, format_duration, parse_duration

# The node label that places a node in a site (containerlab labels; a group can set it for its nodes).
SITE_LABEL = "aidclab-site"
LINK_CLASSES = ("host", "fabric", "dci")


def _seconds(value: Any, src: Source, what: str) -> float:
    try:
        return parse_duration(value, what)
    except DelayError as exc:
        raise problem(src, str(exc)) from None


def site_of(ctx: Context, node: str) -> str | None:
    return ctx.topo.nodes[node].labels.get(SITE_LABEL)


def link_class(ctx: Context, a: str, b: str) -> str:
    if ctx.is_host(a) or ctx.is_host(b):
        return "host"
    site_a, site_b = site_of(ctx, a), site_of(ctx, b)
    if site_a is not None and site_b is not None and site_a != site_b:
        return "dci"
    return "fabric"


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    by_class = {}
    for name in LINK_CLASSES:
        value, src = ctx.setting(f"delay.{name}")
        by_class[name] = (_seconds(value, src, "delay"), src)
    jitter_value, jitter_src = ctx.setting("delay.jitter")
    default_jitter = _seconds(jitter_value, jitter_src, "jitter")
    delay_pins = link_pins(ctx, "delay")
    jitter_pins = link_pins(ctx, "jitter")
    for index, link in enumerate(plan.links):
        link.link_class = link_class(ctx, link.a.node, link.b.node)  # type: ignore[assignment]
        if index in delay_pins:
            value, src = delay_pins[index]
            delay = _seconds(value, src, "delay")
        else:
            delay, src = by_class[link.link_class]
        if index in jitter_pins:
            value, jsrc = jitter_pins[index]
            jitter = _seconds(value, jsrc, "jitter")
        else:
            jitter, jsrc = (default_jitter, jitter_src) if delay > 0 else (0.0, jitter_src)
        try:
            LinkDelay(delay, jitter)
        except DelayError as exc:
            where = f"link {link.a}--{link.b} ({format_duration(delay)} from {src})"
            raise problem(jsrc, f"{where}: {exc}") from None
        link.delay_s, link.jitter_s = delay, jitter
    return plan
