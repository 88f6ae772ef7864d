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

from dataclasses import replace

from aidcnet.agent.replay.protocol import ReplayLoad, ReplayOp
from aidcnet.modes import Mode
from orchestrator.experiment import membership
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import Say
from orchestrator.experiment.modes.igmp import PROXIED, MembershipMode, wait_until
from orchestrator.experiment.replay_groups import groups_received
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
        # The receivers joined their groups when they were loaded: a run starts once every one of those
        # joins is a member port at its leaf, as a net-bier run starts on configured member ports.
        expected: dict[str, dict[str, set[str]]] = {}
        for host in self.all_hosts:
            if host in self.leaf_of:
                leaf, port, _bfr = self.leaf_of[host]
                for group in groups_received(self.groups, host):
                    expected.setdefault(leaf, {}).setdefault(group, set()).add(port)
        wait_member_ports(session, expected, self._say)

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        return replace(
            super().host_load(session, host, ops),
            reports=tuple(self.reports.get(host, ())),
            groups=tuple(groups_received(self.groups, host)),
        )

    def windows(self, ops: list[TraceOp]) -> list[membership.Window]:
        sent = {n: rep.get("reports", []) for n, rep in self.replies.items()}
        return membership.proxy_windows(ops, self.op_group, sent, self.start_ns, self.time_scale)[0]

    def carriages(self, ops: list[TraceOp]) -> list[membership.Carriage]:
        """Each receiver of a group's first op, from the moment its source sent the report naming it
        (later ops of the group reuse the installed set)."""
        by_id = {op.id: op for op in ops}
        return [
            self.carriage(by_id[int(op_id)], host, sent_ns)
            for rep in self.replies.values()
            for op_id, before, sent_ns in rep.get("reports", [])
            if before
            for host in dict.fromkeys(by_id[int(op_id)].dst)
        ]


# How long the receivers' standing joins get to become member ports at their leaves.
JOINS_TIMEOUT_S = 60.0


def wait_member_ports(
    session: LabSession,
    expected: dict[str, dict[str, set[str]]],
    say: Say,
    timeout_s: float = JOINS_TIMEOUT_S,
) -> None:
    """Wait until every leaf re-emits each group on the ports ``expected`` (leaf -> group -> ports):
    the receivers' kernels joined, the leaves took their reports. Before, a proxy run started while
    the leaves were still at it, and their first packets found no member port."""

    def missing() -> dict[str, int]:
        out = {}
        for leaf, groups in sorted(expected.items()):
            have = session.agent(leaf).igmp().get("member_ports") or {}
            short = sum(1 for g, ports in groups.items() if not ports <= set(have.get(g, ())))
            if short:
                out[leaf] = short
        return out

    wait_until(
        missing,
        say,
        timeout_s,
        "waiting for the receivers' joins to reach their leaves: {} groups to go",
        lambda left: (
            f"lab {session.topo.name}: after {timeout_s:g} s the receivers' joins are still not "
            f"member ports at {left} (groups per leaf): see `aidcnet ctl show igmp` on those leaves (ports, "
            "groups, dropped counters)"
        ),
        poll_s=0.2,
    )
