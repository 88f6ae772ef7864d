"""select() computes FARE once per distinct multipath set: its result equals the per-prefix computation."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.bgp.rib import Link, Path, Rib, Selected, select
from aidcnet.fare.weights import KERNEL_MAX_WEIGHT, advertised_bandwidth, kernel_weights, path_bandwidth

G = 1e9 / 8
LOCAL_ASN = 65100
# Six sessions to four neighbor nodes: N1 and N2 each over two parallel links (a Y-cable's sub-links).
SESSIONS = [
    ("10.0.0.1", "N1", "eth1", 65001),
    ("10.0.0.3", "N1", "eth2", 65001),
    ("10.0.0.5", "N2", "eth3", 65002),
    ("10.0.0.7", "N2", "eth4", 65002),
    ("10.0.0.9", "N3", "eth5", 65003),
    ("10.0.0.11", "N4", "eth6", 65004),
]


def reference_select(rib: Rib, links: dict[str, Link], local_asn: int, weighting: str) -> dict[str, Selected]:
    """The per-prefix computation select() did before it shared work between prefixes (the spec)."""
    out: dict[str, Selected] = {}
    for prefix in sorted(rib.prefixes()):
        candidates = [
            p
            for p in rib.paths(prefix)
            if p.peer in links and links[p.peer].usable and local_asn not in p.as_path
        ]
        if not candidates:
            continue
        shortest = min(len(p.as_path) for p in candidates)
        multipath = [p for p in candidates if len(p.as_path) == shortest]
        by_node: dict[str, list[Path]] = {}
        for p in multipath:
            by_node.setdefault(links[p.peer].neighbor, []).append(p)
        node_bw = {}
        for node, paths in by_node.items():
            received = [p.link_bw for p in paths if p.link_bw is not None]
            node_bw[node] = path_bandwidth(
                sum(links[p.peer].bandwidth for p in paths), min(received) if received else None
            )
        advertised = advertised_bandwidth(node_bw)
        share = {}
        for node, paths in by_node.items():
            total = sum(links[p.peer].bandwidth for p in paths)
            for p in paths:
                share[p.peer] = node_bw[node] * links[p.peer].bandwidth / total
        weights = kernel_weights(share, KERNEL_MAX_WEIGHT)
        if weighting == "ecmp":
            weights = dict.fromkeys(weights, 1)
        if not weights:
            continue
        kept = tuple(p for p in multipath if p.peer in weights)
        nexthops = tuple(sorted((p.peer, links[p.peer].dev, weights[p.peer]) for p in kept))
        out[prefix] = Selected(prefix, kept, nexthops, advertised)
    return out


bandwidths = st.sampled_from([0.0, 100 * G, 200 * G, 400 * G, 800 * G])
received_bw = st.one_of(st.none(), bandwidths)
# Per session: no path, or one of length 2-4 (possibly looping through us).
shape = st.lists(
    st.one_of(st.none(), st.tuples(st.integers(1, 3), st.booleans())),
    min_size=len(SESSIONS),
    max_size=len(SESSIONS),
)


@st.composite
def fabrics(draw):
    links = {
        peer: Link(peer, node, dev, asn, draw(bandwidths), up=draw(st.booleans()) or draw(st.booleans()))
        for peer, node, dev, asn in SESSIONS
    }
    rib = Rib()
    # A few path shapes repeat over many prefixes, as on a GPU, with the received bandwidths drawn per
    # kind: prefixes from the same peers with other bandwidths must not share a result.
    shapes = draw(st.lists(shape, min_size=1, max_size=2))
    bws = st.lists(received_bw, min_size=len(SESSIONS), max_size=len(SESSIONS))
    kinds = draw(st.lists(st.tuples(st.sampled_from(shapes), bws), min_size=1, max_size=4))
    for k in range(draw(st.integers(1, 40))):
        prefix = str(ipaddress.IPv4Address(0x0AC80000 + k)) + "/32"
        kind_shape, kind_bws = kinds[k % len(kinds)]
        for (peer, _node, _dev, asn), spec, bw in zip(SESSIONS, kind_shape, kind_bws, strict=True):
            if spec is None:
                continue
            length, loops = spec
            middle = (LOCAL_ASN,) if loops else tuple(64900 + i for i in range(length - 1))
            rib.update(Path(prefix, peer, (*(asn, *middle)[:length], 65500 + k), bw))
    return rib, links


@settings(max_examples=200, deadline=None)
@given(fabrics(), st.sampled_from(["fare", "ecmp"]))
def test_shared_select_equals_per_prefix_select(fabric, weighting) -> None:
    rib, links = fabric
    assert select(rib, links, LOCAL_ASN, weighting=weighting) == reference_select(
        rib, links, LOCAL_ASN, weighting
    )


def test_prefixes_with_different_received_bandwidth_get_their_own_weights() -> None:
    links = {peer: Link(peer, node, dev, asn, 800 * G) for peer, node, dev, asn in SESSIONS[4:]}
    rib = Rib()
    for prefix, n3_bw in (("10.200.0.1/32", 800 * G), ("10.200.0.2/32", 400 * G)):
        rib.update(Path(prefix, "10.0.0.9", (65003, 65500), n3_bw))
        rib.update(Path(prefix, "10.0.0.11", (65004, 65500), 800 * G))
    sel = select(rib, links, LOCAL_ASN)
    full = {dev: w for _v, dev, w in sel["10.200.0.1/32"].nexthops}
    half = {dev: w for _v, dev, w in sel["10.200.0.2/32"].nexthops}
    assert full["eth5"] == full["eth6"]
    assert 2 * half["eth5"] == half["eth6"]
