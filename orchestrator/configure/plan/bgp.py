"""BGP underlay with FARE: whether the plan runs BGP, and its settings (docs/fare.md).

Sessions follow RFC 7938: one eBGP session per link between two managed nodes, on the link addresses,
with the ASNs of :mod:`orchestrator.configure.plan.asn`. The sessions themselves are derived per node in
:func:`orchestrator.configure.plan.configs.bgp_config`; this module only settles the lab-wide settings.

``bier.bift: bgp`` (BIER over BGP, RFC 9793) needs the BGP underlay, so it turns ``bgp.enabled`` on unless
the vars say ``false`` explicitly, which is a contradiction and an error naming both keys.
"""

from __future__ import annotations

from orchestrator.configure.plan.context import Context, clash
from orchestrator.configure.plan.model import LabPlan, PlanBgp


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    values = {}
    for key in ("enabled", "mode", "link_bandwidth", "weights", "hold_time"):
        values[key], _src = ctx.setting(f"bgp.{key}")
    if plan.bier.bift == "bgp":
        bift_src = ctx.setting("bier.bift")[1]
        if ctx.vars.bgp.enabled is False:
            why = "contradicts (BIER over BGP needs BGP)"
            raise clash(ctx.vars_source("bgp.enabled"), False, bift_src, "bgp", why)
        values["enabled"] = True
    plan.bgp = PlanBgp(**values)
    return plan
