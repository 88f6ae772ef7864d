"""BGP RIB, multipath selection and FARE for one node: pure logic, no I/O.

ExaBGP holds the sessions; the agent feeds every received UPDATE into :class:`Rib` and asks
:func:`select` what to install and :func:`advertisements` what to send. Both are recomputed from scratch on
every change (a SuperPoD node has at most a few hundred prefixes), so no incremental state can drift.

Design (RFC 7938 §5 eBGP-only fabric, docs/design.md §3):

* loop prevention: a path whose AS_PATH contains our own ASN is ignored (RFC 4271 §9.1.2);
* best paths: shortest AS_PATH; every path of that length is in the multipath set whatever its
  neighbor AS is ("AS-path multipath relax", RFC 7938 §6.3: the paths through different leaves or planes
  have different first ASNs);
* a path only counts while the link it was learned over is up with a bandwidth above zero: a link down seen
  through netlink removes its paths at once, long before the hold timer expires;
* FARE (:mod:`aidcnet.fare.weights`): per neighbor node, path bandwidth = min(sum of the up parallel links
  toward it, the bandwidth it advertised); kernel nexthop weights are proportional to it, split over the
  parallel links in proportion to their bandwidth; the bandwidth we re-advertise is the sum over the
  multipath set (None → withdraw).
* GPU hosts are stub speakers (seed draft §3): they originate their loopback and never re-advertise.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aidcnet.fare.linkbw import LinkBandwidth
from aidcnet.fare.weights import KERNEL_MAX_WEIGHT, advertised_bandwidth, kernel_weights, path_bandwidth

__all__ = [
    "ATTR_FLAG_OPTIONAL",
    "ATTR_FLAG_PARTIAL",
    "ATTR_FLAG_TRANSITIVE",
    "Announcement",
    "Link",
    "Path",
    "RawAttribute",
    "Rib",
    "Selected",
    "advertisements",
    "bier_view",
    "kernel_routes",
    "select",
]

ATTR_FLAG_OPTIONAL = 0x80
ATTR_FLAG_TRANSITIVE = 0x40
ATTR_FLAG_PARTIAL = 0x20
ATTR_TYPE_BIER = 41


def prefix_key(prefix: str) -> tuple[int, int]:
    """Prefixes in address order, then by length: 10.255.0.2/32 before 10.255.0.10/32 (not as text)."""
    net = ipaddress.ip_network(prefix, strict=False)
    return int(net.network_address), net.prefixlen


@functools.lru_cache(maxsize=4096)
def _peer_key(peer: str) -> tuple[int, str]:
    try:
        return (int(ipaddress.IPv4Address(peer)), peer)
    except ValueError:
        return (1 << 33, peer)


@dataclass(frozen=True)
class RawAttribute:
    """A path attribute ExaBGP does not parse (it reports it as ``attribute-0xCC-0xFF``), kept as octets."""

    code: int
    flags: int
    value_hex: str

    def __post_init__(self) -> None:
        if not 0 <= self.code <= 255 or not 0 <= self.flags <= 255:
            raise ValueError(f"attribute code {self.code!r} / flags {self.flags!r}: must be octets")
        bytes.fromhex(self.value_hex)  # raises ValueError on bad hex
        object.__setattr__(self, "value_hex", self.value_hex.lower())

    @property
    def optional_transitive(self) -> bool:
        return (
            self.flags & (ATTR_FLAG_OPTIONAL | ATTR_FLAG_TRANSITIVE)
            == ATTR_FLAG_OPTIONAL | ATTR_FLAG_TRANSITIVE
        )

    def to_exabgp(self) -> str:
        # ExaBGP sets PARTIAL on unknown attributes it receives; we pass them on as we would send our own.
        flags = self.flags & ~ATTR_FLAG_PARTIAL
        return f"attribute [ 0x{self.code:02x} 0x{flags:02x} 0x{self.value_hex} ]"


@dataclass(frozen=True)
class Path:
    """One route received from one BGP peer (a link address: there is one session per link)."""

    prefix: str
    peer: str
    as_path: tuple[int, ...]
    link_bw: float | None = None  # bytes/s, the lowest of the route's link-bandwidth communities
    attributes: tuple[RawAttribute, ...] = ()

    def attribute(self, code: int) -> RawAttribute | None:
        return next((a for a in self.attributes if a.code == code), None)


@dataclass(frozen=True)
class Link:
    """The link a session runs over: ``peer`` is the neighbor's address on it, ``neighbor`` its node name."""

    peer: str
    neighbor: str
    dev: str
    asn: int
    bandwidth: float  # bytes/s, as configured or set by ``aidclab link set ... bandwidth``
    up: bool = True

    @property
    def usable(self) -> bool:
        return self.up and self.bandwidth > 0


