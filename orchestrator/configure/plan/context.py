"""What every feature module needs besides the plan: the topology, the vars, the defaults, and the
source (file and key path) of every value so that a conflict can name both sides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr, ValidationError

from orchestrator.configure.plan.schema import LabVars, PlanError
from orchestrator.lab.roles import NodeRole, Place, role_of
from orchestrator.lab.topology import Topology

DEFAULTS_PACKAGE = "orchestrator.configure.plan"
DEFAULTS_DISPLAY_DIR = "orchestrator/configure/plan"

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """``h2`` < ``h10``: digit runs compare as numbers. re.split with a group alternates str/int, so
    positions always hold the same type and tuples never compare str with int."""
    return tuple(int(t) if i % 2 else t for i, t in enumerate(_DIGITS.split(name)))


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(names, key=natural_key)


@dataclass(frozen=True)
class Source:
    """Where a value came from: ``file`` (vars file, defaults file, topology file) and ``path`` in it."""

    file: str
    path: str

    def __str__(self) -> str:
        return f"{self.path} ({self.file})"


def clash(
    a: Source, a_value: object, b: Source, b_value: object, relation: str = "clashes with"
) -> PlanError:
    """One message naming both sides; the file is said once when both sides share it."""
    if a.file == b.file:
        return PlanError(f"{a.file}: {a.path} = {a_value} {relation} {b.path} = {b_value}")
    return PlanError(f"{a.file}: {a.path} = {a_value} {relation} {b.path} = {b_value} ({b.file})")


def problem(src: Source, message: str) -> PlanError:
    return PlanError(f"{src.file}: {src.path}: {message}")


def validation_problems(exc: ValidationError) -> list[str]:
    """One line per problem: the key's path and pydantic's message (never the value: it may be a secret).
    A union's branch names (``literal[False]``, ``function-after[...]``) are pydantic's, not the user's
    keys: they are left out, and a message repeated for the branches of one key is said once."""
    out: list[str] = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"] if "[" not in str(p)) or "(top level)"
        line = f"{where}: {err['msg'].removeprefix('Value error, ')}"
        if line not in out:
            out.append(line)
    return out


@dataclass(frozen=True)
class Defaults:
    """The merged ``*.yml`` defaults of all features, and which file set each top-level key."""

    values: LabVars
    files: dict[str, str]


@cache
def load_defaults() -> Defaults:
    merged: dict[str, Any] = {}
    files: dict[str, str] = {}
    for entry in sorted(resources.files(DEFAULTS_PACKAGE).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yml"):
            continue
        shown = f"{DEFAULTS_DISPLAY_DIR}/{entry.name}"
        doc = yaml.safe_load(entry.read_text()) or {}
        for key, value in doc.items():
            if key in files:
                raise PlanError(f"{shown}: {key} already has a default in {files[key]}; keep one owner")
            merged[key] = value
            files[key] = shown
    try:
        values = LabVars.model_validate(merged)
    except ValidationError as exc:
        raise PlanError(f"{DEFAULTS_DISPLAY_DIR}/*.yml: " + "; ".join(validation_problems(exc))) from None
    return Defaults(values=values, files=files)


@dataclass
class Context:
    topo: Topology
    vars: LabVars
    defaults: Defaults = field(default_factory=load_defaults)
    # The lab's generated TCP-MD5 secret, asked for only when a session needs it (bgp.md5 unset); None: the
    # plan is computed without a lab and such sessions stay unsigned.
    lab_md5: Callable[[], SecretStr] | None = None
    roles: dict[str, str] = field(init=False)
    _node_roles: dict[str, NodeRole] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._node_roles = {name: role_of(node) for name, node in self.topo.nodes.items()}
        self.roles = {name: role.name for name, role in self._node_roles.items()}

    def role(self, node: str) -> NodeRole:
        return self._node_roles[node]

    @property
    def vars_file(self) -> str:
        return self.vars.source

    @property
    def topo_file(self) -> str:
        return str(self.topo.path)

    def vars_source(self, path: str) -> Source:
        return Source(self.vars_file, path)

    def setting(self, dotted: str) -> tuple[Any, Source]:
        """The vars value at ``dotted`` if set, else the default, with where it came from."""
        value = _walk(self.vars, dotted)
        if value is not None:
            return value, Source(self.vars_file, dotted)
        top = dotted.split(".", 1)[0]
        return _walk(self.defaults.values, dotted), Source(
            self.defaults.files.get(top, f"{DEFAULTS_DISPLAY_DIR}/*.yml"), dotted
        )

    def is_host(self, node: str) -> bool:
        return self.role(node).place is Place.HOST

    def is_switch(self, node: str) -> bool:
        return self.role(node).place is Place.SWITCH

    def is_managed(self, node: str) -> bool:
        return self.role(node).place is not Place.UNMANAGED


def _walk(model: BaseModel, dotted: str) -> Any:
    value: Any = model
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def check_pin_targets(ctx: Context) -> None:
    """Every ``nodes.X`` and ``links.N:I`` key of the vars must name something in the topology: a pin
    for a node that does not exist is almost always a typo, and silently ignoring it hides that."""
    for name in ctx.vars.nodes:
        if name not in ctx.topo.nodes:
            known = ", ".join(natural_sorted(ctx.topo.nodes))
            raise problem(
                ctx.vars_source(f"nodes.{name}"),
                f"no node {name!r} in {ctx.topo_file} (its nodes: {known})",
            )
    interfaces: dict[str, list[str]] = {}
    for link in ctx.topo.links:
        for ep in link.endpoints:
            interfaces.setdefault(ep.node, []).append(ep.interface)
    for key in ctx.vars.links:
        src = ctx.vars_source(f"links.{key}")
        node, sep, iface = key.partition(":")
        if not sep or not node or not iface or ":" in iface:
            raise problem(src, "a link is keyed by one of its ends as 'node:interface', e.g. 'leaf1:eth1'")
        if node not in ctx.topo.nodes:
            raise problem(src, f"no node {node!r} in {ctx.topo_file}")
        if iface not in interfaces.get(node, []):
            have = ", ".join(natural_sorted(interfaces.get(node, []))) or "none"
            raise problem(
                src, f"{node} has no link on interface {iface!r} in {ctx.topo_file} (its links: {have})"
            )


def link_pins(ctx: Context, attr: str) -> dict[int, tuple[Any, Source]]:
    """``links.<end>.<attr>`` pins by link index; both ends may be pinned only if they agree."""
    by_end = {}
    for index, link in enumerate(ctx.topo.links):
        for ep in link.endpoints:
            by_end[str(ep)] = index
    pins: dict[int, tuple[Any, Source]] = {}
    for key, link_vars in ctx.vars.links.items():
        value = getattr(link_vars, attr)
        if value is None:
            continue
        index = by_end[key]
        src = ctx.vars_source(f"links.{key}.{attr}")
        if index in pins and pins[index][0] != value:
            other_value, other_src = pins[index]
            raise clash(other_src, other_value, src, value, "disagrees with the other end's")
        pins.setdefault(index, (value, src))
    return pins
