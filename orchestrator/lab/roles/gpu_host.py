"""Emulated GPU host: the aidcnet host agent (BFIR/BFER in host-BIER mode, workload sender/receiver)."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name=Role.GPU_HOST,
        description="emulated GPU host (aidcnet host agent)",
        place=Place.HOST,
        gtsm=True,
        dot_shape="ellipse",
        mermaid_brackets=("([", "])"),
    )
)
