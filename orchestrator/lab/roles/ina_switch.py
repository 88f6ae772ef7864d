"""In-network aggregation switch: a BFR that also aggregates AllReduce chunks (INA draft's VAT)."""

from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name="ina-switch",
        image="aidclab/ina-switch:latest",
        ansible_group="ina_switch",
        description="INA switch (aidcnet switch agent with aggregation)",
    )
)
