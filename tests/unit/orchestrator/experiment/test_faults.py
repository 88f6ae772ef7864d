"""Faults during a replay, the pure part: what a user may write, the checks against the lab, the record a
run keeps, and counters that survive an agent's restart."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aidcnet.timescale import TimeScale
from orchestrator.experiment.faults import (
    FAULT_LATE_SHARE,
    FaultRecord,
    counters_across_restarts,
    fault_lines,
    late_faults,
)
from orchestrator.lab.fault_spec import (
    Fault,
    FaultSpecError,
    check_targets,
    expand_nodes,
    parse_fault,
    parse_faults,
    parse_seconds,
    schedule,
)

ROLES = {"h1": "gpu-host", "leaf1": "bfr", "spine1": "bfr", "sw1": "ina-switch", "frr1": "frr"}


def test_the_forms_a_user_writes() -> None:
    assert parse_fault("1.5 link leaf1:eth1 down") == Fault(
        1.5, "link", "leaf1:eth1", ("down",), "1.5 link leaf1:eth1 down"
    )
    assert parse_fault("750ms link leaf1:eth2 loss 0.05 burst 4").words == ("loss", "0.05", "burst", "4")
    assert parse_fault("2s link spine1:eth1 bandwidth 200G").words == ("bandwidth", "200G")
    restart = parse_fault("3 restart spine1")
    assert (restart.at_s, restart.kind, restart.node, restart.words) == (3.0, "restart", "spine1", ())
    assert parse_seconds(".5") == 0.5 and parse_seconds("250ms") == 0.25 and parse_seconds("4") == 4.0
    # Fault times are fabric time: a microsecond is their natural unit.
    assert parse_seconds("20us") == pytest.approx(20e-6) and parse_seconds("15µs") == pytest.approx(15e-6)
    assert parse_seconds("1e-5s") == pytest.approx(1e-5) and parse_seconds("500ns") == pytest.approx(5e-7)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1 link", "too short"),
        ("1 link leaf1:eth1", "one of down, up"),
        ("soon link leaf1:eth1 down", "'soon' is not a time"),
        ("-1 link leaf1:eth1 down", "is not a time"),
        ("1 link leaf1 down", "NODE:INTERFACE"),
        ("1 link leaf1:eth1 wobble", "one of down, up, bandwidth, loss"),
        ("1 link leaf1:eth1 flap", "flap takes a duration and a count"),
        ("1 link leaf1:eth1 flap 5us 0", "flap takes a duration and a count"),
        ("1 link leaf1:eth1 flap 0us 2", "duration must be above zero"),
        ("1 link leaf1:eth1 down one-way", "one-way applies to loss and delay"),
        ("1 link leaf1:eth1 bandwidth 1G for 5us", "'for D' undoes down, loss or delay"),
        ("1 link leaf1:eth1 down for soon", "'soon' is not a time"),
        ("1 link leaf1:eth1 down now", "down takes no value"),
        ("1 link leaf1:eth1 loss", "loss needs a value"),
        ("1 restart spine1 now", "restart takes one node name"),
        ("1 reboot spine1", "'reboot' is not a fault"),
        ("1 node spine1:eth1 down", "node takes a node name"),
        ("1 node spine1 up", "want AT node NODE down [for D]"),
        ("1 node spine1 down for soon", "'soon' is not a time"),
    ],
)
def test_each_mistake_is_named_with_the_fault(text: str, says: str) -> None:
    with pytest.raises(FaultSpecError) as err:
        parse_fault(text)
    assert says in str(err.value) and text in str(err.value)


def test_one_way_loss_is_a_gray_failure_at_the_named_end() -> None:
    gray = parse_fault("8us link leaf1:eth1 loss 1 one-way")
    assert (gray.words, gray.one_way) == (("loss", "1"), True)
    assert gray.describe() == "link leaf1:eth1 loss 1 one-way"
    assert parse_fault("8us link leaf1:eth1 loss 1").one_way is False


def test_for_and_flap_expand_into_a_change_and_its_undoing() -> None:
    down, up = parse_faults("8us link leaf1:eth1 down for 4us")
    assert (down.words, up.words) == (("down",), ("up",))
    assert (down.at_s, up.at_s) == (pytest.approx(8e-6), pytest.approx(12e-6))
    lossy, clean = parse_faults("1ms link leaf1:eth1 loss 0.1 one-way for 2ms")
    assert (lossy.words, clean.words, lossy.one_way, clean.one_way) == (
        ("loss", "0.1"),
        ("loss", "0"),
        True,
        True,
    )
    flaps = parse_faults("10us link spine1:eth2 flap 5us 3")
    assert [f.words[0] for f in flaps] == ["down", "up"] * 3
    assert [f.at_s * 1e6 for f in flaps] == pytest.approx([10, 15, 20, 25, 30, 35])
    with pytest.raises(FaultSpecError, match="is 2 faults"):
        parse_fault("8us link leaf1:eth1 down for 4us")
    # Expanded faults keep their time order among the others.
    faults = schedule(["12us restart spine1", "8us link leaf1:eth1 down for 6us"])
    assert [f.words[0] if f.words else f.kind for f in faults] == ["down", "restart", "up"]


def test_a_node_down_is_every_link_of_the_node_down_at_once() -> None:
    """``node NODE down [for D]``: one link fault per link of the node, all at its time, with its text, and
    their undoing D later; the lab's other faults stay as they are."""
    text = "20us node r2 down for 100us"
    ports = {"r2": ["eth1", "eth2", "eth3"], "r1": ["eth1"]}
    faults = expand_nodes(schedule([text, "30us link r1:eth1 loss 0.1"]), ports)
    assert [(round(f.at_s * 1e6), f.kind, f.target, f.words) for f in faults] == [
        (20, "link", "r2:eth1", ("down",)),
        (20, "link", "r2:eth2", ("down",)),
        (20, "link", "r2:eth3", ("down",)),
        (30, "link", "r1:eth1", ("loss", "0.1")),
        (120, "link", "r2:eth1", ("up",)),
        (120, "link", "r2:eth2", ("up",)),
        (120, "link", "r2:eth3", ("up",)),
    ]
    assert {f.text for f in faults if f.target.startswith("r2:")} == {text}
    assert [f.gives_back for f in faults if f.target == "r2:eth1"] == [False, True]
    check_targets(parse_faults("1 node leaf1 down"), ROLES, "lab")
    with pytest.raises(FaultSpecError, match="no node r9"):
        check_targets(parse_faults("1 node r9 down"), ROLES, "lab")
    with pytest.raises(FaultSpecError, match="r5 has no link to take down"):
        expand_nodes(parse_faults("1 node r5 down"), ports)


