"""Software BIER router (BFR): a fabric switch running the aidcnet switch agent."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.BFR,
        runs_agent=True,
        description="software BIER router (aidcnet switch agent)",
    )
)
