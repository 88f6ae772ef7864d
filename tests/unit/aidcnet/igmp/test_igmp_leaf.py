"""A leaf's IGMP beyond one link: aggregation (RFC 3376 §3.2), reports to the BFIRs, flow composition,
and the whole IgmpLeaf fed with the bytes a raw IGMP socket returns."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.config import BierFlow
from aidcnet.igmp.bfir import BferMemberships
from aidcnet.igmp.codec import GroupRecord, Query, RecordType, Report, Tlv, decode, encode
from aidcnet.igmp.extensions import ProxyReport, interpret
from aidcnet.igmp.leaf import Flow, aggregate, change_report, compose_flows, member_ports, state_report
from aidcnet.igmp.node import ALL_V3_ROUTERS, IgmpLeaf, PortConfig, ipv4_igmp
from aidcnet.igmp.router import FilterMode, GroupSnapshot, IgmpTimers

G = IPv4Address("232.1.1.1")
G2 = IPv4Address("239.1.1.1")
S1, S2, S3 = (IPv4Address(f"10.0.0.{n}") for n in (1, 2, 3))
T = RecordType
INC, EXC = FilterMode.INCLUDE, FilterMode.EXCLUDE
SRCS = [S1, S2, S3]


def snap(mode: FilterMode, requested=(), excluded=()) -> GroupSnapshot:
    return GroupSnapshot(mode, frozenset(requested), frozenset(excluded), None, {})


def test_aggregate_merging_rules() -> None:
    # §3.2 example logic: INCLUDE ports union; any EXCLUDE: intersection of EXCLUDE lists minus INCLUDEs.
    a = {G: snap(INC, [S1])}
    b = {G: snap(INC, [S2])}
    assert aggregate([a, b]) == {G: (INC, frozenset({S1, S2}))}
    c = {G: snap(EXC, [], [S1, S2])}
    d = {G: snap(EXC, [], [S2, S3])}
    assert aggregate([c, d]) == {G: (EXC, frozenset({S2}))}
    assert aggregate([c, d, b]) == {G: (EXC, frozenset())}
    assert aggregate([]) == {}


port_state = st.tuples(st.sampled_from([INC, EXC]), st.frozensets(st.sampled_from(SRCS)))


@given(st.lists(port_state, max_size=4))
def test_aggregate_forwards_what_any_port_forwards(ports) -> None:
    snaps = [{G: snap(m, s if m is INC else (), s if m is EXC else ())} for m, s in ports]
    merged = aggregate(snaps).get(G)
    for source in SRCS:
        want = any(x[G].forwards(source) for x in snaps)
        got = merged is not None and (source in merged[1]) == (merged[0] is INC)
        assert got == want, (ports, source)


def test_change_report_carries_the_new_state_and_the_bfr_id() -> None:
    old = {G: (INC, frozenset({S1})), G2: (EXC, frozenset())}
    new = {G: (INC, frozenset({S1, S2}))}
    r = change_report(old, new, 7)
    assert r is not None and interpret(r.extensions).bfr_id == 7
    assert r.records == (
        GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G, (S1, S2)),
        GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G2),
    )
    assert change_report(new, new, 7) is None
    s = state_report({G2: (EXC, frozenset({S3}))}, 7)
    assert s is not None and s.records == (GroupRecord(T.MODE_IS_EXCLUDE, G2, (S3,)),)
    assert state_report({}, 7) is None


@given(
    st.dictionaries(st.sampled_from([G, G2]), port_state),
    st.dictionaries(st.sampled_from([G, G2]), port_state),
)
def test_bfir_follows_change_reports_within_lmqt(old, new) -> None:
    """Whatever the BFER's previous state, after its change report and LMQT the BFIR's table for it
    forwards exactly what the BFER's state does (the pruned sources are not queried over BIER)."""
    old = {g: v for g, v in old.items() if v[0] is EXC or v[1]}
    new = {g: v for g, v in new.items() if v[0] is EXC or v[1]}
    timers = IgmpTimers()
    bfir = BferMemberships(timers, 64, prune=True)
    first = change_report({}, old, 5)
    if first is not None:
        bfir.receive(first, 0.0)
    second = change_report(old, new, 5)
    if second is not None:
        bfir.receive(second, 1.0)
    later = 1.0 + 2 * timers.lmqi + 0.001
    for g in (G, G2):
        for s in SRCS:
            mode, sources = new.get(g, (INC, frozenset()))
            want = (s in sources) == (mode is INC)
            assert (bfir.bitstring(s, g, later) == {0: 1 << 4}) == want, (old, new, g, s)


