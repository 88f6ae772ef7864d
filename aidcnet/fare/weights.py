"""FARE per-node rules: advertised bandwidth, WECMP weights, per-flow and per-packet selection.

References: draft-xu-idr-fare (FARE using BGP), the seed draft-xu-rtgwg-fare-in-sun-02
(FARE in scale-up networks) and docs/design.md §3 (FARE row): a node advertises min(sum of its
parallel links' bandwidth toward the advertiser, the bandwidth it received); next-hop weights follow the
bandwidth; per-flow WECMP hashes the UDP source port (one QP per port), per-packet spraying happens in
the host's sender.

Interpretation when a prefix has several ECMP next hops (the drafts state the rule for one
advertiser only):

* **path bandwidth of one next hop** (a BGP neighbor N that advertised a best path)::

      path_bw(N) = min(sum of the bandwidths of the *up* parallel links toward N,
                       bandwidth received from N in its link-bandwidth community)

  A route from N that carries no link-bandwidth community is not capped by it
  (``received_bw=None``): the links toward N are then the only limit. (Our BGP agent's
  originator sends the bandwidth of its own links toward each neighbor, so both ends of
  a link agree; see aidcnet/bgp/rib.py.)
* **advertised bandwidth** of the prefix = the sum of ``path_bw`` over the ECMP next hops.
  Each neighbor is an independent path, so their capacities add; a sum of per-neighbor
  minima never exceeds the draft's single-advertiser min() applied to the totals, so this
  never over-advertises. No next hop with positive bandwidth → ``None`` (withdraw).
* **weights** are proportional to ``path_bw``; a next hop with zero bandwidth (all its links
  down, or a received bandwidth of 0) is removed rather than given weight 0, because
  Linux rejects ``weight 0`` and a 0-weight nexthop would still be hashed to by some stacks.

Example (the seed draft's SuperPoD): a GPU with four 800G planes, each an 800G port on a
Y-cable of two 400G sub-links toward leaf L1..L4. All up → weights 1:1:1:1. The port on
plane 3 fails → plane 3 is removed. One 400G sub-link on plane 2 fails (at either end) →
plane 2's path bandwidth halves → weights 2:1:2:2.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from aidcnet.fare.linkbw import float32

__all__ = [
    "KERNEL_MAX_WEIGHT",
    "NextHopInput",
    "RouteView",
    "SmoothWeightedRoundRobin",
    "advertised_bandwidth",
    "changed_prefixes",
    "compute_route",
    "flow_shares",
    "kernel_weights",
    "link_bandwidth_sum",
    "path_bandwidth",
    "path_bandwidths",
    "select_next_hop",
]

KERNEL_MAX_WEIGHT = 256
"""Linux ``ip route ... nexthop ... weight N`` accepts 1..256 (rtnh_hops = N-1 is one octet)."""

_EXACT = 1e-9


def _check_bw(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} {value!r}: must be a number of bytes/s")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} {value!r}: must be finite and >= 0 bytes/s")
    return float(value)


def link_bandwidth_sum(link_bandwidths: Iterable[float]) -> float:
    """Sum of the bandwidths (bytes/s) of the up parallel links toward one neighbor."""
    return sum((_check_bw("link bandwidth", bw) for bw in link_bandwidths), 0.0)


def path_bandwidth(link_bw_sum: float, received_bw: float | None) -> float:
    """``min(link_bw_sum, received_bw)``; ``received_bw=None`` (no community) does not cap."""
    links = _check_bw("link bandwidth sum", link_bw_sum)
    if received_bw is None:
        return links
    return min(links, _check_bw("received bandwidth", received_bw))


@dataclass(frozen=True)
class NextHopInput:
    """One ECMP next hop of a prefix as the BGP agent sees it.

    ``link_bandwidths`` lists the bytes/s of each parallel link toward ``neighbor`` that is
    up (a Y-cable's sub-links count as separate links); ``received_bw`` is the effective
    link bandwidth of the route learned from that neighbor (see
    :func:`aidcnet.fare.linkbw.effective_bandwidth`), None when it carried none.
    """

    neighbor: str
    link_bandwidths: tuple[float, ...]
    received_bw: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.neighbor, str) or not self.neighbor:
            raise ValueError(f"neighbor {self.neighbor!r}: must be a non-empty string")
        object.__setattr__(self, "link_bandwidths", tuple(self.link_bandwidths))

    @property
    def path_bw(self) -> float:
        return path_bandwidth(link_bandwidth_sum(self.link_bandwidths), self.received_bw)


def path_bandwidths(next_hops: Iterable[NextHopInput]) -> dict[str, float]:
    """Path bandwidth per neighbor; a neighbor listed twice is a caller bug and raises."""
    result: dict[str, float] = {}
    for nh in next_hops:
        if nh.neighbor in result:
            raise ValueError(f"neighbor {nh.neighbor!r} appears twice among the next hops")
        result[nh.neighbor] = nh.path_bw
    return result


def advertised_bandwidth(path_bws: Mapping[str, float]) -> float | None:
    """Bandwidth to advertise for a prefix: sum of the next hops' path bandwidths, None if 0."""
    total = sum((_check_bw(f"path bandwidth of {nh!r}", bw) for nh, bw in path_bws.items()), 0.0)
    return total if total > 0 else None


def kernel_weights(path_bws: Mapping[str, float], max_weight: int = KERNEL_MAX_WEIGHT) -> dict[str, int]:
    """Integer nexthop weights in ``1..max_weight`` proportional to ``path_bws``.

    Zero-bandwidth next hops are dropped. The smallest integers that reproduce the ratios
    exactly are preferred (800G:800G:400G → 2:2:1, the gcd-reduced form, which keeps kernel
    routes readable and stable). When no weight scale up to ``max_weight`` is exact, the one whose
    weights have the smallest L1 distance between weight shares and bandwidth shares wins
    (ties → the smaller). Every surviving next hop gets at least weight 1, so a thin
    path is kept rather than silently dropped.
    """
    if (
        isinstance(max_weight, bool)
        or not isinstance(max_weight, int)
        or not 1 <= max_weight <= KERNEL_MAX_WEIGHT
    ):
        raise ValueError(f"max_weight {max_weight!r}: must be an integer 1..{KERNEL_MAX_WEIGHT}")
    usable = {nh: _check_bw(f"path bandwidth of {nh!r}", bw) for nh, bw in path_bws.items()}
    usable = {nh: bw for nh, bw in usable.items() if bw > 0}
    if not usable:
        return {}
    names = sorted(usable)
    bws = [usable[nh] for nh in names]
    top_bw = max(bws)
    total_bw = sum(bws)
    ideal = [bw / total_bw for bw in bws]

    best: list[int] | None = None
    best_err = math.inf
    for weight_scale in range(1, max_weight + 1):  # the widest path's weight
        weights = [max(1, min(max_weight, round(bw * weight_scale / top_bw))) for bw in bws]
        total_w = sum(weights)
        err = sum(abs(w / total_w - share) for w, share in zip(weights, ideal, strict=True))
        if err < best_err - _EXACT:
            best, best_err = weights, err
        if best_err <= _EXACT:
            break
    assert best is not None
    return dict(zip(names, best, strict=True))


# --- per-flow WECMP -------------------------------------------------------------------------


def _unit_hash(src_port: int, neighbor: str, salt: bytes) -> float:
    digest = hashlib.blake2b(
        struct.pack(">H", src_port) + neighbor.encode(), digest_size=8, key=salt[:64]
    ).digest()
    # 53 bits fill a double's mantissa; +0.5 keeps u strictly inside (0, 1) so log(u) < 0.
    return ((int.from_bytes(digest, "big") >> 11) + 0.5) / float(1 << 53)


def _positive_weights(weights: Mapping[str, int]) -> dict[str, int]:
    result: dict[str, int] = {}
    for nh, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"weight of next hop {nh!r} is {w!r}: must be an integer >= 0")
        if w > 0:
            result[nh] = w
    if not result:
        raise ValueError("no next hop with a positive weight: the prefix is unreachable")
    return result


