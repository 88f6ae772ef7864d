"""``igmp``: network BIER with the BitString learned from the receivers' own joins (docs/igmp.md).

Each receiver of an op joins the op's (S,G) through its kernel (``IP_ADD_SOURCE_MEMBERSHIP``) at the op's
``t``, when its receivers are known, and leaves once it has the whole message; the kernel's IGMPv3
reports reach its leaf, which reports over BIER to every BFIR. The source sends plain multicast ``lead``
seconds later; its leaf imposes BIER with whatever BitString it has learned by then. Groups are one per
(source, receivers) as in net-bier, from their own pool so that a net-bier run's static groups on the
same lab never answer for these.

:class:`MembershipMode` is what ``igmp`` and ``proxy`` share: the checks of the lab's ``igmp`` section,
the groups, the lead and the judgement of membership windows
(:mod:`orchestrator.experiment.membership`).
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any, ClassVar

from aidcnet.igmp.leaf import GROUP_SOURCES
from aidcnet.modes import Mode
from orchestrator.experiment import membership
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import ModeOutcome, Say
from orchestrator.experiment.modes.messages import MessageMode
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import TraceOp

# Away from net-bier's 239.100.0.0/16 (its static groups may still be on the leaves).
POOL = ipaddress.IPv4Network("239.101.0.0/16")
# Where a leaf's BitStrings may come from (igmp.groups): each mode needs its own one kept.
STATIC, LEARNED, PROXIED = GROUP_SOURCES


class MembershipMode(MessageMode):
    """The membership modes' common steps; subclasses say what each host is told."""

    # The igmp.groups source the leaves must keep for this mode's signalling to count.
    group_source: ClassVar[str]

    def lead_s(self) -> float:
        lead = self.options.lead_s
        return membership.DEFAULT_LEAD_S[self.name] if lead is None else lead

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        from orchestrator.experiment.groups import ReplayGroupsError, derive_groups

        super().prepare(session, ops, say)
        self._say = say
        igmp = session.plan.igmp
        lab = session.topo.name
        if not igmp.enabled:
            raise ExperimentError(
                f"lab {lab}: {self.name} replay needs IGMP on the leaves; set igmp.enabled: true in the "
                "lab's vars file and run aidclab configure (docs/igmp.md)"
            )
        source = self.group_source
        if source not in igmp.groups:
            raise ExperimentError(
                f"lab {lab}: igmp.groups {igmp.groups} leaves out {source!r}, so the leaves would ignore "
                f"what a {self.name} replay signals; add it to igmp.groups in the vars and configure"
            )
        static = [g.group for g in session.plan.bier.groups]
        try:
            self.groups, self.op_group = derive_groups(ops, pool=POOL, avoid=static)
        except ReplayGroupsError as exc:
            raise ExperimentError(f"lab {lab}: {exc}") from exc
        self.loopbacks = {n: h.loopback for n, h in self.all_hosts.items()}
        self.scale = _scale(session)
        say(f"{len(self.groups)} groups, lead {self.lead_s() * 1e3:g} ms before each op's data")

    def op_entry(self, op: TraceOp) -> list[Any]:
        return [*super().op_entry(op), self.op_group[op.id]]

    def first_load_fields(self, session: LabSession, host: str) -> dict[str, Any]:
        return {
            "interface": session.fabric_interface(host),
            "lead_s": self.lead_s(),
            "hold_s": membership.DEFAULT_HOLD_S,
        }

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        super().load(session, ops)
        if session.plan.igmp.control_cost > 0:
            quiet_control_planes(session, self._say)
        self.settings.update(
            groups=len(self.groups),
            lead_s=self.lead_s(),
            hold_s=membership.DEFAULT_HOLD_S,
            control_cost_s=session.plan.igmp.control_cost,
            control_cost_record_s=session.plan.igmp.control_cost_record,
        )

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        super().run(session, ops, say)
        if session.plan.igmp.control_cost > 0:
            # The run's last leaves and withdrawals are still queued at the leaves: serve them before the
            # counters are read, so the control traffic counted is the run's own and all of it.
            quiet_control_planes(session, say)

    def windows(self, ops: list[TraceOp]) -> tuple[list[membership.Window], set[tuple[int, str]] | None]:
        """The membership windows from the hosts' replies, and the (op, receiver) pairs whose latency
        counts (None: all)."""
        raise NotImplementedError

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        outcome = super().collect(session, ops)
        windows, keys = self.windows(ops)
        deliveries = membership.deliveries_from(self.records, self.start_ns, self.scale)
        changes = membership.membership_changes(self.name, ops, self.op_group)
        result = membership.judge(windows, deliveries, changes, self.scale, keys)
        summary = result.to_dict()
        outcome.settings["membership"] = summary
        outcome.lines.append(membership_line(self.name, summary))
        if (result.wrong or result.missed) and outcome.problem is None:
            outcome.problem = (
                f"membership: {result.wrong} deliveries outside their receiver's membership window, "
                f"{result.missed} members without their packet (lead {self.lead_s() * 1e3:g} ms: "
                "a longer --lead gives the memberships time to reach the BFIRs)"
            )
        return outcome


