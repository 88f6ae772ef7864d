"""BIER fast reroute with link protection (draft-ietf-bier-frr): a bypass tunnel to every BFR-NBR that
goes around the link to it, precomputed, and used the moment that link is seen down.

A BFR (the point of local repair, PLR) whose link to BFR-NBR N fails first tries what it already has: a
BIRT row with another equal-cost next hop drops N (:func:`aidcnet.bier.bift.birt_around`); such a next
hop is downstream of the PLR, so it is a loop-free alternate. Rows whose only next hop is N (a spine's
rows for the BFERs behind one leaf, on a Clos) have no alternate at all: there, the PLR sends N's copy
through N's bypass. The BitString and the BIER label stay the ones N would have received; the tunnel
only carries them to N another way, so no BFER gets a copy twice (RFC 8279 §6.6 names such bypass
tunnels; the draft calls it tunnel-based link protection).

The tunnel is an explicit path of adjacency labels (an MPLS label stack, as RFC 8402's adjacency
segments), not a route: every BFR gives each of its BFR-NBRs one label that means "pop me and send the
rest to that neighbour". The PLR pushes the labels of the path's inner nodes above N's BIER label and
sends the packet to the path's first hop. Each inner node pops one entry and passes the rest on; N sees
its own BIER label, from a BFR neighbour, as any copy. An explicit path cannot loop back through the
failed link, which a route toward N's loopback on a Clos does (every other leaf's route to N's BFERs has
the PLR among its equal-cost next hops).

The path is a shortest one around the protected link whose inner nodes are transit BFRs (switches:
a GPU host is a path's end, never its middle), with neighbours taken in sorted order so every run builds
the same tunnel. One failed link at a time is protected; a bypass whose first hop is down too is not
used (:func:`usable_bypasses`).

Node protection (the draft's tunnel to the next-next hop) covers what a link bypass cannot: N itself dead.
Its link bypass ends at N, so it carries nothing then. For the BFR-ids the PLR reaches only through N, the
PLR looks up N's own next hop for each (the next-next hop, NNH: :func:`next_next_hops`) and sends the
copy's bits for those ids straight to that NNH, with the NNH's BIER label, through a tunnel that avoids N
altogether (:func:`node_bypass_path`). The BitString it sends each NNH is the part of the copy N would have
passed to that NNH, so the BFERs still get one copy each. Bits with no NNH tunnel (N's own BFR-id, or one
whose every NNH is cut off without N) keep N's link bypass. Which kind of failure it was does not matter:
the NNH tunnels are right for a dead link too, and are taken whenever N is seen down.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from aidcnet.bier.bitstring import bitstrings_from_ids
from aidcnet.bier.mpls import MAX_LABEL, encode_lse

BYPASS_TTL = 64
"""The TTL of every pushed adjacency entry (the pipe model: the BIER-TTL below is not touched)."""


@dataclass(frozen=True)
class NnhTunnel:
    """Node protection toward one next-next hop: the copy's bits for ``bfr_ids`` go to ``nnh`` with its
    BIER label (``label_base`` + SI), pushed ``labels`` above it, out through BFR-NBR ``via``."""

    nnh: str
    label_base: int
    via: str
    labels: tuple[int, ...]
    bfr_ids: tuple[int, ...]

    def masks(self, bsl: int) -> dict[int, int]:
        """``{SI: BitString of bfr_ids in that SI}`` at BSL ``bsl``."""
        return bitstrings_from_ids(self.bfr_ids, bsl)


def bypass_path(
    adjacency: Mapping[str, Sequence[str]], plr: str, nbr: str, transit: Callable[[str], bool]
) -> list[str] | None:
    """The shortest path ``[plr, ..., nbr]`` that does not use the link between them, through nodes
    ``transit`` accepts; None when there is none (the link is a bridge of the transit graph)."""
    if nbr not in adjacency.get(plr, ()):
        raise ValueError(f"{nbr!r} is not a neighbour of {plr!r}")
    return _shortest(adjacency, plr, nbr, transit, lambda here, there: here == plr and there == nbr)


def node_bypass_path(
    adjacency: Mapping[str, Sequence[str]],
    plr: str,
    nbr: str,
    nnh: str,
    transit: Callable[[str], bool],
) -> list[str] | None:
    """The shortest path ``[plr, ..., nnh]`` that does not pass through ``nbr`` at all, through nodes
    ``transit`` accepts; None when ``nnh`` cannot be reached without ``nbr``. ``[plr, nnh]`` when the
    next-next hop is the PLR's neighbour too."""
    if nbr not in adjacency.get(plr, ()):
        raise ValueError(f"{nbr!r} is not a neighbour of {plr!r}")
    if nnh in (plr, nbr):
        raise ValueError(f"a next-next hop of {plr!r} through {nbr!r} cannot be {nnh!r}")
    # The last step into nnh comes from the PLR or a transit node other than nbr: with none (a host behind
    # nbr alone), no search is needed, and a spine of a large Clos has one per host of every leaf.
    if not any(v == plr or transit(v) for v in adjacency.get(nnh, ()) if v != nbr):
        return None
    return _shortest(adjacency, plr, nnh, transit, lambda _here, there: there == nbr)


def _shortest(
    adjacency: Mapping[str, Sequence[str]],
    start: str,
    goal: str,
    transit: Callable[[str], bool],
    avoid: Callable[[str, str], bool],
) -> list[str] | None:
    """Breadth first from ``start`` to ``goal`` over the steps ``avoid`` allows, inner nodes ``transit``,
    neighbours in sorted order (one path, the same every time)."""
    parent: dict[str, str] = {start: start}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for there in sorted(adjacency[here]):
            if there in parent or avoid(here, there):
                continue
            parent[there] = here
            if there == goal:
                path = [goal]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if transit(there):
                queue.append(there)
    return None


