"""BGP underlay with FARE: whether the plan runs BGP, and its settings (docs/fare.md).

Sessions follow RFC 7938: one eBGP session per link between two managed nodes, on the link addresses,
with the ASNs of :mod:`orchestrator.configure.plan.asn`. The sessions themselves are derived per node in
:func:`orchestrator.configure.plan.configs.bgp_config`; this module only settles the lab-wide settings.

``bier.bift: bgp`` (BIER over BGP, RFC 9793) needs the BGP underlay, so it turns ``bgp.enabled`` on unless
the vars say ``false`` explicitly, which is a contradiction and an error naming both keys.

TCP-MD5 (RFC 2385) per session: ``links.<end>.md5`` (a secret, or false), else ``bgp.md5``, else the lab's
own secret (``Context.lab_md5``, generated once into the lab dir by configure). A secret may be
written in the vars or read from an environment variable or a file the vars name, so the vars file can be
shared without it. The secret is checked here against what the node file accepts, and every message names
the key, never the value; the plan keeps it out of plan.yml (``PlanLink.md5_secret`` is excluded).

GTSM (RFC 5082): ``bgp.ttl_security_hops`` (default 1) on every session whose both ends do GTSM.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import SecretStr

from orchestrator.configure.plan.context import Context, Source, clash, link_pins, problem
from orchestrator.configure.plan.schema import BGP_KNOBS, LabPlan, Md5Secret, PlanBgp, SecretRef
from orchestrator.lab.roles import role_named


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    values = {}
    for key in ("enabled", *BGP_KNOBS):
        values[key], _src = ctx.setting(f"bgp.{key}")
    if plan.bier.bift == "bgp":
        bift_src = ctx.setting("bier.bift")[1]
        if ctx.vars.bgp.enabled is False:
            why = "contradicts (BIER over BGP needs BGP)"
            raise clash(ctx.vars_source("bgp.enabled"), False, bift_src, "bgp", why)
        values["enabled"] = True
    plan.bgp = PlanBgp(**values)
    if plan.bgp.enabled:
        _plan_md5(plan, ctx)
        _plan_gtsm(plan, ctx)
    return plan


def _plan_md5(plan: LabPlan, ctx: Context) -> None:
    default, default_src = ctx.setting("bgp.md5")
    pins = link_pins(ctx, "md5")
    secrets: dict[Source, SecretStr] = {}  # each secret read once, however many links use it
    for index, link in enumerate(plan.links):
        value, src = pins.get(index, (default, default_src))
        if value is False:
            continue
        if value is None:
            # Unset: the lab's own secret. A plan computed without a lab (models, unit tests) has none to
            # give and leaves these sessions unsigned; configure always passes the lab's.
            if ctx.lab_md5 is None:
                continue
            if src not in secrets:
                secrets[src] = ctx.lab_md5()
        elif src not in secrets:
            secrets[src] = read_secret(value, src, ctx)
        link.md5, link.md5_secret = True, secrets[src]


def _plan_gtsm(plan: LabPlan, ctx: Context) -> None:
    hops, _src = ctx.setting("bgp.ttl_security_hops")
    if hops is None or hops is False:
        return
    plan.bgp.ttl_security_hops = hops
    for link in plan.links:
        # Only between two speakers whose rendering does GTSM (the role says: ExaBGP through
        # aidcnet.bgp.exabgp_main, FRR's ttl-security).
        if role_named(plan.nodes[link.a.node].role).gtsm and role_named(plan.nodes[link.b.node].role).gtsm:
            link.ttl_security_hops = hops


def read_secret(value: Md5Secret, src: Source, ctx: Context) -> SecretStr:
    """The secret a vars value stands for, checked as the node file will check it."""
    from aidcnet.config import BgpNeighbor

    if isinstance(value, SecretRef):
        if value.env is not None:
            text = os.environ.get(value.env)
            if text is None:
                raise problem(src, f"the environment variable {value.env} is not set (export it, then retry)")
        else:
            assert value.file is not None
            vars_file = Path(ctx.vars_file)
            path = Path(value.file) if Path(value.file).is_absolute() else vars_file.parent / value.file
            try:
                text = path.read_text().rstrip("\n")
            except OSError as exc:
                raise problem(src, f"cannot read the secret file {path}: {exc.strerror}") from None
        value = SecretStr(text)
    # The node file's own rule (aidcnet.config.BgpNeighbor), so the plan never writes one it refuses.
    field = BgpNeighbor.model_fields["md5_password"]
    pattern = next(m.pattern for m in field.metadata if getattr(m, "pattern", None))
    if not re.fullmatch(pattern, value.get_secret_value()):
        raise problem(src, f"not a valid secret: {field.description}")
    return value
