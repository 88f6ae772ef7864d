"""In-network aggregation switch: a BFR that also aggregates AllReduce chunks (INA draft's VAT)."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name=Role.INA_SWITCH,
        description="INA switch (aidcnet switch agent with aggregation)",
        place=Place.SWITCH,
        gtsm=True,
        dot_shape="box3d",
    )
)
