"""make deploy / configure / redeploy follow containerlab: a running lab is replaced only when asked."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli import build_parser

ROOT = Path(__file__).resolve().parents[4]


class FakeRuntime:
    def __init__(self, containers: int) -> None:
        self.containers = containers

    def lab_containers(self, lab: str) -> list[dict]:
        return [{"Names": [f"/clab-{lab}-n{i}"]} for i in range(self.containers)]


def _run_deploy(monkeypatch, argv: list[str], containers: int) -> list[tuple[str, bool]]:
    import orchestrator.lab.deploy as deploy_mod
    import orchestrator.lab.runtime.docker as docker_mod

    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(docker_mod, "DockerRuntime", lambda: FakeRuntime(containers))
    monkeypatch.setattr(
        deploy_mod, "deploy", lambda topo, rt, reconfigure=False, **_: calls.append((topo.name, reconfigure))
    )
    monkeypatch.setattr(deploy_mod, "status", lambda rt, lab: [])
    monkeypatch.setattr(deploy_mod, "print_table", lambda rows: None)
    args = build_parser().parse_args(argv)
    assert args.func(args) == 0
    return calls


def test_if_absent_leaves_a_running_lab_and_says_so(monkeypatch, capsys):
    calls = _run_deploy(monkeypatch, ["deploy", "labs/leaf-spine.clab.yml", "--if-absent"], containers=3)
    assert calls == []
    out = capsys.readouterr().out
    assert "already running (3 containers)" in out and "make redeploy" in out


def test_if_absent_deploys_an_absent_lab(monkeypatch):
    calls = _run_deploy(monkeypatch, ["deploy", "labs/leaf-spine.clab.yml", "--if-absent"], containers=0)
    assert calls == [("leaf-spine", False)]


def test_reconfigure_wins_over_if_absent(monkeypatch):
    calls = _run_deploy(
        monkeypatch, ["deploy", "labs/leaf-spine.clab.yml", "--if-absent", "--reconfigure"], containers=3
    )
    assert calls == [("leaf-spine", True)]


def _make_n(target: str) -> list[str]:
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, "LAB=leaf-spine"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if " deploy " in line or " configure " in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_targets_replace_a_running_lab_only_on_redeploy():
    assert _make_n("deploy") == [".venv/bin/aidclab deploy leaf-spine --if-absent"]
    assert _make_n("configure") == [
        ".venv/bin/aidclab deploy leaf-spine --if-absent",
        ".venv/bin/aidclab configure leaf-spine",
    ]
    assert _make_n("redeploy") == [".venv/bin/aidclab deploy leaf-spine --reconfigure"]
