"""BGP session security on by default (issue 18): every session of our nodes signed (TCP-MD5) with the lab's
own secret when the vars give none, kept in clab-<lab>/bgp.md5 and reused; GTSM hops 1 on every session
whose both ends do GTSM (our nodes, FRR), none towards GoBGP and BIRD peers."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr, ValidationError

from aidcnet.config import parse_config
from orchestrator.configure.ansible import compute_plan, write_lab_plan
from orchestrator.configure.plan import LabVars, build_plan, dump_plan, node_config, node_configs
from orchestrator.configure.plan.schema import LabPlan
from orchestrator.lab.labdir import BGP_MD5_FILE, lab_bgp_md5, lab_dir
from orchestrator.lab.topology import load_topology
from orchestrator.paths import ROOT
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, topo_of

LAB_SECRET = "lab-Generated_0123456789"


class LabSecret:
    """A lab_md5 provider that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> SecretStr:
        self.calls += 1
        return SecretStr(LAB_SECRET)


def plan_with(bgp: dict | None = None, links: dict | None = None, lab_md5=None) -> LabPlan:
    doc = {"bgp": {"enabled": True, **(bgp or {})}, "links": links or {}}
    lab_vars = LabVars.model_validate(doc).with_source("labs/x.vars.yml")
    return build_plan(topo_of(leaf_spine_doc(2, 2, 1)), lab_vars, lab_md5=lab_md5)


def sessions(plan: LabPlan) -> dict[tuple[str, str], tuple[str | None, int | None]]:
    """(node, neighbor) -> (secret, GTSM hops) in that node's file."""
    return {
        (node, n.name): (n.md5_password, n.ttl_security_hops)
        for node in plan.nodes
        if (cfg := node_config(plan, node)).bgp is not None
        for n in cfg.bgp.neighbors
    }


def test_by_default_every_session_has_the_lab_secret_and_gtsm_one_hop():
    secret = LabSecret()
    plan = plan_with(lab_md5=secret)
    got = sessions(plan)
    assert len(got) == 12 and set(got.values()) == {(LAB_SECRET, 1)}
    assert secret.calls == 1  # one secret for the lab, asked for once
    assert plan.bgp.ttl_security_hops == 1
    text = dump_plan(plan)
    assert LAB_SECRET not in text and "ttl_security_hops: 1" in text and "md5: true" in text
    assert parse_config(node_config(plan, "leaf1").model_dump(mode="json")) == node_config(plan, "leaf1")


def test_md5_false_or_a_secret_in_the_vars_never_asks_for_the_lab_secret():
    secret = LabSecret()
    assert {s for s, _ in sessions(plan_with({"md5": False}, lab_md5=secret)).values()} == {None}
    assert {s for s, _ in sessions(plan_with({"md5": "vars-Key"}, lab_md5=secret)).values()} == {"vars-Key"}
    assert secret.calls == 0


def test_a_link_override_beats_the_lab_secret():
    got = sessions(plan_with(links={"leaf1:eth1": {"md5": False}, "leaf2:eth2": {"md5": "own-Key"}},
                             lab_md5=LabSecret()))
    assert got[("leaf1", "spine1")][0] is None and got[("spine1", "leaf1")][0] is None
    assert got[("leaf2", "spine2")][0] == got[("spine2", "leaf2")][0] == "own-Key"
    assert got[("leaf1", "spine2")][0] == LAB_SECRET


def test_without_a_lab_the_default_sessions_are_unsigned():
    assert {s for s, _ in sessions(plan_with()).values()} == {None}


def test_gtsm_radius_from_the_vars_or_off():
    assert {h for _, h in sessions(plan_with({"ttl_security_hops": 2})).values()} == {2}
    plan = plan_with({"ttl_security_hops": False})
    assert {h for _, h in sessions(plan).values()} == {None} and plan.bgp.ttl_security_hops is None
    assert {h for _, h in sessions(plan_with({"ttl_security_hops": 0})).values()} == {None}
    with pytest.raises(ValidationError, match=r"ttl_security_hops"):
        plan_with({"ttl_security_hops": 255})  # 256 - 255 = 1: any TTL would pass


def test_no_gtsm_towards_gobgp_and_bird_peers(tmp_path: Path):
    topology = yaml.safe_load((ROOT / "labs" / "superpod-peers.clab.yml").read_text())
    lab_vars = yaml.safe_load((ROOT / "labs" / "superpod-peers.vars.yml").read_text()) or {}
    path = tmp_path / "superpod-peers.clab.yml"
    path.write_text(yaml.safe_dump(topology, sort_keys=False))
    plan = build_plan(load_topology(path), LabVars.model_validate(lab_vars), lab_md5=LabSecret())
    configs = node_configs(plan)
    roles = {name: c.role for name, c in configs.items()}
    seen = set()
    for name, config in configs.items():
        for n in config.bgp.neighbors if config.bgp else []:
            peer_role = roles[n.name]
            third_party = {"gobgp", "bird"} & {config.role, peer_role}
            assert (n.ttl_security_hops is None) == bool(third_party), (name, n.name)
            assert n.md5_password == LAB_SECRET  # every renderer does TCP-MD5
            seen.add(bool(third_party))
    assert seen == {True, False}


def test_lab_secret_is_made_once_0600_and_reused(tmp_path: Path):
    first = lab_bgp_md5(tmp_path / "clab-x")
    file = tmp_path / "clab-x" / BGP_MD5_FILE
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert lab_bgp_md5(tmp_path / "clab-x").get_secret_value() == first.get_secret_value()
    assert len(first.get_secret_value()) >= 32
    assert lab_bgp_md5(tmp_path / "clab-y").get_secret_value() != first.get_secret_value()
    file.write_text("has space\n")
    with pytest.raises(ValueError, match=r"clab-x/bgp.md5: not a secret aidclab made.*delete the") as exc:
        lab_bgp_md5(tmp_path / "clab-x")
    assert "has space" not in str(exc.value)


def test_configure_plans_with_the_lab_secret_and_stays_idempotent(tmp_path: Path, monkeypatch):
    doc = leaf_spine_doc(2, 2, 1)
    doc["name"] = "secx"
    (tmp_path / "secx.clab.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "secx.vars.yml").write_text(yaml.safe_dump({"bgp": {"enabled": True}}))
    monkeypatch.chdir(tmp_path)
    topo = load_topology(tmp_path / "secx.clab.yml")
    files = write_lab_plan(topo, compute_plan(topo))
    secret = (lab_dir(topo) / BGP_MD5_FILE).read_text().strip()
    assert files.changed and {s for s, _ in sessions(compute_plan(topo)).values()} == {secret}
    assert write_lab_plan(topo, compute_plan(topo)).changed == []  # same secret, same node files
    leaf = next(files.path.glob("host_vars/*leaf1.yml"))
    assert secret in leaf.read_text() and stat.S_IMODE(leaf.stat().st_mode) == 0o600
    # The node file is written as JSON, and Ansible reads the same data from it as a YAML reader does.
    from ansible.parsing.dataloader import DataLoader

    as_json = json.loads(leaf.read_text())
    assert as_json == yaml.safe_load(leaf.read_text()) == DataLoader().load_from_file(str(leaf))
    assert as_json["aidclab_node"]["node"] == "leaf1" and "aidclab_generated" in as_json
    assert secret not in (files.path / "plan.yml").read_text()
    assert os.stat(lab_dir(topo) / BGP_MD5_FILE).st_mode & 0o077 == 0
