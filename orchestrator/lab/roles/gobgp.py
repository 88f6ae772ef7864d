"""GoBGP router built from Debian's gobgpd package: an interop peer, not our code."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.GOBGP,
        runs_agent=False,
        # gobgp (the CLI) answers once gobgpd's gRPC API listens.
        health_cmd=("gobgp", "global"),
        description="GoBGP (Debian gobgpd) router",
    )
)
