"""Split one lab into one containerlab file per host, the cut links turned into VXLAN links.

Pure logic plus the writing of files; nothing here touches Docker or the kernel.

- Which node goes where: ``--assign node=host`` wins; every other node follows a default partition that
  keeps cuts few on tiered fabrics: a node with one link (a GPU host) stays with its switch, and the
  remaining switches are dealt in file order into contiguous, container-balanced blocks, one per host.
  On leaf-spine that puts half the leaves with their hosts on each side and cuts only leaf-spine links.
- Every cut link becomes two ``type: vxlan`` links (one per part file) with the same VNI, ``vni_base + the
  link's index`` in the source file: unique across the lab, so no host's kernel ever sees two VXLAN
  devices with one VNI on one UDP port, whatever the assignment.
- MTU: VXLAN over IPv4 adds 50 bytes outside the inner frame, so a cut link's MTU becomes
  ``min(link MTU, underlay MTU - 50)``; with the default jumbo underlay (9500) that is 9450.
- The parts keep the source's prefix, kinds and groups; part ``h`` is the lab ``<lab>-<h>``, so two parts
  can run side by side in one Docker engine. The manifest ``<lab>.split.yml`` names every part, its host,
  underlay address and Docker endpoint; ``load_split`` turns it back into the whole lab (the source's
  nodes and links, each node under its part's container name), which is what plan, configure and replay
  act on.
- ``local``: every part on this machine, each in a namespace of its own that stands in for its host
  (``orchestrator.lab.vxlan.local_underlay``, named ``aidclab-<lab>-<host>``); the manifest names them,
  and ``orchestrator.lab.splitlab`` deploys and destroys the parts there.
"""

from __future__ import annotations

import copy
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from orchestrator.lab.topology import (
    VXLAN_OVERHEAD_V4,
    VXLAN_OVERHEAD_V6,
    Link,
    Topology,
    TopologyError,
    load_topology,
    parse_topology,
)

# containerlab's own examples use 14789 for lab VXLAN, away from a host's own VXLAN on 4789.
DEFAULT_DST_PORT = 14789
DEFAULT_VNI_BASE = 1000
DEFAULT_UNDERLAY_MTU = 9500
# RFC 2544 benchmarking range: the one-machine stand-ins for host addresses.
LOCAL_UNDERLAY = ipaddress.ip_network("198.18.0.0/24")
MANIFEST_SUFFIX = ".split.yml"


class SplitError(ValueError):
    pass


@dataclass
class Part:
    host: str
    lab: str
    file: str
    underlay: str
    docker_host: str = ""
    nodes: list[str] = field(default_factory=list)
    underlay_netns: str = ""  # local: the namespace standing in for the host


@dataclass(frozen=True)
class Cut:
    link: Link
    vni: int
    a_host: str
    b_host: str


@dataclass
class SplitPlan:
    source: Topology
    parts: dict[str, Part]
    cuts: list[Cut]
    dst_port: int
    underlay_mtu: int
    local_underlay: str = ""  # local: the prefix of the parts' underlay namespaces

    def host_of(self, node: str) -> str:
        return next(p.host for p in self.parts.values() if node in p.nodes)

    def inner_mtu(self, link: Link) -> int:
        overhead = (
            VXLAN_OVERHEAD_V6 if any(":" in p.underlay for p in self.parts.values()) else VXLAN_OVERHEAD_V4
        )
        return min(link.mtu, self.underlay_mtu - overhead)


def local_prefix(lab: str) -> str:
    """The prefix of the namespaces that stand in for the hosts of ``lab``'s parts on one machine."""
    return f"aidclab-{lab}"


