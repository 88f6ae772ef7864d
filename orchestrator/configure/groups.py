"""Network-BIER groups of one experiment, put on the leaves through the configuration plane.

The configuration plane's API for a mode that needs lab state: the net-bier mode asks for its groups here
instead of running ``aidclab configure``. The plan is recomputed with the groups added (the vars file is
not edited), written where Ansible finds it, and ``playbooks/site.yml`` runs only on the nodes whose node
file changed, so a re-run of the same trace touches nothing. A later plain ``aidclab configure`` drops the
groups again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.configure.ansible import ConfigureError, compute_plan, run_playbook, write_lab_plan
from orchestrator.lab.labdir import lab_dir
from orchestrator.lab.topology import Topology
from orchestrator.workloads.trace import TraceOp


class GroupsError(ValueError):
    pass


def apply_groups(
    topo: Topology, ops: Iterable[TraceOp], say: Callable[[str], None] = print
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """One group per (source, receivers) of ``ops``, configured on the lab: returns the ``bier.groups``
    entries and each op's group address. Raises GroupsError naming what failed."""
    from orchestrator.configure.plan import PlanError, load_vars, vars_path_for
    from orchestrator.experiment.groups import derive_groups

    try:
        user = load_vars(vars_path_for(topo)).bier.groups
        groups, op_group = derive_groups(ops, avoid=[g.group for g in user])
        files = write_lab_plan(topo, compute_plan(topo, groups))
    except PlanError as exc:
        raise GroupsError(str(exc)) from exc
    if not files.changed:
        say(f"{len(groups)} groups already on the leaves")
        return groups, op_group
    say(f"{len(groups)} groups: node files changed on {len(files.changed)} nodes, applying them with Ansible")
    report = run_playbook(lab_dir(topo) / "ansible-inventory.yml", limit=",".join(files.changed))
    if not report.ok:
        raise GroupsError(
            "configuring the replay's groups failed:\n  " + "\n  ".join(report.failures)
        ) from ConfigureError(report.failures)
    say(f"groups configured: changed={report.changed} in {report.elapsed:.1f} s")
    return groups, op_group
