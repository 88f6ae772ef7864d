"""The reliable modes (issue 15, docs/reliability.md): the message family's ops, each delivered as one
flow of the reliable transport, one sequence per replay fragment, complete when every receiver has
acknowledged it (or was declared failed).  They differ in how DATA travels and where ACKs go:

* ``reliable-unicast``: one flow per receiver, loopback to loopback, ACKs end to end: what
  collective libraries do today, the baseline;
* ``reliable-host-bier-e2e``: one host-BIER flow per op, every receiver acknowledges to the source
  (the implosion: N ACKs per packet);
* ``reliable-host-bier``: one host-BIER flow per op, ACKs hop by hop and aggregated in the BFRs (one
  per first-hop branch at the source), NACKs answered by retransmitting to the missing set only;
* ``reliable-net-bier``: one flow per op over network-BIER (IP multicast to the op's group, the leaves
  BFIR and BFER), ACKs aggregated in the leaves (for their hosts) and the spines, retransmissions
  narrowed by the source's leaf to the BFERs that have not confirmed them.

Besides the deliveries (judged as in every message mode: exactly once, right content), a run records
per source what the reliable service counted (``settings["reliable"]``): feedback packets and bytes
that arrived at the source by kind, DATA first sent and retransmitted (packets and bytes), receivers
declared failed; and per link end what the link-fault program counted over the run (``links``): the
feedback that crossed it by type and the packets and bytes it dropped. Its lines give feedback at the
sources per DATA packet, feedback on the links, and retransmitted bytes against dropped ones.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, ClassVar

from aidcnet.agent.replay.protocol import ReplayLoad, ReplayOp
from aidcnet.ebpf.link_fault import FaultStats
from aidcnet.modes import RELIABLE, Mode
from aidcnet.reliable.timers import TUNED_AT, WALL, Timers, timers
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.schema import LabPlan
from orchestrator.configure.plan.timescale import MIN_QUEUE_BYTES
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import ModeOutcome, Say
from orchestrator.experiment.modes.messages import MessageMode
from orchestrator.experiment.modes.net_bier import NetBier
from orchestrator.experiment.modes.replaying import trace_propagation_s
from orchestrator.experiment.session import ExperimentError, HostInfo, LabSession
from orchestrator.workloads.trace import TraceOp

# Flows start just below 2**32 so every run crosses the sequence-number wrap (RFC 1982 arithmetic).
ISN = 0xFFFF_FF00
WINDOW = 64
# The senders' congestion window (aidcnet.reliable.sender): off, a fixed window. Tried at 4 on leaf-spine
# (bench/reliable.py, 2026-11-27): retransmitted per dropped byte at 5% fell from 3.9x to 2.0x aggregated
# and 5.4x to 2.7x unicast, but at 0% the aggregated run resent 699 kB and heard 1.28 ACKs per packet
# (1.000 without), past the bound of one per first-hop branch: a per-flow window does not stop
# eight flows from queueing behind one link, so RTOs still fire for queued data. Not on until it does.
INITIAL_CWND: int | None = None
# A NACK waits this fraction of the RTO for the other receivers' NACKs of the same sequence: one drop on
# the source's link makes every receiver ask, and one retransmission answers them all (without it: up to
# one per receiver). At 1:20000 their NACKs come some 13 ms apart: the receiver under the source's leaf
# sees the next packet two store-and-forward hops of 8 kB at 20 Mbit/s (3.3 ms each) before those behind
# the spine, whose NACKs also travel two hops more. BFRs that merge NACKs (AGG-NACK) gather them already:
# the senders answer an AGG-NACK at once.
NACK_GATHER = 0.1
FEEDBACK_KINDS = ("ack", "nack", "agg-ack", "agg-ack-partial", "agg-nack")
# What a source counts as an acknowledgment of a DATA packet (a NACK is not one).
ACK_KINDS = ("ack", "agg-ack", "agg-ack-partial")
# What it counts as a request for a repair: a receiver's NACK, or a BFR's merged ones.
NACK_KINDS = ("nack", "agg-nack")
# Feedback as the link-fault programs tell it apart on the wire (a partial is an AGG-ACK there).
LINK_FEEDBACK_KINDS = ("ack", "nack", "agg-ack")


def run_number(now_s: float) -> int:
    """The run's number, the top 8 bits of its flows' ids (``replay_flow_id``): the wall-clock second,
    mod 256. A message run starts START_LEAD_S (1 s) after its load, so two runs of a lab load at least a
    second apart and consecutive runs never share a number; runs 256 s apart may, by when nothing of the
    older one is alive (its senders give up after ``fail_after``, a BFR's windows expire)."""
    return int(now_s) % 256


def forget_earlier_runs(
    session: LabSession, say: Say, round_trip_s: float = 0.0
) -> dict[str, dict[str, Any]]:
    """Every node forgets the reliable flows of earlier runs. A BFR's aggregation window left open by
    the last run (a lossy run leaves many, alive for the aggregator's lifetime) would go on sending
    partial AGG-ACKs toward its source during this run: bytes on this run's links and feedback of
    another run (before flow ids carried the run's number, the sources took it for this run's and
    retransmitted: NACKs and resent DATA at 0% loss right after a 5% run). Returns what each node said of
    its aggregation (:func:`refuse_without_aggregation`). ``round_trip_s``: the run's longest propagation
    round trip (fabric seconds), which the BFRs' timers wait for."""
    replies = session.each_agent(lambda _node, agent: agent.reliable_reset(round_trip_s))
    left = {node: r["forgotten"] for node, r in replies.items() if r.get("forgotten")}
    if left:
        nodes = ", ".join(sorted(left))
        say(f"forgot {sum(left.values())} aggregation windows earlier runs left open ({nodes})")
    return {node: r.get("aggregation") for node, r in replies.items()}


def refuse_without_aggregation(
    mode: str, feedback: str, said: dict[str, dict[str, Any] | None], hosts: Iterable[str]
) -> None:
    """A mode whose feedback goes hop by hop needs every BFR to see the DATA it forwards (``forward``;
    network-BIER also its leaves' imposition, ``impose``): where one cannot, it would relay every ACK, the
    implosion the mode is named against. Refuse, naming the nodes and why, rather than run end to end
    without a word. An agent that says nothing of it is older than this checkout."""
    if feedback not in ("hop", "net"):
        return
    missing = []
    for node, agg in sorted(said.items()):
        if node in set(hosts):
            continue
        if agg is None:
            missing.append(f"{node} (its agent does not say what it aggregates: rebuild the images)")
        elif agg.get("forward") is None:
            missing.append(f"{node} ({agg.get('why')})")
        elif feedback == "net" and agg.get("impose") is None and agg.get("impose_why"):
            missing.append(f"{node} ({agg['impose_why']})")
    if missing:
        raise ExperimentError(
            f"{mode} aggregates feedback in the BFRs, and these cannot see the DATA they forward: "
            f"{'; '.join(missing)}. Rebuild the images (aidclab images) or set bier.dataplane: python"
        )


def reliable_timers(scale: TimeScale, round_trip_s: float = 0.0) -> Timers:
    """The reliable transport's timers on the agents' clock at ``scale`` (fabric seconds when shaped), over
    paths whose longest propagation round trip is ``round_trip_s`` fabric seconds."""
    return timers(scale, round_trip_s)


def inflight_bytes(plan: LabPlan, host: str, round_trip_s: float = 0.0) -> int | None:
    """The send budget of ``host``: :class:`Timers`' ``inflight`` of its slowest link, in fabric time of
    the link's bandwidth (so the same at every scale: at the tuned 1:20000 it is 0.1 s of the veth), plus
    the paths' longest propagation round trip (``round_trip_s``, fabric seconds: the bandwidth-delay
    product, without which a source over a WAN has a sliver of its link in flight), at least one jumbo
    frame; None on an unshaped lab, whose links have no queue to fill."""
    if not TimeScale.of(plan.time.scale).shaped:
        return None
    rates = [
        link.bandwidth_bps for link in plan.links if link.bandwidth_bps and host in (link.a.node, link.b.node)
    ]
    if not rates:
        return None
    fabric_s = timers(TUNED_AT, round_trip_s).inflight
    return max(MIN_QUEUE_BYTES, int(min(rates) / 8 * fabric_s))


def source_totals(status: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The reliable counters of every sending host, summed (``replay_status()["reliable"]``)."""
    total: Counter[str] = Counter()
    for reply in status.values():
        total.update(reply.get("reliable", {}))
    return dict(total)


def feedback_lines(total: dict[str, int]) -> list[str]:
    """What the sources heard and resent, per DATA packet they sent first."""
    sent = total.get("sender.sent", 0)
    packets = {k: total.get(f"source.rx.{k}.packets", 0) for k in FEEDBACK_KINDS}
    acks = sum(packets[k] for k in ACK_KINDS)
    fb_bytes = sum(total.get(f"source.rx.{k}.bytes", 0) for k in FEEDBACK_KINDS)
    per = f"{acks / sent:.3f}" if sent else "n/a"
    nacks = sum(packets[k] for k in NACK_KINDS)
    repaired = total.get("sender.repaired-sequences", 0)
    per_lost = f"{nacks / repaired:.2f}" if repaired else "n/a"
    return [
        f"reliable: {sent} DATA packets sent first, ACKs at the sources {per} per packet "
        f"(ack {packets['ack']}, agg-ack {packets['agg-ack']}, partial {packets['agg-ack-partial']}), "
        f"NACKs {nacks} (nack {packets['nack']}, agg-nack {packets['agg-nack']}; {per_lost} per sequence "
        f"repaired, of {repaired}), feedback bytes at the sources {fb_bytes}",
        f"reliable: retransmitted {total.get('sender.retransmitted', 0)} packets "
        f"({total.get('sender.timeouts', 0)} on a timer, the others asked for by NACKs and partials) / "
        f"{total.get('sender.retransmitted-bytes', 0)} payload bytes against "
        f"{total.get('sender.sent-bytes', 0)} first sent; receivers declared failed "
        f"{total.get('sender.receivers-failed', 0)}",
    ]


def link_feedback(before: dict[str, FaultStats], after: dict[str, FaultStats]) -> dict[str, dict[str, int]]:
    """Per link end, over a run: the reliable feedback that crossed it by type and what its fault program
    dropped. Ends where neither happened are left out."""
    out: dict[str, dict[str, int]] = {}
    for end, now in sorted(after.items()):
        d = now.minus(before.get(end, FaultStats()))
        if d.feedback_packets or d.lost_packets:
            out[end] = {
                "ack": d.ack_packets,
                "nack": d.nack_packets,
                "agg-ack": d.agg_ack_packets,
                "feedback_bytes": d.feedback_bytes,
                "lost_packets": d.lost_packets,
                "lost_bytes": d.lost_bytes,
            }
    return out


def link_feedback_packets(counts: dict[str, int]) -> int:
    """ACK, NACK and AGG-ACK packets of one link end's ``links`` entry."""
    return sum(counts.get(k, 0) for k in LINK_FEEDBACK_KINDS)


def busiest_end(links: dict[str, dict[str, int]]) -> tuple[str, int] | None:
    """The link end that carried the most feedback, and how many packets; None when none carried any."""
    if not links:
        return None
    end = max(links, key=lambda e: (link_feedback_packets(links[e]), e))
    packets = link_feedback_packets(links[end])
    return (end, packets) if packets else None


def link_lines(links: dict[str, dict[str, int]], retransmitted_bytes: int) -> list[str]:
    """Feedback on the links (the implosion is visible on the source's own link) and retransmitted payload
    bytes against the bytes the fabric dropped (every frame the fault programs dropped, feedback included)."""
    total = {k: sum(v[k] for v in links.values()) for k in LINK_FEEDBACK_KINDS}
    dropped = sum(v["lost_bytes"] for v in links.values())
    lines = []
    if (busiest := busiest_end(links)) is not None:
        fb_bytes = sum(v["feedback_bytes"] for v in links.values())
        carrying = sum(1 for v in links.values() if link_feedback_packets(v))
        lines.append(
            f"reliable: feedback on the links {sum(total.values())} packets (ack {total['ack']}, nack "
            f"{total['nack']}, agg-ack {total['agg-ack']}), {fb_bytes} B over {carrying} link ends; most "
            f"at {busiest[0]}: {busiest[1]} packets"
        )
    factor = f"{retransmitted_bytes / dropped:.2f}x" if dropped else "n/a (nothing dropped)"
    lines.append(
        f"reliable: the fabric dropped {sum(v['lost_packets'] for v in links.values())} packets / "
        f"{dropped} B; retransmitted payload bytes per dropped byte {factor}"
    )
    return lines


def _fault_stats(session: LabSession) -> dict[str, FaultStats]:
    from orchestrator.lab.shaping import node_netns, read_fault_stats

    return read_fault_stats({n: node_netns(session.topo.container_name(n)) for n in session.pids})


class ReliableMode(MessageMode):
    # The data of a reliable mode takes the paths of this plain one; the model leaves out the feedback
    # and any loss recovery, so a lossy run is set against a lossless prediction (and must be confirmed).
    carries_as: ClassVar[Mode]

    def predicted_as(self) -> tuple[Mode, str] | None:
        return self.carries_as, "its data without acknowledgements or retransmissions"

    feedback: ClassVar[str]
    needs_bfr_ids: ClassVar[bool] = True
    times: Timers = WALL  # the agents' timers, on their clock (prepare: the lab's)

    def check_hosts(self, hosts: dict[str, HostInfo]) -> None:
        if not self.needs_bfr_ids:
            return
        unnumbered = [h.name for h in hosts.values() if h.bfr_id is None]
        if unnumbered:
            names = ", ".join(unnumbered)
            raise ExperimentError(f"{self.name} needs BFR-ids; the plan gives none to {names}")

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        super().prepare(session, ops, say)
        self.ids = self._number(self.all_hosts)
        # The links' length (docs/delay.md): the timers and send budget wait for answers from that far.
        round_trip_s = trace_propagation_s(session, ops)[1]
        self.inflight = {h: inflight_bytes(session.plan, h, round_trip_s) for h in self.all_hosts}
        self.times = reliable_timers(session.time_scale, round_trip_s)
        said = forget_earlier_runs(session, say, round_trip_s)
        refuse_without_aggregation(self.name, self.feedback, said, self.all_hosts)
        self.run_number = run_number(time.time())

    def _number(self, hosts: dict[str, HostInfo]) -> dict[str, int]:
        # BFR-ids when every host has one, so ids mean the same in every mode; otherwise 1..N by name.
        if all(h.bfr_id is not None for h in hosts.values()):
            return {n: int(h.bfr_id) for n, h in hosts.items()}  # type: ignore[arg-type]
        return {n: i for i, n in enumerate(sorted(hosts), 1)}

    def host_id(self, name: str) -> int | None:
        return self.ids[name]

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        reliable = {
            "self_id": self.ids[host],
            "isn": ISN,
            "run": self.run_number,
            "window": WINDOW,
            "initial_cwnd": INITIAL_CWND,
            "inflight_bytes": self.inflight[host],
            "nack_gather": NACK_GATHER,
            **self.timer_fields(),
        }
        return replace(super().host_load(session, host, ops), reliable=reliable)

    def timer_fields(self) -> dict[str, float]:
        """The senders' and receivers' timers of the replay load, on the agents' clock."""
        fields = ("fail_after", "initial_rto", "min_rto", "max_rto", "ack_delay", "nack_interval")
        return {name: getattr(self.times, name) for name in (*fields, "nack_max_interval")}

    def quiet_wall_s(self, session: LabSession) -> float:
        """A source owed something resends at least every largest RTO (fabric time), until its receivers
        answer or it declares them failed."""
        return session.time_scale.wall_s(self.times.max_rto)

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        self.links_before = _fault_stats(session)
        super().run(session, ops, say)

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        links = link_feedback(self.links_before, _fault_stats(session))
        outcome = super().collect(session, ops)
        status: dict[str, dict[str, Any]] = {}
        for name in self.all_hosts:
            agent = session.agent(name)
            reply = session.lost.call(name, lambda a=agent: a.replay_status(timeout=5.0))
            if reply is not None and "reliable" in reply:
                status[name] = reply
        total = source_totals({n: s for n, s in status.items() if n in self.senders})
        outcome.settings["reliable"] = {
            "feedback": self.feedback,
            "isn": ISN,
            "run": self.run_number,
            "window": WINDOW,
            "initial_cwnd": INITIAL_CWND,
            "inflight_bytes": {h: self.inflight[h] for h in sorted(self.senders)},
            "nack_gather": NACK_GATHER,
            "timers": self.timer_fields(),
            "sources": total,
            "receivers": {
                k: v for k, v in source_totals(status).items() if k.startswith(("receiver.", "agg."))
            },
            "links": links,
        }
        outcome.lines.extend(feedback_lines(total))
        outcome.lines.extend(link_lines(links, total.get("sender.retransmitted-bytes", 0)))
        failed = total.get("sender.receivers-failed", 0)
        if failed and outcome.problem is None:
            outcome.problem = f"{failed} receiver(s) declared failed by the reliable senders"
        return outcome


@register
class ReliableUnicast(ReliableMode):
    name = Mode.RELIABLE_UNICAST
    carries_as = Mode.UNICAST
    feedback = RELIABLE[Mode.RELIABLE_UNICAST]
    needs_bfr_ids = False
    summary = "reliable: one flow per receiver over unicast, ACKs end to end (docs/reliability.md)"


@register
class ReliableHostBierE2e(ReliableMode):
    name = Mode.RELIABLE_HOST_BIER_E2E
    carries_as = Mode.HOST_BIER
    feedback = RELIABLE[Mode.RELIABLE_HOST_BIER_E2E]
    summary = "reliable: host-BIER DATA, every receiver ACKs the source end to end (the implosion)"


@register
class ReliableHostBier(ReliableMode):
    name = Mode.RELIABLE_HOST_BIER
    carries_as = Mode.HOST_BIER
    feedback = RELIABLE[Mode.RELIABLE_HOST_BIER]
    summary = "reliable: host-BIER DATA, ACKs aggregated in the BFRs, subset retransmission"


@register
class ReliableNetBier(ReliableMode, NetBier):
    """Network-BIER's groups (configured on the leaves as ``net-bier`` does), each op one flow to its
    group from the source's loopback; the source acknowledges per BFER leaf (its receivers are the BFR-ids
    of the group's BitString), the leaves answer for their hosts (docs/reliability.md, "Over
    network-BIER")."""

    name = Mode.RELIABLE_NET_BIER
    carries_as = Mode.NET_BIER
    feedback = RELIABLE[Mode.RELIABLE_NET_BIER]
    summary = (
        "reliable: network-BIER DATA (IP multicast to one group per op), ACKs aggregated in the leaves and "
        "spines, retransmissions narrowed to the missing BFERs by the source's leaf"
    )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        super().prepare(session, ops, say)
        leaf_ids: dict[str, list[int]] = {}
        for group in session.plan.bier.groups:
            leaves = {leaf for leaf, _port in group.receiver_ports.values()}
            unnumbered = sorted(leaf for leaf in leaves if session.plan.nodes[leaf].bfr_id is None)
            if unnumbered:
                raise ExperimentError(
                    f"{self.name}: leaf {', '.join(unnumbered)} of group {group.group} has no BFR-id in the "
                    f"plan (an FRR leaf has none: network-BIER needs our agent there); run "
                    f"{Mode.RELIABLE_HOST_BIER} on this lab instead"
                )
            ids = (session.plan.nodes[leaf].bfr_id for leaf in leaves)
            leaf_ids[str(group.group)] = sorted(int(i) for i in ids if i is not None)
        self.op_bfers = {op.id: leaf_ids[self.op_group[op.id]] for op in ops}

    def op_entry(self, op: TraceOp) -> ReplayOp:
        return replace(super().op_entry(op), bfers=tuple(self.op_bfers[op.id]))
