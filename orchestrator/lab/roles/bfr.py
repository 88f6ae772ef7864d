"""Software BIER router (BFR): a fabric switch running the aidcnet switch agent."""

from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name="bfr",
        image="aidclab/bfr:latest",
        ansible_group="bfr",
        description="software BIER router (aidcnet switch agent)",
    )
)
