"""GoBGP router built from Debian's gobgpd package: an interop peer, not our code."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.GOBGP,
        runs_agent=False,
        # The gobgp CLI answers once gobgpd's gRPC API listens (the path: "gobgp" alone is the role's name).
        health_cmd=("/usr/bin/gobgp", "global"),
        description="GoBGP (Debian gobgpd) router",
    )
)
