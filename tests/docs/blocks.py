"""The shell blocks of README.md and docs/*.md, read with Sybil's Markdown lexers: every block a reader is
told to run, the marker that keeps one out of CI (with its reason), its commands, and the labs they act on.

Pure: reads Markdown and the Makefile, runs nothing. tests/docs/test_docs_run.py runs the blocks,
tests/docs/test_docs_commands.py parses their commands; docs/writing-docs.md is the convention for authors.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from sybil import Document, Example, Region
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

from orchestrator.paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Fence info strings of blocks a reader types into a shell; `console` shows a session: its `$ ` lines run.
SHELL_LANGUAGES = ("sh", "bash", "shell", "console")
PROMPT = "$ "
# The marker, an HTML comment right above a shell block: `<!-- not run in CI: REASON -->` (or `not run in
# CI yet:` for a block that waits for a fix). Readers of the Markdown see it; renderers hide it.
MARKER_DIRECTIVE = r"not run in CI(?: yet)?"
# An untagged block with such a line holds commands (or their output): its author must say which.
COMMAND_LIKE = re.compile(r"^\s*(?:\$ )?(?:\.venv/bin/)?(?:aidclab|aidcnet|make)\s+[a-z]", re.M)

Evaluator = Callable[[Example], "str | None"]


@dataclass(frozen=True)
class Command:
    """One command of a block: a line (continuations joined) or a part of one between `&&`, without its
    comment, the pipe after it, or a description column."""

    doc: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{_shown(self.doc)}:{self.line}: {self.text}"


LabNeed = Literal["deploys", "deployed", "configured"]


@dataclass(frozen=True)
class LabUse:
    """A lab a command acts on: its name, how the command names it (a name or a topology file), and what
    it needs: ``deploys`` (the command brings the lab up itself), ``deployed`` (running, e.g. to be
    configured or inspected) or ``configured`` (running and configured, e.g. to replay or exec)."""

    name: str
    ref: str
    need: LabNeed


@dataclass(frozen=True)
class ShellBlock:
    doc: Path
    line: int  # of the opening fence
    language: str
    source: str
    reason: str | None  # the marker's: this block is not run in CI
    uses: tuple[LabUse, ...] = ()
    needs_docker: bool = False

    @property
    def name(self) -> str:
        return f"{_shown(self.doc)}:{self.line}"

    @property
    def script(self) -> str:
        """What a reader types: the whole block, or a console block's `$ ` lines without the prompt."""
        if self.language != "console":
            return self.source
        return "".join(ln[len(PROMPT) :] + "\n" for ln in self.source.splitlines() if ln.startswith(PROMPT))

    @property
    def commands(self) -> list[Command]:
        return list(_commands(self.doc, self.line + 1, self.script))


@dataclass(frozen=True)
class Problem:
    """A block or marker the harness cannot accept; the message says how to fix it."""

    doc: Path
    line: int
    message: str


def _shown(doc: Path) -> str:
    try:
        return str(doc.relative_to(ROOT))
    except ValueError:
        return str(doc)


def strip_command(line: str) -> str:
    """The command alone: no comment, no pipe into another tool, no description column (3+ spaces), no
    ``&`` that runs it in the background (a capture beside the traffic it waits for, capture.md)."""
    line = re.split(r"\s+#", line, maxsplit=1)[0]
    line = re.split(r"\s{3,}", line.strip(), maxsplit=1)[0]
    return re.sub(r"\s+&$", "", line.split(" | ", 1)[0].strip())


def _commands(doc: Path, first_line: int, script: str) -> Iterator[Command]:
    lines = script.splitlines()
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        for part in strip_command(text).split(" && "):
            if part.strip() and not part.lstrip().startswith("#"):
                yield Command(doc, first_line + start, part.strip())


# --- what a command does to labs -------------------------------------------------------------------------

# aidclab commands by what they need of the lab they name (cli/lab.py, cli/configure.py, cli/experiment.py);
# the others (workload, model, report, plan, graph, split) read files only.
_AIDCLAB_NEEDS: dict[str, LabNeed] = {
    "deploy": "deploys",
    "configure": "deployed",
    "inspect": "deployed",
    "linkcheck": "deployed",
    "capture": "deployed",
    "destroy": "deployed",
    "replay": "configured",
    "exec": "configured",
    "link": "configured",
}
# Makefile targets: deploy, redeploy, configure and demo bring the lab up (configure: `deploy --if-absent`).
_MAKE_NEEDS: dict[str, LabNeed] = {
    "deploy": "deploys",
    "redeploy": "deploys",
    "configure": "deploys",
    "demo": "deploys",
    "inspect": "deployed",
    "linkcheck": "deployed",
    "destroy": "deployed",
    "replay": "configured",
}
_MAKE_DOCKER = {"images", "test", "e2e", "bench"}


def make_default_lab(makefile: Path = ROOT / "Makefile") -> str:
    match = re.search(r"^LAB\s*\?=\s*(\S+)", makefile.read_text(), re.M)
    if match is None:
        raise ValueError(f"{makefile}: no `LAB ?= ...` line; the docs' make commands need the default lab")
    return match.group(1)


