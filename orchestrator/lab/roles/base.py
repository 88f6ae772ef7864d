"""The node-role interface and its registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aidcnet.roles import AGENT_ROLES, Role
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

@dataclass(frozen=True)
class NodeRole:
    """What aidclab needs to know to run one kind of node.

    ``runs_agent``: the aidcnet agent is the node's main process, so ``aidcnet ctl`` and the host's
    :class:`aidcnet.agent.client.AgentClient` work there, and its health check is the agent's own.
    Otherwise ``health_cmd`` (run with docker exec) says when the node is up, or nothing is checked.
    """

    name: Role
    runs_agent: bool
    health_cmd: tuple[str, ...] | None = None
    sysctls: dict[str, str] = field(default_factory=lambda: dict(FABRIC_SYSCTLS))
    cap_add: tuple[str, ...] = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN")
    description: str = ""
    has_image: bool = True

    def __post_init__(self) -> None:
        if self.runs_agent != (self.name in AGENT_ROLES):
            raise ValueError(f"role {self.name}: runs_agent={self.runs_agent} disagrees with aidcnet.roles")

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


def register(role: NodeRole) -> NodeRole:
    ROLES[role.name] = role
    return role


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
    name = labels.get(ROLE_LABEL) or image_role_name(image) or Role.LINUX
    if name not in ROLES:
        known = ", ".join(sorted(ROLES))
        raise ValueError(
            f"node {node_name!r}: unknown role {name!r} (from label {ROLE_LABEL} or image {image!r}); "
            f"known roles: {known}"
        )
    return ROLES[name]