def select_next_hop(src_port: int, weights: Mapping[str, int], *, salt: bytes = b"") -> str:
    """Next hop for the flow (QP) with UDP source port ``src_port``, chosen with probability ∝ weight.

    Weighted rendezvous hashing (score = w / -ln(u), u = hash(port, next hop)) rather than a
    modulo table: when one next hop's weight drops or it is removed, only flows that were on
    it move, and QPs on unaffected planes keep their paths, as the seed draft requires (§3).
    ``salt`` lets different nodes hash independently (avoids polarisation); blake2b keeps the
    choice identical across processes and Python versions, unlike ``hash()``.
    """
    if isinstance(src_port, bool) or not isinstance(src_port, int) or not 0 <= src_port <= 0xFFFF:
        raise ValueError(f"src_port {src_port!r}: must be a UDP port 0..65535")
    usable = _positive_weights(weights)
    best_nh = ""
    best_score = -math.inf
    for nh in sorted(usable):
        score = usable[nh] / -math.log(_unit_hash(src_port, nh, salt))
        if score > best_score:
            best_nh, best_score = nh, score
    return best_nh


def flow_shares(
    src_ports: Iterable[int], weights: Mapping[str, int], *, salt: bytes = b""
) -> dict[str, float]:
    """Fraction of ``src_ports`` (one flow each) that :func:`select_next_hop` puts on each next hop."""
    counts = dict.fromkeys(sorted(_positive_weights(weights)), 0)
    n = 0
    for port in src_ports:
        counts[select_next_hop(port, weights, salt=salt)] += 1
        n += 1
    if n == 0:
        raise ValueError("src_ports is empty: shares are undefined")
    return {nh: c / n for nh, c in counts.items()}