def lab_name(ref: str, root: Path = ROOT) -> str:
    """A LAB argument's lab: the name itself, or the `name:` of the topology file it points at."""
    if Path(ref).suffix not in (".yml", ".yaml"):
        return ref
    try:
        return str(yaml.safe_load((root / ref).read_text())["name"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return Path(ref).name.split(".")[0]


@functools.cache
def _cli_parser():  # -> argparse.ArgumentParser
    from orchestrator.cli import build_parser

    return build_parser()


def aidclab_args(words: list[str]):  # -> argparse.Namespace | None
    """The CLI's own parse of an `aidclab ...` command, or None when it does not parse."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return _cli_parser().parse_args(words[1:])
    except SystemExit:
        return None


def lab_uses(command: Command, last_lab: str | None, default_lab: str) -> tuple[list[LabUse], bool]:
    """The labs one command acts on (a LAB left out is the lab named last before it, as when exactly one lab
    runs), and whether it needs Docker."""
    try:
        words = shlex.split(command.text)
    except ValueError:
        return [], False
    if not words:
        return [], False
    if words[0] == "make":
        targets = [w for w in words[1:] if "=" not in w]
        ref = next((w[4:] for w in words[1:] if w.startswith("LAB=")), default_lab)
        uses = [LabUse(lab_name(ref), ref, _MAKE_NEEDS[t]) for t in targets if t in _MAKE_NEEDS]
        return uses, bool(uses) or any(t in _MAKE_DOCKER for t in targets)
    if words[0] == "docker":
        return [], True
    if words[0] not in ("aidclab", ".venv/bin/aidclab"):
        return [], False
    args = aidclab_args(words)
    if args is None:
        return [], False
    need = _AIDCLAB_NEEDS.get(args.command)
    if args.command == "images":
        return [], True
    if need is None:
        return [], False
    ref = getattr(args, "lab_option", None) or getattr(args, "lab", None) or last_lab
    if ref is None:  # inspect and destroy --all without a lab: every lab, none in particular
        return [], True
    return [LabUse(lab_name(ref), ref, need)], True


# --- the Sybil parser --------------------------------------------------------------------------------------


class DocsParser:
    """A Sybil parser: one region per shell block (evaluated by ``evaluate_block``, marked ones carry their
    reason), and one per problem (an untagged block of commands, a marker without a reason or above no shell
    block), evaluated as a failure so a block can neither escape the harness nor be skipped silently."""

    def __init__(self, evaluate_block: Evaluator, default_lab: str | None = None):
        self.evaluate_block = evaluate_block
        self.default_lab = default_lab or make_default_lab()
        self._fences = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.M))
        self._markers = DirectiveInHTMLCommentLexer(directive=MARKER_DIRECTIVE, arguments=".*?")

    def __call__(self, document: Document) -> Iterable[Region]:
        doc = Path(document.path)
        fences = list(self._fences(document))
        # CommonMark: nothing inside a fenced block is Markdown (docs/writing-docs.md shows blocks in blocks).
        outer = [f for f in fences if not any(o is not f and o.start < f.start < o.end for o in fences)]
        markers = [
            m for m in self._markers(document) if not any(f.start < m.start < f.end for f in outer)
        ]
        used: set[int] = set()
        regions: list[Region] = []
        last_lab: str | None = None
        for fence in sorted(outer, key=lambda r: r.start):
            line = document.text.count("\n", 0, fence.start) + 1
            words = str(fence.lexemes["info"]).split()
            language = words[0] if words else ""
            source = str(fence.lexemes["source"])
            marker = next(
                (m for m in markers if re.fullmatch(r"-+>\s*", document.text[m.end : fence.start])), None
            )
            if language not in SHELL_LANGUAGES:
                if not language and COMMAND_LIKE.search(source):
                    regions.append(_problem(fence, doc, line, UNTAGGED))
                continue
            reason = None
            if marker is not None:
                used.add(marker.start)
                reason = " ".join(f"{marker.lexemes['arguments']} {marker.lexemes['source']}".split())
                if not reason:
                    regions.append(_problem(fence, doc, line, NO_REASON))
                    continue
            block = ShellBlock(doc, line, language, source, reason)
            uses, docker = [], False
            for command in block.commands:
                found, needs = lab_uses(command, last_lab, self.default_lab)
                uses += found
                docker = docker or needs
                last_lab = found[-1].ref if found else last_lab
            block = ShellBlock(doc, line, language, source, reason, tuple(uses), docker)
            regions.append(Region(fence.start, fence.end, block, self.evaluate_block))
        for marker in markers:
            if marker.start not in used:
                line = document.text.count("\n", 0, marker.start) + 1
                regions.append(_problem(marker, doc, line, STRAY_MARKER))
        return regions


UNTAGGED = (
    "an untagged block with aidclab/make commands: tag it ```sh (then it runs in make test, or carries a "
    "`<!-- not run in CI: REASON -->` marker) or ```text if it shows output (docs/writing-docs.md)"
)
NO_REASON = "the marker gives no reason: `<!-- not run in CI: REASON -->` (docs/writing-docs.md)"
STRAY_MARKER = (
    "a `not run in CI` marker that is not right above a shell block (```sh, ```console): move it there or "
    "delete it"
)


def _problem(region: Region, doc: Path, line: int, message: str) -> Region:
    problem = Problem(doc, line, message)
    return Region(region.start, region.end, problem, lambda example: f"{_shown(doc)}:{line}: {message}")


def parse(doc: Path, evaluate_block: Evaluator, default_lab: str | None = None) -> Document:
    return Document.parse(str(doc), DocsParser(evaluate_block, default_lab))


def shell_blocks(docs: Iterable[Path] = DOCS) -> list[ShellBlock]:
    """Every shell block of the docs, marked or not, in doc order."""
    return [
        ex.parsed
        for doc in docs
        for ex in parse(doc, lambda _ex: None).examples()
        if isinstance(ex.parsed, ShellBlock)
    ]
