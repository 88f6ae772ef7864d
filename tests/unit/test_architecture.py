"""The shape docs/architecture.md promises, checked on the source: no import cycle, no two orchestrator
packages importing each other, the page's table of imports true, short functions where the daemons, the
orchestrator and the benches live, mode and role names written out in one module each, and nothing citing a
file that is not in the repository."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
from functools import cache
from pathlib import Path

import networkx as nx
import pytest

from aidcnet.modes import Mode
from aidcnet.roles import Role
from orchestrator.lab import roles as roles_package
from orchestrator.lab.roles import ROLES
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
    """A copy each caller may change (parsing every module once is most of this file's time)."""
    return _import_graph().copy()


@cache
def _import_graph() -> nx.DiGraph:
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


# The orchestrator's packages (directories); its top-level modules (paths, progress, units) are helpers any
# package may import, and they import none.
ORCHESTRATOR_PACKAGES = frozenset(
    p.name for p in (ROOT / "orchestrator").iterdir() if (p / "__init__.py").is_file()
)


def package_imports(graph: nx.DiGraph) -> dict[str, set[str]]:
    """Orchestrator package -> the other orchestrator packages its modules import (function-local imports
    included: the graph has them)."""
    out: dict[str, set[str]] = {name: set() for name in ORCHESTRATOR_PACKAGES}
    for a, b in graph.edges:
        pa, pb = _orchestrator_package(a), _orchestrator_package(b)
        if pa and pb and pa != pb:
            out[pa].add(pb)
    return out


def _orchestrator_package(module: str) -> str | None:
    top, _, rest = module.partition(".")
    package = rest.partition(".")[0]
    return package if top == "orchestrator" and package in ORCHESTRATOR_PACKAGES else None


def two_way(imports: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in imports.items() for b in targets if a < b and a in imports[b])


def test_no_two_way_imports_between_orchestrator_packages() -> None:
    """The packages sit on floors (docs/architecture.md): an import may go down, never back up, not even
    inside a function, where no module cycle shows."""
    assert two_way(package_imports(import_graph())) == []


def test_the_two_way_check_sees_a_function_local_import() -> None:
    tree = ast.parse("def f():\n    from orchestrator.experiment.replay_groups import derive_groups\n")
    known = set(modules())
    found = imported(tree, "orchestrator.configure.leaf_groups", False, known)
    assert found == {"orchestrator.experiment.replay_groups"}
    graph = import_graph()
    graph.add_edge("orchestrator.configure.leaf_groups", "orchestrator.experiment.replay_groups")
    assert two_way(package_imports(graph)) == [("configure", "experiment")]


ARCHITECTURE_PAGE = ROOT / "docs" / "architecture.md"


def documented_imports() -> dict[str, set[str]]:
    """docs/architecture.md's table of packages: orchestrator package -> the orchestrator packages its
    "imports" cell names (other words in the cell, such as aidcnet's, are not checked here)."""
    out: dict[str, set[str]] = {}
    for line in ARCHITECTURE_PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        row = re.fullmatch(r"`orchestrator/(\w+)/`", cells[0]) if len(cells) == 3 else None
        if row:
            out[row[1]] = set(re.findall(r"\w+", cells[2])) & ORCHESTRATOR_PACKAGES
    return out


def test_the_architecture_page_names_the_imports() -> None:
    assert documented_imports() == package_imports(import_graph())


def long_functions(source: str, name: str) -> list[str]:
    """``name:LINE function (N lines)`` for every function of ``source`` longer than MAX_FUNCTION_LINES."""
    long = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > MAX_FUNCTION_LINES:
                long.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return long


# bench/: a bench's main reads as a short list of steps (deploy through the shared lifecycle, measure,
# print), its measurements and lines in functions of their own.
@pytest.mark.parametrize("where", ["orchestrator", "aidcnet", "aidclab", "bench"])
def test_no_function_over_80_lines(where: str) -> None:
    long = []
    for path in (ROOT / where).rglob("*.py"):
        long += long_functions(path.read_text(), str(path.relative_to(ROOT)))
    assert long == []


def test_the_length_check_sees_a_long_function() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def main():\n{body}", "m.py") == [f"m.py:1 main ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions("def main():\n    return 0\n", "m.py") == []


# -- mode families ------------------------------------------------------------------------------------------
# Every set of modes the project needs is a family in aidcnet/modes.py; elsewhere a module reads them, the
# benches' mains included.
FAMILY_HOME = "aidcnet/modes.py"


def _is_mode_member(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Mode"


def mode_sets(tree: ast.AST) -> list[tuple[int, str]]:
    """Where ``tree`` declares a set of modes of its own: a tuple, list or set literal of two or more
    ``Mode.X`` members (``frozenset({...})`` and ``in (Mode.A, Mode.B)`` included), or a comprehension
    over ``Mode`` that picks members by name. (line, what) for each."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            if sum(_is_mode_member(e) for e in node.elts) >= 2:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for gen in node.generators:
                over_mode = isinstance(gen.iter, ast.Name) and gen.iter.id == "Mode"
                if over_mode and any(_is_mode_member(n) for cond in gen.ifs for n in ast.walk(cond)):
                    found.append((node.lineno, ast.unparse(node)))
    return found


def test_mode_families_are_declared_in_one_module() -> None:
    found = []
    for package in (*PACKAGES, "bench"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel != FAMILY_HOME:
                found += [f"{rel}:{line} {what}" for line, what in mode_sets(ast.parse(path.read_text()))]
    assert found == [], f"sets of modes outside {FAMILY_HOME} (read its families instead): {found}"


@pytest.mark.parametrize(
    "source",
    [
        "MODES = (Mode.UNICAST, Mode.HOST_BIER)",
        "if mode in (Mode.IGMP, Mode.PROXY): pass",
        "x = frozenset({Mode.INA, Mode.RING, Mode.PS})",
        "x = [Mode.NET_BIER, *RELIABLE, Mode.IGMP]",
        "x = {m for m in Mode if m is not Mode.RING}",
    ],
)
def test_the_family_check_sees_a_set_of_modes(source: str) -> None:
    assert len(mode_sets(ast.parse(source))) == 1


def test_the_family_check_lets_one_mode_and_per_mode_values_be() -> None:
    ok = "\n".join(
        [
            "if mode == Mode.IGMP: pass",
            "LEAD = {Mode.IGMP: 0.05, Mode.PROXY: 0.0}",
            "x = [m for m in Mode if m in F]",
        ]
    )
    assert mode_sets(ast.parse(ok)) == []


def test_the_replay_service_knows_no_mode() -> None:
    """Per-mode behaviour is the senders' (aidcnet/agent/replay/senders.py, chosen once at load); the
    service keeps the schedule, the deliveries and the status for every mode alike."""
    tree = ast.parse((ROOT / "aidcnet/agent/replay/service.py").read_text())
    named = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Mode"]
    imports = [
        n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "aidcnet.modes"
    ]
    assert named == [] and imports == []


# The same words in other vocabularies, each defined in its own one place: a trace op kind (what a
# workload does, not how a run carries it), the agent's `ina` control operation and ctl verb,
# containerlab's `kind: linux`, and Python's platform name.
OTHER_VOCABULARIES = {
    ("unicast", "orchestrator/workloads/trace.py"),
    ("ina", "aidcnet/agent/control.py"),
    ("ina", "aidcnet/cli.py"),
    ("linux", "orchestrator/lab/topology.py"),
    ("linux", "aidcnet/udpio.py"),
    # The agent's `igmp` control operation, the node file's and lab vars' `igmp` section, and the
    # sources a leaf's BitStrings come from (igmp.groups: static, igmp, proxy), defined with IGMP.
    ("igmp", "aidcnet/agent/control.py"),
    ("igmp", "aidcnet/config.py"),
    # The node file's ina section (which only the agent's roles take).
    ("ina", "aidcnet/config.py"),
    ("proxy", "aidcnet/config.py"),
    ("igmp", "aidcnet/igmp/leaf.py"),
    ("proxy", "aidcnet/igmp/leaf.py"),
    ("igmp", "aidcnet/igmp/node.py"),
    ("proxy", "aidcnet/igmp/node.py"),
}


def role_homes() -> dict[str, str]:
    """Every role's name and the one module that writes it out: ``aidcnet/roles.py`` for the agent's
    roles (the agent must know them without the orchestrator), the role's own module for the others."""
    homes = {}
    for info in pkgutil.iter_modules(roles_package.__path__):
        module = importlib.import_module(f"{roles_package.__name__}.{info.name}")
        role = getattr(module, "ROLE", None)
        if role is not None:
            own = str(Path(str(module.__file__)).relative_to(ROOT))
            homes[str(role.name)] = "aidcnet/roles.py" if role.name in set(Role) else own
    assert set(homes) == set(ROLES), "every role is a module of orchestrator.lab.roles with its ROLE"
    return homes


def test_a_peer_role_is_named_in_its_module_alone() -> None:
    assert role_homes()["gobgp"] == "orchestrator/lab/roles/gobgp.py"
    assert role_homes()["gpu-host"] == "aidcnet/roles.py"


@pytest.mark.parametrize(
    "homes", [{str(m): "aidcnet/modes.py" for m in Mode}, role_homes()], ids=["modes", "roles"]
)
def test_names_are_written_out_once(homes: dict[str, str]) -> None:
    where: dict[str, set[str]] = {}
    for package in (*PACKAGES, "bench"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Constant) or node.value not in homes:
                    continue
                if (node.value, rel) not in OTHER_VOCABULARIES:
                    where.setdefault(node.value, set()).add(rel)
    assert {w: sorted(files) for w, files in where.items() if files != {homes[w]}} == {}
    assert set(where) == set(homes)  # each is written out somewhere: in its home


# What a user who clones the project does not have: the design note and the seed documents in the
# maintainers' shared folder, and the paths of the machine the project is built on (docs/design.md has what
# the code needs of them). Written in pieces so this file does not match itself.
NOT_SHIPPED = re.compile("DESIGN" + r"\.md|\.\./" + "shared|/" + "work/|" + r"\bseeds/")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs git and a git checkout of the project to list its files ({exc})")
    return [ROOT / name for name in out.decode().split("\0") if name]


def citations_of_unshipped_files(paths: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        if not path.is_file():  # deleted in the work tree, not yet in the index
            continue
        text = path.read_bytes().decode(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if NOT_SHIPPED.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:100]}")
    return found


def test_nothing_cites_a_file_that_is_not_shipped() -> None:
    """Every design fact the code relies on is in docs/ (docs/design.md), so a citation names a file that
    ships with the project."""
    assert citations_of_unshipped_files(tracked_files()) == []


def test_the_citation_check_sees_one(tmp_path: Path) -> None:
    cited = tmp_path / "cited.py"
    cited.write_text('"""A fact (see ' + "DESIGN" + '.md §5)."""\n')
    machine = tmp_path / "machine.md"
    machine.write_text("read /" + "work/shared/notes\n")
    seed = tmp_path / "seed.yml"
    seed.write_text("# Figure 1 of the draft (" + "seeds" + "/004)\n")
    clean = tmp_path / "clean.md"
    clean.write_text("docs/design.md §5, seed 004, workloads/, the network/ folder and a shared/ one\n")
    paths = [cited, machine, seed, clean]
    found = [line.split(":", 1)[0] for line in citations_of_unshipped_files(paths, tmp_path)]
    assert found == ["cited.py", "machine.md", "seed.yml"]


# -- one clock conversion --------------------------------------------------------------------------------
# Wall and fabric time convert in aidcnet/timescale.py (TimeScale) and nowhere else: a time multiplied or
# divided by a time scale anywhere else is a second copy of the conversion, which is how a scale search
# once converted fault times with the plan's scale instead of the trial's (issue 36).
TIMESCALE_HOME = "aidcnet/timescale.py"
SCALE_NAMES = {"scale", "time_scale"}
TIME_WORDS = re.compile(
    r"(_s|_ns|_us|_ms)$|^(s|ns|t)$|wall|fabric|time|lead|hold|delay|rtt|rto|cost|interval|completion|due"
)


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _names_in(node: ast.AST) -> set[str]:
    return {n for sub in ast.walk(node) if (n := _name(sub)) is not None}


def _is_scale(node: ast.AST) -> bool:
    """``scale``, ``self.time_scale``, or ``(scale or 1)``."""
    if isinstance(node, ast.BoolOp):
        return any(_is_scale(v) for v in node.values)
    return _name(node) in SCALE_NAMES


def clock_arithmetic(tree: ast.AST) -> list[tuple[int, str]]:
    """Multiplications and divisions of a time by a time scale: one side named ``scale``/``time_scale``,
    the other naming a time (``wall_s``, ``started_s``, ``query_interval``...) or a unit (1e9, 1e6)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div | ast.FloorDiv)):
            continue
        for side, other in ((node.left, node.right), (node.right, node.left)):
            if not _is_scale(side):
                continue
            units = [c.value for c in ast.walk(other) if isinstance(c, ast.Constant)]
            timed = any(TIME_WORDS.search(n) for n in _names_in(other) - SCALE_NAMES)
            if timed or any(u in (1e3, 1e6, 1e9) for u in units if isinstance(u, int | float)):
                found.append((node.lineno, ast.unparse(node)))
                break
    return found


def test_no_clock_arithmetic_outside_the_time_scale() -> None:
    found = []
    for package in (*PACKAGES, "bench"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel != TIMESCALE_HOME:
                tree = ast.parse(path.read_text())
                found += [f"{rel}:{line} {what}" for line, what in clock_arithmetic(tree)]
    assert found == [], f"wall/fabric arithmetic outside {TIMESCALE_HOME} (call TimeScale): {found}"


@pytest.mark.parametrize(
    "source",
    [
        "fabric = wall_s / scale",
        "x = r.started_s / scale * 1e6",
        "cost_ns = round(igmp.control_cost * scale * 1e9)",
        "qi = self.query_interval * self.scale",
        "t = ns / 1e9 / (time_scale or 1)",
    ],
)
def test_the_clock_check_sees_a_conversion(source: str) -> None:
    assert len(clock_arithmetic(ast.parse(source))) == 1


def test_the_clock_check_lets_scales_and_other_scales_be() -> None:
    ok = "\n".join(["nxt = best.scale // 2", "x = math.sqrt(best.scale * worst)", "y = bits / unit"])
    assert clock_arithmetic(ast.parse(ok)) == []
