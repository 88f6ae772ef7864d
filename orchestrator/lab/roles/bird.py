"""BIRD 2 router built from Debian's bird2 package: an interop peer, not our code."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.BIRD,
        runs_agent=False,
        # birdc answers once bird's control socket is up.
        health_cmd=("birdc", "show", "status"),
        description="BIRD 2 (Debian bird2) router",
    )
)