def default_partition(topo: Topology, hosts: list[str], assign: dict[str, str]) -> dict[str, str]:
    """node -> host: ``assign`` first, then the default partition described in the module docstring."""
    degree = dict.fromkeys(topo.nodes, 0)
    neighbours: dict[str, list[str]] = {n: [] for n in topo.nodes}
    for link in topo.links:
        degree[link.a.node] += 1
        degree[link.b.node] += 1
        neighbours[link.a.node].append(link.b.node)
        neighbours[link.b.node].append(link.a.node)
    # A unit is a switch and the single-homed nodes hanging off it; units move between hosts whole.
    owner = {
        n: (neighbours[n][0] if degree[n] == 1 and degree[neighbours[n][0]] > 1 else n) for n in topo.nodes
    }
    units: dict[str, list[str]] = {}
    for n in topo.nodes:
        units.setdefault(owner[n], []).append(n)
    placed = {n: assign[n] for n in topo.nodes if n in assign}
    free = [u for u in units if not any(n in placed for n in units[u])]
    load = dict.fromkeys(hosts, 0)
    for h in placed.values():
        load[h] += 1
    # Members of a unit with a pinned node follow the pin.
    for members in units.values():
        pinned = [placed[n] for n in members if n in placed]
        for n in members:
            if n not in placed and pinned:
                placed[n] = pinned[0]
                load[pinned[0]] += 1
    total = sum(len(units[u]) for u in free) + sum(load.values())
    target = total / len(hosts)
    hi = 0
    for u in free:
        while hi < len(hosts) - 1 and load[hosts[hi]] >= target:
            hi += 1
        for n in units[u]:
            placed[n] = hosts[hi]
        load[hosts[hi]] += len(units[u])
    return placed


def plan_split(
    topo: Topology,
    hosts: list[str],
    assign: dict[str, str] | None = None,
    underlay: dict[str, str] | None = None,
    docker_hosts: dict[str, str] | None = None,
    vni_base: int = DEFAULT_VNI_BASE,
    dst_port: int = DEFAULT_DST_PORT,
    underlay_mtu: int = DEFAULT_UNDERLAY_MTU,
    local: bool = False,
) -> SplitPlan:
    """``local``: the parts run side by side on this machine, each in its own underlay namespace."""
    from orchestrator.lab.vxlan import local_netns

    assign = assign or {}
    problems = []
    if local and (docker_hosts or underlay):
        problems.append(
            f"--local puts every part on this machine, at the underlay addresses {LOCAL_UNDERLAY} gives: "
            "leave out --docker-host and --underlay"
        )
    underlay = dict(underlay or {})
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        problems.append(f"--hosts: give two or more distinct host names, got {','.join(hosts) or 'none'}")
    for n, h in assign.items():
        if n not in topo.nodes:
            problems.append(f"--assign {n}={h}: the lab has no node {n!r}")
        if h not in hosts:
            problems.append(f"--assign {n}={h}: {h!r} is not one of --hosts {','.join(hosts)}")
    for h in underlay:
        if h not in hosts:
            problems.append(f"--underlay {h}=...: {h!r} is not one of --hosts")
    for i, h in enumerate(hosts):
        underlay.setdefault(h, str(LOCAL_UNDERLAY[i + 1]))
        try:
            ipaddress.ip_address(underlay[h])
        except ValueError:
            problems.append(f"--underlay {h}={underlay[h]}: not an IP address")
    if len(set(underlay.values())) != len(underlay):
        problems.append("--underlay: two hosts have the same underlay address")
    last_vni = vni_base + max((link.index for link in topo.links), default=0)
    if vni_base < 1 or last_vni > 2**24 - 1:
        problems.append(f"--vni-base {vni_base}: VNIs {vni_base}..{last_vni} must lie in 1..16777215")
    if problems:
        raise SplitError("; ".join(problems))
    placed = default_partition(topo, hosts, assign)
    parts = {
        h: Part(
            host=h,
            lab=f"{topo.name}-{h}",
            file=f"{topo.name}-{h}.clab.yml",
            underlay=underlay[h],
            docker_host=(docker_hosts or {}).get(h, ""),
            nodes=[n for n in topo.nodes if placed[n] == h],
            underlay_netns=local_netns(local_prefix(topo.name), h) if local else "",
        )
        for h in hosts
    }
    empty = [h for h, p in parts.items() if not p.nodes]
    if empty:
        raise SplitError(
            f"hosts {', '.join(empty)} got no nodes; use fewer --hosts or --assign nodes to them"
        )
    cuts = [
        Cut(link, vni_base + link.index, placed[link.a.node], placed[link.b.node])
        for link in topo.links
        if placed[link.a.node] != placed[link.b.node]
    ]
    return SplitPlan(topo, parts, cuts, dst_port, underlay_mtu, local_prefix(topo.name) if local else "")