def test_compose_flows_precedence() -> None:
    static = [BierFlow(group=G, source=S1, bfers=[1, 2]), BierFlow(group=G2, bfers=[3])]
    igmp = {(S1, G): [4], (None, G2): [5]}
    proxy = {(S1, G): [9]}
    assert compose_flows(["static", "igmp"], static, igmp, proxy) == [
        Flow(G, S1, (1, 2, 4)),
        Flow(G2, None, (3, 5)),
    ]
    assert compose_flows(["static", "igmp", "proxy"], static, igmp, proxy)[0] == Flow(G, S1, (9,))
    assert compose_flows(["proxy"], static, igmp, proxy) == [Flow(G, S1, (9,))]
    assert compose_flows(["static"], static, igmp, {}) == [Flow(G, S1, (1, 2)), Flow(G2, None, (3,))]


def test_member_ports() -> None:
    ports = {"h1": {G: snap(INC, [S1])}, "h2": {G: snap(EXC), G2: snap(INC, [])}}
    assert member_ports(ports) == {G: ["h1", "h2"]}


# -- the whole leaf ---------------------------------------------------------------------------------
HOST1, HOST2, PROXY_HOST = IPv4Address("10.1.0.3"), IPv4Address("10.1.1.3"), IPv4Address("10.1.2.3")
P1, P2, P3 = IPv4Address("10.1.0.2"), IPv4Address("10.1.1.2"), IPv4Address("10.1.2.2")


def leaf(bfr_id: int, now: float = 0.0, **kw) -> IgmpLeaf:
    ports = [PortConfig("h1", P1), PortConfig("h2", P2), PortConfig("h3", P3, proxy=True)]
    args = dict(
        ports=ports,
        timers=IgmpTimers(),
        bfr_id=bfr_id,
        bsl=64,
        loopback=IPv4Address(f"10.255.0.{bfr_id}"),
        bfirs=[1, 2],
        receivers={IPv4Address("10.2.0.3"): 2, IPv4Address("10.3.0.3"): 3},
        modes=["static", "igmp", "proxy"],
        static_flows=[],
        now=now,
    )
    args.update(kw)
    return IgmpLeaf(**args)


def from_host(src: IPv4Address, report: Report | Query) -> bytes:
    return ipv4_igmp(src, ALL_V3_ROUTERS, encode(report))


def join(g=G, *sources) -> Report:  # what Linux sends on IP_ADD_(SOURCE_)MEMBERSHIP
    kind = T.ALLOW_NEW_SOURCES if sources else T.CHANGE_TO_EXCLUDE_MODE
    return Report((GroupRecord(kind, g, sources),))


def test_join_goes_to_the_bfir_and_becomes_a_flow() -> None:
    bfer, bfir = leaf(3), leaf(1)
    out = bfer.receive("h1", from_host(HOST1, join(G, S1)), 1.0)
    assert len(out.over_bier) == 1
    inner = decode(out.over_bier[0][24:])
    assert isinstance(inner, Report) and interpret(inner.extensions).bfr_id == 3
    assert bfer.members(1.0) == {G: ["h1"]}
    got = bfir.receive_over_bier(out.over_bier[0], 1.1)
    assert got.flows_changed
    assert bfir.flows() == [Flow(G, S1, (3,))]
    # the receiver leaves: BLOCK, the port querier asks Q(G,S1); nobody answers; after LMQT it is gone
    out = bfer.receive("h1", from_host(HOST1, Report((GroupRecord(T.BLOCK_OLD_SOURCES, G, (S1,)),))), 2.0)
    assert [q.sources for _port, q in out.queries] == [(S1,)]
    assert out.over_bier == []  # still forwarding during the query
    out = bfer.tick(2.0 + 2.0 + 0.01)  # LMQT = 2 x 1 s
    assert bfer.members(4.1) == {}
    assert len(out.over_bier) == 1
    bfir.receive_over_bier(out.over_bier[0], 4.1)
    assert bfir.tick(4.1 + 2.01).flows_changed  # the BFIR prunes on LMQT too
    assert bfir.flows() == []


def test_general_queries_and_refresh_over_bier() -> None:
    bfer = leaf(3)
    first = bfer.tick(0.0)
    assert {p for p, q in first.queries if q.is_general} == {"h1", "h2", "h3"}
    bfer.receive("h2", from_host(HOST2, join(G2)), 1.0)
    refresh = bfer.tick(125.0)
    assert len(refresh.over_bier) == 1
    rec = decode(refresh.over_bier[0][24:]).records  # type: ignore[union-attr]
    assert rec == (GroupRecord(T.MODE_IS_EXCLUDE, G2),)


