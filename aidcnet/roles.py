"""Node roles, named once for the whole project (node side and host side).

A role is what a lab node is for: it picks the node's image, its Ansible group and which software the
agent runs in it. ``orchestrator.lab.roles`` adds what the host needs to start one (image, sysctls,
health check); this module is only the names, so the agent can import it without the orchestrator.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    BFR = "bfr"
    INA_SWITCH = "ina-switch"
    GPU_HOST = "gpu-host"
    FRR = "frr"
    GOBGP = "gobgp"
    BIRD = "bird"
    LINUX = "linux"


# The roles whose nodes run the aidcnet agent (``aidcnet agent --role ROLE``); the interop peers (FRR, GoBGP,
# BIRD) and plain linux do not.
AGENT_ROLES: tuple[Role, ...] = (Role.BFR, Role.INA_SWITCH, Role.GPU_HOST)

# Third-party BGP speakers configured from the plan by their own Ansible role (docs/interop.md).
PEER_ROLES: tuple[Role, ...] = (Role.FRR, Role.GOBGP, Role.BIRD)