def _vxlan_link(end: Any, remote: str, vni: int, port: int, mtu: int) -> dict[str, Any]:
    return {
        "type": "vxlan",
        "endpoint": {"node": end.node, "interface": end.interface},
        "remote": remote,
        "vni": vni,
        "dst-port": port,
        "mtu": mtu,
    }


def _rebase_binds(level: dict[str, Any], src_dir: Path, out_dir: Path) -> None:
    """containerlab resolves relative bind sources against the file's folder: keep them pointing at the
    same files from the part's folder."""
    binds = level.get("binds")
    if not isinstance(binds, list):
        return
    out = []
    for bind in binds:
        src, sep, rest = str(bind).partition(":")
        if sep and not src.startswith("/"):
            src = os.path.relpath((src_dir / src).resolve(), out_dir.resolve())
        out.append(f"{src}{sep}{rest}")
    level["binds"] = out


def part_documents(plan: SplitPlan, raw: dict[str, Any], out_dir: Path) -> dict[str, dict[str, Any]]:
    """host -> the part's containerlab document, built from the source file's own YAML."""
    src_dir = plan.source.path.resolve().parent
    raw_links = raw["topology"].get("links") or []
    docs = {}
    for h, part in plan.parts.items():
        d = copy.deepcopy(raw)
        d["name"] = part.lab
        topo = d["topology"]
        topo["nodes"] = {n: topo["nodes"][n] for n in part.nodes}
        for level in [
            topo.get("defaults") or {},
            *(topo.get("kinds") or {}).values(),
            *(topo.get("groups") or {}).values(),
            *(v or {} for v in topo["nodes"].values()),
        ]:
            _rebase_binds(level, src_dir, out_dir)
        links = []
        cut_by_index = {c.link.index: c for c in plan.cuts}
        for link in plan.source.links:
            cut = cut_by_index.get(link.index)
            if cut is None:
                if plan.host_of(link.a.node) == h:
                    links.append(raw_links[link.index])
                continue
            mtu = plan.inner_mtu(link)
            if cut.a_host == h:
                links.append(
                    _vxlan_link(link.a, plan.parts[cut.b_host].underlay, cut.vni, plan.dst_port, mtu)
                )
            if cut.b_host == h:
                links.append(
                    _vxlan_link(link.b, plan.parts[cut.a_host].underlay, cut.vni, plan.dst_port, mtu)
                )
        topo["links"] = links
        docs[h] = d
    return docs


def manifest(plan: SplitPlan, out_dir: Path) -> dict[str, Any]:
    local = {"local-underlay": plan.local_underlay} if plan.local_underlay else {}
    return {
        "lab": plan.source.name,
        "source": os.path.relpath(plan.source.path.resolve(), out_dir.resolve()),
        "dst-port": plan.dst_port,
        "underlay-mtu": plan.underlay_mtu,
        **local,
        "parts": [
            {
                "host": p.host,
                "file": p.file,
                "lab": p.lab,
                "underlay": p.underlay,
                "docker-host": p.docker_host,
                **({"underlay-netns": p.underlay_netns} if p.underlay_netns else {}),
                "nodes": p.nodes,
            }
            for p in plan.parts.values()
        ],
        "cuts": [
            {
                "link": str(c.link),
                "index": c.link.index,
                "vni": c.vni,
                "hosts": [c.a_host, c.b_host],
                "mtu": plan.inner_mtu(c.link),
            }
            for c in plan.cuts
        ],
    }