def test_schedule_is_in_time_order_keeping_the_given_order_among_equal_times() -> None:
    faults = schedule(["3 link a:eth1 up", "1 restart s1", "1 link a:eth1 down"])
    assert [f.text for f in faults] == ["1 restart s1", "1 link a:eth1 down", "3 link a:eth1 up"]


def test_targets_must_be_nodes_of_the_lab_and_restarts_forwarding_nodes() -> None:
    check_targets(schedule(["1 link h1:eth1 down", "2 restart leaf1", "3 restart sw1"]), ROLES, "lab")
    with pytest.raises(FaultSpecError, match="lab lab has no node spine9"):
        check_targets([parse_fault("1 restart spine9")], ROLES, "lab")
    with pytest.raises(FaultSpecError, match="h1 is a gpu-host"):
        check_targets([parse_fault("1 restart h1")], ROLES, "lab")
    with pytest.raises(FaultSpecError, match="frr1 is a frr"):
        check_targets([parse_fault("1 restart frr1")], ROLES, "lab")


def test_a_record_says_what_became_of_its_fault() -> None:
    done = FaultRecord(
        parse_fault("50us restart spine1"), started_s=1.002, effect_s=1.004, done_s=2.5, lines=["spine1: ok"]
    )
    failed = FaultRecord(parse_fault("2 link leaf1:eth1 down"), started_s=2.0, error="LinkSetError: no")
    never = FaultRecord(parse_fault("90 link leaf1:eth1 up"))
    assert done.problem() is None
    assert "failed: LinkSetError: no" in (failed.problem() or "")
    assert "never happened: the run ended before 90.000 s of fabric time" in (never.problem() or "")
    assert done.to_dict()["fault"] == "50us restart spine1" and done.to_dict()["done_s"] == 2.5
    assert done.to_dict()["effect_s"] == 1.004
    lines = fault_lines([done, failed, never], TimeScale(20000))
    assert lines[0] == (
        "fault restart spine1 at 50.1 µs = 1.002 s (wall), in effect 200.0 ns = 4.00 ms (wall) after its "
        "time, done after 1.498 s (wall)"
    )
    assert "failed" in lines[1] and "never happened" in lines[2]
    assert lines[2].startswith("fault link leaf1:eth1 up at 90.000 s fabric: ")
    # No fabric time without a time scale: the wall times alone, labelled.
    assert fault_lines([done], TimeScale.unshaped()) == [
        "fault restart spine1 at 1.002 s (wall), in effect 1.004 s (wall) after its time, "
        "done after 1.498 s (wall)"
    ]


