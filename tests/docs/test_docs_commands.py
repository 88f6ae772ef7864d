"""Every aidclab and make command in the shell blocks of README.md and docs/ (marked ones too: a block CI does
not run must still be right) parses as printed, and names labs, nodes, interfaces, files and make targets
that exist. Nothing is executed: argparse and the files only; tests/docs/test_docs_run.py runs the blocks."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from orchestrator.cli import build_parser
from orchestrator.lab.topology import load_topology, resolve_lab
from orchestrator.paths import ROOT
from tests.docs.blocks import Command, aidclab_args, lab_name, shell_blocks

COMMAND = re.compile(r"^(?:\.venv/bin/)?aidclab\b|^make\b")
# What a doc writes (-o, --out, -w) exists afterwards for the commands below it.
OUTPUT_OPTIONS = ("-o", "--output", "--out", "-w", "--write")


def commands() -> list[Command]:
    return [c for block in shell_blocks() for c in block.commands if COMMAND.match(c.text)]


ALL = commands()


def _placeholder(word: str) -> bool:
    """TRACE, LAB, results/RUN, <lab>: names a reader fills in."""
    return bool(re.search(r"<|\b[A-Z][A-Z_]{2,}\b", word))


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def _outputs_before(cmd: Command) -> set[str]:
    """Files and folders the doc's commands above ``cmd`` write: -o/--out/-w, and `split`'s folder."""
    made = set()
    for other in ALL:
        if other.doc == cmd.doc and other.line < cmd.line:
            words = shlex.split(other.text)
            made |= {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUT_OPTIONS}
            args = aidclab_args(words) if COMMAND.match(other.text) and words[0] != "make" else None
            if args is not None and args.command == "split" and not args.output:
                made.add(f"split-{lab_name(args.lab)}")
    return made


def _written_before(path: str, cmd: Command) -> bool:
    return any(path == made or path.startswith(made.rstrip("/") + "/") for made in _outputs_before(cmd))


def _lab_named_before(cmd: Command) -> str | None:
    """The lab a doc's earlier commands named: what a command without LAB acts on when that lab runs."""
    lab = None
    for other in ALL:
        if other.doc == cmd.doc and other.line < cmd.line and other.text.split()[0].endswith("aidclab"):
            args = aidclab_args(shlex.split(other.text))
            lab = getattr(args, "lab", None) or lab
        if other.doc == cmd.doc and other.line < cmd.line and other.text.startswith("make"):
            lab = next((w[4:] for w in other.text.split() if w.startswith("LAB=")), lab)
    return lab


def _check_lab(lab: str, cmd: Command) -> None:
    if _placeholder(lab) or _written_before(lab, cmd):
        return
    assert (ROOT / resolve_lab(lab)).exists(), f"{cmd}: no lab {lab!r} (labs/{lab}.clab.yml)"


def _check_file(path: str, cmd: Command) -> None:
    if _placeholder(path) or _written_before(path, cmd):
        return
    assert (ROOT / path).exists(), f"{cmd}: {path} does not exist and no command above writes it"


def _check_node(lab: str | None, node: str, iface: str | None, cmd: Command) -> None:
    assert lab, f"{cmd}: names no lab, and no command above it does"
    if _placeholder(lab):
        return
    topo = load_topology(ROOT / resolve_lab(lab))
    assert node in topo.nodes, f"{cmd}: lab {topo.name} has no node {node!r}"
    if iface is not None:
        ifaces = {e.interface for _l, e, _p in topo.links_of(node)}
        assert iface in ifaces, f"{cmd}: {node} has no {iface} (it has {', '.join(sorted(ifaces))})"


def test_the_docs_have_commands_to_check() -> None:
    assert len(ALL) > 40
    assert any(c.doc.name == "README.md" for c in ALL)


@pytest.mark.parametrize("cmd", ALL, ids=str)
def test_command_parses_and_names_what_exists(cmd: Command) -> None:
    words = shlex.split(cmd.text)
    if words[0] == "make":
        targets = [w for w in words[1:] if "=" not in w]
        assert set(targets) <= _make_targets(), f"{cmd}: no make target {set(targets) - _make_targets()}"
        for assignment in (w for w in words[1:] if "=" in w):
            key, value = assignment.split("=", 1)
            if key == "LAB":
                _check_lab(value, cmd)
            elif key == "WORKLOAD" and "*" not in value:
                _check_file(value, cmd)
        return
    assert words[0] in ("aidclab", ".venv/bin/aidclab")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(words[1:])
    except SystemExit as exc:
        assert exc.code == 0, f"{cmd}: does not parse: {stderr.getvalue().strip().splitlines()[-1]}"
        return
    lab = getattr(args, "lab", None) or getattr(args, "lab_option", None)
    if lab is not None:
        _check_lab(lab, cmd)
    if getattr(args, "trace", None):
        _check_file(args.trace, cmd)
    endpoint = getattr(args, "endpoint", None)
    if endpoint:
        node, iface = endpoint.split(":", 1)
        _check_node(lab or _lab_named_before(cmd), node, iface, cmd)
    if args.command == "exec":
        _check_node(lab, args.node, None, cmd)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("aidclab link set superpod G99:eth2 down", "no node 'G99'"),
        ("aidclab link set superpod G1:eth9 down", "G1 has no eth9"),
        ("aidclab link set s5:eth1 loss 0.02", "names no lab"),
        ("aidclab link set ina-fig1 s5:eth1 lose 0.02", "does not parse"),
        ("aidclab replay ina-fig1 missing.jsonl --mode ina", "missing.jsonl does not exist"),
        ("aidclab configure no-such-lab", "no lab 'no-such-lab'"),
        ("make deploy LAB=no-such-lab", "no lab 'no-such-lab'"),
        ("make redeploy-all", "no make target"),
        ("aidclab exec superpod G99 -- ip -br addr", "no node 'G99'"),
    ],
)
def test_the_check_catches_what_would_not_work(text: str, needle: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(needle)):
        test_command_parses_and_names_what_exists(Command(ROOT / "README.md", 0, text))


def test_the_blocks_the_old_regex_missed_are_checked() -> None:
    """A fence regex paired a json block's closing fence with the next opening one and never saw
    docs/trace-format.md's workload commands; Sybil's lexer pairs fences as Markdown does."""
    assert any(c.doc.name == "trace-format.md" and "workload all-to-all" in c.text for c in ALL)
