"""The gobgp and bird roles' configs from the plan (docs/interop.md): one eBGP session per cable with the
plan's ASNs, addresses and timers, the loopback originated, multipath on; and the files parse in the real
daemons (``gobgpd --dry-run``, ``bird -p``) when Debian's gobgpd and bird2 are installed on this host."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import jinja2
import pytest
import yaml

from aidcnet.config import NodeConfig
from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.roles import ROLES
from orchestrator.lab.topology import load_topology
from orchestrator.paths import ROOT

ROLES_DIR = ROOT / "playbooks" / "roles"


def configs(lab: str, tmp_path: Path, edit=None) -> dict[str, NodeConfig]:
    topology = yaml.safe_load((ROOT / "labs" / f"{lab}.clab.yml").read_text())
    vars_path = ROOT / "labs" / f"{lab}.vars.yml"
    lab_vars = yaml.safe_load(vars_path.read_text()) or {} if vars_path.exists() else {}
    if edit:
        edit(topology)
    path = tmp_path / f"{topology['name']}.clab.yml"
    path.write_text(yaml.safe_dump(topology, sort_keys=False))
    return node_configs(build_plan(load_topology(path), LabVars.model_validate(lab_vars)))


def render(template: Path, config: NodeConfig) -> str:
    # Ansible's template module renders with trim_blocks on; StrictUndefined catches a renamed field.
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    return env.from_string(template.read_text()).render(
        aidclab_node=config.model_dump(mode="json", exclude_none=True), ansible_managed="test"
    )


@pytest.fixture(scope="module")
def peers(tmp_path_factory) -> dict[str, NodeConfig]:
    return configs("superpod-peers", tmp_path_factory.mktemp("peers"))


def test_superpod_peers_has_a_gobgp_and_a_bird_leaf_with_two_cables_per_gpu(peers) -> None:
    assert peers["L1"].role == "gobgp" and peers["L2"].role == "bird"
    assert {peers[n].role for n in ("L3", "L4")} == {"bfr"}
    for leaf in ("L1", "L2"):
        neighbors = peers[leaf].bgp.neighbors
        assert len(neighbors) == 16  # 8 GPUs x 2 cables
        g1 = [n for n in neighbors if n.name == "G1"]
        assert len(g1) == 2 and g1[0].asn == g1[1].asn and g1[0].interface != g1[1].interface
        assert peers[leaf].routes == []  # BGP installs the routes, not static ones
    # The GPUs peer with the leaves over both cables: their own plan lists L1 and L2 twice.
    names = [n.name for n in peers["G1"].bgp.neighbors]
    assert names.count("L1") == 2 and names.count("L2") == 2 and len(names) == 6


def test_gobgpd_conf_has_one_session_per_cable_from_the_plan(peers) -> None:
    config = peers["L1"]
    doc = tomllib.loads(render(ROLES_DIR / "gobgp" / "templates" / "gobgpd.conf.j2", config))
    want_global = {"as": config.bgp.asn, "router-id": str(config.bgp.router_id), "port": 179}
    assert doc["global"]["config"] == want_global
    assert doc["global"]["use-multiple-paths"]["config"]["enabled"] is True
    got = {
        n["config"]["neighbor-address"]: (
            n["config"]["peer-as"],
            n["transport"]["config"]["local-address"],
            n["timers"]["config"]["hold-time"],
            n["timers"]["config"]["keepalive-interval"],
            [a["config"]["afi-safi-name"] for a in n["afi-safis"]],
        )
        for n in doc["neighbors"]
    }
    want = {
        str(n.address): (n.asn, str(n.local_address), 9, 3, ["ipv4-unicast"]) for n in config.bgp.neighbors
    }
    assert got == want


def test_gobgp_originates_the_loopback_and_nothing_without_bgp(peers, tmp_path) -> None:
    template = ROLES_DIR / "gobgp" / "templates" / "networks.j2"
    lines = [ln for ln in render(template, peers["L1"]).splitlines() if ln and not ln.startswith("#")]
    assert lines == [str(peers["L1"].loopback)]

    def gobgp_spine(doc: dict) -> None:
        doc["topology"]["nodes"]["spine2"] = {"kind": "linux", "image": "aidclab/gobgp:latest"}

    spine = configs("leaf-spine", tmp_path, gobgp_spine)["spine2"]
    assert spine.role == "gobgp" and (spine.bgp is None or not spine.bgp.neighbors)
    lines = [ln for ln in render(template, spine).splitlines() if ln and not ln.startswith("#")]
    assert lines == []


def test_bird_conf_has_one_session_per_cable_from_the_plan(peers) -> None:
    config = peers["L2"]
    text = render(ROLES_DIR / "bird" / "templates" / "bird.conf.j2", config)
    lines = [ln.strip() for ln in text.splitlines()]
    for needed in (
        f"router id {config.bgp.router_id};",
        f"local as {config.bgp.asn};",
        "hold time 9;",
        "keepalive time 3;",
        "merge paths on limit 64;",
        "ipv4 { export where source = RTS_BGP; };",
        "export where source ~ [ RTS_BGP, RTS_DEVICE ];",
        f"ipv4 {{ import where net = {config.loopback}; }};",
    ):
        assert needed in lines, needed
    for n in config.bgp.neighbors:
        block = text.split(f'description "{n.name} via {n.interface}";', 1)[1].split("}", 1)[0]
        assert f"neighbor {n.address} as {n.asn};" in block
        assert f"source address {n.local_address};" in block
        assert f'interface "{n.interface}";' in block
    assert text.count("protocol bgp ") == len(config.bgp.neighbors)


def test_peer_net_script_sets_addresses_and_static_routes_and_parses(tmp_path) -> None:
    def bird_spine(doc: dict) -> None:
        doc["topology"]["nodes"]["spine2"] = {"kind": "linux", "image": "aidclab/bird:latest"}

    spine = configs("leaf-spine", tmp_path, bird_spine)["spine2"]
    tasks = yaml.safe_load((ROLES_DIR / "peer_net" / "tasks" / "main.yml").read_text())
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=False, undefined=jinja2.StrictUndefined)
    script = env.from_string(tasks[0]["ansible.builtin.raw"]).render(
        aidclab_node=spine.model_dump(mode="json", exclude_none=True)
    )
    assert f"addr {spine.loopback} lo" in script
    for iface in spine.interfaces:
        assert f"addr {iface.ipv4} {iface.name}" in script
    route = spine.routes[0]
    hops = "".join(f" nexthop via {h.via} dev {h.dev}" for h in route.nexthops)
    assert f"ip route replace {route.prefix} proto static{hops}" in script
    check = subprocess.run(["sh", "-n"], input=script, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr


def test_gobgp_and_bird_are_roles_with_images_and_groups() -> None:
    from orchestrator.lab.images import RECIPES, ROLE_IMAGES

    for name in ("gobgp", "bird"):
        role = ROLES[name]
        assert not role.runs_agent and role.image == f"aidclab/{name}:latest" and role.ansible_group == name
        assert name in ROLE_IMAGES
        assert f'aidclab-role="{name}"' in (RECIPES / name / "Dockerfile").read_text()
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    assert {"gobgp", "bird"} <= {play["hosts"] for play in site}


def test_the_interop_peers_are_a_group_of_the_plan(peers) -> None:
    """site.yml's play for every peer targets aidclab_peers, which the roles fill: no play lists them."""
    from orchestrator.configure.ansible import plan_groups
    from orchestrator.lab.topology import load_topology

    topo = load_topology(ROOT / "labs" / "superpod-peers.clab.yml")
    groups = plan_groups(topo, peers)
    assert groups["aidclab_peers"] == [topo.container_name("L1"), topo.container_name("L2")]
    assert set(groups["aidclab_bgp"]) > set(groups["aidclab_peers"])
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    assert [play["roles"] for play in site if play["hosts"] == "aidclab_peers"] == [[{"role": "common"}]]


