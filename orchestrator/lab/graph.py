"""Draw a lab: Mermaid (renders in GitHub Markdown) and Graphviz dot."""

from __future__ import annotations

import re

from aidcnet.roles import Role
from orchestrator.lab.roles import role_of
from orchestrator.lab.topology import Topology

ROLE_SHAPES_DOT = {Role.BFR: "box", Role.INA_SWITCH: "box3d", Role.GPU_HOST: "ellipse", Role.FRR: "hexagon",
                   Role.GOBGP: "hexagon", Role.BIRD: "hexagon"}


def _mermaid_id(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def to_mermaid(topo: Topology) -> str:
    lines = ["graph TD"]
    for name, node in topo.nodes.items():
        role = role_of(node).name
        label = f"{name}<br/><small>{role}</small>"
        shape = f'(["{label}"])' if role == Role.GPU_HOST else f'["{label}"]'
        lines.append(f"  {_mermaid_id(name)}{shape}")
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
        role = role_of(node).name
        lines.append(f'  "{name}" [shape={ROLE_SHAPES_DOT.get(role, "box")} label="{name}\\n{role}"];')
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
