"""``net-bier``: the hosts send plain IP multicast from their loopback to one group per (source,
receivers) of the trace (239.100.0.0/16, ``orchestrator/experiment/replay_groups.py``); the leaves are
BFIR and BFER. The groups reach the leaves through the configuration plane
(``orchestrator.configure.leaf_groups``) before the run; a re-run of the same trace changes nothing there."""

from __future__ import annotations

from dataclasses import replace

from aidcnet.agent.replay.protocol import ReplayLoad, ReplayOp
from aidcnet.modes import Mode
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import Say
from orchestrator.experiment.modes.messages import IpMulticastMode
from orchestrator.experiment.replay_groups import groups_received
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import TraceOp, message_ops


@register
class NetBier(IpMulticastMode):
    name = Mode.NET_BIER
    summary = (
        "plain IP multicast from the source's loopback to one group per (source, receivers) of the trace "
        "(239.100.0.0/16); the leaves are BFIR/BFER. The groups are configured on the leaves first"
    )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        from orchestrator.configure.leaf_groups import GroupsError, apply_groups, vars_groups
        from orchestrator.experiment.replay_groups import ReplayGroupsError, derive_groups

        super().prepare(session, ops, say)
        try:
            # A closed-loop step's compute phases and AllReduces have no group.
            self.groups, self.op_group = derive_groups(message_ops(ops), avoid=vars_groups(session.topo))
            apply_groups(session.topo, self.groups, say)
        except (GroupsError, ReplayGroupsError) as exc:
            raise ExperimentError(f"lab {session.topo.name}: {exc}") from exc
        session.reload_plan()

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        load = super().host_load(session, host, ops)
        return replace(load, groups=tuple(groups_received(self.groups, host)))

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        super().load(session, ops)
        self.settings["groups"] = len(self.groups)