def next_next_hops(
    adjacency: Mapping[str, Sequence[str]],
    birts: Mapping[str, Mapping[int, Sequence[str]]],
    plr: str,
    nbr: str,
    transit: Callable[[str], bool],
) -> dict[str, tuple[list[str], list[int]]]:
    """Node protection of ``plr``'s BFR-NBR ``nbr``: ``{nnh: (path avoiding nbr, BFR-ids)}``.

    Only the BFR-ids the PLR's own BIRT sends to ``nbr`` alone need it (an id with another equal-cost next
    hop has a loop-free alternate already). For each, the NNH is ``nbr``'s first next hop (in its BIRT's
    order) that a path around ``nbr`` reaches; an id with none (``nbr``'s own, or one behind it alone) is
    left to the link bypass. The NNH is on a shortest path from ``nbr``, so its own rows for those ids
    lead away from ``nbr`` and the PLR: the copy cannot come back."""
    paths: dict[str, list[str] | None] = {}
    out: dict[str, tuple[list[str], list[int]]] = {}
    theirs = birts.get(nbr, {})
    for bfr_id, hops in sorted(birts.get(plr, {}).items()):
        if list(hops) != [nbr]:
            continue
        for nnh in theirs.get(bfr_id, ()):
            if nnh in (plr, nbr):
                continue
            if nnh not in paths:
                paths[nnh] = node_bypass_path(adjacency, plr, nbr, nnh, transit)
            path = paths[nnh]
            if path is not None:
                out.setdefault(nnh, (path, []))[1].append(bfr_id)
                break
    return out


def adjacency_labels(adjacency: Mapping[str, Sequence[str]], first: int) -> dict[str, dict[str, int]]:
    """``{node: {neighbour: label}}``: one label per directed adjacency from ``first`` on, nodes and
    neighbours in sorted order, so a label names exactly one (node, neighbour) pair in the lab."""
    out: dict[str, dict[str, int]] = {}
    label = first
    for node in sorted(adjacency):
        out[node] = {}
        for nbr in sorted(set(adjacency[node])):
            out[node][nbr] = label
            label += 1
    if label - 1 > MAX_LABEL:
        raise ValueError(
            f"adjacency labels from {first} pass the 20-bit label space ({label - first} needed)"
        )
    return out


def tunnel(path: Sequence[str], labels: Mapping[str, Mapping[str, int]]) -> tuple[str, list[int]]:
    """``(first hop, labels to push, top first)`` for a bypass ``path`` from :func:`bypass_path` or
    :func:`node_bypass_path`: the first hop pops the top label and sends the rest to the next inner node,
    and so on; the last inner node sends the packet to the path's end with only its BIER label left. A
    path of two nodes (a next-next hop that is a neighbour too) pushes nothing."""
    if len(path) < 2:
        raise ValueError(f"a bypass needs two ends, got {list(path)}")
    return path[1], [labels[path[i]][path[i + 1]] for i in range(1, len(path) - 1)]


def push(labels: Sequence[int]) -> bytes:
    """The label stack entries a bypass puts in front of the BIER packet: S=0 on every one, because the
    BIER label below them is the bottom of the stack (RFC 3032 §2.1)."""
    return b"".join(encode_lse(label, 0, 0, BYPASS_TTL) for label in labels)


def usable_bypasses(
    needed: Collection[str], bypasses: Mapping[str, tuple[str, Sequence[int]]], down: Collection[str]
) -> dict[str, tuple[str, Sequence[int]]]:
    """The bypasses to switch on: for every neighbour in ``needed`` (still a next hop although its link is
    ``down``), its tunnel, unless the tunnel's first hop is down too (a second failure it does not
    survive)."""
    return {
        nbr: bypasses[nbr]
        for nbr in sorted(needed)
        if nbr in down and nbr in bypasses and bypasses[nbr][0] not in down
    }


def usable_nnh_tunnels(
    needed: Collection[str], tunnels: Mapping[str, Sequence[NnhTunnel]], down: Collection[str]
) -> dict[str, tuple[NnhTunnel, ...]]:
    """The node-protection tunnels to switch on, as :func:`usable_bypasses` for link bypasses: those of
    every down neighbour still ``needed`` whose first hop is up."""
    out: dict[str, tuple[NnhTunnel, ...]] = {}
    for nbr in sorted(needed):
        if nbr in down:
            usable = tuple(t for t in tunnels.get(nbr, ()) if t.via not in down)
            if usable:
                out[nbr] = usable
    return out


def rows_kept_for_bypass(
    birt: Mapping[int, Sequence[str]],
    last_hops: Mapping[int, Sequence[str]],
    down: Collection[str],
    first_hops: Mapping[str, Collection[str]],
) -> dict[int, list[str]]:
    """The BIRT a routing underlay gives (``birt``) plus every row it lost to a link that is ``down``:
    a BFR-id it has no row for whose last next hops (``last_hops``) include a down neighbour with a usable
    tunnel (one of its ``first_hops``, link bypass or node protection, is up) keeps those neighbours, so its
    copies go through their tunnels until the underlay finds another way. (On a Clos, BGP at a spine that
    loses a leaf has no other way at all: every path back through another leaf meets the spines' own AS.)
    A row the underlay gives again replaces the kept one."""
    out = {bfr_id: list(hops) for bfr_id, hops in birt.items()}
    for bfr_id, hops in last_hops.items():
        if bfr_id in out:
            continue
        kept = [hop for hop in hops if hop in down and any(v not in down for v in first_hops.get(hop, ()))]
        if kept:
            out[bfr_id] = kept
    return out
