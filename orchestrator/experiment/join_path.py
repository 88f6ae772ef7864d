"""Where a membership change spent its time, from the agents' join-path stamps (docs/igmp.md), pure.

For each new receiver of a run (an (op, receiver) whose latency counts) the stamps give, on one clock
(CLOCK_REALTIME: the containers share the host's):

igmp   join issued (receiver host) ─► heard at its leaf ─► overlay report sent ─► received at the BFIR
       ─► BitString with that BFER installed ─► first packet at the receiver
proxy  report sent (source host) ─► received at its first-hop router ─► BitString installed ─► first packet

The arrows split into **fabric transit** (host → leaf, leaf → BFIR over BIER: packets on shaped links and
through the dataplanes, scaled to fabric time) and **node processing** (the leaf's and the BFIR's agents
working on the reports: our Python's wall time, shown as such and never scaled, because a real router's
control plane is not modelled by it). ``installed → first packet`` is the data's own path, which starts
only when the source sends (the lead). A run whose node processing outweighs the transit measured
membership latency of our agents, not of the protocol: :attr:`JoinPath.processing_dominated`.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Segment names, in path order, and which kind each is.
TRANSIT = ("host to leaf", "leaf to BFIR")
PROCESSING = ("leaf processing", "BFIR processing")


@dataclass(frozen=True)
class Sample:
    """One new receiver's path in wall nanoseconds; None where the path has no such step (proxy has no
    leaf or overlay)."""

    op: int
    host: str
    host_to_leaf: int
    leaf: int | None
    overlay: int | None
    bfir: int
    to_first: int | None  # installed -> first packet; None: no packet arrived

    @property
    def transit_ns(self) -> int:
        return self.host_to_leaf + (self.overlay or 0)

    @property
    def processing_ns(self) -> int:
        return (self.leaf or 0) + self.bfir


@dataclass
class JoinPath:
    samples: list[Sample]
    unmatched: int  # new receivers whose stamps were not all found (a report lost, stamps cut off)
    shared: int  # igmp: the leaf already had the channel from another host, so nothing went to the BFIRs
    scale: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def processing_share(self) -> float | None:
        """Node processing over (processing + transit), summed over the samples (wall)."""
        proc = sum(s.processing_ns for s in self.samples)
        total = proc + sum(s.transit_ns for s in self.samples)
        return proc / total if total else None

    @property
    def processing_dominated(self) -> bool:
        share = self.processing_share
        return share is not None and share > 0.5

    def to_dict(self) -> dict[str, Any]:
        scale = self.scale or 1
        transit = sorted(s.transit_ns / 1e9 / scale for s in self.samples)
        proc = sorted(s.processing_ns / 1e9 for s in self.samples)
        leaf = sorted(s.leaf / 1e9 for s in self.samples if s.leaf is not None)
        bfir = sorted(s.bfir / 1e9 for s in self.samples)
        first = sorted(s.to_first / 1e9 / scale for s in self.samples if s.to_first is not None)
        share = self.processing_share
        return {
            "samples": len(self.samples),
            "unmatched": self.unmatched,
            "shared": self.shared,
            "transit_time": "fabric" if self.scale is not None else "wall",
            "transit_p50_s": _q(transit, 0.5),
            "transit_p99_s": _q(transit, 0.99),
            "processing_p50_wall_s": _q(proc, 0.5),
            "processing_p99_wall_s": _q(proc, 0.99),
            "leaf_processing_p50_wall_s": _q(leaf, 0.5),
            "bfir_processing_p50_wall_s": _q(bfir, 0.5),
            "installed_to_first_p50_s": _q(first, 0.5),
            "processing_share": share,
            "processing_dominated": self.processing_dominated,
            "notes": list(self.notes),
        }


def _q(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted ``values``."""
    if not values:
        return None
    if q == 0.5:
        return statistics.median(values)
    return values[max(0, math.ceil(q * len(values)) - 1)]


def _first_at_or_after(rows: list[tuple[int, Any]], ns: int) -> Any | None:
    """The row of the earliest key >= ns in ``rows`` sorted by key."""
    i = bisect.bisect_left(rows, ns, key=lambda r: r[0])
    return rows[i][1] if i < len(rows) else None


def _bfir_index(
    stamps: Mapping[str, Mapping[str, Any]],
) -> dict[tuple[str, int, str | None, str], list[tuple[int, tuple[int, int]]]]:
    """(node, BFER, source, group) -> [(received, (received, installed))] of joins, sorted."""
    out: dict[tuple[str, int, str | None, str], list[tuple[int, tuple[int, int]]]] = {}
    for node, st in stamps.items():
        for bfer, source, group, join, received, installed in st.get("bfir", []):
            if join:
                out.setdefault((node, int(bfer), source, group), []).append(
                    (int(received), (int(received), int(installed)))
                )
    for rows in out.values():
        rows.sort()
    return out