def test_a_fault_that_took_effect_late_spoils_the_run_by_its_share_of_the_run() -> None:
    """A fault due at 30 µs of fabric time (0.75 s of wall at 1:25000) that a busy machine woke late: by
    more than 5% of the run, it fell on other traffic than asked for; within it, it did not; one that never
    took effect is the run's failure (problem()), not a lateness."""
    scale = TimeScale(25000)
    due = scale.wall_s(30e-6)
    fault = parse_fault("30us restart spine2")
    late = FaultRecord(fault, started_s=due + 0.48, effect_s=due + 0.486)
    on_time = FaultRecord(fault, started_s=due + 0.001, effect_s=due + 0.004)
    assert late.late_s(scale) == pytest.approx(0.486)
    (reason,) = late_faults([late, on_time, FaultRecord(fault)], run_s=1.5, time_scale=scale)
    assert reason.startswith("fault 'restart spine2' took effect 19.4 µs = 486.00 ms (wall) after its time")
    assert "more than 5% of the run (1.500 s (wall))" in reason
    # The same lateness in a run twenty times as long is within its share.
    assert late_faults([late], run_s=30.0, time_scale=scale) == []


@given(
    st.floats(1e-7, 1e-3), st.floats(0.0, 2.0), st.floats(0.1, 100.0), st.sampled_from([1000, 25000, 100000])
)
def test_lateness_is_judged_against_the_share_of_the_run_at_any_scale(at_s, late_s, run_s, n) -> None:
    assume(abs(late_s - FAULT_LATE_SHARE * run_s) > 1e-6)
    scale = TimeScale(n)
    record = FaultRecord(parse_fault(f"{at_s!r} link leaf1:eth1 down"), effect_s=scale.wall_s(at_s) + late_s)
    assert bool(late_faults([record], run_s, scale)) == (late_s > FAULT_LATE_SHARE * run_s)


@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=30),
    st.lists(st.integers(0, 30), max_size=4),
    st.integers(0, 10**6),
)
def test_counters_across_restarts_are_the_run_share_as_if_never_reset(increments, cuts, start) -> None:
    """One counter grows by ``increments``; the agent restarts after the steps in ``cuts`` (its counter
    goes back to 0). The combined snapshot minus ``before`` is the sum of all increments."""
    before = {"c": start}
    value, segments, cut_at = start, [], set(cuts)
    for i, inc in enumerate(increments):
        if i in cut_at:
            segments.append({"c": value})
            value = 0
        value += inc
    after = {"c": value}
    combined = counters_across_restarts(segments, after)
    assert combined["c"] - before["c"] == sum(increments)


def test_a_counter_born_after_the_restart_counts_from_zero() -> None:
    before = {"a": 5}
    combined = counters_across_restarts([{"a": 8}], {"a": 2, "new": 3})
    assert combined == {"a": before["a"] + 3 + 2, "new": 3}


def test_the_cli_refuses_a_wrong_fault_before_touching_any_lab(capsys) -> None:
    from orchestrator.cli import main

    code = main(["replay", "no-such-lab", "no-such.jsonl", "--mode", "unicast", "--fault", "1 reboot spine1"])
    assert code == 2
    err = capsys.readouterr()
    assert "'reboot' is not a fault" in err.err + err.out


