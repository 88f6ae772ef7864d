"""The replay's typed records over the control socket: a load survives the wire unchanged, is cut into
requests the socket takes without losing or repeating anything, and a bad field is named."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.agent.control import REQUEST_LINE_BYTES
from aidcnet.agent.replay.protocol import LINE_BUDGET, Join, OpTimes, Receiver, ReplayLoad, ReplayOp, Report
from aidcnet.agent.replay.senders import SENDERS, sender_class
from aidcnet.modes import COLLECTIVE, IP_MULTICAST, Mode

HOSTS = [f"h{i}" for i in range(1, 40)]
groups = st.builds(lambda a, b: f"239.100.{a}.{b}", st.integers(0, 255), st.integers(0, 255))
addresses = st.builds(lambda a, b: f"10.255.{a}.{b}", st.integers(0, 255), st.integers(1, 254))
times = st.floats(0, 1e4, allow_nan=False)
ops = st.builds(
    ReplayOp,
    st.integers(0, 1 << 24),
    times,
    st.integers(1, 1 << 30),
    st.lists(st.sampled_from(HOSTS), max_size=30).map(tuple),
    st.none() | groups,
    st.lists(st.integers(1, 0xFFFF), max_size=8).map(tuple),
)
joins = st.builds(Join, st.integers(0, 1 << 24), times, groups, addresses)
reports = st.builds(
    Report, st.integers(0, 1 << 24), st.booleans(), groups, st.lists(addresses, max_size=8).map(tuple)
)
loads = st.builds(
    ReplayLoad,
    st.sampled_from(list(Mode)),
    st.lists(ops, max_size=300).map(tuple),
    st.dictionaries(
        st.sampled_from(HOSTS), st.builds(Receiver, addresses, st.none() | st.integers(1, 0xFFFF))
    ),
    st.booleans(),
    st.none() | st.sampled_from(["eth1", "lo"]),
    st.lists(groups, max_size=50).map(tuple),
    st.integers(80, 65000),
    st.floats(0, 100),
    st.integers(1, 16),
    st.floats(0, 5),
    st.floats(0.01, 5),
    st.lists(joins, max_size=100).map(tuple),
    st.lists(reports, max_size=100).map(tuple),
    st.none() | st.just({"self_id": 3, "isn": 7}),
)


@settings(max_examples=60, deadline=None)
@given(loads)
def test_a_load_survives_the_wire(load: ReplayLoad) -> None:
    assert ReplayLoad.from_wire(json.loads(json.dumps(load.to_wire()))) == load


@settings(max_examples=60, deadline=None)
@given(loads, st.sampled_from([2000, 8000, LINE_BUDGET]))
def test_a_load_is_cut_into_requests_the_socket_takes_and_nothing_is_lost(
    load: ReplayLoad, budget: int
) -> None:
    lines = load.lines(budget)
    assert all(len(json.dumps(line.to_wire())) <= budget for line in lines)
    first, rest = lines[0], lines[1:]
    # The settings travel once, in the first request; the others are appends to it.
    assert (first.append, first.interface, first.lead_s, first.reliable) == (
        load.append, load.interface, load.lead_s, load.reliable,
    )  # fmt: skip
    assert all(line.append and line.mode == load.mode for line in rest)
    for kind in ("ops", "joins", "reports", "groups"):
        assert tuple(x for line in lines for x in getattr(line, kind)) == getattr(load, kind)
    for line in lines:
        named = {d for op in line.ops for d in op.receivers if d in load.receivers}
        assert set(line.receivers) == named and all(load.receivers[r] == line.receivers[r] for r in named)


def test_a_default_request_line_is_under_the_agents_limit() -> None:
    ops = tuple(ReplayOp(i, i / 1e3, 1 << 20, tuple(HOSTS), "239.100.0.1") for i in range(3000))
    receivers = {h: Receiver(f"10.255.0.{i}", i) for i, h in enumerate(HOSTS, 1)}
    lines = ReplayLoad(Mode.NET_BIER, ops, receivers).lines()
    assert len(lines) > 1 and max(len(json.dumps(line.to_wire())) + 40 for line in lines) < REQUEST_LINE_BYTES


def test_one_item_over_the_budget_is_refused_before_it_is_sent() -> None:
    load = ReplayLoad(Mode.UNICAST, (ReplayOp(0, 0.0, 10, tuple(HOSTS)),))
    with pytest.raises(ValueError, match=r"one of ops is \d+ bytes of JSON alone"):
        load.lines(300)


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"ops": []}, "mode missing"),
        ({"mode": "multicast"}, "mode 'multicast' does not exist"),
        ({"mode": "unicast", "qpz": 3}, "unknown field.*qpz"),
        ({"mode": "unicast", "ops": [[0, 0.0, 10, []]]}, r"ops\.0: want an object with id, t, size"),
        ({"mode": "unicast", "ops": [{"id": 0, "t": 0.0, "receivers": []}]}, r"ops\.0: missing 'size'"),
        ({"mode": "unicast", "ops": [{"id": 0, "t": "x", "size": 1, "receivers": []}]}, r"ops\.0: could not"),
        (
            {"mode": "unicast", "ops": [{"id": 0, "t": 0, "size": 1, "receivers": [], "bfers": [0]}]},
            r"ops\.0\.bfers: 0 is not a BFR-id",
        ),
        ({"mode": "unicast", "receivers": {"h2": {"address": "h2"}}}, r"receivers\.h2\.address: 'h2' is not"),
        ({"mode": "net-bier", "groups": ["10.0.0.1"]}, r"groups\.0: '10\.0\.0\.1' is not an IPv4 multicast"),
        ({"mode": "igmp", "hold_s": 0}, r"hold_s 0\.0 > 0"),
    ],
)
def test_a_bad_request_names_its_field(request_: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ReplayLoad.from_wire({"op": "replay_load", **request_})


def test_every_mode_has_exactly_one_sender_and_collectives_send_nothing() -> None:
    from aidcnet.agent.replay.senders import NoMessages
    from aidcnet.agent.replay.service import ReplayService

    for mode in Mode:
        assert [cls for cls in SENDERS if cls.serves(mode)] == [sender_class(mode)]
    for mode in COLLECTIVE:
        assert sender_class(mode) is NoMessages
        # Open loop, a collective mode is the INA worker's; a closed-loop step with messages needs a
        # message mode.
        with pytest.raises(ValueError, match=f"mode {mode} is not a message mode"):
            ReplayService("10.0.0.1").load({"mode": str(mode)})
        with pytest.raises(ValueError, match=f"op 3: mode {mode} runs AllReduces"):
            ReplayService("10.0.0.1").load({"mode": str(mode), "closed_loop": True, "ops": [
                {"id": 3, "t": 0, "size": 10, "receivers": []}]})  # fmt: skip
        assert ReplayService("10.0.0.1").load({"mode": str(mode), "closed_loop": True})["ok"]
    # The membership modes' signalling rides on the IP-multicast sender.
    assert sender_class(Mode.IGMP) is sender_class(Mode.NET_BIER) and Mode.PROXY in IP_MULTICAST


def test_op_times_mark_the_first_and_last_hand_off() -> None:
    t = OpTimes(4, due_ns=100)
    assert t.to_wire() == {
        "id": 4,
        "due_ns": 100,
        "first_ns": None,
        "last_ns": None,
        "datagrams": 0,
        "bytes": 0,
    }
    t.handed(150, 8000)
    t.handed(180, 2000, datagrams=2)
    assert (t.first_ns, t.last_ns, t.datagrams, t.bytes) == (150, 180, 3, 10000)
    assert OpTimes.from_wire(json.loads(json.dumps(t.to_wire()))) == t
