"""Network-BIER groups of one experiment, put on the leaves through the configuration plane.

The configuration plane's API for a mode that needs lab state: the net-bier mode derives its groups from
its trace (:mod:`orchestrator.experiment.replay_groups`, avoiding :func:`vars_groups`) and hands them here
instead of running ``aidclab configure``. The plan is recomputed with the groups added (the vars file is
not edited), written where Ansible finds it, and ``playbooks/site.yml`` runs only on the nodes whose node
file changed, so a re-run of the same trace touches nothing. A later plain ``aidclab configure`` drops the
groups again.
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Address
from typing import Any

from orchestrator.configure.ansible import ConfigureError, compute_plan, run_playbook, write_lab_plan
from orchestrator.lab.labdir import lab_dir
from orchestrator.lab.topology import Topology


class GroupsError(ValueError):
    pass


def vars_groups(topo: Topology) -> list[IPv4Address]:
    """The group addresses the lab's vars file gives (``bier.groups``): an experiment's own groups must
    avoid them. Raises GroupsError naming the vars file when it cannot be read."""
    from orchestrator.configure.plan import PlanError, load_vars, vars_path_for

    try:
        return [g.group for g in load_vars(vars_path_for(topo)).bier.groups]
    except PlanError as exc:
        raise GroupsError(str(exc)) from exc


def apply_groups(topo: Topology, groups: list[dict[str, Any]], say: Callable[[str], None] = print) -> None:
    """Configure the lab with ``groups`` (``bier.groups`` entries) added to its vars' own. Raises
    GroupsError naming what failed."""
    from orchestrator.configure.plan import PlanError

    try:
        files = write_lab_plan(topo, compute_plan(topo, groups))
    except PlanError as exc:
        raise GroupsError(str(exc)) from exc
    if not files.changed:
        say(f"{len(groups)} groups already on the leaves")
        return
    say(f"{len(groups)} groups: node files changed on {len(files.changed)} nodes, applying them with Ansible")
    report = run_playbook(lab_dir(topo) / "ansible-inventory.yml", limit=",".join(files.changed))
    if not report.ok:
        raise GroupsError(
            "configuring the replay's groups failed:\n  " + "\n  ".join(report.failures)
        ) from ConfigureError(report.failures)
    say(f"groups configured: changed={report.changed} in {report.elapsed:.1f} s")
