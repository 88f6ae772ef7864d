"""What every replay of the agents' schedules shares, message modes and closed-loop steps alike: starting the
hosts on one clock and waiting for them (:func:`start_and_wait`, and for what a delayed lab's links still
hold: :func:`flight_wall_s`), each host's results, the judgement of every (message, receiver) pair
(:func:`build_messages`) and what each source did with each op (:func:`op_times`)."""

from __future__ import annotations

import json
import time
from typing import Any

from aidcnet.agent.control import Op
from aidcnet.agent.replay.protocol import OpTimes
from aidcnet.timescale import TimeScale
from orchestrator.experiment.modes.base import RunOptions, Say
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import LabSession
from orchestrator.workloads.trace import TraceOp

START_LEAD_S = 1.0
POLL_S = 0.2
# The share of the run's wall time the status polls may take. A poll is a request to every host's agent,
# which a lab's own work waits behind on a small machine: on bsl256 (256 hosts) a round took most of the
# pause between rounds, so the polls ran almost without pause, at the same wall rate at any time scale,
# and a larger scale could not give the senders back their CPU.
POLL_SHARE = 0.1
# ... but never a longer pause than this: a round slowed by one host that did not answer must not leave the
# rest unpolled (a host silent for STATUS_PATIENCE_S between two polls is given up).
POLL_MAX_S = 1.0
# A host that misses status polls this long is given up (a paused container); a busy one misses a few.
STATUS_PATIENCE_S = 20.0


def build_messages(
    ops: list[TraceOp],
    records: dict[str, dict[int, dict[str, Any]]],
    start_ns: int,
    time_scale: TimeScale | None = None,
) -> tuple[list[MessageResult], list[tuple[int, str]], list[tuple[int, str]]]:
    """MessageResults from the trace ops and each host's receiver records (host -> msg id -> record).
    Returns them with the (message, receiver) pairs missing and delivered to a host not in ``dst``.
    ``sent_at`` and latencies are wall seconds of the run; an op nobody received is put at its t, which
    is fabric time, stretched by ``time_scale``."""
    clock = time_scale or TimeScale.unshaped()
    by_id: dict[int, dict[str, dict[str, Any]]] = {}
    for host, recs in records.items():
        for msg_id, rec in recs.items():
            by_id.setdefault(msg_id, {})[host] = rec
    messages, missing, wrong = [], [], []
    for op in ops:
        got = by_id.pop(op.id, {})
        delivered, latency, dups = [], {}, {}
        sent_at = clock.wall_s(op.t)
        for host in [*op.dst, *sorted(h for h in got if h not in op.dst)]:
            rec = got.get(host)
            if rec is None or not rec["checksum_ok"]:
                if host in op.dst:
                    missing.append((op.id, host))
                continue
            if host not in op.dst:
                wrong.append((op.id, host))
            delivered.append(host)
            sent_at = (rec["send_ns"] - start_ns) / 1e9
            latency[host] = max(0.0, (rec["complete_ns"] - rec["send_ns"]) / 1e9)
            if rec["duplicates"]:
                dups[host] = int(rec["duplicates"])
        messages.append(
            MessageResult(
                id=op.id,
                op=op.op,
                src=op.src,
                expected=list(op.dst),
                delivered=delivered,
                bytes=op.bytes,
                sent_at=sent_at,
                latency=latency,
                duplicates=dups,
            )
        )
    # Records of ids the trace does not have: a stale or foreign sender; count them as wrong.
    wrong.extend((msg_id, host) for msg_id, hosts in sorted(by_id.items()) for host in sorted(hosts))
    return messages, missing, wrong


