"""bench/harness.py's lab lifecycle with the orchestrator's deploy, configure and destroy replaced by
recorders: the copy's name and vars, the working directory while the bench runs, and the lab destroyed and
its work dir removed on the way out, also when the bench fails. No Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import harness
from orchestrator.lab.topology import load_topology


class FakeRuntime:
    def lab_containers(self, lab: str | None = None) -> list[dict]:
        return []


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    import orchestrator.configure.ansible as ansible
    import orchestrator.lab.deploy as deploy
    import orchestrator.lab.runtime.docker as docker

    calls: list[tuple[Any, ...]] = []

    def fake_deploy(topo, runtime=None, reconfigure=False, underlay_netns=None):
        calls.append(("deploy", topo.name, Path.cwd()))
        (Path.cwd() / topo.lab_dir_name).mkdir()

    def fake_configure(topo, check=False, extra_vars=None, extra_groups=None):
        calls.append(
            ("configure", topo.name, yaml.safe_load(topo.path.with_name(f"{topo.name}.vars.yml").read_text()))
        )

    def fake_destroy(lab, runtime=None, cleanup=False, lab_dir_root=None, quiet=False, underlay_netns=None):
        calls.append(("destroy", lab, lab_dir_root))

    monkeypatch.setattr(deploy, "deploy", fake_deploy)
    monkeypatch.setattr(deploy, "destroy", fake_destroy)
    monkeypatch.setattr(ansible, "configure", fake_configure)
    monkeypatch.setattr(docker, "DockerRuntime", FakeRuntime)
    return calls


def test_a_copy_under_the_benchs_name_runs_in_its_work_dir_and_is_destroyed(calls) -> None:
    before = Path.cwd()
    with harness.bench_lab("leaf-spine", "bn-t", vars={"time": {"scale": "off"}}) as lab:
        assert lab.name == "bn-t"
        assert Path.cwd() == lab.workdir and lab.lab_dir.is_dir()
        assert lab.topo.nodes.keys() == load_topology(harness.shipped("leaf-spine")).nodes.keys()
        workdir = lab.workdir
    assert Path.cwd() == before and not workdir.exists()
    assert calls == [
        ("deploy", "bn-t", workdir),
        ("configure", "bn-t", {"time": {"scale": "off"}}),
        ("destroy", "bn-t", workdir),
    ]


def test_without_vars_the_copy_has_the_shipped_labs(calls) -> None:
    with harness.bench_lab("ina-fig1", "bn-v"):
        pass
    assert calls[1] == ("configure", "bn-v", harness.shipped_vars("ina-fig1"))
    assert harness.shipped_vars("ina-fig1")  # the shipped lab has vars, so the check can fail


def test_set_vars_is_what_the_next_configure_applies(calls) -> None:
    with harness.bench_lab("leaf-spine", "bn-s", vars={"igmp": {"enabled": False}}, configure=False) as lab:
        harness.set_vars(lab, {"igmp": {"enabled": True}})
        lab.configure()
    assert [c[0] for c in calls] == ["deploy", "configure", "destroy"]
    assert calls[1] == ("configure", "bn-s", {"igmp": {"enabled": True}})


def test_a_failing_bench_still_destroys_its_lab(calls) -> None:
    before = Path.cwd()
    with pytest.raises(RuntimeError, match="measurement failed"), harness.bench_lab("leaf-spine", "bn-f"):
        raise RuntimeError("measurement failed")
    assert calls[-1][:2] == ("destroy", "bn-f") and Path.cwd() == before
