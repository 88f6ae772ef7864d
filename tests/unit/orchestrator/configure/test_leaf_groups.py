"""The configuration plane's groups API: an experiment's network-BIER groups put on the leaves, avoiding
the vars file's own, with Ansible run only where a node file changed (the playbook run is recorded here,
not made)."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest
import yaml

from orchestrator.configure import leaf_groups
from orchestrator.configure.ansible import RunReport
from orchestrator.configure.leaf_groups import GroupsError, apply_groups, vars_groups
from orchestrator.lab.topology import load_topology
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc


@pytest.fixture
def topo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the lab dir clab-x/ is made here
    path = tmp_path / "x.clab.yml"
    path.write_text(yaml.safe_dump(leaf_spine_doc(1, 2, 2)))
    return load_topology(path)


def test_vars_groups_are_the_vars_files_own(topo, tmp_path):
    assert vars_groups(topo) == []
    mine = {"group": "239.1.1.1", "source": "h1", "receivers": ["h3"]}
    (tmp_path / "x.vars.yml").write_text(yaml.safe_dump({"bier": {"groups": [mine]}}))
    assert vars_groups(topo) == [IPv4Address("239.1.1.1")]


def test_a_broken_vars_file_is_named(topo, tmp_path):
    (tmp_path / "x.vars.yml").write_text("bier: [not, a, mapping\n")
    with pytest.raises(GroupsError, match=r"x\.vars\.yml: not valid YAML"):
        vars_groups(topo)


def test_groups_reach_the_changed_leaves_once(topo, tmp_path, monkeypatch):
    runs: list[str] = []

    def run_playbook(inventory, limit):
        runs.append(limit)
        return RunReport(ok=True, stats={"changed": {"leaf2": 1}})

    monkeypatch.setattr(leaf_groups, "run_playbook", run_playbook)
    (tmp_path / "clab-x").mkdir()
    groups = [{"group": "239.100.0.0", "source": "h1", "receivers": ["h3", "h4"]}]
    said: list[str] = []
    apply_groups(topo, groups, said.append)
    plan = yaml.safe_load((tmp_path / "clab-x" / "plan.yml").read_text())
    assert [g["group"] for g in plan["bier"]["groups"]] == ["239.100.0.0"]
    assert len(runs) == 1 and "clab-x-leaf2" in runs[0].split(",")
    apply_groups(topo, groups, said.append)  # the same groups again: nothing changed, no playbook run
    assert len(runs) == 1 and said[-1] == "1 groups already on the leaves"


def test_a_failed_playbook_is_an_error(topo, tmp_path, monkeypatch):
    failed = RunReport(ok=False, stats={}, failures=["clab-x-leaf1: task failed"])
    monkeypatch.setattr(leaf_groups, "run_playbook", lambda inventory, limit: failed)
    with pytest.raises(GroupsError, match="configuring the replay's groups failed:\n  clab-x-leaf1"):
        apply_groups(topo, [{"group": "239.100.0.0", "source": "h1", "receivers": ["h3"]}], print)
