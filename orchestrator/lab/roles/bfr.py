"""Software BIER router (BFR): a fabric switch running the aidcnet switch agent."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name=Role.BFR,
        description="software BIER router (aidcnet switch agent)",
        place=Place.SWITCH,
        gtsm=True,
        dot_shape="box",
    )
)
