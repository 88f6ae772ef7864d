"""Emulated GPU host: the aidcnet host agent (BFIR/BFER in host-BIER mode, workload sender/receiver)."""

from orchestrator.lab.roles.base import NodeRole, register

ROLE = register(
    NodeRole(
        name="gpu-host",
        image="aidclab/gpu-host:latest",
        ansible_group="gpu_host",
        description="emulated GPU host (aidcnet host agent)",
    )
)