@dataclass
class Rib:
    """Adj-RIB-In per peer; ``paths(prefix)`` lists every received path for a prefix."""

    adj_in: dict[str, dict[str, Path]] = field(default_factory=dict)

    def update(self, path: Path) -> bool:
        table = self.adj_in.setdefault(path.peer, {})
        if table.get(path.prefix) == path:
            return False
        table[path.prefix] = path
        return True

    def withdraw(self, peer: str, prefix: str) -> bool:
        return self.adj_in.get(peer, {}).pop(prefix, None) is not None

    def clear_peer(self, peer: str) -> bool:
        """Session down: everything learned from that peer goes (RFC 4271 §8.2.2 on leaving Established)."""
        return bool(self.adj_in.pop(peer, None))

    def prefixes(self) -> set[str]:
        return {p for table in self.adj_in.values() for p in table}

    def paths(self, prefix: str) -> list[Path]:
        return [
            t[prefix] for _, t in sorted(self.adj_in.items(), key=lambda kv: _peer_key(kv[0])) if prefix in t
        ]


@dataclass(frozen=True)
class Selected:
    """The multipath set of one prefix and what FARE makes of it."""

    prefix: str
    paths: tuple[Path, ...]
    nexthops: tuple[tuple[str, str, int], ...]  # sorted (via, dev, weight) for the kernel
    advertised_bw: float | None  # bytes/s; None when no usable bandwidth remains

    @property
    def best(self) -> Path:
        """The path whose attributes we re-advertise: the lowest peer address of the multipath set."""
        return self.paths[0]


def select(
    rib: Rib,
    links: Mapping[str, Link],
    local_asn: int,
    max_weight: int = KERNEL_MAX_WEIGHT,
    weighting: str = "fare",
) -> dict[str, Selected]:
    """Best paths, multipath sets and FARE weights for every prefix with a usable path. ``weighting``
    "ecmp": every next hop with bandwidth left gets weight 1 (equal-cost, the baseline FARE is measured
    against); what is advertised does not change."""
    out: dict[str, Selected] = {}
    # Peers are ordered once per recompute, not once per prefix; prefixes whose multipath sets come from
    # the same peers with the same received bandwidths (a GPU's 63 peer loopbacks, behind the same four
    # leaves) share one FARE computation, so a recompute costs little more per prefix than reading it.
    tables = [rib.adj_in[peer] for peer in sorted(rib.adj_in, key=_peer_key)]
    usable = {peer for peer, link in links.items() if link.usable}
    fare: dict[tuple[tuple[str, float | None], ...], tuple[tuple[str, str, int], ...] | None] = {}
    advertised_of: dict[tuple[tuple[str, float | None], ...], float | None] = {}
    for prefix in sorted(rib.prefixes()):
        candidates = [
            p
            for t in tables
            if (p := t.get(prefix)) is not None and p.peer in usable and local_asn not in p.as_path
        ]
        if not candidates:
            continue
        shortest = min(len(p.as_path) for p in candidates)
        multipath = [p for p in candidates if len(p.as_path) == shortest]
        key = tuple((p.peer, p.link_bw) for p in multipath)
        if key not in fare:
            fare[key], advertised_of[key] = _fare(multipath, links, max_weight, weighting)
        nexthops = fare[key]
        if nexthops is None:
            continue
        kept_peers = {via for via, _dev, _w in nexthops}
        kept = tuple(p for p in multipath if p.peer in kept_peers)
        out[prefix] = Selected(prefix=prefix, paths=kept, nexthops=nexthops, advertised_bw=advertised_of[key])
    return out


def _fare(
    multipath: list[Path], links: Mapping[str, Link], max_weight: int, weighting: str
) -> tuple[tuple[tuple[str, str, int], ...] | None, float | None]:
    """Kernel next hops (None: no weight left) and the bandwidth to advertise for one multipath set."""
    # FARE per neighbor node: its parallel links add up; a node that advertised several bandwidths over
    # several sessions is held to the lowest (they describe the same path behind it).
    by_node: dict[str, list[Path]] = {}
    for p in multipath:
        by_node.setdefault(links[p.peer].neighbor, []).append(p)
    node_bw: dict[str, float] = {}
    for node, paths in by_node.items():
        received = [p.link_bw for p in paths if p.link_bw is not None]
        node_bw[node] = path_bandwidth(
            sum(links[p.peer].bandwidth for p in paths), min(received) if received else None
        )
    advertised = advertised_bandwidth(node_bw)
    link_share: dict[str, float] = {}
    for node, paths in by_node.items():
        total = sum(links[p.peer].bandwidth for p in paths)
        for p in paths:
            link_share[p.peer] = node_bw[node] * links[p.peer].bandwidth / total
    weights = kernel_weights(link_share, max_weight)
    if weighting == "ecmp":
        weights = dict.fromkeys(weights, 1)
    if not weights:
        return None, advertised
    nexthops = tuple(
        sorted((p.peer, links[p.peer].dev, weights[p.peer]) for p in multipath if p.peer in weights)
    )
    return nexthops, advertised