def igmp_path(
    joins: Mapping[str, Iterable[list[Any]]],
    channel: Mapping[int, tuple[str, str]],
    attach: Mapping[str, tuple[str, int]],
    source_leaf: Mapping[int, str],
    stamps: Mapping[str, Mapping[str, Any]],
    first_ns: Mapping[tuple[int, str], int],
    scale: int | None,
) -> JoinPath:
    """igmp: ``joins`` the receivers' ``[op, join ns, leave ns]``; ``channel`` op -> (source loopback,
    group); ``attach`` host -> (its leaf node, the leaf's BFR-id); ``source_leaf`` op -> the source's
    leaf (the BFIR that imposes); ``stamps`` node -> what its agent's ``igmp_stamps`` answered;
    ``first_ns`` (op, host) -> the receiver's first packet."""
    heard: dict[tuple[str, str, str], list[tuple[int, tuple[int, int | None]]]] = {}
    for node, st in stamps.items():
        for source, group, join, heard_ns, sent_ns in st.get("leaf", []):
            if join and source is not None:
                heard.setdefault((node, source, group), []).append(
                    (int(heard_ns), (int(heard_ns), None if sent_ns is None else int(sent_ns)))
                )
    for rows in heard.values():
        rows.sort()
    bfir = _bfir_index(stamps)
    samples, unmatched, shared = [], 0, 0
    for host, events in joins.items():
        if host not in attach:
            continue
        leaf, bfer = attach[host]
        for op_id, join_ns, leave_ns in events:
            op = int(op_id)
            source, group = channel[op]
            at_leaf = _first_at_or_after(heard.get((leaf, source, group), []), int(join_ns))
            if at_leaf is None or (leave_ns is not None and at_leaf[0] > int(leave_ns)):
                unmatched += 1  # nothing heard while this join stood (a socket another op had joined)
                continue
            heard_ns, sent_ns = at_leaf
            if sent_ns is None:
                shared += 1
                continue
            at_bfir = _first_at_or_after(bfir.get((source_leaf[op], bfer, source, group), []), sent_ns)
            if at_bfir is None:
                unmatched += 1
                continue
            received, installed = at_bfir
            first = first_ns.get((op, host))
            samples.append(
                Sample(
                    op,
                    host,
                    heard_ns - int(join_ns),
                    sent_ns - heard_ns,
                    received - sent_ns,
                    installed - received,
                    None if first is None else first - installed,
                )
            )
    return JoinPath(samples, unmatched, shared, scale)


def proxy_path(
    reports: Mapping[str, Iterable[list[Any]]],
    receivers: Mapping[int, list[str]],
    channel: Mapping[int, tuple[str, str]],
    attach: Mapping[str, tuple[str, int]],
    source_leaf: Mapping[int, str],
    stamps: Mapping[str, Mapping[str, Any]],
    first_ns: Mapping[tuple[int, str], int],
    scale: int | None,
) -> JoinPath:
    """proxy: ``reports`` the sources' ``[op, before, sent ns]``; ``receivers`` the op's receiver hosts;
    the rest as in :func:`igmp_path`. Only the reports naming receivers (``before``) change a set."""
    bfir = _bfir_index(stamps)
    samples, unmatched = [], 0
    for _src, events in reports.items():
        for op_id, before, sent_ns in events:
            if not before:
                continue
            op = int(op_id)
            source, group = channel[op]
            for host in dict.fromkeys(receivers.get(op, [])):
                if host not in attach:
                    continue
                _leaf, bfer = attach[host]
                rows = bfir.get((source_leaf[op], bfer, source, group), [])
                at_fhr = _first_at_or_after(rows, int(sent_ns))
                if at_fhr is None:
                    unmatched += 1
                    continue
                received, installed = at_fhr
                first = first_ns.get((op, host))
                samples.append(
                    Sample(
                        op,
                        host,
                        received - int(sent_ns),
                        None,
                        None,
                        installed - received,
                        None if first is None else first - installed,
                    )
                )
    return JoinPath(samples, unmatched, 0, scale)


def join_path_line(mode: str, jp: Mapping[str, Any]) -> str:
    """One summary line: the protocol's part in fabric time and what our agents added on the wall."""

    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v * 1e3:.3f} ms"

    share = jp.get("processing_share")
    verdict = (
        "node processing dominated: NOT faithful for membership latency"
        if jp.get("processing_dominated")
        else "transit dominated"
    )
    return (
        f"{mode} join path over {jp['samples']} new receivers: fabric transit p50 "
        f"{ms(jp['transit_p50_s'])} ({jp['transit_time']}), node processing p50 "
        f"{ms(jp['processing_p50_wall_s'])} wall (not scaled); processing share "
        f"{'–' if share is None else f'{share:.0%}'}: {verdict}"
    )