def test_the_failure_domain_names_each_receiver_that_missed_a_message() -> None:
    from orchestrator.experiment.faults import FailureDomain
    from orchestrator.experiment.records import MessageResult

    def message(i: int, expected: list[str], delivered: list[str]) -> MessageResult:
        return MessageResult(id=i, src="h1", expected=expected, delivered=delivered, bytes=8, sent_at=0.0)

    domain = FailureDomain.of(
        [
            message(0, ["h2", "h3", "h4"], ["h2", "h4"]),
            message(1, ["h3", "h4"], []),
            message(2, ["h2"], ["h2"]),
        ]
    )
    assert (domain.receivers, dict(domain.missed)) == (3, {"h3": 2, "h4": 1})
    assert domain.describe() == "failure domain: 2 of the 3 receivers missed messages (h3 2 of 2, h4 1 of 2)"
    # no arrival times in these records: of h1's messages h3 and h4 got none after their misses
    assert domain.to_dict() == {
        "receivers": 3,
        "touched": 2,
        "missed": {"h3": 2, "h4": 1},
        "outage": {
            r: {"source": "h1", "from_s": 0.0, "back_s": None, "usual_s": None, "for_s": None}
            for r in ("h3", "h4")
        },
    }
    whole = FailureDomain.of([message(0, ["h2", "h3"], ["h3", "h2"])])
    assert whole.describe() == "failure domain: none of the 2 receivers missed a message"


def test_the_failure_domain_says_how_long_each_receiver_went_without() -> None:
    """The gap in a source's arrivals at a receiver around the messages it missed (in the source's send
    order, its ids), the longest over the receiver's sources; a source whose messages never came back is
    open; a message sent after the misses that overtook one sent before them leaves no gap."""
    from orchestrator.experiment.faults import FailureDomain, Outage
    from orchestrator.experiment.records import MessageResult

    def message(i: int, src: str, expected: list[str], arrivals: dict[str, float]) -> MessageResult:
        return MessageResult(
            id=i, src=src, expected=expected, delivered=list(arrivals), bytes=8, sent_at=0.01 * i,
            latency={r: a - 0.01 * i for r, a in arrivals.items()},
        )  # fmt: skip

    messages = [
        message(0, "h1", ["h2", "h3"], {"h2": 0.10, "h3": 0.10}),
        message(1, "h1", ["h2"], {}),
        message(2, "h1", ["h2"], {}),
        message(3, "h1", ["h2", "h3"], {"h2": 0.40, "h3": 0.30}),
        message(4, "h5", ["h2"], {"h2": 0.05}),
        message(5, "h5", ["h2"], {}),
        message(6, "h5", ["h2"], {"h2": 0.15}),  # h5's gap at h2: 0.10, shorter than h1's 0.30
        message(7, "h6", ["h3"], {"h3": 0.20}),
        message(8, "h6", ["h3"], {}),  # and nothing of h6's after it
        message(9, "h7", ["h4"], {"h4": 0.50}),
        message(10, "h7", ["h4"], {}),
        message(11, "h7", ["h4"], {"h4": 0.45}),  # overtook the one before the miss: no gap
        message(12, "h1", ["h2"], {"h2": 0.50}),  # h1's usual gap at h2, besides the outage: 0.10
    ]
    domain = FailureDomain.of(messages)
    assert dict(domain.missed) == {"h2": 3, "h3": 1, "h4": 1}
    h2, h3, h4 = (domain.outages[r] for r in ("h2", "h3", "h4"))
    assert (h2.source, h2.from_s, h2.back_s, round(h2.for_s, 6)) == ("h1", 0.10, 0.40, 0.30)
    assert round(h2.usual_s, 6) == 0.10
    assert (h3.source, h3.from_s, h3.back_s, h3.for_s) == ("h6", 0.20, None, None)
    assert (h4.source, h4.for_s) == ("h7", 0.0)
    assert domain.describe(TimeScale(20000)) == (
        "failure domain: 3 of the 3 receivers missed messages (h2 3 of 8, 15.0 µs = 300.00 ms (wall) without "
        "h1's (one every 5.0 µs otherwise), h3 1 of 4, h6's not back by the run's end, h4 1 of 3, no gap in "
        "h7's)"
    )
    assert domain.to_dict()["outage"]["h2"] == {
        "source": "h1",
        "from_s": 0.10,
        "back_s": 0.40,
        "usual_s": h2.usual_s,
        "for_s": h2.for_s,
    }
    assert (
        domain.describe()
        == "failure domain: 3 of the 3 receivers missed messages (h2 3 of 8, h3 1 of 4, h4 1 of 3)"
    )
    # missed first of all: from the run's zero
    first = FailureDomain.of([message(0, "h1", ["h2"], {}), message(1, "h1", ["h2"], {"h2": 0.2})])
    assert first.outages["h2"] == Outage("h1", 0.0, 0.2)