# --- per-packet spraying --------------------------------------------------------------------


class SmoothWeightedRoundRobin(Iterator[str]):
    """Deterministic per-packet spraying: nginx's smooth weighted round-robin.

    Each step adds every weight to its next hop's running credit, picks the highest credit
    (ties → first in sorted next-hop order) and subtracts the weight total from the winner.
    Over any window of ``sum(weights)`` packets each next hop is chosen exactly ``weight``
    times, interleaved (2:1 gives a a b, not a a b b-style bursts).
    """

    def __init__(self, weights: Mapping[str, int]) -> None:
        self._weights: dict[str, int] = {}
        self._current: dict[str, int] = {}
        self._total = 0
        self.update(weights)

    @property
    def weights(self) -> dict[str, int]:
        return dict(self._weights)

    def update(self, weights: Mapping[str, int]) -> None:
        """Replace the weights (a FARE update) and restart the credits.

        Keeping old credits would break the zero-sum invariant once a next hop leaves, and
        the exact per-window counts with it; a restart costs at most one window of phase.
        """
        usable = _positive_weights(weights)
        self._weights = {nh: usable[nh] for nh in sorted(usable)}
        self._current = dict.fromkeys(self._weights, 0)
        self._total = sum(self._weights.values())

    def __iter__(self) -> SmoothWeightedRoundRobin:
        return self

    def __next__(self) -> str:
        best_nh = ""
        best = -math.inf
        for nh, w in self._weights.items():
            self._current[nh] += w
            if self._current[nh] > best:
                best_nh, best = nh, self._current[nh]
        self._current[best_nh] -= self._total
        return best_nh


# --- route views and change detection -------------------------------------------------------


@dataclass(frozen=True)
class RouteView:
    """What the agent derives for one prefix: bandwidth to advertise and kernel weights."""

    advertised_bw: float | None
    weights: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", dict(self.weights))

    def __hash__(self) -> int:
        return hash((self.advertised_bw, tuple(sorted(self.weights.items()))))


def compute_route(next_hops: Iterable[NextHopInput], max_weight: int = KERNEL_MAX_WEIGHT) -> RouteView:
    """Apply the FARE rules to one prefix's ECMP next hops (see the module docstring)."""
    bws = path_bandwidths(next_hops)
    return RouteView(advertised_bw=advertised_bandwidth(bws), weights=kernel_weights(bws, max_weight))


def _wire_bw(bw: float | None) -> float | None:
    return None if bw is None else float32(bw)


def changed_prefixes(old: Mapping[str, RouteView], new: Mapping[str, RouteView]) -> set[str]:
    """Prefixes whose advertised bandwidth or weights differ between two RIB views.

    Prefixes present in only one view count as changed (announce or withdraw). Bandwidths are
    compared as the float32 the community carries, so a change below its precision does not
    trigger a BGP update that would carry identical octets.
    """
    changed: set[str] = set(old.keys() ^ new.keys())
    for prefix in old.keys() & new.keys():
        a, b = old[prefix], new[prefix]
        if _wire_bw(a.advertised_bw) != _wire_bw(b.advertised_bw) or dict(a.weights) != dict(b.weights):
            changed.add(prefix)
    return changed
