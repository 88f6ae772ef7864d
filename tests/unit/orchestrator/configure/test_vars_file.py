"""Which vars file a lab's plan reads: by lab name or by file stem, never silently none or the wrong one."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.configure.plan import PlanError, build_plan, describe_vars, vars_candidates, vars_path_for
from orchestrator.lab.topology import load_topology
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc


def _topo(tmp_path, file_stem: str, name: str):
    doc = leaf_spine_doc(1, 1, 1)
    doc["name"] = name
    path = tmp_path / f"{file_stem}.clab.yml"
    path.write_text(yaml.safe_dump(doc))
    return load_topology(path)


def test_candidates_are_lab_name_then_file_stem(tmp_path):
    topo = _topo(tmp_path, "rfc6-6", "rfc66")
    assert vars_candidates(topo) == [tmp_path / "rfc66.vars.yml", tmp_path / "rfc6-6.vars.yml"]
    same = _topo(tmp_path, "ls", "ls")
    assert vars_candidates(same) == [tmp_path / "ls.vars.yml"]


def test_file_stem_vars_is_found_and_used(tmp_path):
    topo = _topo(tmp_path, "rfc6-6", "rfc66")
    (tmp_path / "rfc6-6.vars.yml").write_text(yaml.safe_dump({"bier": {"bsl": 128}}))
    assert vars_path_for(topo) == tmp_path / "rfc6-6.vars.yml"
    assert describe_vars(topo) == f"vars: {tmp_path / 'rfc6-6.vars.yml'}"
    assert build_plan(topo).bier.bsl == 128


def test_lab_name_vars_is_found(tmp_path):
    topo = _topo(tmp_path, "rfc6-6", "rfc66")
    (tmp_path / "rfc66.vars.yml").write_text("bier: {bsl: 128}\n")
    assert vars_path_for(topo) == tmp_path / "rfc66.vars.yml"


def test_none_found_is_said_with_where_we_looked(tmp_path):
    topo = _topo(tmp_path, "rfc6-6", "rfc66")
    line = describe_vars(topo)
    assert line.startswith("vars: none found")
    assert "rfc66.vars.yml" in line and "rfc6-6.vars.yml" in line and "default" in line


def test_two_candidates_that_disagree_are_an_error_naming_both(tmp_path):
    topo = _topo(tmp_path, "rfc6-6", "rfc66")
    (tmp_path / "rfc66.vars.yml").write_text("bier: {bsl: 128}\n")
    (tmp_path / "rfc6-6.vars.yml").write_text("bier: {bsl: 256}\n")
    with pytest.raises(PlanError) as exc:
        vars_path_for(topo)
    assert "rfc66.vars.yml" in str(exc.value) and "rfc6-6.vars.yml" in str(exc.value)
    with pytest.raises(PlanError):
        build_plan(topo)


def test_two_identical_candidates_are_fine(tmp_path):
    topo = _topo(tmp_path, "rfc6-6", "rfc66")
    (tmp_path / "rfc66.vars.yml").write_text("bier: {bsl: 128}\n")
    (tmp_path / "rfc6-6.vars.yml").write_text("bier:\n  bsl: 128\n")
    assert vars_path_for(topo) == tmp_path / "rfc66.vars.yml"
