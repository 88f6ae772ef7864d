"""The leaf re-derives only what a message or a timer changed (aidcnet/igmp/node.py): after any sequence of
host reports, queries, BFER reports over BIER, proxy reports and ticks, its state, flows and member ports
are what the whole tables give at that moment, and one report on a leaf holding many groups looks at its
own groups only."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.config import BierFlow
from aidcnet.igmp import router
from aidcnet.igmp.codec import GroupRecord, Query, RecordType, Report, encode
from aidcnet.igmp.extensions import ProxyReport, bfr_id_tlv
from aidcnet.igmp.leaf import aggregate, bfr_ids, compose_flows
from aidcnet.igmp.node import ALL_V3_ROUTERS, IgmpLeaf, PortConfig, ipv4_igmp
from aidcnet.igmp.router import IgmpTimers

GROUPS = [IPv4Address(f"232.1.1.{n}") for n in (1, 2, 3)]
SOURCES = [IPv4Address(f"10.0.0.{n}") for n in (1, 2, 3)]
PORTS = {"h1": IPv4Address("10.1.0.2"), "h2": IPv4Address("10.1.1.2"), "h3": IPv4Address("10.1.2.2")}
HOSTS = {"h1": IPv4Address("10.1.0.3"), "h2": IPv4Address("10.1.1.3"), "h3": IPv4Address("10.1.2.3")}
RECEIVERS = {IPv4Address(f"10.2.0.{b}"): b for b in (2, 3, 4)}
# Short timers so that sources, groups and queries run out within a test: GMI 21 s, LMQT 1 s.
TIMERS = IgmpTimers(query_interval=10.0, query_response_interval=1.0, last_member_query_interval=0.5)
STATIC = [BierFlow(group=GROUPS[0], source=SOURCES[0], bfers=[5]), BierFlow(group=GROUPS[2], bfers=[6])]
MODES = ["static", "igmp", "proxy"]


def new_leaf(now: float = 0.0) -> IgmpLeaf:
    ports = [PortConfig(n, a, querier=n != "h2", proxy=n == "h3") for n, a in PORTS.items()]
    return IgmpLeaf(ports, TIMERS, 1, 64, IPv4Address("10.255.0.1"), [1, 2], RECEIVERS, MODES, STATIC, now)


records = st.builds(
    GroupRecord,
    st.sampled_from([t for t in RecordType]),
    st.sampled_from(GROUPS),
    st.lists(st.sampled_from(SOURCES), unique=True, max_size=2).map(tuple),
)
host_report = st.tuples(
    st.just("host"), st.sampled_from(sorted(PORTS)), st.lists(records, min_size=1, max_size=3)
)
bfer_report = st.tuples(
    st.just("bier"), st.sampled_from([2, 3, 4]), st.lists(records, min_size=1, max_size=3)
)
proxy = st.tuples(
    st.just("proxy"),
    st.tuples(st.sampled_from(GROUPS), st.sampled_from(SOURCES)),
    st.lists(st.sampled_from(sorted(RECEIVERS)), unique=True, max_size=2),
)
query = st.tuples(
    st.just("query"), st.sampled_from(sorted(PORTS)), st.tuples(st.sampled_from(GROUPS), st.booleans())
)
tick = st.tuples(st.just("tick"), st.none(), st.none())
events = st.lists(
    st.tuples(st.floats(0.0, 8.0), st.one_of(host_report, bfer_report, proxy, query, tick)), max_size=25
)


def feed(leaf: IgmpLeaf, now: float, event: tuple) -> None:
    kind, where, what = event
    if kind == "host":
        leaf.receive(where, ipv4_igmp(HOSTS[where], ALL_V3_ROUTERS, encode(Report(tuple(what)))), now)
    elif kind == "bier":
        report = Report(tuple(what), (bfr_id_tlv(where),))
        leaf.receive_over_bier(
            ipv4_igmp(IPv4Address(f"10.255.0.{where}"), ALL_V3_ROUTERS, encode(report)), now
        )
    elif kind == "proxy":
        (group, source), receivers = where, what
        report = ProxyReport(group, source, tuple(receivers)).to_report()
        leaf.receive("h3", ipv4_igmp(HOSTS["h3"], ALL_V3_ROUTERS, encode(report)), now)
    elif kind == "query":  # a lower address than ours: on h1 it wins the election
        group, suppress = what
        other = IPv4Address(int(PORTS[where]) - 1)
        leaf.receive(
            where, ipv4_igmp(other, ALL_V3_ROUTERS, encode(Query(group=group, suppress=suppress))), now
        )
    else:
        leaf.tick(now)


def reference(leaf: IgmpLeaf, now: float):
    """State, flows and member ports from the whole tables at ``now`` (what the leaf computed before it
    was incremental, after every message)."""
    state = aggregate(link.table.snapshot(now) for link in leaf.links.values())
    igmp = {ch: bfr_ids(bits, leaf.bsl) for ch, bits in leaf.bfers.entries(now).items()}
    proxy = {ch: sorted(ids) for ch, ids in leaf.proxy.channels.items()}
    flows = compose_flows(leaf.modes, leaf.static_flows, igmp, proxy)
    members = {g: tuple(ports) for g, ports in leaf.members(now).items()}
    return state, flows, members


@settings(max_examples=300, deadline=None)
@given(events)
def test_incremental_leaf_equals_the_whole_tables(steps) -> None:
    leaf = new_leaf()
    now = 0.0
    for gap, event in steps:
        now += gap
        feed(leaf, now, event)
        state, flows, members = reference(leaf, now)
        assert leaf.state == state, (now, event)
        assert leaf.flows() == flows, (now, event)
        assert leaf.member_map() == members, (now, event)
    # and once every timer has run out, without any message: only the static flows are left
    later = now + 600.0  # beyond GMI with the QQI a foreign querier may have set (2 x 125 s + 1 s)
    while (deadline := leaf.next_deadline(later)) <= later:
        leaf.tick(deadline)
    leaf.tick(later)
    assert leaf.state == {} and leaf.member_map() == {}
    assert leaf.flows() == compose_flows(
        MODES, STATIC, {}, {ch: ids for ch, ids in leaf.proxy.channels.items()}
    )


def test_changes_are_reported_as_deltas() -> None:
    leaf = new_leaf()
    join = Report((GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, GROUPS[1]),), (bfr_id_tlv(3),))
    out = leaf.receive_over_bier(ipv4_igmp(IPv4Address("10.255.0.3"), ALL_V3_ROUTERS, encode(join)), 1.0)
    assert out.flow_changes == {(None, GROUPS[1]): (3,)} and out.member_changes == {}
    out = leaf.receive("h1", ipv4_igmp(HOSTS["h1"], ALL_V3_ROUTERS, encode(Report(join.records))), 1.0)
    assert out.member_changes == {GROUPS[1]: ("h1",)} and out.flow_changes == {}
    assert len(out.over_bier) == 1  # the leaf's own state changed: it tells its BFIRs


def test_a_burst_taken_without_deriving_derives_once() -> None:
    leaf = new_leaf()
    join = [GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, g) for g in GROUPS]
    for k, record in enumerate(join):
        out = leaf.receive(
            "h1", ipv4_igmp(HOSTS["h1"], ALL_V3_ROUTERS, encode(Report((record,)))), 1.0, derive=False
        )
        assert out.over_bier == [] and out.member_changes == {}, k
    out = leaf.derive(1.0)
    assert out.member_changes == {g: ("h1",) for g in GROUPS}
    assert len(out.over_bier) == 1  # one change report of the three groups, not three reports


def test_one_report_looks_at_its_own_groups_only(monkeypatch) -> None:
    """A leaf holding 2000 groups on its ports and from its BFERs: a report naming one group costs that
    group, not the whole state (before, every message snapshotted every table: thousands of groups)."""
    leaf = new_leaf()
    many = [IPv4Address("239.1.0.0") + k for k in range(2000)]
    for k in range(0, len(many), 50):
        chunk = tuple(GroupRecord(RecordType.ALLOW_NEW_SOURCES, g, (SOURCES[0],)) for g in many[k : k + 50])
        leaf.receive("h1", ipv4_igmp(HOSTS["h1"], ALL_V3_ROUTERS, encode(Report(chunk))), 1.0)
        bier = Report(chunk, (bfr_id_tlv(2),))
        leaf.receive_over_bier(ipv4_igmp(IPv4Address("10.255.0.2"), ALL_V3_ROUTERS, encode(bier)), 1.0)
    assert len(leaf.flows()) == 2000 + 2  # and the static ones
    made = []
    real = router.GroupSnapshot.__init__

    def counted(self, *args, **kwargs) -> None:
        made.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(router.GroupSnapshot, "__init__", counted)
    one = (GroupRecord(RecordType.ALLOW_NEW_SOURCES, many[7], (SOURCES[1],)),)
    leaf.receive("h2", ipv4_igmp(HOSTS["h2"], ALL_V3_ROUTERS, encode(Report(one))), 2.0)
    leaf.receive_over_bier(
        ipv4_igmp(IPv4Address("10.255.0.3"), ALL_V3_ROUTERS, encode(Report(one, (bfr_id_tlv(3),)))), 2.0
    )
    leaf.next_deadline(2.0)
    leaf.tick(2.0)
    assert len(made) <= 10, len(made)


def test_rescale_keeps_the_state_and_stretches_what_is_left_of_each_timer() -> None:
    """A new time scale (a replay's automatic scale) keeps every membership and channel; each running
    timer runs out at the same fabric moment, so ``ratio`` times later on the wall clock (before, the
    agent rebuilt the leaf: every membership forgotten, every host queried again at once)."""
    leaf = new_leaf()
    join = (GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, GROUPS[1]),)
    leaf.receive("h1", ipv4_igmp(HOSTS["h1"], ALL_V3_ROUTERS, encode(Report(join))), 1.0)
    bier = ipv4_igmp(IPv4Address("10.255.0.2"), ALL_V3_ROUTERS, encode(Report(join, (bfr_id_tlv(2),))))
    leaf.receive_over_bier(bier, 1.0)
    before = (dict(leaf.state), leaf.flows(), leaf.member_map())
    assert (None, GROUPS[1]) in {(f.source, f.group) for f in before[1]}
    out = leaf.rescale(TIMERS.model_copy(update={"time_scale": 3}), 5.0)
    assert out.flow_changes == {} and out.member_changes == {} and out.over_bier == []
    assert (dict(leaf.state), leaf.flows(), leaf.member_map()) == before
    # GMI (21 s) from t=1 ran out at 22 unscaled; 17 s of it were left at 5, now 51: at 56.
    gone = 5.0 + (22.0 - 5.0) * 3
    assert leaf.next_deadline(5.0) <= gone
    leaf.tick(gone - 0.01)
    assert leaf.member_map() == before[2] and leaf.flows() == before[1]
    leaf.tick(gone + 0.01)
    assert leaf.member_map() == {} and (None, GROUPS[1]) not in {(f.source, f.group) for f in leaf.flows()}
    assert leaf.timers.qi == 30.0  # new General Queries at the new scale
