"""Any other ``kind: linux`` image: no agent, healthy once its container runs."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.LINUX,
        runs_agent=False,
        has_image=False,
        description="plain linux container",
    )
)
