"""``net-bier``: the hosts send plain IP multicast from their loopback to one group per (source,
receivers) of the trace (239.100.0.0/16, ``orchestrator/experiment/groups.py``); the leaves are BFIR and
BFER. The groups reach the leaves through the configuration plane (``orchestrator.configure.groups``)
before the run; a re-run of the same trace changes nothing there."""

from __future__ import annotations

from typing import Any

from aidcnet.modes import Mode
from orchestrator.experiment.groups import groups_received
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import Say
from orchestrator.experiment.modes.messages import MessageMode
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import TraceOp


@register
class NetBier(MessageMode):
    name = Mode.NET_BIER
    summary = (
        "plain IP multicast from the source's loopback to one group per (source, receivers) of the trace "
        "(239.100.0.0/16); the leaves are BFIR/BFER. The groups are configured on the leaves first"
    )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        from orchestrator.configure.groups import GroupsError, apply_groups
        from orchestrator.experiment.groups import ReplayGroupsError

        super().prepare(session, ops, say)
        try:
            self.groups, self.op_group = apply_groups(session.topo, ops, say)
        except (GroupsError, ReplayGroupsError) as exc:
            raise ExperimentError(f"lab {session.topo.name}: {exc}") from exc
        session.reload_plan()

    def op_entry(self, op: TraceOp) -> list[Any]:
        return [*super().op_entry(op), self.op_group[op.id]]

    def first_load_fields(self, session: LabSession, host: str) -> dict[str, Any]:
        return {"interface": session.fabric_interface(host), "groups": groups_received(self.groups, host)}

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        super().load(session, ops)
        self.settings["groups"] = len(self.groups)
