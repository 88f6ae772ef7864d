"""Any other ``kind: linux`` image: no agent, healthy once its container runs."""

from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name="linux",
        image="",
        ansible_group="linux",
        health_cmd=None,
        description="plain linux container",
    )
)
