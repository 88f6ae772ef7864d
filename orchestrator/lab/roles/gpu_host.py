"""Emulated GPU host: the aidcnet host agent (BFIR/BFER in host-BIER mode, workload sender/receiver)."""

from aidcnet.roles import Role
from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name=Role.GPU_HOST,
        runs_agent=True,
        description="emulated GPU host (aidcnet host agent)",
    )
)
