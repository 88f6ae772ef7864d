"""Join-path stamps (aidcnet/igmp/stamps.py): which records are joins and leaves, heard -> sent at a
leaf, received -> installed at a BFIR, and the bound."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given
from hypothesis import strategies as st

from aidcnet.igmp.codec import GroupRecord, RecordType
from aidcnet.igmp.stamps import BfirStamps, LeafStamps, changes, flow_changes, proxy_records

T = RecordType
G, G2 = IPv4Address("239.101.0.1"), IPv4Address("239.101.0.2")
S1, S2 = IPv4Address("10.0.0.1"), IPv4Address("10.0.0.2")


def test_changes_of_each_record_type() -> None:
    assert changes(GroupRecord(T.ALLOW_NEW_SOURCES, G, (S1, S2))) == [(S1, True), (S2, True)]
    assert changes(GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G, (S1,))) == [(S1, True)]
    assert changes(GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G)) == [(None, False)]  # v2 Leave, TO_IN({})
    assert changes(GroupRecord(T.BLOCK_OLD_SOURCES, G, (S1,))) == [(S1, False)]
    assert changes(GroupRecord(T.CHANGE_TO_EXCLUDE_MODE, G)) == [(None, True)]  # IP_ADD_MEMBERSHIP
    assert changes(GroupRecord(T.MODE_IS_INCLUDE, G, (S1,))) == []  # a refresh is no change
    assert changes(GroupRecord(T.MODE_IS_EXCLUDE, G)) == []
    assert changes(GroupRecord(9, G, (S1,))) == []  # unknown type: skipped as the router skips it


def test_leaf_heard_then_sent_and_a_join_that_changed_nothing() -> None:
    stamps = LeafStamps()
    stamps.heard([GroupRecord(T.ALLOW_NEW_SOURCES, G, (S1,))], 100)
    stamps.heard([GroupRecord(T.ALLOW_NEW_SOURCES, G2, (S1,))], 110)
    stamps.settled([GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G, (S1,))], 150)  # G2 was known already
    assert stamps.since(0) == [["10.0.0.1", str(G), True, 100, 150], ["10.0.0.1", str(G2), True, 110, None]]
    # the next report about G2 does not complete the old stamp: it belonged to the earlier settle
    stamps.settled([GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G2)], 300)
    assert stamps.since(105) == [["10.0.0.1", str(G2), True, 110, None]]


def test_bfir_received_then_installed_and_removed() -> None:
    stamps = BfirStamps()
    stamps.received([(2, GroupRecord(T.CHANGE_TO_INCLUDE_MODE, G, (S1,)))], 200)
    stamps.received([(2, GroupRecord(T.MODE_IS_INCLUDE, G2, (S1,)))], 205)  # refresh: not stamped
    stamps.received([(2, GroupRecord(T.ALLOW_NEW_SOURCES, G, (S1,)))], 210)  # the earliest one counts
    stamps.installed({}, {(S1, G): (2,), (S1, G2): (2,), (None, G): (7,)}, 250)
    assert stamps.since(0) == [[2, "10.0.0.1", str(G), True, 200, 250]]  # G2, BFER 7: no report of ours
    stamps.received([(2, GroupRecord(T.BLOCK_OLD_SOURCES, G, (S1,)))], 400)
    stamps.installed({(S1, G): (2,)}, {(S1, G): (2,)}, 410)  # LMQT still running: nothing yet
    stamps.installed({(S1, G): (2,)}, {}, 900)
    assert stamps.since(300) == [[2, "10.0.0.1", str(G), False, 400, 900]]


def test_proxy_report_is_stamped_per_bfer_it_changes() -> None:
    stamps = BfirStamps()
    stamps.received(proxy_records(G, S1, {3, 2}), 50)
    stamps.installed({(S1, G): (4,)}, {(S1, G): (2, 3)}, 60)
    assert stamps.since(0) == [[2, "10.0.0.1", str(G), True, 50, 60], [3, "10.0.0.1", str(G), True, 50, 60]]


def test_the_bound_counts_what_it_does_not_keep() -> None:
    stamps = LeafStamps(limit=2)
    stamps.heard(
        [GroupRecord(T.ALLOW_NEW_SOURCES, G, (S1, S2)), GroupRecord(T.CHANGE_TO_EXCLUDE_MODE, G2)], 1
    )
    assert len(stamps.since(0)) == 2 and stamps.dropped == 1


channels = st.sampled_from([(None, G), (S1, G), (S2, G), (S1, G2)])
flows = st.dictionaries(channels, st.lists(st.integers(1, 8), unique=True, max_size=4).map(tuple))


@given(flows, flows)
def test_flow_changes_turn_old_into_new(old, new) -> None:
    result = {ch: set(ids) for ch, ids in old.items()}
    for source, group, bfer, added in flow_changes(old, new):
        ids = result.setdefault((source, group), set())
        assert (bfer in ids) != added  # each change is a real one
        (ids.add if added else ids.discard)(bfer)
    assert {ch: ids for ch, ids in result.items() if ids} == {ch: set(ids) for ch, ids in new.items() if ids}
