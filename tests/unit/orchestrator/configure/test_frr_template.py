"""The frr role's frr.conf from the plan: eBGP to our nodes with the settings docs/frr-interop.md explains,
or the plan's static routes when the lab runs no BGP."""

from __future__ import annotations

from pathlib import Path

import jinja2
import yaml
from pydantic import SecretStr

from aidcnet.config import NodeConfig
from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology
from orchestrator.paths import ROOT as ROOT_DIR

ROOT = ROOT_DIR
TEMPLATE = ROOT / "playbooks" / "roles" / "frr" / "templates" / "frr.conf.j2"


def configs(topology: dict, lab_vars: dict, tmp_path: Path) -> dict[str, NodeConfig]:
    path = tmp_path / f"{topology['name']}.clab.yml"
    path.write_text(yaml.safe_dump(topology, sort_keys=False))
    return node_configs(build_plan(load_topology(path), LabVars.model_validate(lab_vars)))


def render(config: NodeConfig) -> list[str]:
    # Ansible's template module renders with trim_blocks on; StrictUndefined catches a renamed field.
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    text = env.from_string(TEMPLATE.read_text()).render(
        aidclab_node=config.model_dump(mode="json", exclude_none=True), ansible_managed="test"
    )
    return text.splitlines()


def shipped(lab: str) -> tuple[dict, dict]:
    topology = yaml.safe_load((ROOT / "labs" / f"{lab}.clab.yml").read_text())
    vars_path = ROOT / "labs" / f"{lab}.vars.yml"
    return topology, (yaml.safe_load(vars_path.read_text()) or {}) if vars_path.exists() else {}


def test_superpod_frr_leaf_gets_one_ebgp_session_per_cable(tmp_path: Path) -> None:
    config = configs(*shipped("superpod-frr"), tmp_path)["L1"]
    lines = render(config)
    assert config.role == "frr" and config.routes == []  # BGP installs the routes, not static ones
    assert f"router bgp {config.bgp.asn}" in lines
    for needed in (
        " no bgp ebgp-requires-policy",
        " bgp bestpath as-path multipath-relax",
        " set extcommunity bandwidth cumulative",
        "  maximum-paths 64",
        f"  network {config.loopback}",
        f" bgp router-id {config.bgp.router_id}",
        " timers bgp 3 9",
    ):
        assert needed in lines, needed
    assert len(config.bgp.neighbors) == 128  # 64 GPUs x 2 cables
    for n in config.bgp.neighbors:
        assert f" neighbor {n.address} remote-as {n.asn}" in lines
        assert f" neighbor {n.address} update-source {n.local_address}" in lines
        assert f"  neighbor {n.address} activate" in lines
        assert f"  neighbor {n.address} route-map AIDCLAB-LBW-OUT out" in lines
    # Each GPU twice, with its own ASN on both sessions.
    g1 = [n for n in config.bgp.neighbors if n.name == "G1"]
    assert len(g1) == 2 and g1[0].asn == g1[1].asn and g1[0].interface != g1[1].interface
    assert not any(line.startswith("ip route ") for line in lines)


def test_without_bgp_an_frr_node_keeps_the_static_routes(tmp_path: Path) -> None:
    topology, _ = shipped("leaf-spine")
    topology["topology"]["nodes"]["spine2"] = {"kind": "linux", "image": "aidclab/frr:latest"}
    config = configs(topology, {}, tmp_path)["spine2"]
    lines = render(config)
    assert config.routes and not any(line.startswith("router bgp") for line in lines)
    hop = config.routes[0].nexthops[0]
    assert f"ip route {config.routes[0].prefix} {hop.via} {hop.dev}" in lines


def test_frr_sessions_get_gtsm_and_the_lab_md5_by_default(tmp_path: Path) -> None:
    topology, lab_vars = shipped("superpod-frr")
    path = tmp_path / "superpod-frr.clab.yml"
    path.write_text(yaml.safe_dump(topology, sort_keys=False))
    topo = load_topology(path)

    def l1(extra: dict) -> list[str]:
        doc = {**lab_vars, "bgp": {**lab_vars.get("bgp", {}), **extra}}
        plan = build_plan(topo, LabVars.model_validate(doc), lab_md5=lambda: SecretStr("lab-k3y"))
        return render(node_configs(plan)["L1"])

    config = configs(topology, lab_vars, tmp_path)["L1"]
    lines = l1({})
    for n in config.bgp.neighbors:  # every session: its peers are GPU hosts, which do GTSM
        assert f" neighbor {n.address} ttl-security hops 1" in lines
        assert f" neighbor {n.address} password lab-k3y" in lines
    off = l1({"ttl_security_hops": False, "md5": False})
    assert not any("ttl-security" in line or " password " in line for line in off)
    assert f" neighbor {config.bgp.neighbors[0].address} ttl-security hops 2" in l1({"ttl_security_hops": 2})
    # A hand-written node file may set GTSM node-wide; the session's own value wins.
    n = config.bgp.neighbors[0]
    wide = config.model_copy(
        update={"bgp": config.bgp.model_copy(update={"ttl_security_hops": 3, "neighbors": [n]})}
    )
    assert f" neighbor {n.address} ttl-security hops 1" in render(wide)
    bare = n.model_copy(update={"ttl_security_hops": None})
    wide = wide.model_copy(update={"bgp": wide.bgp.model_copy(update={"neighbors": [bare]})})
    assert f" neighbor {n.address} ttl-security hops 3" in render(wide)