def write_split(plan: SplitPlan, out_dir: Path) -> list[Path]:
    """Write every part file and the manifest; each part is parsed back (schema and meaning) first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load(plan.source.path.read_text())
    written = []
    for h, d in part_documents(plan, raw, out_dir).items():
        path = out_dir / plan.parts[h].file
        parse_topology(d, path)
        path.write_text(
            f"# Part {h!r} of lab {plan.source.name!r}, written by aidclab split; deploy it on {h}.\n"
            + yaml.safe_dump(d, sort_keys=False)
        )
        written.append(path)
    path = out_dir / f"{plan.source.name}{MANIFEST_SUFFIX}"
    path.write_text(
        "# The parts of one lab; aidclab plan/configure/replay take this file as the lab.\n"
        + yaml.safe_dump(manifest(plan, out_dir), sort_keys=False)
    )
    written.append(path)
    return written


@dataclass
class SplitLab:
    """A split lab read back from its manifest."""

    manifest_path: Path
    whole: Topology
    parts: list[dict[str, Any]]
    # local: the prefix of the parts' underlay namespaces on this machine, and the underlay's MTU
    local_underlay: str = ""
    underlay_mtu: int = DEFAULT_UNDERLAY_MTU

    def part_topology(self, host: str) -> Topology:
        part = next(p for p in self.parts if p["host"] == host)
        return load_topology(self.manifest_path.parent / part["file"])

    def docker_host_of(self, node: str) -> str:
        return next(p.get("docker-host", "") for p in self.parts if node in p["nodes"])


def is_manifest(path: str | Path) -> bool:
    return str(path).endswith(MANIFEST_SUFFIX)


def load_split(path: str | Path) -> SplitLab:
    """The whole lab of a manifest: the source's nodes and links under the parts' container names."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
        source = path.parent / doc["source"]
        parts = list(doc["parts"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise TopologyError(path, [f"not a split manifest written by aidclab split: {exc}"]) from exc
    whole = load_topology(source)
    names: dict[str, str] = {}
    for part in parts:
        topo = load_topology(path.parent / part["file"])
        for node in topo.nodes:
            names[node] = topo.container_name(node)
    missing = sorted(set(whole.nodes) - set(names))
    if missing:
        raise TopologyError(path, [f"nodes {', '.join(missing)} of {source} are in no part; split again"])
    whole.container_names = names
    # The plan sets every interface's MTU from its link (aidcnet's kernel sync): a cut link's must be the
    # inner MTU its VXLAN devices were made with, or the agents would raise it past what the underlay carries.
    cut_mtu = {c["index"]: c["mtu"] for c in doc.get("cuts") or []}
    whole.links = [replace(lk, mtu=cut_mtu[lk.index]) if lk.index in cut_mtu else lk for lk in whole.links]
    local = str(doc.get("local-underlay") or "")
    return SplitLab(path, whole, parts, local, int(doc.get("underlay-mtu") or DEFAULT_UNDERLAY_MTU))


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """``a=b,c=d`` (repeatable) -> {a: b, c: d}; the error names the option."""
    out = {}
    for item in items:
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            if not sep or not key or not value:
                raise SplitError(f"{what} {pair!r}: write KEY=VALUE, e.g. {what} leaf1=a")
            out[key.strip()] = value.strip()
    return out


def write_inventory(split: SplitLab, root: Path | None = None) -> Path:
    """One Ansible inventory for every part, in the whole lab's directory ``clab-<lab>/``. A part on
    another host is reached through its Docker endpoint (``docker -H ssh://user@host``); the connection
    plugin addresses containers by name, so no management address is needed here."""
    from orchestrator.lab import labdir

    inv = labdir.inventory(split.whole, {}, labdir.local_connection())
    for group in inv["all"]["children"].values():
        for entry in group["hosts"].values():
            docker_host = split.docker_host_of(entry["clab_node_name"])
            if docker_host:
                # nsenter reaches this machine's containers only
                entry["ansible_connection"] = labdir.DOCKER_CONNECTION
                entry["ansible_docker_extra_args"] = f"-H {docker_host}"
    path = labdir.lab_dir(split.whole, root)
    path.mkdir(parents=True, exist_ok=True)
    out = path / "ansible-inventory.yml"
    out.write_text(
        f"# Generated by aidclab from {split.manifest_path}: every part of the split lab.\n"
        + yaml.safe_dump(inv, sort_keys=False)
    )
    return out
