"""Node roles: one module per role behind one small interface (docs/design.md §7, like containerlab's kinds).

A role says which image it runs, what the container needs (sysctls, capabilities), how to tell that the
node is healthy, which Ansible group it belongs to, where the plan puts it and how it is drawn
(:class:`NodeRole`). Every module of this package registers its role when the package is imported, so a
new role is one module here. A node's role comes from its ``aidclab-role`` label or, failing that, from
its image name (``aidclab/bfr:latest`` → bfr).
"""

import importlib
import pkgutil

from orchestrator.lab.roles.base import ROLES, NodeRole, Place, role_from, role_named, role_of

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "base":
        importlib.import_module(f"{__name__}.{_module}")

__all__ = ["ROLES", "NodeRole", "Place", "role_from", "role_named", "role_of"]
