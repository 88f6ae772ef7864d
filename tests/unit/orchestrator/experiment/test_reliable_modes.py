"""The reliable modes' orchestrator side: registered, ids for every host, what a run's lines say."""

from __future__ import annotations

import pytest

from aidcnet.ebpf.link_fault import FaultStats
from aidcnet.modes import RELIABLE, Mode
from orchestrator.experiment.modes import mode_class, registered
from orchestrator.experiment.modes.reliable import (
    ISN,
    ReliableMode,
    feedback_lines,
    inflight_bytes,
    link_feedback,
    link_lines,
    refuse_without_aggregation,
    reliable_timers,
    run_number,
    source_totals,
)
from orchestrator.experiment.session import ExperimentError, HostInfo


def test_every_reliable_mode_is_registered_with_its_feedback() -> None:
    for mode, feedback in RELIABLE.items():
        cls = mode_class(mode)
        assert issubclass(cls, ReliableMode) and cls.feedback == feedback
        assert not cls.is_baseline()
    order = list(registered())
    assert (
        order.index(Mode.NET_BIER) < order.index(Mode.RELIABLE_UNICAST) < order.index(Mode.RELIABLE_HOST_BIER)
    )


def test_ids_are_bfr_ids_when_all_have_one_else_numbered_by_name() -> None:
    mode = mode_class(Mode.RELIABLE_UNICAST)()
    assert isinstance(mode, ReliableMode)
    with_ids = {"h2": HostInfo("h2", "10.0.0.2", 7), "h1": HostInfo("h1", "10.0.0.1", 3)}
    assert mode._number(with_ids) == {"h2": 7, "h1": 3}
    mixed = {"h2": HostInfo("h2", "10.0.0.2", 7), "h1": HostInfo("h1", "10.0.0.1", None)}
    assert mode._number(mixed) == {"h1": 1, "h2": 2}
    mode.check_hosts(mixed)  # unicast needs no BFR-ids
    mode.ids = mode._number(mixed)
    mode.run_number = 9
    mode.inflight = {"h1": None, "h2": 250_000}
    load = mode.host_load(None, "h2", [])  # type: ignore[arg-type]
    assert load.mode == Mode.RELIABLE_UNICAST and load.reliable is not None
    assert load.reliable["self_id"] == 2 and load.reliable["isn"] == ISN
    assert load.reliable["run"] == 9 and load.reliable["inflight_bytes"] == 250_000


def test_run_numbers_of_runs_a_second_apart_differ() -> None:
    """A message run starts a second after its load, so consecutive runs' numbers are never equal; the
    number fits the Flow ID's top 8 bits."""
    start = 1_795_000_000.25
    numbers = [run_number(start + k * 1.0) for k in range(256)]
    assert len(set(numbers)) == 256 and all(0 <= n <= 255 for n in numbers)
    assert run_number(start + 0.7) == run_number(start)  # within one second: one number


def test_host_bier_modes_need_bfr_ids() -> None:
    for mode in (Mode.RELIABLE_HOST_BIER, Mode.RELIABLE_HOST_BIER_E2E):
        with pytest.raises(ExperimentError, match=r"needs BFR-ids.*h1"):
            mode_class(mode)().check_hosts({"h1": HostInfo("h1", "10.0.0.1", None)})  # type: ignore[attr-defined]


def test_feedback_lines_count_per_first_sent_packet() -> None:
    total = source_totals(
        {
            "h1": {
                "reliable": {"sender.sent": 100, "source.rx.agg-ack.packets": 90, "source.rx.nack.packets": 4}
            },
            "h2": {"reliable": {"sender.sent": 100, "source.rx.agg-ack-partial.packets": 10}},
            "h3": {},
        }
    )
    assert total == {
        "sender.sent": 200,
        "source.rx.agg-ack.packets": 90,
        "source.rx.nack.packets": 4,
        "source.rx.agg-ack-partial.packets": 10,
    }
    first, second = feedback_lines(
        {**total, "sender.retransmitted-bytes": 5000, "sender.retransmitted": 5, "sender.timeouts": 2}
    )
    assert "ACKs at the sources 0.500 per packet" in first and "NACKs 4" in first
    assert "retransmitted 5 packets (2 on a timer, the others asked for" in second
    assert "/ 5000 payload bytes" in second
    assert "n/a" in feedback_lines({})[0]


def _stats(**counts: int) -> FaultStats:
    return FaultStats(**counts)