def test_election_lower_address_wins_and_we_listen() -> None:
    bfer = leaf(3)
    other = IPv4Address("10.1.0.1")  # below our 10.1.0.2
    bfer.receive("h1", from_host(other, Query(max_resp_time=100)), 1.0)
    st_ = bfer.status(1.0)["ports"]["h1"]
    assert st_["querier"] is False and st_["other_querier"] == "10.1.0.1"
    assert bfer.counters["port.h1.querier-lost"] == 1
    higher = IPv4Address("10.1.1.9")
    bfer.receive("h2", from_host(higher, Query(max_resp_time=100)), 1.0)
    assert bfer.status(1.0)["ports"]["h2"]["querier"] is True


def test_proxy_report_installs_at_once_and_only_from_allowed_ports() -> None:
    fhr = leaf(1)
    rpr = ProxyReport(G, S1, (IPv4Address("10.2.0.3"), IPv4Address("10.3.0.3"))).to_report()
    refused = fhr.receive("h1", from_host(HOST1, rpr), 1.0)
    assert not refused.flows_changed and fhr.flows() == []
    assert fhr.counters["port.h1.dropped.proxy-port-not-allowed"] == 1
    out = fhr.receive("h3", from_host(PROXY_HOST, rpr), 1.0)
    assert out.flows_changed and fhr.flows() == [Flow(G, S1, (2, 3))]
    unknown = ProxyReport(G, S1, (IPv4Address("10.9.9.9"),)).to_report()
    fhr.receive("h3", from_host(PROXY_HOST, unknown), 1.0)
    assert fhr.counters["dropped.proxy-unknown-receiver"] == 1 and fhr.flows() == [Flow(G, S1, (2, 3))]
    fhr.receive("h3", from_host(PROXY_HOST, ProxyReport(G, S1, ()).to_report()), 2.0)
    assert fhr.flows() == []


def test_malformed_and_unknown_are_counted_and_dropped() -> None:
    bfer = leaf(3)
    good = from_host(HOST1, join(G))
    bfer.receive("h1", good[:-3], 1.0)  # IPv4 total length beyond the data
    bad_sum = bytearray(good)
    bad_sum[-1] ^= 0xFF
    bfer.receive("h1", bytes(bad_sum), 1.0)
    bfer.receive("h1", ipv4_igmp(HOST1, ALL_V3_ROUTERS, b"\x22\x00"), 1.0)
    unknown_tlv = Report((GroupRecord(T.CHANGE_TO_EXCLUDE_MODE, G),), (Tlv(0x1234, b"xy"),))
    bfer.receive("h1", from_host(HOST1, unknown_tlv), 1.0)
    c = bfer.counters
    assert c["port.h1.dropped.ip-truncated"] == 1
    assert c["port.h1.dropped.bad-checksum"] == 1
    assert c["port.h1.dropped.truncated"] == 1
    assert c["port.h1.unknown-extension-4660"] == 1
    assert c["dropped"] == 3
    assert bfer.members(1.0) == {G: ["h1"]}  # the report with an unknown TLV still counts
    assert bfer.receive_over_bier(b"\x45", 1.0).over_bier == []
    assert bfer.counters["bier-drop.ip-truncated"] == 1


def test_max_groups_refuses_more() -> None:
    bfer = leaf(3, max_groups=1)
    bfer.receive("h1", from_host(HOST1, join(G)), 1.0)
    bfer.receive("h1", from_host(HOST1, join(G2)), 1.0)
    assert bfer.members(1.0) == {G: ["h1"]}
    assert bfer.counters["port.h1.dropped.too-many-groups"] == 1


def test_bytes_heard_on_host_ports_and_sent_over_bier_are_counted() -> None:
    """The replay's membership modes report control overhead from these counters, never estimates."""
    bfer = leaf(3)
    packets = [from_host(HOST1, join(G, S1)), from_host(HOST1, join(G2))]
    sent = [bfer.receive("h1", p, 1.0 + k).over_bier for k, p in enumerate(packets)]
    c = bfer.all_counters()
    assert (c["rx"], c["rx-bytes"]) == (2, sum(map(len, packets)))
    assert (c["bier-reports-out"], c["bier-report-bytes-out"]) == (
        sum(map(len, sent)),
        sum(len(p) for out in sent for p in out),
    )
