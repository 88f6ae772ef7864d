"""Network-BIER groups for a replay: one IP multicast group per distinct (source, receiver set) of a trace.

Pure logic. In ``net-bier`` mode the hosts send plain IP multicast and the leaves map (S,G) to BFERs from
static config (``bier.groups``, docs/bier.md), so before a run every receiver set a trace uses must be a
group. Ops with the same source and the same receivers (in any order) share a group; groups are numbered
through :data:`POOL` in the order their first op appears in the trace, so the same trace always gives
the same addresses (and an unchanged lab config on a re-run).

An op with one receiver goes through a group of one as well rather than as plain unicast: every byte of a
net-bier run then takes the network-BIER path, and the run measures that path alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from orchestrator.workloads.trace import TraceOp

# Administratively scoped (RFC 2365), away from the 239.1/239.2 the docs and tests use by hand; the whole
# /16 maps to distinct Ethernet addresses (RFC 1112 §6.4 keeps the low 23 bits).
POOL = ipaddress.IPv4Network("239.100.0.0/16")


class ReplayGroupsError(ValueError):
    """The trace needs more groups than the pool holds."""


def group_key(op: TraceOp) -> tuple[str, frozenset[str]]:
    return op.src, frozenset(op.dst)


def _natural(name: str) -> tuple[Any, ...]:
    from orchestrator.configure.plan.context import natural_key

    return natural_key(name)


def derive_groups(
    ops: Iterable[TraceOp],
    pool: ipaddress.IPv4Network = POOL,
    avoid: Iterable[ipaddress.IPv4Address | str] = (),
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """``bier.groups`` entries ``{group, source, receivers}`` for the trace's distinct (source, receivers)
    and each op id's group address. Addresses in ``avoid`` (groups the lab's vars already use) are
    skipped. Raises :class:`ReplayGroupsError` when the pool runs out."""
    taken = {ipaddress.IPv4Address(a) for a in avoid}
    free = (a for a in pool if a not in taken)
    by_key: dict[tuple[str, frozenset[str]], dict[str, Any]] = {}
    op_group: dict[int, str] = {}
    distinct = 0
    for op in ops:
        key = group_key(op)
        entry = by_key.get(key)
        if entry is None:
            distinct += 1
            address = next(free, None)
            if address is None:
                raise ReplayGroupsError(
                    f"the trace has more distinct (source, receivers) sets than the {pool} pool holds "
                    f"({pool.num_addresses - sum(a in pool for a in taken)} free groups; op {op.id} is set "
                    f"{distinct}): network-BIER replay needs one multicast group per set"
                )
            entry = by_key[key] = {
                "group": str(address),
                "source": op.src,
                "receivers": sorted(op.dst, key=_natural),
            }
        op_group[op.id] = entry["group"]
    return list(by_key.values()), op_group


def groups_received(groups: Iterable[dict[str, Any]], host: str) -> list[str]:
    """The group addresses ``host`` must join: every group that lists it as a receiver."""
    return [g["group"] for g in groups if host in g["receivers"]]