def test_link_feedback_is_the_run_share_per_end_and_leaves_out_quiet_ends() -> None:
    before = {
        "h1:eth1": _stats(ack_packets=5, feedback_bytes=400, passed_packets=50),
        "leaf1:eth1": _stats(lost_good_packets=2, lost_good_bytes=2000),
        "spine1:eth1": _stats(passed_packets=9),
    }
    after = {
        "h1:eth1": _stats(ack_packets=8, agg_ack_packets=2, feedback_bytes=700, passed_packets=90),
        "leaf1:eth1": _stats(
            lost_good_packets=3, lost_good_bytes=2900, lost_bad_packets=1, lost_bad_bytes=100
        ),
        "spine1:eth1": _stats(passed_packets=19),  # data only: not feedback, nothing lost
        "leaf2:eth1": _stats(nack_packets=1, feedback_bytes=90),  # absent before (attached since): from 0
    }
    links = link_feedback(before, after)
    quiet = {"ack": 0, "nack": 0, "agg-ack": 0, "feedback_bytes": 0, "lost_packets": 0, "lost_bytes": 0}
    assert links == {
        "h1:eth1": {**quiet, "ack": 3, "agg-ack": 2, "feedback_bytes": 300},
        "leaf1:eth1": {**quiet, "lost_packets": 2, "lost_bytes": 1000},
        "leaf2:eth1": {**quiet, "nack": 1, "feedback_bytes": 90},
    }
    feedback, dropped = link_lines(links, retransmitted_bytes=1500)
    assert "feedback on the links 6 packets (ack 3, nack 1, agg-ack 2), 390 B over 2 link ends" in feedback
    assert "most at h1:eth1: 5 packets" in feedback
    assert "dropped 2 packets / 1000 B; retransmitted payload bytes per dropped byte 1.50x" in dropped


def test_link_lines_without_feedback_or_drops_say_so() -> None:
    (only,) = link_lines({}, retransmitted_bytes=0)
    assert "dropped 0 packets / 0 B" in only and "n/a (nothing dropped)" in only


def test_the_send_budget_is_the_same_fabric_time_of_the_hosts_slowest_link_at_every_scale() -> None:
    """0.1 s of the veth at the tuned 1:20000 (5 µs of the fabric's 400G): the same bytes at 1:40000, so a run
    at twice the scale (replay --confirm) queues the same fabric time behind the source's link."""
    from orchestrator.configure.plan import LabVars, build_plan
    from orchestrator.lab.topology import load_topology
    from orchestrator.paths import LABS

    topo = load_topology(LABS / "leaf-spine.clab.yml")

    def plan(scale: object):
        return build_plan(topo, LabVars.model_validate({"time": {"scale": scale}}).with_source("x.vars.yml"))

    # 400G / 20000 = 20 Mbit/s: 2.5 MB/s, 0.1 s of it; 400G for 5 µs
    assert inflight_bytes(plan(20000), "h1") == 250_000 == inflight_bytes(plan(40000), "h1")
    assert inflight_bytes(plan(2_000_000), "h1") == 250_000
    assert inflight_bytes(plan("off"), "h1") is None
    # Over a 4 ms round trip (the interdc lab's DCI) the budget also covers 400G for 4 ms: 200 MB more.
    assert inflight_bytes(plan(20000), "h1", 0.004) == 250_000 + 200_000_000


def test_the_timers_are_fabric_time_on_a_shaped_lab_and_wall_time_unshaped() -> None:
    from aidcnet.timescale import TimeScale

    tuned, twice, unshaped = (
        reliable_timers(s) for s in (TimeScale(20000), TimeScale(40000), TimeScale.unshaped())
    )
    assert tuned == twice, "a second run at twice the scale runs the same fabric timers"
    assert tuned.initial_rto == pytest.approx(1.0 / 20000) and tuned.fail_after == pytest.approx(30.0 / 20000)
    assert unshaped.initial_rto == 1.0 and unshaped.min_rto == 0.25  # the agents run on the wall clock
    mode = mode_class(Mode.RELIABLE_HOST_BIER)()
    assert isinstance(mode, ReliableMode)
    mode.times = tuned
    mode.ids, mode.run_number, mode.inflight = {"h1": 1}, 3, {"h1": None}
    mode.hosts = {}
    load = mode.host_load(None, "h1", [])  # type: ignore[arg-type]
    assert load.reliable is not None
    fields = load.reliable
    assert (
        fields["initial_rto"] == tuned.initial_rto and fields["nack_max_interval"] == tuned.nack_max_interval
    )


def test_a_hop_by_hop_mode_refuses_bfrs_that_cannot_see_the_data() -> None:
    ok = {"forward": "ebpf", "impose": None, "why": None}
    said = {"h1": None, "leaf1": ok, "spine1": ok}
    refuse_without_aggregation("reliable-host-bier", "hop", said, ["h1"])  # hosts need not aggregate
    refuse_without_aggregation("reliable-host-bier-e2e", "e2e", {"leaf1": None}, [])  # nothing to see
    blind = {"forward": None, "impose": None, "why": "eBPF reports not started: rebuild the images"}
    with pytest.raises(ExperimentError, match=r"spine1 \(eBPF reports not started"):
        refuse_without_aggregation("reliable-host-bier", "hop", {**said, "spine1": blind}, ["h1"])
    with pytest.raises(ExperimentError, match=r"leaf1 \(its agent does not say"):
        refuse_without_aggregation("reliable-host-bier", "hop", {"leaf1": None}, [])
    no_impose = {"forward": "ebpf", "impose": None, "why": None, "impose_why": "no ring buffer"}
    refuse_without_aggregation("reliable-host-bier", "hop", {"leaf1": no_impose}, [])
    with pytest.raises(ExperimentError, match=r"leaf1 \(no ring buffer"):
        refuse_without_aggregation("reliable-net-bier", "net", {"leaf1": no_impose}, [])
