"""``proxy``: network BIER with the BitString the source names (docs/igmp.md, the Receiver Proxy Report).

The source knows its receivers (the gating network picked the experts): before the first op of a group it
sends its first-hop router an IGMPv3 report for (S,G) with the receivers' addresses in an RFC 9279
extension, which the FHR turns into the BitString at once; after the group's last op an empty report
withdraws it. The data follows ``lead`` seconds after the report (0 by default: the FHR reads the report
before the next packet). The receivers join their groups once at the start, as in net-bier: the BFER
delivers to its member ports; which BFERs get a packet is the FHR's decision from the report.
The source hosts must be allowed to send reports (``igmp.proxy_hosts`` in the lab's vars).
"""

from __future__ import annotations

from typing import Any

from aidcnet.modes import Mode
from orchestrator.experiment import membership
from orchestrator.experiment.groups import groups_received
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import Say
from orchestrator.experiment.modes.igmp import PROXIED, MembershipMode
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import TraceOp


@register
class Proxy(MembershipMode):
    name = Mode.PROXY
    group_source = PROXIED
    summary = (
        "plain IP multicast as net-bier, the BitString from the source: it sends its first-hop router a "
        "Receiver Proxy Report naming the receivers before each new receiver set (igmp.proxy_hosts)"
    )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        from orchestrator.configure.plan.bier import host_leaf_port

        super().prepare(session, ops, say)
        allowed = session.plan.igmp.proxy_ports
        refused = []
        for src in sorted({op.src for op in ops}):
            found = host_leaf_port(session.plan, src)
            if found is None or found[1] not in allowed.get(found[0], []):
                refused.append(src)
        if refused:
            raise ExperimentError(
                f"lab {session.topo.name}: sources {', '.join(refused)} may not send Receiver Proxy "
                "Reports (their leaf would drop and count them); list them in igmp.proxy_hosts in the "
                "lab's vars (or set it to all) and run aidclab configure"
            )

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        self.reports = membership.host_reports(ops, self.op_group, self.loopbacks)
        super().load(session, ops)

    def first_load_fields(self, session: LabSession, host: str) -> dict[str, Any]:
        return {
            **super().first_load_fields(session, host),
            "reports": self.reports.get(host, []),
            "groups": groups_received(self.groups, host),
        }

    def windows(self, ops: list[TraceOp]) -> tuple[list[membership.Window], set[tuple[int, str]] | None]:
        sent = {n: rep.get("reports", []) for n, rep in self.replies.items()}
        return membership.proxy_windows(ops, self.op_group, sent, self.start_ns, self.scale)
