"""Node roles: one module per role behind one small interface (DESIGN.md §7, like containerlab's kinds).

A role says which image it runs, what the container needs (sysctls, capabilities), how to tell that the
node is healthy, and which Ansible group it belongs to. Roles register themselves by name; a node's role
comes from its ``aidclab-role`` label or, failing that, from its image name (``aidclab/bfr:latest`` → bfr).
"""

from orchestrator.lab.roles import bfr, bird, frr, gobgp, gpu_host, ina_switch, linux  # noqa: F401  (registration)
from orchestrator.lab.roles.base import ROLES, NodeRole, role_from, role_of

__all__ = ["ROLES", "NodeRole", "role_from", "role_of"]
