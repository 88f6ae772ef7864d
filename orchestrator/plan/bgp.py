"""BGP underlay with FARE: whether the plan runs BGP, and its settings (docs/fare.md).

Sessions follow RFC 7938: one eBGP session per link between two managed nodes, on the link addresses,
with the ASNs of :mod:`orchestrator.plan.asn`. The sessions themselves are derived per node in
:func:`orchestrator.plan.configs.bgp_config`; this module only settles the lab-wide settings.
"""

from __future__ import annotations

from orchestrator.plan.context import Context
from orchestrator.plan.model import LabPlan, PlanBgp


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    values = {}
    for key in ("enabled", "mode", "link_bandwidth", "hold_time"):
        values[key], _src = ctx.setting(f"bgp.{key}")
    plan.bgp = PlanBgp(**values)
    return plan
