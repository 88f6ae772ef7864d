"""Containerlab topology files: parse, validate against containerlab's schema, then check meaning.

A lab file that aidclab deploys must also be deployable by containerlab itself (docs/design.md §2), so we
read the same format and the same inheritance rules: ``topology.defaults`` < ``kinds[kind]`` <
``groups[group]`` < the node itself. Maps (env, labels, sysctls) merge key by key; binds accumulate;
every other key is taken from the most specific level that sets it.

Every error names the file and the node, link or field at fault and says how to fix it.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PREFIX = "clab"
# containerlab's shared management network; a lab gets it only by naming it (``mgmt: network: clab``).
# A lab that names no network gets its own (:func:`own_mgmt_network`), sized to its nodes.
DEFAULT_MGMT_NETWORK = "clab"
DEFAULT_MGMT_SUBNET = "172.20.20.0/24"
# Where a lab's own management subnet is chosen, clear of every Docker network (free_mgmt_subnet).
MGMT_POOL = "172.16.0.0/12"
# containerlab's default link MTU; jumbo frames keep a 4 KiB RoCE payload plus BIER in one packet.
DEFAULT_MTU = 9500
# Linux IFNAMSIZ is 16 including the terminating NUL.
MAX_IFNAME = 15
RESERVED_IFNAMES = frozenset({"lo", "eth0"})
# The one containerlab kind aidclab runs: a plain container (its role comes from image or label).
LINUX_KIND = "linux"
SUPPORTED_KINDS = frozenset({LINUX_KIND})
# containerlab's single-endpoint VXLAN links: the node's interface is a VXLAN device (``vxlan``), or a
# veth whose host end is joined to a VXLAN device in the host by a tc redirect (``vxlan-stitch``).
VXLAN_TYPES = ("vxlan", "vxlan-stitch")
# Outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8: what a VXLAN link adds to every inner frame on the
# underlay (IPv6 underlays add 20 more). Inner MTU = underlay MTU - this.
VXLAN_OVERHEAD_V4 = 50
VXLAN_OVERHEAD_V6 = 70

MERGED_MAP_KEYS = ("env", "labels", "sysctls")
ACCUMULATED_LIST_KEYS = ("binds",)


class TopologyError(ValueError):
    """One or more problems in a topology file; ``problems`` lists each with its location."""

    def __init__(self, path: str | Path, problems: Iterable[str]):
        self.path = str(path)
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{self.path}: {len(self.problems)} problem(s):\n{lines}")


@dataclass(frozen=True, order=True)
class Endpoint:
    node: str
    interface: str

    def __str__(self) -> str:
        return f"{self.node}:{self.interface}"


@dataclass(frozen=True)
class Link:
    a: Endpoint
    b: Endpoint
    mtu: int = DEFAULT_MTU
    index: int = 0

    @property
    def endpoints(self) -> tuple[Endpoint, Endpoint]:
        return (self.a, self.b)

    def __str__(self) -> str:
        return f"{self.a} <-> {self.b}"


@dataclass(frozen=True)
class VxlanLink:
    """One end of a link cut across hosts: ``endpoint`` talks to ``remote`` over UDP ``dst_port``
    with VXLAN network identifier ``vni``. Its peer is the same VNI in another host's file."""

    endpoint: Endpoint
    remote: str
    vni: int
    dst_port: int
    src_port: int | None = None
    mtu: int = DEFAULT_MTU
    stitched: bool = False
    index: int = 0

    @property
    def type(self) -> str:
        return VXLAN_TYPES[1] if self.stitched else VXLAN_TYPES[0]

    @property
    def overhead(self) -> int:
        return VXLAN_OVERHEAD_V6 if ":" in self.remote else VXLAN_OVERHEAD_V4

    def __str__(self) -> str:
        return f"{self.endpoint} -> {self.type} {self.remote} vni {self.vni} port {self.dst_port}"


@dataclass
class Node:
    name: str
    kind: str
    image: str
    group: str = ""
    exec: list[str] = field(default_factory=list)
    binds: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    mgmt_ipv4: str | None = None
    cmd: str | None = None
    # Other containerlab keys we pass through untouched (for topology-data.json) but do not act on.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Mgmt:
    """The management network. ``own``: the topology names no ``mgmt.network``, so the lab has a network
    of its own that deploy creates and destroy removes. ``ipv4_subnet`` None: not chosen yet; deploy picks
    a free one sized to the nodes and records it in the lab directory (labdir.recorded_mgmt_subnet)."""

    network: str = DEFAULT_MGMT_NETWORK
    ipv4_subnet: str | None = DEFAULT_MGMT_SUBNET
    bridge: str | None = None
    own: bool = False


