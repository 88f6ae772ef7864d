"""FRR router built from Debian's frr package: the interop peer, not our code."""

from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name="frr",
        image="aidclab/frr:latest",
        ansible_group="frr",
        # vtysh answers only once zebra and the vtysh socket are up.
        health_cmd=("vtysh", "-c", "show version"),
        description="FRR (Debian frr) router",
    )
)