def test_bfd_detections_are_each_ends_first_change_after_the_fault_began() -> None:
    from orchestrator.experiment.faults import bfd_detections, detection_line

    zero = 1000.0
    cut = FaultRecord(parse_fault("5us link leaf1:eth1 loss 1 one-way"), started_s=0.10, effect_s=0.12)

    def event(interface: str, state: str, reason: str, at_s: float) -> dict:
        return {"interface": interface, "state": state, "reason": reason, "at_ns": round((zero + at_s) * 1e9),
                "late_s": 0.001}  # fmt: skip

    events = {
        "leaf1": [
            event("eth1", "down", "detection-time", 0.05),  # before the fault: another story
            event("eth2", "down", "detection-time", 0.15),  # another link of leaf1
            event("eth1", "down", "neighbor-down", 0.19),
            event("eth1", "up", "handshake", 0.40),
        ],
        "spine1": [
            event("eth1", "down", "loss-cleared", 0.11),
            event("eth1", "down", "detection-time", 0.17),
        ],
    }
    got = bfd_detections(cut, [("leaf1", "eth1"), ("spine1", "eth1")], events, zero, until_s=0.30)
    assert [(d.node, d.state, d.reason, round(d.after_s, 6)) for d in got] == [
        ("leaf1", "down", "neighbor-down", 0.09),
        ("spine1", "down", "detection-time", 0.07),
    ]
    cut.detections = got
    assert cut.to_dict()["bfd"][1] == {
        "node": "spine1", "interface": "eth1", "state": "down", "reason": "detection-time",
        "after_s": pytest.approx(0.07), "late_s": 0.001,
    }  # fmt: skip
    line = detection_line(cut, TimeScale(20000))
    assert line is not None and "down at spine1:eth1 after 3.5 µs" in line, line
    # nothing before the next fault on the link, or the run's end: nothing to say
    assert bfd_detections(cut, [("spine1", "eth1")], events, zero, until_s=0.16) == []
    assert bfd_detections(FaultRecord(cut.fault), [("spine1", "eth1")], events, zero, None) == []


def test_a_reroute_is_each_ends_first_bypass_switch_for_the_link_after_the_fault_began() -> None:
    from orchestrator.experiment.faults import fault_lines, reroutes

    zero = 1000.0

    def event(at_s: float, *on: str) -> dict:
        return {"at_ns": round((zero + at_s) * 1e9), "on": list(on)}

    cut = FaultRecord(parse_fault("5us link leaf1:eth1 down"), started_s=0.10, effect_s=0.12)
    back = FaultRecord(parse_fault("20us link leaf1:eth1 up"), started_s=0.40, effect_s=0.41)
    events = {
        "spine1": [
            event(0.05, "leaf3"),  # before the fault: another link's bypass
            event(0.1062, "leaf1", "leaf3"),  # leaf1's goes on
            event(0.30, "leaf1"),  # leaf3's goes off: not this link's
            event(0.35),  # leaf1's goes off (BGP's rows back elsewhere)
            event(0.405, "leaf1"),  # the link back: BGP's routes heard a moment before the carrier
            event(0.43),  # leaf1's goes off again: the carrier
        ],
        "leaf1": [],  # leaf1 had another next hop: no bypass, nothing switched
    }
    across = [("leaf1", "spine1"), ("spine1", "leaf1")]
    # the first copy into it: one before the switch (another cut), one for leaf3's bypass, then this one
    copies = {"spine1": [{"neighbor": n, "at_ns": round((zero + t) * 1e9)} for n, t in
                         (("leaf1", 0.02), ("leaf3", 0.107), ("leaf1", 0.108), ("leaf1", 0.2))]}  # fmt: skip
    got = reroutes(cut, across, events, zero, until_s=0.40, first_copies=copies)
    assert [
        (r.node, r.neighbor, r.state, round(r.after_s, 6), round(r.first_copy_s or 0, 6)) for r in got
    ] == [("spine1", "leaf1", "on", 0.0062, 0.008)]
    assert [(r.state, round(r.after_s, 6)) for r in reroutes(back, across, events, zero, None)] == [
        ("off", 0.03)
    ]
    # the next fault on the link came first: nothing to say about this one
    assert reroutes(cut, across, events, zero, until_s=0.105) == []
    cut.reroutes = got
    assert cut.to_dict()["fast_reroute"] == [
        {
            "node": "spine1",
            "neighbor": "leaf1",
            "state": "on",
            "after_s": pytest.approx(0.0062),
            "first_copy_s": pytest.approx(0.008),
        }
    ]
    lines = fault_lines([cut], TimeScale(20000))
    assert any(
        "fast reroute: spine1's bypass to leaf1 on after 310.0 ns = 6.20 ms (wall), "
        "its first copy after 400.0 ns" in ln
        for ln in lines
    ), lines


