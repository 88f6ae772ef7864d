"""The benches, without running one: every bench module imports and its main answers ``--help``, every bench
runs from ``make bench``, and every bench line of the Makefile parses with its bench's own parser. Nothing
is deployed or measured."""

from __future__ import annotations

import importlib
import re
import shlex

import pytest

from orchestrator.paths import ROOT

BENCH = ROOT / "bench"
# Modules in bench/ that are not benches: what the benches share (the lab lifecycle; the loopback load
# of the Python-dataplane benches), which has no main, and the traffic source bench/bier_forwarding_netns.py
# runs in the source's namespace.
LIBRARIES = {"harness", "loopback"}
HELPERS = {*LIBRARIES, "bier_sender"}
MODULES = sorted(p.stem for p in BENCH.glob("*.py"))
BENCHES = [m for m in MODULES if m not in HELPERS]
MAINS = [m for m in MODULES if m not in LIBRARIES]
MAKE_LINE = re.compile(r"^\t\$\(PY\) bench/(\w+)\.py(.*)$", re.M)


def make_bench_lines() -> list[tuple[str, list[str]]]:
    """(bench, its arguments) for every line of the Makefile's bench target."""
    text = (ROOT / "Makefile").read_text()
    target = re.search(r"^bench:.*\n((?:\t.*\n)+)", text, re.M)
    assert target is not None, "Makefile has no bench target"
    return [(m.group(1), shlex.split(m.group(2))) for m in MAKE_LINE.finditer(target.group(1))]


def test_the_harness_imports() -> None:
    harness = importlib.import_module("bench.harness")
    assert harness.shipped("leaf-spine").exists()


@pytest.mark.parametrize("name", MAINS)
def test_main_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:")
    # The description is the module's docstring: what the bench measures and against which baseline.
    assert module.__doc__.strip().splitlines()[0] in out


def test_every_bench_runs_from_make_bench() -> None:
    assert sorted(set(BENCHES) - {name for name, _ in make_bench_lines()}) == []


@pytest.mark.parametrize(("name", "argv"), make_bench_lines(), ids=lambda v: v if isinstance(v, str) else "")
def test_make_bench_lines_parse(name: str, argv: list[str]) -> None:
    parser = importlib.import_module(f"bench.{name}").parser()
    parser.parse_args(argv)  # an option the bench no longer has exits here (SystemExit 2)


def test_a_wrong_option_is_caught() -> None:
    parser = importlib.import_module("bench.replay").parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--no-such-option"])
