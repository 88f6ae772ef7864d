"""The lab directory ``clab-<lab>/``: Ansible inventory and topology data in containerlab's shape.

``ansible-playbook -i clab-<lab>/ansible-inventory.yml playbooks/site.yml`` must work on its own
(docs/design.md §2), so the inventory carries the connection settings itself.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr

from orchestrator.lab.owner import owner_labels
from orchestrator.lab.roles import role_of
from orchestrator.lab.topology import Topology

PYTHON_IN_NODES = "/usr/bin/python3"


def lab_dir(topo: Topology, root: Path | None = None) -> Path:
    return (root or Path.cwd()) / topo.lab_dir_name


# The lab's own TCP-MD5 secret (RFC 2385), signing the BGP sessions the vars give no secret (docs/fare.md).
BGP_MD5_FILE = "bgp.md5"
# secrets.token_urlsafe's alphabet (A-Z a-z 0-9 - _) is inside what every speaker's config accepts.
_LAB_SECRET = re.compile(r"[A-Za-z0-9_-]{16,80}")


def lab_bgp_md5(path: Path) -> SecretStr:
    """The secret in ``path/bgp.md5``, made on first use (mode 0600) and read back ever after, so every
    configure of the lab renders the same node files. Destroy removes it with the lab dir."""
    file = path / BGP_MD5_FILE
    path.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        text = file.read_text().strip()
        if not _LAB_SECRET.fullmatch(text):
            raise ValueError(
                f"{file}: not a secret aidclab made (16-80 of A-Z a-z 0-9 - _); delete the file to have a "
                "new one generated, or give bgp.md5 in the vars"
            ) from None
        return SecretStr(text)
    text = secrets.token_urlsafe(24)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return SecretStr(text)


def container_labels(topo: Topology, node: str) -> dict[str, str]:
    """containerlab's labels plus our role, so destroy and inspect find everything by label."""
    n = topo.nodes[node]
    labels = {
        "containerlab": topo.name,
        "clab-node-name": node,
        "clab-node-longname": topo.container_name(node),
        "clab-node-kind": n.kind,
        "clab-node-group": n.group,
        "clab-node-type": "",
        "clab-node-lab-dir": str(lab_dir(topo) / node),
        "clab-topo-file": str(topo.path.resolve()),
        "clab-owner": "aidclab",
        "aidclab-role": str(role_of(n).name),
    }
    return {**owner_labels(), **n.labels, **labels}


# How Ansible reaches a node: as root, by entering the container's namespaces on this machine
# (playbooks/connection_plugins/aidclab_nsenter.py, one fork per task); otherwise, or for a node on another
# Docker host, through `docker exec`, which costs a docker CLI, dockerd, containerd and runc per task.
NSENTER_CONNECTION = "aidclab_nsenter"
DOCKER_CONNECTION = "community.docker.docker"


def local_connection() -> str:
    return NSENTER_CONNECTION if os.geteuid() == 0 else DOCKER_CONNECTION


def inventory(
    topo: Topology, mgmt_addresses: dict[str, str], connection: str = DOCKER_CONNECTION
) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for name, node in topo.nodes.items():
        host = topo.container_name(name)
        entry = {
            "ansible_host": mgmt_addresses.get(name, ""),
            "ansible_docker_host": host,
            "clab_node_name": name,
        }
        for group in (node.kind, role_of(node).ansible_group, node.group):
            if group:
                groups.setdefault(group, {"hosts": {}})["hosts"][host] = dict(entry)
    return {
        "all": {
            "vars": {
                "ansible_connection": connection,
                "ansible_python_interpreter": PYTHON_IN_NODES,
                "ansible_pipelining": True,
                # The inventory is used from the lab host; never go through an HTTP proxy.
                "ansible_httpapi_use_proxy": False,
                "aidclab_lab": topo.name,
                "aidclab_lab_dir": str(lab_dir(topo).resolve()),
            },
            "children": dict(sorted(groups.items())),
        }
    }


