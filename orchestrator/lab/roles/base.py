"""The node-role interface and its registry.

A role is what a lab node is for, and :class:`NodeRole` is everything the host knows of one: its name,
its image, its Ansible group, whether our agent runs there, its health check, where the plan puts it and
how a drawing shows it. Readers ask the role; nothing else lists roles. Adding a role is one module in this
package (found on import) plus its image recipe (``node-images/<role>/``) and its Ansible role.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from aidcnet.roles import AGENT_ROLES
from orchestrator.lab.topology import Node

IMAGE_REPOSITORY = "aidclab"
ROLE_LABEL = "aidclab-role"

# Every lab node forwards, hashes multipath on L4 ports (FARE per-flow WECMP keys on the UDP source
# port) and has IPv6 enabled even though Docker attaches it to an IPv4-only management network.
FABRIC_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.fib_multipath_hash_policy": "1",
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv6.conf.all.disable_ipv6": "0",
    "net.ipv6.conf.all.forwarding": "1",
    # veth peers cannot clash; skipping DAD makes link-local addresses usable the moment a link is up.
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
    # Ephemeral ports stay below the QP source ports (aidcnet.ipv4.QP_PORT_BASE): a socket the kernel
    # bound for an agent once held one of the 4000 ports a FARE per-flow run binds (EADDRINUSE).
    "net.ipv4.ip_local_port_range": "32768 49151",
}

# The agent's own health check (a node whose role runs the agent is up when its agent answers).
AGENT_HEALTH_CHECK = "aidcnet ctl health"


class Place(StrEnum):
    """Where the lab plan puts a node: a GPU host at the edge, a switch that routes (ours or an interop
    peer), or a node the plan neither configures nor routes through."""

    HOST = "host"
    SWITCH = "switch"
    UNMANAGED = "unmanaged"


@dataclass(frozen=True)
class NodeRole:
    """What aidclab needs to know to run one kind of node.

    Whether the aidcnet agent is the node's main process is aidcnet's to say (``aidcnet.roles``: the agent
    must know its roles without the orchestrator); :attr:`runs_agent` reads it. Such a node's health
    check is the agent's own; otherwise ``health_cmd`` (run with docker exec) says when the node is up,
    or nothing is checked.
    """

    name: str
    description: str
    place: Place
    health_cmd: tuple[str, ...] | None = None
    # aidclab builds an image for it (``aidclab images``, from node-images/<name>/).
    has_image: bool = True
    # A third-party BGP speaker the plan configures through its own Ansible role (docs/interop.md).
    interop_peer: bool = False
    # Its BGP rendering sends with TTL 255 and checks the minimum (RFC 5082 GTSM): a session gets GTSM
    # only when both ends do.
    gtsm: bool = False
    # How `aidclab graph` draws it: a Graphviz shape, and the brackets around a Mermaid label.
    dot_shape: str = "box"
    mermaid_brackets: tuple[str, str] = ("[", "]")
    sysctls: dict[str, str] = field(default_factory=lambda: dict(FABRIC_SYSCTLS))
    cap_add: tuple[str, ...] = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN")

    @property
    def runs_agent(self) -> bool:
        """The aidcnet agent is the node's main process, so ``aidcnet ctl`` and the host's
        :class:`aidcnet.agent.client.AgentClient` work there."""
        return self.name in AGENT_ROLES

    @property
    def bfr(self) -> bool:
        """BIER runs in our agent: only its nodes are BFRs and take a BFR-id."""
        return self.runs_agent

    @property
    def restartable(self) -> bool:
        """A ``restart`` fault may restart its agent during a run: a switch's, never a GPU host's (whose
        agent holds its part of the run)."""
        return self.runs_agent and self.place is Place.SWITCH

    @property
    def health_check(self) -> str:
        """The check deploy waits on, as a user would type it (empty: the running container is enough)."""
        return AGENT_HEALTH_CHECK if self.runs_agent else " ".join(self.health_cmd or ())

    @property
    def ansible_group(self) -> str:
        """The inventory group of the role's nodes (``gpu_host`` for gpu-host): what playbooks/site.yml
        targets."""
        return str(self.name).replace("-", "_")

    @property
    def image(self) -> str:
        """The image aidclab builds for this role (``aidclab images``); empty for roles it does not build."""
        return f"{IMAGE_REPOSITORY}/{self.name}:latest" if self.has_image else ""

    def container_sysctls(self, node: Node) -> dict[str, str]:
        return {**self.sysctls, **node.sysctls}


ROLES: dict[str, NodeRole] = {}
# The role of a node that names none (no label, not one of our images): set by the role that says so.
_fallback: list[NodeRole] = []


def register(role: NodeRole, fallback: bool = False) -> NodeRole:
    if role.name in ROLES:
        raise ValueError(f"role {role.name} is registered twice; each role is one module")
    ROLES[role.name] = role
    if fallback:
        _fallback[:] = [role]
    return role


def role_named(name: str) -> NodeRole:
    """The role called ``name`` (a plan node's, a node file's)."""
    if name not in ROLES:
        raise ValueError(f"unknown role {name!r}; known roles: {', '.join(sorted(ROLES))}")
    return ROLES[name]


def image_role_name(image: str) -> str | None:
    """``aidclab/ina-switch:latest`` → ``ina-switch``; other repositories have no aidclab role."""
    repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    owner, _, name = repo.rpartition("/")
    if owner.endswith(IMAGE_REPOSITORY):
        return name
    return None


def role_of(node: Node) -> NodeRole:
    return role_from(node.name, node.labels, node.image)


def role_from(node_name: str, labels: Mapping[str, str], image: str) -> NodeRole:
    """The role from a node's labels and image, wherever they come from (a topology, topology-data.json)."""
    name = labels.get(ROLE_LABEL) or image_role_name(image)
    if not name:
        return _fallback[0]
    if name not in ROLES:
        known = ", ".join(sorted(ROLES))
        raise ValueError(
            f"node {node_name!r}: unknown role {name!r} (from label {ROLE_LABEL} or image {image!r}); "
            f"known roles: {known}"
        )
    return ROLES[name]
