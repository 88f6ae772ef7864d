"""Draw a lab: Mermaid (renders in GitHub Markdown) and Graphviz dot."""

from __future__ import annotations

import re

from orchestrator.lab.roles import role_of
from orchestrator.lab.topology import Topology


def _mermaid_id(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def to_mermaid(topo: Topology) -> str:
    lines = ["graph TD"]
    for name, node in topo.nodes.items():
        role = role_of(node)
        opening, closing = role.mermaid_brackets
        lines.append(f'  {_mermaid_id(name)}{opening}"{name}<br/><small>{role.name}</small>"{closing}')
    for link in topo.links:
        lines.append(
            f"  {_mermaid_id(link.a.node)} ---|{link.a.interface} - {link.b.interface}| "
            f"{_mermaid_id(link.b.node)}"
        )
    # A VXLAN end leads off this file, to the host at ``remote``: drawn as a cloud-ish node per remote.
    for vx in topo.vxlan_links:
        remote = f"vx_{vx.index}_remote"
        lines.append(f'  {remote}{{{{"{vx.type} {vx.remote}:{vx.dst_port}"}}}}')
        lines.append(
            f"  {_mermaid_id(vx.endpoint.node)} -.-|{vx.endpoint.interface} vxlan vni {vx.vni}| {remote}"
        )
    return "\n".join(lines) + "\n"


def to_dot(topo: Topology) -> str:
    lines = [f'graph "{topo.name}" {{', "  layout=dot; rankdir=TB; node [fontname=Helvetica];"]
    for name, node in topo.nodes.items():
        role = role_of(node)
        lines.append(f'  "{name}" [shape={role.dot_shape} label="{name}\\n{role.name}"];')
    for link in topo.links:
        lines.append(
            f'  "{link.a.node}" -- "{link.b.node}" '
            f'[taillabel="{link.a.interface}" headlabel="{link.b.interface}"];'
        )
    for vx in topo.vxlan_links:
        remote = f"vxlan:{vx.remote}:{vx.dst_port}"
        lines.append(f'  "{remote}" [shape=note label="{vx.type}\\n{vx.remote}:{vx.dst_port}"];')
        lines.append(
            f'  "{vx.endpoint.node}" -- "{remote}" [style=dashed taillabel="{vx.endpoint.interface}" '
            f'label="vni {vx.vni}"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"