def topology_data(topo: Topology, mgmt_addresses: dict[str, str], prefix_len: int) -> dict[str, Any]:
    nodes = {}
    for index, (name, node) in enumerate(topo.nodes.items()):
        nodes[name] = {
            "index": str(index),
            "shortname": name,
            "longname": topo.container_name(name),
            "fqdn": f"{name}.{topo.name}.io",
            "group": node.group,
            "labdir": str(lab_dir(topo) / name),
            "kind": node.kind,
            "image": node.image,
            "mgmt-net": topo.mgmt.network,
            "mgmt-intf": "eth0",
            "mgmt-ipv4-address": mgmt_addresses.get(name, ""),
            "mgmt-ipv4-prefix-length": prefix_len,
            "mgmt-ipv6-address": "",
            "mgmt-ipv6-prefix-length": 0,
            "mac-address": "",
            "labels": container_labels(topo, name),
        }
    links = [
        {
            "a": {"node": link.a.node, "interface": link.a.interface, "mac": "", "peer": "z"},
            "z": {"node": link.b.node, "interface": link.b.interface, "mac": "", "peer": "a"},
            "mtu": link.mtu,
        }
        for link in topo.links
    ]
    return {
        "name": topo.name,
        "type": "clab",
        "clab": {
            "config": {
                "prefix": topo.prefix,
                "mgmt": {"network": topo.mgmt.network, "ipv4-subnet": topo.mgmt.ipv4_subnet},
                "config-path": str(topo.path.resolve().parent),
            }
        },
        "ssh-pub-keys": [],
        "nodes": nodes,
        "links": links,
    }


def recorded_mgmt_subnet(topo: Topology, root: Path | None = None) -> str | None:
    """The management subnet the last deploy of the lab gave it, as its topology-data.json records it;
    None when the lab was not deployed here or its file now names another network."""
    path = lab_dir(topo, root) / "topology-data.json"
    try:
        mgmt = json.loads(path.read_text())["clab"]["config"]["mgmt"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if mgmt.get("network") != topo.mgmt.network:
        return None
    return mgmt.get("ipv4-subnet") or None


def settle_mgmt(topo: Topology, root: Path | None = None) -> Topology:
    """Give a topology whose own management subnet is chosen at deploy the subnet that deploy recorded,
    so a configure in another process plans around the same subnet (unchanged when none is recorded)."""
    if topo.mgmt.ipv4_subnet is None:
        topo.mgmt.ipv4_subnet = recorded_mgmt_subnet(topo, root)
    return topo


PLAN_GROUPS = ("aidclab_igmp", "aidclab_bgp", "aidclab_peers")


def write_plan_groups(path: Path, groups: dict[str, list[str]]) -> None:
    """Put the plan's groups (``PLAN_GROUPS``: containers whose node file has IGMP, BGP; the interop
    peers) into the lab's inventory, so the plays of a feature run on exactly those nodes and cost nothing
    on the others (a role ``when:`` that is false, or a ``group_by`` task, costs a round over every host).
    Every group is written, empty or not, so a play naming one never warns that it matches nothing."""
    inventory_path = path / "ansible-inventory.yml"
    lines = inventory_path.read_text().splitlines(keepends=True)
    header = "".join(line for line in lines if line.startswith("#"))
    doc = yaml.safe_load("".join(lines))
    children = doc["all"].setdefault("children", {})
    for name in PLAN_GROUPS:
        children[name] = {"hosts": {host: None for host in sorted(groups.get(name, []))}}
    inventory_path.write_text(header + yaml.safe_dump(doc, sort_keys=False))


def write_lab_dir(topo: Topology, mgmt_addresses: dict[str, str], prefix_len: int) -> Path:
    path = lab_dir(topo)
    path.mkdir(parents=True, exist_ok=True)
    for name in topo.nodes:
        (path / name).mkdir(exist_ok=True)
    (path / "ansible-inventory.yml").write_text(
        "# Generated by aidclab deploy; rewritten on every deploy. The aidclab_igmp, aidclab_bgp and\n"
        "# aidclab_peers groups come from the plan (aidclab plan / configure).\n"
        + yaml.safe_dump(inventory(topo, mgmt_addresses, local_connection()), sort_keys=False)
    )
    (path / "topology-data.json").write_text(
        json.dumps(topology_data(topo, mgmt_addresses, prefix_len), indent=2) + "\n"
    )
    return path
