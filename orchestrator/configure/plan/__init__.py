"""The lab plan: addresses, ASNs, BFR-IDs, planes, link bandwidth and static routes, computed from a
topology and its ``labs/<lab>.vars.yml`` (docs/lab-plan.md).

One module per feature transforms the typed :class:`LabPlan` in turn, each with its defaults as data
in a ``.yml`` beside it (the netlab module layout, docs/design.md §7). Pure logic: the only I/O is reading
the vars file and writing the plan file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import yaml
from pydantic import SecretStr, ValidationError

from orchestrator.configure.plan import (
    addressing,
    asn,
    bandwidth,
    bfd,
    bgp,
    bier,
    delay,
    igmp,
    ina,
    planes,
    routes,
    scheduled_faults,
    tiers,
    timescale,
)
from orchestrator.configure.plan.configs import node_config, node_configs
from orchestrator.configure.plan.context import Context, check_pin_targets, validation_problems
from orchestrator.configure.plan.schema import (
    GroupVars,
    LabPlan,
    LabVars,
    PlanEndpoint,
    PlanError,
    PlanLink,
    PlanNode,
)
from orchestrator.lab.labdir import settle_mgmt
from orchestrator.lab.topology import Topology

__all__ = [
    "FEATURES",
    "LabPlan",
    "LabVars",
    "PlanError",
    "build_plan",
    "describe_vars",
    "dump_plan",
    "load_vars",
    "node_config",
    "node_configs",
    "read_plan",
    "vars_candidates",
    "vars_path_for",
    "write_plan",
]

# Order matters: tiers feed ASNs and BFR-ID order, addresses feed routes, routes feed BIER fast reroute's
# next-next hops, planes read the tiers' graph, the time scale divides the bandwidth.
FEATURES = (
    tiers,
    addressing,
    bandwidth,
    timescale,
    delay,
    planes,
    asn,
    routes,
    bier,
    bgp,
    ina,
    igmp,
    bfd,
    scheduled_faults,
)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block YAML, except short scalar lists and next-hop entries on one line each: a SuperPoD plan has
    some 16k next hops, and three lines apiece make the file three times longer to read and diff."""


class _FlowList(list):
    pass


class _FlowDict(dict):
    pass


_Dumper.add_representer(
    _FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)
_Dumper.add_representer(
    _FlowDict, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v.items(), flow_style=True)
)


def _scalar(value: object) -> bool:
    return not isinstance(value, dict | list)


def _compact(value: object, in_list: bool = False) -> object:
    if isinstance(value, dict):
        if in_list and value and all(map(_scalar, value.values())):
            return _FlowDict(value)
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        if all(map(_scalar, value)):
            return _FlowList(value)
        return [_compact(v, in_list=True) for v in value]
    return value