# How long the leaves' modelled control planes get to work off what earlier runs left them.
QUIET_TIMEOUT_S = 300.0


def quiet_control_planes(session: LabSession, say: Say, timeout_s: float = QUIET_TIMEOUT_S) -> None:
    """Wait until no leaf's modelled control plane holds a message (docs/igmp.md): a run starts from an
    idle control plane as from an idle fabric, not behind the leaves and joins of the run before."""
    from orchestrator.configure.plan.bier import host_leaf_port

    leaves = sorted({found[0] for h in session.gpu_hosts() if (found := host_leaf_port(session.plan, h))})
    deadline = time.monotonic() + timeout_s
    told = 0.0
    while True:
        queued = {}
        for leaf in leaves:
            # Every admitted message is served once: what is neither is queued.
            c = session.agent(leaf).counters()
            waiting = int(c.get("igmp.control.admitted", 0)) - int(c.get("igmp.control.served", 0))
            if waiting:
                queued[leaf] = waiting
        if not queued:
            return
        now = time.monotonic()
        if now > deadline:
            raise ExperimentError(
                f"lab {session.topo.name}: the leaves' control planes still hold {queued} messages after "
                f"{timeout_s:g} s; igmp.control_cost x time.scale is the wall time each takes: lower one"
            )
        if now - told >= 5.0:
            say(f"waiting for the leaves' control planes to finish earlier messages: {queued} queued")
            told = now
        time.sleep(0.5)


def membership_line(mode: str, m: dict[str, Any]) -> str:
    """One line for the run's summary: changes, latency quantiles, wrong and missed deliveries."""

    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v * 1e3:.3f} ms"

    return (
        f"{mode}: {m['changes']} receiver-set changes; membership latency ({m['time']} time) p50 "
        f"{ms(m['latency_p50_s'])}, p99 {ms(m['latency_p99_s'])}, max {ms(m['latency_max_s'])} over "
        f"{m['latency_samples']} new receivers; wrong {m['wrong']}, missed {m['missed']}"
    )


def _scale(session: LabSession) -> int | None:
    scale = session.plan.time.scale
    return scale if isinstance(scale, int) else None


@register
class Igmp(MembershipMode):
    name = Mode.IGMP
    group_source = LEARNED
    summary = (
        "plain IP multicast as net-bier, the BitString learned from IGMP: receivers join each op's (S,G) "
        "through their kernels when it is known and leave once they have it; the data follows --lead later"
    )

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        self.joins = membership.host_joins(ops, self.op_group, self.loopbacks)
        super().load(session, ops)
        # The receivers run a schedule of their own (their joins and leaves): start and wait for them too.
        self.senders = [*self.senders, *(h for h in self.joins if h not in self.senders)]

    def first_load_fields(self, session: LabSession, host: str) -> dict[str, Any]:
        return {**super().first_load_fields(session, host), "memberships": self.joins.get(host, [])}

    def windows(self, ops: list[TraceOp]) -> tuple[list[membership.Window], set[tuple[int, str]] | None]:
        joins = {n: rep.get("joins", []) for n, rep in self.replies.items()}
        op_t = {op.id: op.t for op in ops}
        return membership.igmp_windows(joins, op_t, self.start_ns, self.scale), None