@dataclass
class Topology:
    name: str
    path: Path
    nodes: dict[str, Node]
    links: list[Link]
    prefix: str = DEFAULT_PREFIX
    mgmt: Mgmt = field(default_factory=Mgmt)
    vxlan_links: list[VxlanLink] = field(default_factory=list)
    # A lab split across hosts (orchestrator.lab.split) is configured as one: its nodes keep the
    # container names their parts gave them.
    container_names: dict[str, str] = field(default_factory=dict)

    def container_name(self, node: str) -> str:
        """containerlab's naming: ``<prefix>-<lab>-<node>``; an empty prefix means the bare node name."""
        if node in self.container_names:
            return self.container_names[node]
        if self.prefix == "":
            return node
        prefix = self.name if self.prefix == "__lab-name" else self.prefix
        return f"{prefix}-{self.name}-{node}"

    @property
    def lab_dir_name(self) -> str:
        return lab_dir_name(self.name)

    def links_of(self, node: str) -> list[tuple[Link, Endpoint, Endpoint]]:
        """(link, local endpoint, remote endpoint) for every link of ``node``, in file order."""
        out = []
        for link in self.links:
            if link.a.node == node:
                out.append((link, link.a, link.b))
            if link.b.node == node:
                out.append((link, link.b, link.a))
        return out


@cache
def clab_schema() -> dict[str, Any]:
    """containerlab's JSON schema, with ``\\p{N}\\p{L}`` rewritten for Python's ``re`` (docs/design.md §2)."""
    text = resources.files("orchestrator.lab").joinpath("schema/clab.schema.json").read_text()
    return json.loads(text)


def _schema_problems(path: Path, doc: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator(clab_schema())
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        msg = err.message
        if len(msg) > 200:
            msg = msg[:200] + "..."
        refined = _link_schema_problems(doc, err.absolute_path)
        if refined:
            problems += [p for p in refined if p not in problems]
            continue
        problems.append(f"{where}: {msg} (containerlab schema)")
    return problems


def _link_schema_problems(doc: Any, path: Any) -> list[str]:
    """A link that matches none of the schema's link types only gets "not valid under any of the given
    schemas"; check it against the one type it names, so the error says which field is wrong."""
    import jsonschema

    parts = list(path)
    if len(parts) != 3 or parts[:2] != ["topology", "links"]:
        return []
    raw = doc["topology"]["links"][parts[2]]
    link_type = raw.get("type") if isinstance(raw, dict) else None
    definitions = clab_schema()["definitions"]
    name = "link-type-vxlan-stitched" if link_type == "vxlan-stitch" else f"link-type-{link_type}"
    if name not in definitions:
        return []
    validator = jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}", "definitions": definitions})
    label = _raw_link_label(raw)
    out = []
    for err in validator.iter_errors(raw):
        field_path = "/".join(str(p) for p in err.absolute_path)
        where = f"topology/links/{parts[2]}{'/' + field_path if field_path else ''} ({label})"
        out.append(f"{where}: {err.message} (containerlab schema, type {link_type})")
    return out


def _raw_link_label(raw: dict[str, Any]) -> str:
    ep = raw.get("endpoint")
    if isinstance(ep, dict):
        return f"{raw.get('type')} {ep.get('node')}:{ep.get('interface')}"
    return str(raw.get("type"))