def test_bfd_downs_on_links_no_fault_touched_are_named() -> None:
    from orchestrator.experiment.faults import unexplained_downs, unexplained_line

    zero = 50.0

    def event(interface: str, state: str, reason: str, at_s: float) -> dict:
        return {"interface": interface, "state": state, "reason": reason, "at_ns": round((zero + at_s) * 1e9),
                "late_s": 0.0}  # fmt: skip

    events = {
        "leaf1": [
            event("eth1", "down", "neighbor-down", 0.3),  # the faulted link: explained
            event("eth2", "down", "loss", 0.4),
            event("eth2", "down", "loss-cleared", 0.9),
            event("eth2", "up", "handshake", 1.0),
        ],
        "spine2": [
            event("eth1", "down", "detection-time", -0.5),
            event("eth1", "down", "detection-time", 9.0),
        ],
    }
    downs = unexplained_downs(events, {("leaf1", "eth1"), ("spine1", "eth1")}, zero, end_s=2.0)
    assert [(d.node, d.interface, d.reason) for d in downs] == [("leaf1", "eth2", "loss")]
    line = unexplained_line(downs, TimeScale(10000))
    assert line.startswith("BFD took down links no fault touched: leaf1:eth2 at 40.0 µs"), line


def test_an_end_without_a_bypass_says_whether_a_way_round_only_passes_hosts() -> None:
    """Two planes of two GPUs (the superpod's shape): L1's way round its cut link to G2 passes G1, a host,
    so the plan has no bypass and the record says why; an end with a bypass, a neighbour that is not a
    BFR-NBR, and a fault that does not take the link away are not listed."""
    from orchestrator.experiment.faults import FaultRecord, Unprotected, unprotected
    from orchestrator.lab.fault_spec import parse_fault

    adjacency = {"L1": ["G1", "G2"], "L2": ["G1", "G2"], "G1": ["L1", "L2"], "G2": ["L1", "L2"]}
    cut = FaultRecord(parse_fault("1us link L1:eth2 down"))
    assert unprotected(cut, [("L1", "G2"), ("G2", "L1")], adjacency, {"G2": {"L1"}}) == [
        Unprotected("L1", "G2", through_hosts=True)
    ]
    lossy = FaultRecord(parse_fault("1us link L1:eth2 loss 5"))
    assert unprotected(lossy, [("L1", "h9")], adjacency, {}) == []  # h9: no BFR-NBR of L1
    for words in ("up", "bandwidth 400G", "loss 0"):
        assert (
            unprotected(FaultRecord(parse_fault(f"1us link L1:eth2 {words}")), [("L1", "G2")], adjacency, {})
            == []
        )
    alone = {"L1": ["G1"], "G1": ["L1"]}
    assert unprotected(cut, [("L1", "G1")], alone, {}) == [Unprotected("L1", "G1", through_hosts=False)]


def test_the_superpod_plan_has_no_bypass_for_a_gpu_port() -> None:
    """Every way round a superpod link passes a GPU host: the plan gives no BFR a bypass, and a cut port is
    reported as such."""
    from orchestrator.configure.plan import build_plan
    from orchestrator.configure.plan.bier import bier_adjacency
    from orchestrator.configure.plan.schema import LabVars
    from orchestrator.experiment.faults import FaultRecord, Unprotected, unprotected
    from orchestrator.lab.fault_spec import parse_fault
    from orchestrator.lab.topology import load_topology
    from orchestrator.paths import LABS

    plan = build_plan(load_topology(LABS / "superpod.clab.yml"), LabVars.model_validate({}))
    assert plan.bier.fast_reroute and not any(n.bier_bypass for n in plan.nodes.values())
    record = FaultRecord(parse_fault("1us link L1:eth5 down"))
    assert unprotected(record, [("L1", "G5")], bier_adjacency(plan), {}) == [
        Unprotected("L1", "G5", through_hosts=True)
    ]
