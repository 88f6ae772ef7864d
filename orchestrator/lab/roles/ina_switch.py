"""In-network aggregation switch: a BFR that also aggregates AllReduce chunks (INA draft's VAT)."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.INA_SWITCH,
        runs_agent=True,
        description="INA switch (aidcnet switch agent with aggregation)",
    )
)
