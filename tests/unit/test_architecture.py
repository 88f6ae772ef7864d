"""The shape docs/architecture.md promises, checked on the source: no import cycle, short functions where
the daemons and the orchestrator live, and mode and role names written out in one module each."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

from aidcnet.modes import Mode
from aidcnet.roles import Role
from orchestrator.paths import ROOT

PACKAGES = ("aidclab", "orchestrator", "aidcnet")
MAX_FUNCTION_LINES = 80


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(tree: ast.Module, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Project modules ``module`` imports, at any depth (function-level imports too), except under
    ``if TYPE_CHECKING``: those never run."""
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if _type_checking_only(node):
            skip |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            # The deepest project module the name points into (a name may be a module or an attribute).
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph() -> nx.DiGraph:
    mods = modules()
    known = set(mods)
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        tree = ast.parse(path.read_text())
        for target in imported(tree, name, path.name == "__init__.py", known):
            # Importing a.b.c runs a/__init__ and a/b/__init__ too, but a package's own submodules
            # importing it back is how packages work, not a cycle of concerns.
            if not name.startswith(target + "."):
                graph.add_edge(name, target)
    return graph


def test_no_import_cycles() -> None:
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles}"


def test_the_cycle_check_sees_a_cycle() -> None:
    graph = import_graph()
    graph.add_edge("aidcnet.roles", "orchestrator.lab.roles.base")  # the base imports roles: a cycle
    assert any(len(c) > 1 for c in nx.strongly_connected_components(graph))


@pytest.mark.parametrize("where", ["orchestrator", "aidcnet/agent"])
def test_no_function_over_80_lines(where: str) -> None:
    long = []
    for path in (ROOT / where).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


# The same words in other vocabularies, each defined in its own one place: a trace op kind (what a
# workload does, not how a run carries it), the agent's `ina` control operation and ctl verb, the PS
# address field of an AllReduce request, containerlab's `kind: linux`, and Python's platform name.
OTHER_VOCABULARIES = {
    ("unicast", "orchestrator/workloads/trace.py"),
    ("ina", "aidcnet/agent/control.py"),
    ("ina", "aidcnet/cli.py"),
    ("ps", "orchestrator/experiment/modes/ps.py"),
    ("ps", "aidcnet/agent/ina_worker.py"),
    ("linux", "orchestrator/lab/topology.py"),
    ("linux", "aidcnet/udpio.py"),
    ("linux", "bench/bier_forwarding.py"),
    # The agent's `igmp` control operation, the node file's and lab vars' `igmp` section, and the
    # sources a leaf's BitStrings come from (igmp.groups: static, igmp, proxy), defined with IGMP.
    ("igmp", "aidcnet/agent/control.py"),
    ("igmp", "aidcnet/config.py"),
    ("proxy", "aidcnet/config.py"),
    ("igmp", "aidcnet/igmp/leaf.py"),
    ("proxy", "aidcnet/igmp/leaf.py"),
    ("igmp", "aidcnet/igmp/node.py"),
    ("proxy", "aidcnet/igmp/node.py"),
    ("igmp", "orchestrator/configure/plan/model.py"),
    ("proxy", "orchestrator/configure/plan/model.py"),
}


@pytest.mark.parametrize(("names", "home"), [(Mode, "aidcnet/modes.py"), (Role, "aidcnet/roles.py")])
def test_names_are_written_out_once(names: type, home: str) -> None:
    words = {str(m) for m in names}
    where: dict[str, set[str]] = {}
    for package in (*PACKAGES, "bench"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Constant) or node.value not in words:
                    continue
                if (node.value, rel) not in OTHER_VOCABULARIES:
                    where.setdefault(node.value, set()).add(rel)
    assert {w: sorted(files) for w, files in where.items() if files != {home}} == {}
    assert set(where) == words  # each is written out somewhere: in its home