@pytest.mark.skipif(shutil.which("gobgpd") is None, reason="Debian's gobgpd is not installed on this host")
def test_gobgpd_accepts_the_rendered_config_and_rejects_a_broken_one(peers, tmp_path) -> None:
    good = tmp_path / "gobgpd.conf"
    good.write_text(render(ROLES_DIR / "gobgp" / "templates" / "gobgpd.conf.j2", peers["L1"]))
    ok = subprocess.run(["gobgpd", "--dry-run", "-f", str(good)], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.conf"
    first_asn = peers["L1"].bgp.neighbors[0].asn
    bad.write_text(good.read_text().replace(f"peer-as = {first_asn}", 'peer-as = "x"', 1))
    failed = subprocess.run(
        ["gobgpd", "--dry-run", "-f", str(bad)], capture_output=True, text=True, timeout=30
    )
    assert failed.returncode != 0 and "peer-as" in failed.stdout + failed.stderr


@pytest.mark.skipif(shutil.which("bird") is None, reason="Debian's bird2 is not installed on this host")
def test_bird_accepts_the_rendered_config_and_rejects_a_broken_one(peers, tmp_path) -> None:
    good = tmp_path / "bird.conf"
    good.write_text(render(ROLES_DIR / "bird" / "templates" / "bird.conf.j2", peers["L2"]))
    ok = subprocess.run(["bird", "-p", "-c", str(good)], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.conf"
    bad.write_text(good.read_text().replace("local as", "local ass", 1))
    failed = subprocess.run(["bird", "-p", "-c", str(bad)], capture_output=True, text=True, timeout=30)
    assert failed.returncode != 0 and "syntax error" in failed.stderr


@pytest.fixture(scope="module")
def signed_peers(tmp_path_factory) -> dict[str, NodeConfig]:
    """superpod-peers with TCP-MD5 on every session (a backslash in the secret: TOML escapes it)."""
    tmp = tmp_path_factory.mktemp("signed")
    topology = yaml.safe_load((ROOT / "labs" / "superpod-peers.clab.yml").read_text())
    path = tmp / "superpod-peers.clab.yml"
    path.write_text(yaml.safe_dump(topology, sort_keys=False))
    lab_vars = yaml.safe_load((ROOT / "labs" / "superpod-peers.vars.yml").read_text()) or {}
    lab_vars.setdefault("bgp", {})["md5"] = MD5
    return node_configs(build_plan(load_topology(path), LabVars.model_validate(lab_vars)))


MD5 = "s3cret\\Bgp!"


def test_peers_render_the_sessions_tcp_md5_secret(signed_peers, tmp_path) -> None:
    gobgp = tomllib.loads(render(ROLES_DIR / "gobgp" / "templates" / "gobgpd.conf.j2", signed_peers["L1"]))
    assert {n["config"]["auth-password"] for n in gobgp["neighbors"]} == {MD5}
    bird = render(ROLES_DIR / "bird" / "templates" / "bird.conf.j2", signed_peers["L2"])
    assert bird.count(f'password "{MD5}";') == len(signed_peers["L2"].bgp.neighbors)
    unsigned = configs("superpod-peers", tmp_path)["L1"]
    assert "auth-password" not in render(ROLES_DIR / "gobgp" / "templates" / "gobgpd.conf.j2", unsigned)
    daemons = (("gobgp", ["gobgpd", "--dry-run", "-f"], "L1"), ("bird", ["bird", "-p", "-c"], "L2"))
    for role, cmd, node in daemons:
        if shutil.which(cmd[0]) is None:
            continue  # the render checks above still ran; the daemons check it where Debian's are installed
        template = ROLES_DIR / role / "templates" / f"{cmd[0]}.conf.j2"
        conf = tmp_path / f"{role}.conf"
        conf.write_text(render(template, signed_peers[node]))
        ok = subprocess.run([*cmd, str(conf)], capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0, ok.stdout + ok.stderr
