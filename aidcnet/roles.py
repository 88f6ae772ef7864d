"""The roles the aidcnet agent plays, named once for the whole project (node side and host side).

A node whose role is one of these runs ``aidcnet agent --role ROLE`` as its main process. The host knows
every role, these and the others (interop peers, plain linux), with all its facts in
``orchestrator.lab.roles``, one module per role; this module is only the agent's names, so the agent
imports it without the orchestrator.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    BFR = "bfr"
    INA_SWITCH = "ina-switch"
    GPU_HOST = "gpu-host"


# The roles whose nodes run the aidcnet agent: every role named here.
AGENT_ROLES: tuple[Role, ...] = tuple(Role)