def start_and_wait(
    session: LabSession,
    senders: list[str],
    hosts: list[str] | dict[str, Any],
    expected: int,
    ops: int,
    duration_s: float,
    options: RunOptions,
    say: Say,
    flight_s: float = 0.0,
    quiet_s: float = 0.0,
) -> tuple[int, dict[str, Any]]:
    """Start ``senders`` on one clock and poll every host until the senders are done and the ``expected``
    (message, receiver) deliveries are in, or the drain or the deadline passes. The drain is
    ``options.drain_s`` without any change after the senders are done, while no shaper's queue holds a
    byte (what they queued still crosses the links: ``session.fabric_queued``). Deliveries arrive up to a
    path's delay after the last send (docs/delay.md): ``flight_s`` (:func:`flight_wall_s`) is waited for
    too, in the deadline and the drain. The deadline is
    ``duration_s`` wall seconds of schedule and ``options.timeout_s``, and later while the hosts still make
    progress: a run gives up only once nothing has changed in any host's status for ``options.timeout_s``
    plus ``quiet_s``, the longest a live run of the mode may legitimately show no change (a reliable
    source backing off to its largest RTO, fabric time at the lab's scale: a recovery at 1:60000 runs for
    minutes of wall time). Returns the start (wall ns) and the send errors."""
    lost = session.lost
    status: dict[str, dict[str, Any]] = {}
    start_ns = time.time_ns() + int(START_LEAD_S * 1e9)
    for name in senders:
        session.agent(name).replay_start(start_ns)
    deadline = time.monotonic() + START_LEAD_S + duration_s + flight_s + options.timeout_s
    drain_until: float | None = None
    done_at: float | None = None
    period = POLL_S  # the last round of polls and its pause
    last = ""
    seen, changed_at = progress_of(status), time.monotonic()
    while True:
        round_began = time.monotonic()
        for n in hosts:
            agent = session.agent(n)
            reply = lost.call(
                n, lambda agent=agent: agent.replay_status(timeout=2.0), patience_s=STATUS_PATIENCE_S
            )
            if reply is not None:
                status[n] = reply
        sent = sum(s["sent_ops"] for s in status.values())
        delivered = sum(s["received_complete"] for s in status.values())
        # A sender that stopped answering will send no more: do not wait for it.
        done = all(n in lost.nodes or status.get(n, {}).get("done") for n in senders)
        line = f"sent {sent}/{ops} ops, delivered {delivered}/{expected}"
        if line != last:
            say(line)
            last = line
        now = time.monotonic()
        if (progress := progress_of(status)) != seen:
            seen, changed_at = progress, now
        elif session.fabric_queued is not None and session.fabric_queued():
            changed_at = now  # the shapers still hold what the senders queued: it is on its way
        if done:
            # The drain counts from the senders' end or the last change, whichever is later: a sender is
            # done once its datagrams are in its socket, and behind a slow shaper they may take far longer
            # than the drain to cross (at 1:2000000 a 400G link carries 25 kB per wall second).
            # No shorter than two rounds of polls, or a pause between them would end it unseen.
            done_at = now if done_at is None else done_at
            drain_until = max(done_at, changed_at) + max(options.drain_s, 2 * period) + flight_s
        if done and delivered >= expected:
            # A short settle so late duplicates are counted too.
            time.sleep(min(0.3, options.drain_s))
            break
        stalled = now > deadline and now > changed_at + options.timeout_s + quiet_s
        if (drain_until is not None and now > drain_until) or stalled:
            say(f"stopped waiting: {line}" + ("" if done else " (senders not done: timeout)"))
            break
        pause = poll_pause_s(time.monotonic() - round_began)
        period = time.monotonic() - round_began + pause
        time.sleep(pause)
    if not done:
        stop_senders([n for n in senders if not status.get(n, {}).get("done")], session, say)
    send_errors = {n: s["send_errors"] for n, s in status.items() if s.get("send_errors")}
    if send_errors:
        say(f"send errors: {send_errors}")
    return start_ns, send_errors


