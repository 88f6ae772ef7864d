"""Any other ``kind: linux`` image: no agent, healthy once its container runs, left alone by the plan.

It is the role of every node that names none (no ``aidclab-role`` label, not one of our images).
"""

from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name="linux",
        description="plain linux container",
        # whatever the user put there: the plan neither configures nor routes through it
        place=Place.UNMANAGED,
        has_image=False,
    ),
    fallback=True,
)
