"""Runs a doc's shell blocks as a reader would: in order, with bash, from a fresh copy of the project (the
repository root the docs assume, `.venv/bin` on PATH as README.md says), with the labs the doc assumes up,
and every lab it touched destroyed when the doc is done."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.lab.owner import OWNER_ENV, process_token
from orchestrator.paths import ROOT
from tests.docs.blocks import LabUse, ShellBlock

# A block that has not finished after this long hangs (a capture with no traffic waits forever).
BLOCK_TIMEOUT_S = 900.0
OUTPUT_TAIL_LINES = 120
# Make's own variables would make a block's `make demo` a sub-make of `make test`'s, not the reader's make.
_MAKE_ENV = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")


class Labs(Protocol):
    """What the runner asks of the machine's labs (DockerLabs; a recording fake in tests)."""

    def ensure_absent(self, lab: str) -> None: ...

    def bring_up(self, use: LabUse, workdir: Path, configure: bool, stack: contextlib.ExitStack) -> None: ...

    def tear_down(self, lab: str, workdir: Path) -> None: ...


class DockerLabs:
    """Labs through the code the aidclab.pytest plugin and the CLI use: a lab already running under the name
    a doc uses is refused, never touched (it is someone's own)."""

    def __init__(self) -> None:
        self._runtime = None

    @property
    def runtime(self):  # -> DockerRuntime, made on first use so docs without labs need no Docker
        if self._runtime is None:
            from orchestrator.lab.runtime.docker import DockerRuntime

            self._runtime = DockerRuntime()
        return self._runtime

    def ensure_absent(self, lab: str) -> None:
        from aidclab.pytest import LabError, clear_lab_left_by_a_killed_run, containers_held

        existing = clear_lab_left_by_a_killed_run(lab, self.runtime)
        if existing:
            raise LabError(
                f"lab {lab!r} already has {containers_held(existing)}; the docs' blocks deploy it themselves "
                f"and never touch a lab they did not deploy: `aidclab destroy {lab}` first"
            )

    def bring_up(self, use: LabUse, workdir: Path, configure: bool, stack: contextlib.ExitStack) -> None:
        from aidclab.pytest import deployed_lab
        from orchestrator.lab.topology import resolve_lab

        topology = workdir / resolve_lab(use.ref)
        stack.enter_context(deployed_lab(topology, workdir, configure=configure, runtime=self.runtime))

    def tear_down(self, lab: str, workdir: Path) -> None:
        from orchestrator.lab.deploy import destroy

        destroy(lab, self.runtime, cleanup=True, lab_dir_root=workdir, quiet=True)