def _merge(levels: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for level in levels:
        for key, value in level.items():
            if key in MERGED_MAP_KEYS and isinstance(value, dict):
                merged[key] = {**merged.get(key, {}), **value}
            elif key in ACCUMULATED_LIST_KEYS and isinstance(value, list):
                merged[key] = [*merged.get(key, []), *(v for v in value if v not in merged.get(key, []))]
            else:
                merged[key] = value
    return merged


def _parse_endpoint(text: Any, where: str, problems: list[str]) -> Endpoint | None:
    if isinstance(text, dict):
        node, iface = text.get("node"), text.get("interface")
    elif isinstance(text, str) and text.count(":") == 1:
        node, iface = text.split(":")
    else:
        problems.append(f"{where}: endpoint {text!r} must be 'node:interface'")
        return None
    if not node or not iface:
        problems.append(f"{where}: endpoint {text!r} needs both a node and an interface")
        return None
    return Endpoint(str(node), str(iface))


def _parse_vxlan(raw: dict[str, Any], i: int, problems: list[str]) -> VxlanLink | None:
    where = f"topology/links/{i}"
    ep = _parse_endpoint(raw.get("endpoint"), where, problems)
    if ep is None:
        return None
    return VxlanLink(
        endpoint=ep,
        remote=str(raw["remote"]),
        vni=int(raw["vni"]),
        dst_port=int(raw["dst-port"]),
        src_port=raw.get("src-port"),
        mtu=raw.get("mtu", DEFAULT_MTU),
        stitched=raw["type"] == "vxlan-stitch",
        index=i,
    )


def _parse_links(
    raw_links: list[Any], problems: list[str], vxlan_links: list[VxlanLink] | None = None
) -> list[Link]:
    links = []
    for i, raw in enumerate(raw_links or []):
        where = f"topology/links/{i}"
        if not isinstance(raw, dict):
            problems.append(f"{where}: a link must be a mapping with 'endpoints'")
            continue
        link_type = raw.get("type", "veth")
        if link_type in VXLAN_TYPES and vxlan_links is not None:
            vx = _parse_vxlan(raw, i, problems)
            if vx is not None:
                vxlan_links.append(vx)
            continue
        if link_type != "veth":
            problems.append(
                f"{where}: link type {link_type!r} is not supported by aidclab; use the brief form "
                "(endpoints: ['a:eth1', 'b:eth1']), type: veth, or type: vxlan / vxlan-stitch"
            )
            continue
        eps = raw.get("endpoints") or []
        if len(eps) != 2:
            problems.append(f"{where}: a veth link needs exactly 2 endpoints, found {len(eps)}")
            continue
        a = _parse_endpoint(eps[0], where, problems)
        b = _parse_endpoint(eps[1], where, problems)
        if a is None or b is None:
            continue
        mtu = raw.get("mtu", DEFAULT_MTU)
        if not isinstance(mtu, int) or not 68 <= mtu <= 65535:
            problems.append(f"{where}: mtu {mtu!r} must be an integer from 68 to 65535")
            continue
        links.append(Link(a=a, b=b, mtu=mtu, index=i))
    return links


def _build_node(name: str, raw: dict[str, Any] | None, topo: dict[str, Any], problems: list[str]) -> Node:
    raw = raw or {}
    defaults = topo.get("defaults") or {}
    kind = raw.get("kind") or defaults.get("kind") or ""
    group = raw.get("group") or ""
    levels = [defaults, (topo.get("kinds") or {}).get(kind) or {}]
    if group:
        if group not in (topo.get("groups") or {}):
            problems.append(
                f"topology/nodes/{name}/group: group {group!r} is not defined under topology.groups"
            )
        levels.append((topo.get("groups") or {}).get(group) or {})
    levels.append(raw)
    merged = _merge(levels)
    known = {
        "kind",
        "image",
        "group",
        "exec",
        "binds",
        "env",
        "labels",
        "sysctls",
        "mgmt-ipv4",
        "cmd",
    }
    node = Node(
        name=name,
        kind=merged.get("kind", ""),
        image=merged.get("image", ""),
        group=group,
        exec=list(merged.get("exec") or []),
        binds=list(merged.get("binds") or []),
        env={str(k): str(v) for k, v in (merged.get("env") or {}).items()},
        labels={str(k): str(v) for k, v in (merged.get("labels") or {}).items()},
        sysctls={str(k): str(v) for k, v in (merged.get("sysctls") or {}).items()},
        mgmt_ipv4=merged.get("mgmt-ipv4"),
        cmd=merged.get("cmd"),
        extra={k: v for k, v in merged.items() if k not in known},
    )
    if not node.kind:
        problems.append(
            f"topology/nodes/{name}: no kind (set kind: linux on the node or in topology.defaults)"
        )
    elif node.kind not in SUPPORTED_KINDS:
        problems.append(
            f"topology/nodes/{name}/kind: {node.kind!r} is not deployable by aidclab; "
            f"our nodes and FRR are kind: linux with their image (docs/design.md §2)"
        )
    if not node.image:
        problems.append(
            f"topology/nodes/{name}/image: missing; set it on the node, its group, its kind or "
            "topology.defaults (e.g. image: aidclab/bfr:latest)"
        )
    return node


def _endpoint_problems(where: str, ep: Endpoint, nodes: dict[str, Node], problems: list[str]) -> bool:
    """Append what is wrong with one link end; True when its node is unknown (nothing more to check)."""
    if ep.node not in nodes:
        problems.append(f"{where}: unknown node {ep.node!r}; define it under topology.nodes or fix the name")
        return True
    if len(ep.interface) > MAX_IFNAME:
        problems.append(f"{where}: interface name {ep.interface!r} is longer than {MAX_IFNAME} chars")
    if ep.interface in RESERVED_IFNAMES:
        problems.append(
            f"{where}: interface {ep.interface!r} on {ep.node} is reserved (eth0 is the management "
            "interface); use eth1 and up"
        )
    return False


def _vxlan_problems(
    nodes: dict[str, Node], vxlan_links: list[VxlanLink], used: dict[Endpoint, Any]
) -> list[str]:
    """A VXLAN link is checked like a veth end, plus what the kernel of the host will refuse: two VXLAN
    devices with the same VNI on the same UDP port in one network namespace."""
    problems = []
    by_key: dict[tuple[int, int], VxlanLink] = {}
    for vx in vxlan_links:
        where = f"topology/links/{vx.index} ({vx})"
        ep = vx.endpoint
        _endpoint_problems(where, ep, nodes, problems)
        if ep in used:
            problems.append(
                f"{where}: interface {ep} is already used by topology/links/{used[ep].index}; "
                "give each link its own interface"
            )
        used.setdefault(ep, vx)
        try:
            remote = ipaddress.ip_address(vx.remote)
        except ValueError:
            problems.append(f"{where}: remote {vx.remote!r} is not an IP address")
        else:
            if remote.is_multicast or remote.is_unspecified or remote.is_loopback:
                problems.append(
                    f"{where}: remote {remote} must be the unicast underlay address of the host that holds "
                    "the other end (not multicast, loopback or unspecified)"
                )
        if not 68 <= vx.mtu <= 65535 - vx.overhead:
            problems.append(f"{where}: mtu {vx.mtu} must be from 68 to {65535 - vx.overhead}")
        key = (vx.vni, vx.dst_port)
        if key in by_key:
            other = by_key[key]
            problems.append(
                f"{where}: VNI {vx.vni} on UDP port {vx.dst_port} is already used by topology/links/"
                f"{other.index} ({other.endpoint}); one host's kernel holds one VXLAN device per VNI and "
                "port, so give this link another vni (or dst-port)"
            )
        by_key.setdefault(key, vx)
    return problems


def _semantic_problems(
    nodes: dict[str, Node], links: list[Link], mgmt: Mgmt, vxlan_links: list[VxlanLink] | None = None
) -> list[str]:
    problems = []
    used: dict[Endpoint, Link] = {}
    for link in links:
        where = f"topology/links/{link.index} ({link})"
        if link.a == link.b:
            problems.append(f"{where}: both ends are the same interface")
        for ep in link.endpoints:
            if _endpoint_problems(where, ep, nodes, problems):
                continue
            if ep in used and used[ep] is not link:
                problems.append(
                    f"{where}: interface {ep} is already used by topology/links/{used[ep].index} "
                    f"({used[ep]}); give each link its own interface"
                )
            used.setdefault(ep, link)
    problems += _vxlan_problems(nodes, vxlan_links or [], used)  # type: ignore[arg-type]
    subnet = None
    try:
        if mgmt.ipv4_subnet is not None:
            subnet = ipaddress.ip_network(mgmt.ipv4_subnet, strict=False)
    except ValueError:
        problems.append(f"mgmt/ipv4-subnet: {mgmt.ipv4_subnet!r} is not an IPv4 prefix")
    seen_mgmt: dict[str, str] = {}
    for node in nodes.values():
        if not node.mgmt_ipv4:
            continue
        where = f"topology/nodes/{node.name}/mgmt-ipv4"
        try:
            addr = ipaddress.ip_address(node.mgmt_ipv4)
        except ValueError:
            problems.append(f"{where}: {node.mgmt_ipv4!r} is not an IPv4 address")
            continue
        if subnet is not None and addr not in subnet:
            problems.append(f"{where}: {addr} is outside the management subnet {subnet}")
        if node.mgmt_ipv4 in seen_mgmt:
            problems.append(
                f"{where}: {addr} is already the management address of node {seen_mgmt[node.mgmt_ipv4]!r}"
            )
        seen_mgmt[node.mgmt_ipv4] = node.name
    if subnet is not None and len(nodes) > mgmt_capacity(subnet):
        problems.append(
            f"mgmt/ipv4-subnet: {len(nodes)} nodes do not fit {subnet}, which holds "
            f"{mgmt_capacity(subnet)} containers; give the lab a management network of its own, a "
            f"/{mgmt_prefix_for(len(nodes))} or wider, in the topology file: "
            f"mgmt: {{network: NAME, ipv4-subnet: A.B.C.D/{mgmt_prefix_for(len(nodes))}}}"
        )
    return problems


def mgmt_capacity(subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> int:
    """Containers a management subnet holds: its addresses less network, broadcast and Docker's gateway."""
    return max(0, subnet.num_addresses - 3)


def mgmt_prefix_for(containers: int) -> int:
    """The longest IPv4 prefix whose subnet holds ``containers`` (see :func:`mgmt_capacity`)."""
    prefix = 30
    while prefix > 8 and (1 << (32 - prefix)) - 3 < containers:
        prefix -= 1
    return prefix


def own_mgmt_network(lab_name: str) -> str:
    """The name of a lab's own management network: the lab directory's name, ``clab-<lab>`` (containerlab
    itself has no per-lab default; ``clab-<lab>`` is what the generated large labs already name)."""
    return lab_dir_name(lab_name)


def free_mgmt_subnet(
    containers: int, taken: Iterable[ipaddress.IPv4Network], pool: str = MGMT_POOL
) -> ipaddress.IPv4Network | None:
    """The first subnet of ``pool`` that holds ``containers`` and overlaps none of ``taken``."""
    for candidate in ipaddress.IPv4Network(pool).subnets(new_prefix=mgmt_prefix_for(containers)):
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    return None


def _mgmt(raw: dict[str, Any], lab_name: str, nodes: dict[str, Node]) -> Mgmt:
    """The topology's ``mgmt`` as deploy acts on it. A named network keeps containerlab's default subnet
    when none is given (it is shared, as ``clab`` is). A lab's own network takes a free subnet chosen at
    deploy, unless the file sets one or pins a node's ``mgmt-ipv4``, which only means something in a
    known subnet: then containerlab's default."""
    subnet = raw.get("ipv4-subnet")
    if subnet == "auto":
        subnet = None
    own = "network" not in raw
    if subnet is None and (not own or any(n.mgmt_ipv4 for n in nodes.values())):
        subnet = DEFAULT_MGMT_SUBNET
    return Mgmt(
        network=own_mgmt_network(lab_name) if own else raw["network"],
        ipv4_subnet=subnet,
        bridge=raw.get("bridge"),
        own=own,
    )


def parse_topology(doc: Any, path: str | Path = "<string>") -> Topology:
    """Build a :class:`Topology` from an already loaded YAML document; raises :class:`TopologyError`."""
    path = Path(path)
    problems = _schema_problems(path, doc)
    if problems:
        raise TopologyError(path, problems)
    topo = doc.get("topology") or {}
    raw_mgmt = doc.get("mgmt") or {}
    nodes = {name: _build_node(name, raw, topo, problems) for name, raw in (topo.get("nodes") or {}).items()}
    mgmt = _mgmt(raw_mgmt, doc["name"], nodes)
    if not nodes:
        problems.append("topology/nodes: the lab has no nodes")
    vxlan_links: list[VxlanLink] = []
    links = _parse_links(topo.get("links") or [], problems, vxlan_links)
    problems += _semantic_problems(nodes, links, mgmt, vxlan_links)
    if problems:
        raise TopologyError(path, problems)
    return Topology(
        name=doc["name"],
        path=path,
        nodes=nodes,
        links=links,
        prefix=doc.get("prefix", DEFAULT_PREFIX),
        mgmt=mgmt,
        vxlan_links=vxlan_links,
    )


def load_topology(path: str | Path) -> Topology:
    """Read and validate a ``*.clab.yml`` file."""
    path = Path(path)
    if not path.exists():
        raise TopologyError(path, ["file not found; labs live in labs/NAME.clab.yml (try: ls labs/)"])
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TopologyError(path, [f"not valid YAML: {exc}"]) from exc
    if not isinstance(doc, dict):
        raise TopologyError(path, ["the file must be a mapping with name: and topology:"])
    return parse_topology(doc, path)


def lab_dir_name(lab_name: str) -> str:
    """containerlab's lab directory name, ``clab-<lab>``, created in the working directory."""
    return f"clab-{lab_name}"


def resolve_lab(lab: str, labs_dir: str | Path = "labs") -> Path:
    """``leaf-spine`` → ``labs/leaf-spine.clab.yml``; a path is taken as is."""
    candidate = Path(lab)
    if candidate.suffix in (".yml", ".yaml") or candidate.exists():
        return candidate
    return Path(labs_dir) / f"{lab}.clab.yml"
