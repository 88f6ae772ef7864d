"""FRR router built from Debian's frr package: the interop peer, not our code."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.FRR,
        runs_agent=False,
        # vtysh answers only once zebra and the vtysh socket are up.
        health_cmd=("vtysh", "-c", "show version"),
        description="FRR (Debian frr) router",
    )
)