def project_copy(dest: Path, venv: Path | None = None) -> Path:
    """The project as a fresh clone has it (git's tracked files, with their working-tree content), and
    `.venv` linked to the virtualenv running the tests: outputs the blocks write (traces, results/, lab dirs)
    land here, never in the checkout, and `report latest` sees only this doc's runs."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        raise RuntimeError(f"git ls-files in {ROOT} failed ({listed.stderr.strip()}): docs run from a clone")
    dest.mkdir(parents=True, exist_ok=True)
    for rel in filter(None, listed.stdout.split("\0")):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
    (dest / ".venv").symlink_to(venv or Path(sys.prefix))
    return dest


# Per doc: name, seconds of its blocks, of which bringing up the labs it assumes, blocks run, seconds of
# destroying its labs. The session summary (tests/docs/conftest.py) prints them: what each doc costs.
DOC_TIMES: list[tuple[str, float, float, int, float]] = []


@dataclass
class BlockTime:
    block: str
    seconds: float
    labs_seconds: float  # of which bringing up the labs the doc assumes


@dataclass
class DocRun:
    """One doc's blocks in order. ``workdir`` is made on the first block that runs."""

    doc: Path
    make_workdir: Callable[[], Path]
    labs: Labs
    timeout_s: float = BLOCK_TIMEOUT_S
    times: list[BlockTime] = field(default_factory=list)
    doc_times: list[tuple[str, float, float, int, float]] = field(default_factory=lambda: DOC_TIMES)
    _workdir: Path | None = None
    _touched: dict[str, str] = field(default_factory=dict)  # lab -> "doc" (its blocks deploy it) | "harness"
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = self.make_workdir()
        return self._workdir

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _MAKE_ENV}
        env["PATH"] = f"{self.workdir / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PWD"] = str(self.workdir)
        # A lab a block deploys names this run its owner: if the run is killed mid-doc, the next clears it.
        env[OWNER_ENV] = process_token(os.getpid()) or ""
        return env

    def _prepare(self, block: ShellBlock) -> None:
        """The labs the block acts on, as the doc assumes them: absent where the doc deploys a lab itself,
        deployed (and configured, unless the doc configures it first) where it only uses one."""
        for use in block.uses:
            if use.name in self._touched:
                continue
            if use.need == "deploys":
                self.labs.ensure_absent(use.name)
                self._touched[use.name] = "doc"
            else:
                self._touched[use.name] = "harness"
                self.labs.bring_up(use, self.workdir, use.need == "configured", self._stack)

    def run(self, block: ShellBlock) -> str | None:
        """None when the block exits 0; otherwise what failed: the block, where it is, and its output."""
        started = time.monotonic()
        try:
            self._prepare(block)
        except Exception as exc:
            labs = ", ".join(sorted({u.name for u in block.uses}))
            return f"{block.name}: the lab(s) this block acts on ({labs}) could not be made ready: {exc}"
        ready = time.monotonic()
        log = self.workdir / f"{block.name.replace('/', '_').replace(':', '-')}.log"
        code, output, timed_out = run_script(block.script, self.workdir, self.env(), self.timeout_s)
        log.write_text(output)
        done = time.monotonic()
        self.times.append(BlockTime(block.name, done - started, ready - started))
        if code == 0 and not timed_out:
            return None
        lines = output.splitlines()
        tail = lines[-OUTPUT_TAIL_LINES:]
        what = f"timed out after {self.timeout_s:.0f} s" if timed_out else f"exited {code}"
        return (
            f"{block.name} {what} ({done - ready:.1f} s, run in {self.workdir})\n"
            f"--- the block ({block.language}) ---\n{block.source.rstrip()}\n"
            f"--- its output (last {len(tail)} of {len(lines)} lines; all of it in {log}) ---\n"
            + "\n".join(tail)
        )

    def close(self) -> None:
        """Destroy every lab the doc's blocks touched: the ones they deployed, then the ones brought up for
        them (the plugin's own teardown). Every lab is tried; the first error is raised after."""
        started = time.monotonic()
        try:
            self._destroy_labs()
        finally:
            if self.times:
                total = sum(t.seconds for t in self.times)
                labs = sum(t.labs_seconds for t in self.times)
                destroy = time.monotonic() - started
                self.doc_times.append((self.doc.name, total, labs, len(self.times), destroy))

    def _destroy_labs(self) -> None:
        errors: list[BaseException] = []
        for lab, by in self._touched.items():
            if by == "doc":
                try:
                    self.labs.tear_down(lab, self.workdir)
                except Exception as exc:
                    errors.append(exc)
        try:
            self._stack.close()
        except Exception as exc:
            errors.append(exc)
        if errors:
            raise errors[0]


def run_script(script: str, cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str, bool]:
    """bash runs the block (stop at the first failing command, a failing pipe fails; each command echoed
    with `$ ` before its output). On timeout the whole process group goes: a block's children too."""
    proc = subprocess.Popen(
        # PS4 set in the script: bash run by root ignores it from the environment.
        ["bash", "-e", "-o", "pipefail", "-c", "PS4='$ '; set -x\n" + script],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output, False
    except BaseException as exc:  # the block's own session: nothing else stops its children
        if not isinstance(exc, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            raise
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        return proc.returncode, output, True