def kernel_routes(selected: Mapping[str, Selected]) -> dict[str, tuple[tuple[str, str, int], ...]]:
    """What the kernel should hold: the shape of :data:`aidcnet.netstate.NextHops` per prefix."""
    return {prefix: sel.nexthops for prefix, sel in selected.items()}


@dataclass(frozen=True)
class Announcement:
    """One route we send to one peer; ``text`` is the ExaBGP ``announce route`` argument list."""

    prefix: str
    as_path: tuple[int, ...]
    link_bw: float | None
    extra: str = ""

    def text(self, community_asn: int, transitive: bool) -> str:
        return _route_text(self.prefix, self.as_path, self.link_bw, self.extra, community_asn, transitive)


@functools.lru_cache(maxsize=8192)
def _route_text(
    prefix: str,
    as_path: tuple[int, ...],
    link_bw: float | None,
    extra: str,
    community_asn: int,
    transitive: bool,
) -> str:
    # Cached: the agent re-derives every announcement on each change and sends only texts that moved.
    parts = [f"route {prefix} next-hop self", f"as-path [ {' '.join(map(str, as_path))} ]"]
    if link_bw is not None:
        # Always the hex form: ExaBGP's bandwidth: keyword only builds the non-transitive type and
        # rejects values above 2^32 (an 800G link is 1e11 bytes/s).
        lb = LinkBandwidth(asn=community_asn, bytes_per_s=link_bw, transitive=transitive)
        parts.append(f"extended-community [ 0x{lb.encode().hex().upper()} ]")
    if extra:
        parts.append(extra)
    return " ".join(parts)


AS_TRANS = 23456


def community_asn(asn: int) -> int:
    """The 2-octet Global Administrator for ``asn``: a 4-octet ASN is carried as AS_TRANS (RFC 6793)."""
    return asn if asn <= 0xFFFF else AS_TRANS


def advertisements(
    selected: Mapping[str, Selected],
    links: Mapping[str, Link],
    local_asn: int,
    originate: Mapping[str, str],
    transit: bool,
) -> dict[str, dict[str, Announcement]]:
    """Per peer (link address), the routes to announce to it; anything not listed must be withdrawn.

    ``originate`` maps our own prefixes (the loopback) to extra ExaBGP text (e.g. the BIER attribute).
    An originated prefix carries the bandwidth of our up links toward that neighbor node, so the neighbor's
    min() sees the same value from both ends. Learned prefixes go out only when ``transit`` (switches), to
    every peer whose AS is not already in the path (it would drop it as a loop anyway).
    """
    up_bw: dict[str, float] = {}
    for link in links.values():
        if link.usable:
            up_bw[link.neighbor] = up_bw.get(link.neighbor, 0.0) + link.bandwidth
    # Learned routes are built once per prefix (a leaf has ~64 prefixes and ~64 peers), with the neighbor
    # ASes and next-hop nodes they must not go back to.
    learned: list[tuple[str, Announcement, frozenset[int], frozenset[str]]] = []
    if transit:
        for prefix, sel in selected.items():
            if prefix in originate or sel.advertised_bw is None:
                continue
            best = sel.best
            extra = " ".join(a.to_exabgp() for a in best.attributes if a.optional_transitive)
            ann = Announcement(prefix, (local_asn, *best.as_path), sel.advertised_bw, extra)
            learned.append(
                (prefix, ann, frozenset(best.as_path), frozenset(links[p.peer].neighbor for p in sel.paths))
            )
    out: dict[str, dict[str, Announcement]] = {}
    for peer, link in links.items():
        if not link.usable:
            continue
        routes: dict[str, Announcement] = {}
        for prefix, extra in originate.items():
            routes[prefix] = Announcement(prefix, (local_asn,), up_bw[link.neighbor], extra)
        for prefix, ann, path_asns, via_nodes in learned:
            if link.asn not in path_asns and link.neighbor not in via_nodes:
                routes[prefix] = ann
        out[peer] = routes
    return out


def bier_view(selected: Mapping[str, Selected]) -> dict[str, tuple[list[str], str | None]]:
    """For BIER over BGP: per prefix, the multipath next hops and the best path's attribute 41 (hex)."""
    out: dict[str, tuple[list[str], str | None]] = {}
    for prefix, sel in selected.items():
        attr = sel.best.attribute(ATTR_TYPE_BIER)
        out[prefix] = ([via for via, _dev, _w in sel.nexthops], attr.value_hex if attr else None)
    return out


def links_from(items: Iterable[Link]) -> dict[str, Link]:
    return {link.peer: link for link in items}