def poll_pause_s(round_s: float) -> float:
    """The pause after a round of status polls that took ``round_s``: :data:`POLL_S`, or long enough that
    the polls take at most :data:`POLL_SHARE` of the wall time, up to :data:`POLL_MAX_S`."""
    return min(POLL_MAX_S, max(POLL_S, round_s * (1 - POLL_SHARE) / POLL_SHARE))


def stop_senders(names: list[str], session: LabSession, say: Say) -> None:
    """End the schedules of senders the run gave up on: left running, a sender would load the next run's
    links and refuse its ``replay_load``. What they sent stays theirs to report; the session keeps who
    they were (``unfinished``: the run has no time to vouch for)."""
    for name in names:
        agent = session.agent(name)
        reply = session.lost.call(name, lambda agent=agent: agent.replay_stop(timeout=10.0))
        if reply is not None and reply.get("stopped"):
            session.unfinished[name] = f"{reply['sent_ops']}/{reply['ops']} ops sent"
    if session.unfinished:
        said = ", ".join(f"{n} ({what})" for n, what in sorted(session.unfinished.items()))
        say(f"stopped the senders still sending: {said}")


def progress_of(status: dict[str, dict[str, Any]]) -> str:
    """What the hosts' replay statuses say has happened so far, as one comparable value: any op or
    datagram sent, message received or reliable counter moved changes it."""
    return json.dumps(status, sort_keys=True, default=str)


def trace_propagation_s(session: LabSession, ops: list[TraceOp]) -> tuple[float, float]:
    """(longest one-way delay, longest round trip) between a source of the trace and one of its
    receivers, fabric seconds over the lab's live delays (docs/delay.md); (0, 0) on a lab without delay."""
    from orchestrator.lab.propagation import path_delays, worst_round_trip_s

    delays = session.delays
    if not any(delays.values()):
        return 0.0, 0.0
    pairs = sorted({(op.src, d) for op in ops for d in op.dst})
    one_way = max((path_delays(session.plan, delays, a, b)[1] for a, b in pairs), default=0.0)
    return one_way, worst_round_trip_s(session.plan, delays, pairs)


def flight_wall_s(session: LabSession, ops: list[TraceOp]) -> float:
    """Wall seconds a trace's messages may still be on the links after their senders are done: the
    longest source-receiver round trip (there, and back for a reliable mode's repairs) at the lab's time
    scale; 0 on a lab without delay."""
    return session.time_scale.wall_s(trace_propagation_s(session, ops)[1])


def op_times(replies: dict[str, dict[str, Any]]) -> dict[str, list[OpTimes]]:
    """Per sending host, what it did with each of its ops (``replay_results``' ``op_times``)."""
    out = {}
    for host, reply in replies.items():
        raw = reply.get("op_times", [])
        times = [OpTimes.from_wire(t, f"{host}: op_times.{k}") for k, t in enumerate(raw)]
        if times:
            out[host] = times
    return out


def protocol_waits(replies: dict[str, dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per reliable source, the spans (wall-clock seconds) in which its protocol let it send nothing until
    an answer or a timer (``replay_results``' ``protocol_waits``, aidcnet/reliable/waits.py)."""
    out = {}
    for host, reply in replies.items():
        raw = reply.get("protocol_waits") or []
        try:
            spans = [(int(a) / 1e9, int(b) / 1e9) for a, b in raw]
        except (TypeError, ValueError):
            what = f"{host}: protocol_waits must be [start ns, end ns] pairs, not {raw!r}"
            raise ValueError(what) from None
        if spans:
            out[host] = spans
    return out


def results_of(session: LabSession, hosts: Any) -> dict[str, dict[str, Any]]:
    """Every host's ``replay_results`` reply (empty for a host that stopped answering)."""
    replies: dict[str, dict[str, Any]] = {}
    for name in hosts:
        agent = session.agent(name)
        reply = session.lost.call(name, lambda a=agent: a.call(Op.REPLAY_RESULTS, 30.0))
        replies[name] = reply if reply is not None else {}
    return replies