def vars_candidates(topo: Topology) -> list[Path]:
    """Where a lab's vars file may be, beside the topology file: ``<lab name>.vars.yml`` and
    ``<file stem>.vars.yml`` (``rfc6-6.clab.yml`` with ``name: rfc66`` has its vars in
    ``rfc6-6.vars.yml``)."""
    stem = topo.path.name
    for suffix in (".clab.yml", ".clab.yaml", ".yml", ".yaml"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    names = dict.fromkeys([f"{topo.name}.vars.yml", f"{stem}.vars.yml"])
    return [topo.path.parent / n for n in names]


def vars_path_for(topo: Topology) -> Path:
    """The lab's vars file beside the topology file (see vars_candidates); when none exists, the
    ``<lab name>.vars.yml`` path, which load_vars reads as every default. Two candidates that both exist
    and say different things are an error naming both, so a vars file is never silently ignored."""
    candidates = vars_candidates(topo)
    found = [p for p in candidates if p.exists()]
    if len(found) > 1:
        docs = []
        for p in found:
            try:
                docs.append(yaml.safe_load(p.read_text()))
            except yaml.YAMLError as exc:
                raise PlanError(f"{p}: not valid YAML: {exc}") from None
        if any(d != docs[0] for d in docs[1:]):
            raise PlanError(
                f"lab {topo.name!r} ({topo.path}) has two vars files that disagree: "
                + " and ".join(str(p) for p in found)
                + "; keep one (or make them identical)"
            )
    return found[0] if found else candidates[0]


def describe_vars(topo: Topology) -> str:
    """One line saying which vars file a plan of this lab uses, or that none was found and where we looked."""
    path = vars_path_for(topo)
    if path.exists():
        return f"vars: {path}"
    looked = ", ".join(str(p) for p in vars_candidates(topo))
    return f"vars: none found ({looked}); every key takes its default"


def load_vars(path: str | Path) -> LabVars:
    """Read a vars file; a missing or empty file means every default."""
    path = Path(path)
    if not path.exists():
        return LabVars().with_source(str(path))
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PlanError(f"{path}: not valid YAML: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise PlanError(f"{path}: the vars file must be a mapping (pools:, nodes:, links:, ...)")
    try:
        return LabVars.model_validate(doc).with_source(str(path))
    except ValidationError as exc:
        raise PlanError(f"{path}: " + "; ".join(validation_problems(exc))) from None


def build_plan(
    topo: Topology,
    lab_vars: LabVars | None = None,
    extra_groups: Iterable[GroupVars | dict] = (),
    lab_md5: Callable[[], SecretStr] | None = None,
) -> LabPlan:
    """Compute the plan; ``lab_vars`` defaults to the topology's vars file (or all defaults).
    ``extra_groups`` (``bier.groups`` entries) are appended to the vars' groups for this plan only:
    ``aidclab replay --mode net-bier`` adds its groups this way without editing the user's file.
    ``lab_md5`` gives the lab's own TCP-MD5 secret, which signs the sessions the vars give none (called
    only if one does); without it those sessions are unsigned."""
    if lab_vars is None:
        lab_vars = load_vars(vars_path_for(topo))
    settle_mgmt(topo)
    extra = [GroupVars.model_validate(g) for g in extra_groups]
    if extra:
        source = lab_vars.source
        groups = [*lab_vars.bier.groups, *extra]
        lab_vars = lab_vars.model_copy(
            update={"bier": lab_vars.bier.model_copy(update={"groups": groups})}
        ).with_source(source)
    ctx = Context(topo=topo, vars=lab_vars, lab_md5=lab_md5)
    check_pin_targets(ctx)
    plan = LabPlan(
        lab=topo.name,
        topology=str(topo.path),
        vars=lab_vars.source,
        nodes={name: PlanNode(name=name, role=ctx.roles[name]) for name in topo.nodes},
        links=[
            PlanLink(
                index=link.index,
                a=PlanEndpoint(node=link.a.node, interface=link.a.interface),
                b=PlanEndpoint(node=link.b.node, interface=link.b.interface),
                mtu=link.mtu,
            )
            for link in topo.links
        ],
    )
    for feature in FEATURES:
        plan = feature.apply(plan, ctx)
    return plan


def dump_plan(plan: LabPlan) -> str:
    """Canonical YAML: the same plan always gives the same bytes (so a re-plan shows no diff)."""
    return yaml.dump(
        _compact(plan.model_dump(mode="json")),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        width=120,
    )


def read_plan(path: str | Path) -> LabPlan:
    """plan.yml back into the plan. libyaml's loader where PyYAML has it: on bsl256 (0.7 MB) the pure-Python
    one took seconds of every replay's prepare."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return LabPlan.model_validate(yaml.load(Path(path).read_text(), Loader=loader))


def write_plan(plan: LabPlan, path: str | Path) -> bool:
    """Write the plan file; returns False (and leaves the file alone) when it is already up to date."""
    path = Path(path)
    text = dump_plan(plan)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True
