"""A leaf's IGMP state beyond one link (docs/igmp.md), pure: no socket, no clock.

* :func:`aggregate` merges the per-port tables into the leaf's own membership (RFC 3376 §3.2, the
  merging rules for a system's interface state), which it reports to its BFIRs as a BFER;
* :func:`change_report` / :func:`state_report` are those reports (state-change and current-state
  records, with the BFER Identity TLV);
* :func:`compose_flows` chooses the BitString source per channel (static | igmp | proxy);
* :func:`member_ports` is where a BFER re-emits a group's packets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address

from aidcnet.bier.bitstring import ids_from_bitstring
from aidcnet.igmp.bfir import Channel
from aidcnet.igmp.codec import GroupRecord, RecordType, Report
from aidcnet.igmp.extensions import bfr_id_tlv
from aidcnet.igmp.router import FilterMode, GroupSnapshot

Sources = frozenset[IPv4Address]
# group -> (mode, sources): INCLUDE the sources, or EXCLUDE them (RFC 3376 §3.2 interface state).
LeafState = dict[IPv4Address, tuple[FilterMode, Sources]]


def _port_state(snap: GroupSnapshot) -> tuple[FilterMode, Sources]:
    if snap.mode is FilterMode.INCLUDE:
        return FilterMode.INCLUDE, snap.requested
    return FilterMode.EXCLUDE, snap.excluded


def aggregate(ports: Iterable[Mapping[IPv4Address, GroupSnapshot]]) -> LeafState:
    """RFC 3376 §3.2: any EXCLUDE makes the group EXCLUDE of the intersection of the EXCLUDE lists minus
    every INCLUDE list; otherwise INCLUDE of the union.  A port's router state stands for its hosts'."""
    includes: dict[IPv4Address, set[IPv4Address]] = {}
    excludes: dict[IPv4Address, list[Sources]] = {}
    for port in ports:
        for group, snap in port.items():
            mode, sources = _port_state(snap)
            if mode is FilterMode.INCLUDE:
                includes.setdefault(group, set()).update(sources)
            else:
                excludes.setdefault(group, []).append(sources)
    out: LeafState = {}
    for group in includes.keys() | excludes.keys():
        inc = frozenset(includes.get(group, ()))
        if group in excludes:
            out[group] = (FilterMode.EXCLUDE, frozenset.intersection(*excludes[group]) - inc)
        elif inc:
            out[group] = (FilterMode.INCLUDE, inc)
    return out


def _record(kind: RecordType, group: IPv4Address, sources: Sources) -> GroupRecord:
    return GroupRecord(kind, group, tuple(sorted(sources)))


def change_report(old: LeafState, new: LeafState, bfr_id: int) -> Report | None:
    """State-change records for every group whose state differs (TO_IN / TO_EX of the new state; a group
    that went is TO_IN({})), with the BFER Identity TLV; None when nothing changed.  TO_IN/TO_EX carry
    the whole new state, so the BFIR needs no earlier report to get it right."""
    records = []
    for group in sorted(old.keys() | new.keys()):
        if old.get(group) == new.get(group):
            continue
        mode, sources = new.get(group, (FilterMode.INCLUDE, frozenset()))
        kind = (
            RecordType.CHANGE_TO_INCLUDE_MODE
            if mode is FilterMode.INCLUDE
            else RecordType.CHANGE_TO_EXCLUDE_MODE
        )
        records.append(_record(kind, group, sources))
    if not records:
        return None
    return Report(tuple(records), (bfr_id_tlv(bfr_id),))


def state_report(state: LeafState, bfr_id: int) -> Report | None:
    """Current-state records (IS_IN / IS_EX) for every group, the periodic refresh that keeps the BFIR's
    timers running; None with no memberships."""
    records = [
        _record(
            RecordType.MODE_IS_INCLUDE if mode is FilterMode.INCLUDE else RecordType.MODE_IS_EXCLUDE,
            group,
            sources,
        )
        for group, (mode, sources) in sorted(state.items())
    ]
    return Report(tuple(records), (bfr_id_tlv(bfr_id),)) if records else None


def split_report(report: Report, max_records: int) -> list[Report]:
    """The same records over several reports of at most ``max_records`` each (an MTU's worth)."""
    recs = report.records
    return [Report(recs[i : i + max_records], report.extensions) for i in range(0, len(recs), max_records)]


@dataclass(frozen=True)
class Flow:
    """:class:`aidcnet.config.BierFlow`-shaped, what NetBierEdge and the eBPF imposition take."""

    group: IPv4Address
    source: IPv4Address | None
    bfers: tuple[int, ...]


GROUP_SOURCES = ("static", "igmp", "proxy")


def compose_flows(
    modes: Sequence[str],
    static: Iterable[object],
    igmp: Mapping[Channel, Iterable[int]],
    proxy: Mapping[Channel, Iterable[int]],
) -> list[Flow]:
    """The net-BIER flows from the enabled sources.  Per channel: a Receiver Proxy Report's set wins (the
    source knows its receivers); otherwise static and IGMP combine as a union.  ``static`` are
    :class:`aidcnet.config.BierFlow`; ``igmp`` / ``proxy`` map a channel to BFR-ids."""
    return flows_of(compose_channels(modes, static_channels(static), igmp, proxy))


def static_channels(static: Iterable[object]) -> dict[Channel, frozenset[int]]:
    """:class:`aidcnet.config.BierFlow` objects as channel -> BFR-ids (flows of one channel add up)."""
    out: dict[Channel, set[int]] = {}
    for f in static:
        out.setdefault((f.source, f.group), set()).update(f.bfers)  # type: ignore[attr-defined]
    return {ch: frozenset(ids) for ch, ids in out.items()}


def compose_channels(
    modes: Sequence[str],
    static: Mapping[Channel, Iterable[int]],
    igmp: Mapping[Channel, Iterable[int]],
    proxy: Mapping[Channel, Iterable[int]],
) -> dict[Channel, tuple[int, ...]]:
    """:func:`compose_flows` as channel -> sorted BFR-ids, over whatever channels it is given: all of a
    leaf's, or one group's (what a change to that group re-derives)."""
    unknown = [m for m in modes if m not in GROUP_SOURCES]
    if unknown:
        raise ValueError(f"groups: {unknown} unknown; choose from {', '.join(GROUP_SOURCES)}")
    union: dict[Channel, set[int]] = {}
    if "static" in modes:
        for key, ids in static.items():
            union.setdefault(key, set()).update(ids)
    if "igmp" in modes:
        for key, ids in igmp.items():
            union.setdefault(key, set()).update(ids)
    if "proxy" in modes:
        for key, ids in proxy.items():
            union[key] = set(ids)
    return {key: tuple(sorted(ids)) for key, ids in union.items() if ids}


def flows_of(channels: Mapping[Channel, tuple[int, ...]]) -> list[Flow]:
    """Channels as flows, by group then source ((*,G) first)."""
    return [
        Flow(group, source, ids)
        for (source, group), ids in sorted(
            channels.items(), key=lambda kv: (kv[0][1], kv[0][0] or IPv4Address(0))
        )
    ]


def bfr_ids(bitstrings: Mapping[int, int], bsl: int) -> list[int]:
    """BFR-ids of ``{SI: bits}``, the form BferMemberships hands out."""
    return sorted(i for si, bits in bitstrings.items() for i in ids_from_bitstring(si, bits, bsl))


def member_ports(ports: Mapping[str, Mapping[IPv4Address, GroupSnapshot]]) -> dict[IPv4Address, list[str]]:
    """group -> the ports with any membership in it (the BFER re-emits per group; which sources reach
    the leaf at all the BFIR's BitString already chose)."""
    out: dict[IPv4Address, list[str]] = {}
    for name, groups in sorted(ports.items()):
        for group, snap in groups.items():
            if snap.mode is FilterMode.EXCLUDE or snap.requested:
                out.setdefault(group, []).append(name)
    return out
