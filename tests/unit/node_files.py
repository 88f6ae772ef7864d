"""A node file section's knobs as a lab plans them when its vars set none, for tests that write node files
by hand: the node file's models declare the knobs without defaults (the plan writes every one), and the
defaults are the features' own (orchestrator/configure/plan/*.yml), read from there rather than repeated."""

from __future__ import annotations

from typing import Any

from orchestrator.configure.plan.context import load_defaults
from orchestrator.configure.plan.schema import BGP_KNOBS, BIER_KNOBS, IGMP_KNOBS, IGMP_TIMERS, INA_KNOBS


def igmp_knobs(**changes: Any) -> dict[str, Any]:
    """The igmp section's knobs on an unscaled lab (each unset timer is its wall_timers value)."""
    igmp = load_defaults().values.igmp
    knobs = {key: getattr(igmp, key) for key in IGMP_KNOBS}
    for key in IGMP_TIMERS:
        if knobs[key] is None:
            knobs[key] = getattr(igmp.wall_timers, key)
    return {**knobs, **changes}


def bier_knobs(**changes: Any) -> dict[str, Any]:
    bier = load_defaults().values.bier
    return {**{key: getattr(bier, key) for key in (*BIER_KNOBS, "bsl")}, **changes}


def bgp_knobs(**changes: Any) -> dict[str, Any]:
    bgp = load_defaults().values.bgp
    return {**{key: getattr(bgp, key) for key in BGP_KNOBS}, **changes}


def ina_member_knobs(**changes: Any) -> dict[str, Any]:
    """A GPU host's part in a job: the job's reduction and element type."""
    ina = load_defaults().values.ina
    return {**{key: getattr(ina, key) for key in INA_KNOBS}, **changes}


def ina_job_knobs(**changes: Any) -> dict[str, Any]:
    """A VAT node's: the member's knobs and the slot budget."""
    return ina_member_knobs(slot_budget=load_defaults().values.ina.slot_budget, **changes)
