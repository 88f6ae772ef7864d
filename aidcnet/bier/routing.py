"""Static BIRT computation for a whole lab graph (RFC 8279 §6.2–6.3), pure BFS.

Every link costs 1.  For each BFER ``d`` one BFS over the reversed adjacency gives every
node's hop distance to ``d``; the BFR-NBRs of ``u`` toward ``d`` are all neighbors ``v``
with ``dist(v, d) == dist(u, d) - 1``, i.e. every equal-cost shortest-path next hop
(RFC 8279 §6.2: "BFR-A may have multiple BFR-NBRs for BFER-D").  Next hops are sorted by
name so the result, and therefore ECMP choices, do not depend on dict or input order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from aidcnet.bier.bift import NULL, SELF


def _check(adjacency: Mapping[str, Sequence[str]], bfr_ids: Mapping[str, int]) -> None:
    for node, nbrs in adjacency.items():
        for nbr in nbrs:
            if nbr not in adjacency:
                raise ValueError(f"adjacency: neighbor {nbr!r} of {node!r} is not a node")
            if nbr == node:
                raise ValueError(f"adjacency: node {node!r} lists itself as a neighbor")
    seen: dict[int, str] = {}
    for node, bfr_id in bfr_ids.items():
        if node not in adjacency:
            raise ValueError(f"bfr_ids: {node!r} is not a node of the adjacency")
        if not 1 <= bfr_id <= 0xFFFF:
            raise ValueError(f"bfr_ids: {node!r} has invalid BFR-id {bfr_id!r} (must be 1..65535)")
        if bfr_id in seen:
            raise ValueError(f"bfr_ids: BFR-id {bfr_id} assigned to both {seen[bfr_id]!r} and {node!r}")
        seen[bfr_id] = node


def distances_to(adjacency: Mapping[str, Sequence[str]], dest: str) -> dict[str, int]:
    """Hop count from every node that can reach ``dest`` (BFS on the reversed edges)."""
    reverse: dict[str, list[str]] = {n: [] for n in adjacency}
    for u, nbrs in adjacency.items():
        for v in nbrs:
            reverse[v].append(u)
    dist = {dest: 0}
    queue = deque([dest])
    while queue:
        v = queue.popleft()
        dv = dist[v] + 1
        for u in reverse[v]:
            if u not in dist:
                dist[u] = dv
                queue.append(u)
    return dist


def compute_birts(
    adjacency: Mapping[str, Sequence[str]], bfr_ids: Mapping[str, int]
) -> dict[str, dict[int, tuple[str, ...]]]:
    """Return ``{node: {bfr_id: next_hops}}`` for every node of ``adjacency``.

    ``next_hops`` is ``(SELF,)`` for the node's own BFR-id, ``(NULL,)`` when the BFER is
    unreachable, else the sorted tuple of all equal-cost next-hop neighbors.  Nodes
    missing from ``bfr_ids`` are transit BFRs: they get a BIRT but no row points at them.
    Edges are directed as given; list both directions for an undirected link.
    """
    _check(adjacency, bfr_ids)
    # A reversed adjacency shared by all BFS runs would be faster, but labs are small
    # (tens of nodes) and this runs once per config push, not per packet.
    birts: dict[str, dict[int, tuple[str, ...]]] = {node: {} for node in adjacency}
    for dest, bfr_id in sorted(bfr_ids.items(), key=lambda item: item[1]):
        dist = distances_to(adjacency, dest)
        for node, nbrs in adjacency.items():
            if node == dest:
                birts[node][bfr_id] = (SELF,)
                continue
            d = dist.get(node)
            if d is None:
                birts[node][bfr_id] = (NULL,)
                continue
            hops = sorted({v for v in nbrs if dist.get(v) == d - 1})
            birts[node][bfr_id] = tuple(hops)
    return birts


def undirected(edges: Sequence[tuple[str, str]], nodes: Sequence[str] = ()) -> dict[str, list[str]]:
    """Adjacency from an undirected edge list (both directions), nodes in sorted order."""
    adj: dict[str, set[str]] = {n: set() for n in nodes}
    for a, b in edges:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    return {n: sorted(adj[n]) for n in sorted(adj)}
