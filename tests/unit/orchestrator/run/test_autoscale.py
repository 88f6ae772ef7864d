"""The automatic time scale: the smallest nice scale that keeps every node and the machine within their
CPU headroom and the run long enough to judge (pure)."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.run.autoscale import (
    AGENT_HEADROOM,
    HEADROOM,
    MIN_WALL_S,
    NICE,
    Calibration,
    Demand,
    choose_scale,
    demand_of,
    feedback_datagrams,
    igmp_scales,
    nice_ceiling,
)

CAL = Calibration(
    lab="leaf-spine",
    measured="2026-12-02T01:00:00",
    dataplane="ebpf",
    cores=2,
    host_cpu_per_packet_s=50e-6,
    bfr_cpu_per_packet_s=0.0,
    machine_cpu_per_hop_s=20e-6,
)


def test_nice_numbers() -> None:
    assert [nice_ceiling(x) for x in (0.3, 1, 1.1, 19999, 20000, 20001, 23817, 79000, 81000)] == [
        1, 1, 2, 20000, 20000, 25000, 25000, 80000, 100000,
    ]  # fmt: skip


@given(st.floats(1, 1e9))
def test_a_nice_ceiling_is_at_or_just_above(x: float) -> None:
    n = nice_ceiling(x)
    # The widest step between nice numbers is 1.5 -> 2 (and 3 -> 4, 6 -> 8): a third.
    assert x - 1e-6 <= n <= 4 / 3 * x + 1
    mantissa = n / 10 ** (len(str(n)) - 1)
    assert any(abs(mantissa - step) < 1e-9 for step in (*NICE, 10.0)) or n < 10


def test_the_busiest_host_decides_when_it_needs_most() -> None:
    # h1 sends 3,700 datagrams in 590 µs of fabric time: 0.185 s of CPU at 50 µs each, within a quarter
    # of a core: 0.185 / (0.25 x 590e-6) = 1254 -> the run-length bound (1 s / 590 µs = 1695) decides.
    d = Demand(590e-6, host_packets={"h1": 3700, "h2": 530}, link_packets=3700 * 4)
    c = choose_scale(d, CAL)
    assert c.time_scale.factor == 2000
    assert "lasts at least 1 s" in c.why[0]
    # A host 100 times busier: its CPU decides.
    c = choose_scale(Demand(590e-6, host_packets={"h1": 370_000}), CAL)
    assert c.time_scale.factor == nice_ceiling(370_000 * 50e-6 / (AGENT_HEADROOM * 590e-6))
    assert c.why[0].startswith("host h1 handles 370000 packets")


def test_the_machine_decides_for_a_big_lab() -> None:
    hosts = {f"h{i}": 100 for i in range(256)}
    d = Demand(144e-6, host_packets=hosts, link_packets=8163 * 40 * 4)
    c = choose_scale(d, CAL)
    need = 8163 * 40 * 4 * 20e-6 / (HEADROOM * 2 * 144e-6)
    assert c.time_scale.factor == nice_ceiling(need) and "2 cores" in c.why[0]
    assert "1:" in c.describe() and c.describe().startswith(f"time scale auto: {c.time_scale.label}")


def test_the_tbf_floor_holds() -> None:
    d = Demand(1.0, host_packets={"h1": 1})
    # 24 is the floor; the nice number at or above it is 25.
    assert choose_scale(d, CAL, floor=24).time_scale.factor == 25
    assert choose_scale(d, CAL, floor=40).time_scale.factor == 40


def test_a_lab_floor_holds_and_says_why() -> None:
    # A short trace wants 1:20000 (1 s of wall time); an IGMP floor of 1:25000 wins and is named first.
    d = Demand(50e-6)
    assert choose_scale(d, CAL).time_scale.factor == 20000
    c = choose_scale(d, CAL, floor=24, floors=[(25000, "the IGMP timers must fit")])
    assert c.time_scale.factor == 25000 and c.why[0].startswith("the IGMP timers must fit (from 1:25000)")


def test_igmp_scales_from_the_plan_timers() -> None:
    # The lab's default wall timers at 1:20000 (igmp.yml): 20 s, 2 s and 0.2 s of wall time. Below
    # 1:10000 the last member query interval is under 0.1 s, the shortest Max Resp Code.
    timers = {"query_interval": 20 / 20000, "query_response_interval": 2 / 20000,
              "last_member_query_interval": 0.2 / 20000}  # fmt: skip
    low, high, why = igmp_scales(timers)
    assert low == 10000
    # The query interval reaches QQIC's 31744 s first: 1e-3 s of fabric time at 1:31,744,000.
    assert high == 31_744_000
    assert why.startswith("the IGMP timers (query_response_interval 100 µs, last_member_query_interval 10 µs")


@given(
    st.floats(1e-7, 1e-2),
    st.dictionaries(st.sampled_from(["h1", "h2", "h3"]), st.integers(0, 10**6)),
    st.integers(0, 10**7),
)
def test_at_the_chosen_scale_every_bound_holds(fabric_s: float, hosts: dict, links: int) -> None:
    c = choose_scale(Demand(fabric_s, host_packets=hosts, link_packets=links), CAL)
    wall = c.time_scale.wall_s(fabric_s)
    assert wall >= MIN_WALL_S * (1 - 1e-9)
    for n in hosts.values():
        assert n * CAL.host_cpu_per_packet_s / wall <= AGENT_HEADROOM * (1 + 1e-9)
    assert links * CAL.machine_cpu_per_hop_s / wall <= HEADROOM * CAL.cores * (1 + 1e-9)


def test_no_fabric_time_is_refused() -> None:
    with pytest.raises(ValueError, match="no fabric time"):
        choose_scale(Demand(0.0), CAL)


# Model distribution on leaf-spine as CI measured it (2026-12-03): h1 sends 264 DATA to h2..h8 in 43.1 µs
# of fabric time; leaf1 sends each on to h2 and a spine, the spine to three leaves, each leaf to its two
# hosts: 3168 packets on the links. The calibration: 216 µs of CPU per host datagram, 122 µs per hop.
RECEIVERS = [f"h{i}" for i in range(2, 9)]
SENT = {"h1": 264}
RECEIVED = dict.fromkeys(RECEIVERS, 264)
COPIES = {"leaf1": 528, "spine1": 792, "leaf2": 528, "leaf3": 528, "leaf4": 528}
MEASURED = Calibration(
    lab="leaf-spine", measured="2026-12-03T09:48:00", dataplane="ebpf", cores=2,
    host_cpu_per_packet_s=216e-6, bfr_cpu_per_packet_s=2e-6, machine_cpu_per_hop_s=122e-6,
)  # fmt: skip


def test_end_to_end_the_source_takes_every_receivers_ack_and_the_bfrs_none() -> None:
    got = feedback_datagrams(SENT, RECEIVED, COPIES, "e2e")
    assert got == {"h1": 7 * 264, **dict.fromkeys(RECEIVERS, 264)}


def test_aggregated_the_source_takes_one_per_packet_and_each_bfr_two_per_copy() -> None:
    got = feedback_datagrams(SENT, RECEIVED, COPIES, "hop")
    assert got == {"h1": 264, **dict.fromkeys(RECEIVERS, 264), **{b: 2 * n for b, n in COPIES.items()}}
    assert feedback_datagrams(SENT, RECEIVED, COPIES, "net") == got


@given(
    st.dictionaries(st.sampled_from(["h1", "h2", "h3"]), st.integers(0, 10**5), min_size=1),
    st.dictionaries(st.sampled_from(["h1", "h2", "h3", "h4"]), st.integers(0, 10**5)),
)
def test_end_to_end_the_sources_take_as_many_acks_as_the_receivers_send(sent: dict, received: dict) -> None:
    got = feedback_datagrams(sent, received, {}, "e2e")
    taken = sum(got.get(h, 0) for h in sent) - sum(received.get(h, 0) for h in sent)
    if sum(sent.values()):
        assert abs(taken - sum(received.values())) <= len(sent)  # each share rounded
    else:
        assert taken == 0


class _Load:
    def __init__(self, packets: float, received: float, completion_s: float) -> None:
        self.packets, self.received_mean_pps = packets, received / completion_s


class _Prediction:
    completion_s = 43.1e-6
    aggregated: ClassVar[dict[str, int]] = {}
    issued_at_once: ClassVar[dict[str, int]] = {"h1": 264}

    def nodes(self) -> dict[str, _Load]:
        loads = {h: _Load(n, 0, self.completion_s) for h, n in SENT.items()}
        loads |= {h: _Load(0, n, self.completion_s) for h, n in RECEIVED.items()}
        return loads | {b: _Load(n, 0, self.completion_s) for b, n in COPIES.items()}


ROLES = {**dict.fromkeys(["h1", *RECEIVERS], "gpu-host"), **dict.fromkeys(COPIES, "bfr")}


def test_a_reliable_modes_feedback_raises_the_scale_to_where_ci_found_its_runs_faithful() -> None:
    # The data alone: 1:25000 (the run-length bound). There CI's aggregated runs kept the machine busy
    # 1.84-1.97 of 2 cores and the end-to-end source woke late; at 1:50000 both were judged faithful.
    plain = choose_scale(demand_of(_Prediction(), ROLES), MEASURED)
    assert plain.time_scale.factor == 25000 and "lasts at least 1 s" in plain.why[0]
    # Aggregated: 7920 datagrams of feedback in the agents (the BFRs' reports and ACKs): the machine.
    hop = choose_scale(demand_of(_Prediction(), ROLES, "hop"), MEASURED)
    assert hop.time_scale.factor == 50000
    assert hop.why[0].startswith("the lab moves 3168 packets over its links and its agents 7920 datagrams")
    # End to end: the source takes 1848 ACKs for its 264 DATA: its own core.
    e2e = choose_scale(demand_of(_Prediction(), ROLES, "e2e"), MEASURED)
    assert e2e.time_scale.factor == 50000
    assert e2e.why[0].startswith("host h1 handles 264 packets and 1848 datagrams of feedback")


@given(
    st.floats(1e-7, 1e-2),
    st.dictionaries(st.sampled_from(["h1", "h2", "leaf1", "spine1"]), st.integers(0, 10**6)),
)
def test_at_the_chosen_scale_every_agent_keeps_up_with_its_feedback_too(fabric_s: float, extra: dict) -> None:
    hosts = {"h1": 1000, "h2": 1000}
    bfrs = {"leaf1": 2000, "spine1": 2000}
    demand = Demand(fabric_s, hosts, bfrs, 4000, extra)
    wall = choose_scale(demand, MEASURED).time_scale.wall_s(fabric_s)
    for node in (*hosts, *bfrs):
        cost = MEASURED.host_cpu_per_packet_s if node in hosts else MEASURED.bfr_cpu_per_packet_s
        cpu = {**hosts, **bfrs}[node] * cost + extra.get(node, 0) * MEASURED.host_cpu_per_packet_s
        assert cpu / wall <= AGENT_HEADROOM * (1 + 1e-9)
    machine = 4000 * MEASURED.machine_cpu_per_hop_s + sum(extra.values()) * MEASURED.host_cpu_per_packet_s
    assert machine / wall <= HEADROOM * MEASURED.cores * (1 + 1e-9)


# -------------------------------------------------------------------------------------- the delay relay

RELAYED = MEASURED.model_copy(update={"relay_cpu_per_packet_s": 100e-6})


class _DelayedPrediction(_Prediction):
    # What each link end sent: h1's uplink and leaf1's port toward spine1 carry a delay, the rest not.
    link_packets: ClassVar[dict[str, float]] = {"h1:eth1": 264.0, "leaf1:eth3": 500.0, "leaf2:eth1": 900.0}


def test_the_relay_holds_what_the_delayed_ends_send() -> None:
    delays = {"h1:eth1": 1e-6, "leaf1:eth3": 2e-3, "leaf2:eth1": 0.0, "h2:eth1": 1e-6}
    assert demand_of(_DelayedPrediction(), ROLES, None, delays).relay_packets == 764
    assert demand_of(_DelayedPrediction(), ROLES, None, dict.fromkeys(delays, 0.0)).relay_packets == 0
    assert demand_of(_Prediction(), ROLES).relay_packets == 0  # no delays: the prediction is not asked


def test_the_relay_is_one_process_and_keeps_to_a_share_of_its_core() -> None:
    # 764 packets at 100 µs: 76.4 ms of the relay's CPU in 43.1 µs of fabric time, at most 25% of a core:
    # 1:7090 and up; here the run-length bound (1:25000) still decides. Ten times the packets: the relay.
    few = choose_scale(Demand(43.1e-6, relay_packets=764), RELAYED)
    assert few.time_scale.factor == 25000 and any(w.startswith("the delay relay holds 764") for w in few.why)
    many = choose_scale(Demand(43.1e-6, relay_packets=7640), RELAYED)
    assert many.why[0].startswith("the delay relay holds 7640 packets") and many.time_scale.factor == 80000
    # A calibration without the relay's cost (a lab without delay) adds no bound.
    assert not any("relay" in w for w in choose_scale(Demand(43.1e-6, relay_packets=7640), MEASURED).why)


@given(st.floats(1e-7, 1e-2), st.integers(0, 10**6), st.floats(0, 1e-3))
def test_at_the_chosen_scale_the_relay_keeps_up(fabric_s: float, held: int, cost: float) -> None:
    calibration = MEASURED.model_copy(update={"relay_cpu_per_packet_s": cost})
    wall = choose_scale(Demand(fabric_s, relay_packets=held), calibration).time_scale.wall_s(fabric_s)
    assert held * cost / wall <= AGENT_HEADROOM * (1 + 1e-9)


def test_a_calibration_from_before_the_relay_reads_as_having_no_relay_cost() -> None:
    old = MEASURED.model_dump(mode="json")
    del old["relay_cpu_per_packet_s"]
    assert Calibration.model_validate(old).relay_cpu_per_packet_s is None
    assert "relay" not in MEASURED.describe() and "the delay relay 100.0 µs per packet" in RELAYED.describe()


class _AllReduce(_Prediction):
    # INA on leaf-spine: each leaf's agent takes its hosts' chunks and sends their partials on, spine1
    # takes the partials and sends each result by BIER; the eBPF dataplane forwards everything else.
    aggregated: ClassVar[dict[str, int]] = {"leaf1": 3960, "leaf2": 3960, "spine1": 6600, "h1": 7}


def test_an_ina_switch_aggregates_in_python_whatever_its_dataplane() -> None:
    ina = demand_of(_AllReduce(), ROLES)
    assert ina.aggregated_packets == {"leaf1": 3960, "leaf2": 3960, "spine1": 6600}  # a host's are its own
    choice = choose_scale(ina, MEASURED)
    # spine1: 792 copies at 2 µs and 6600 datagrams at 216 µs = 1.427 s in 43.1 µs -> 1:132458 of its core,
    # above the machine's (3168 hops at 122 µs, 14520 datagrams at 216 µs: 3.523 s over a core, 1:81744);
    # the data alone needed 1:25000.
    assert choice.time_scale.factor == 150000
    assert choice.why[0].startswith("BFR spine1 handles 792 packets and aggregates 6600 INA datagrams")
    assert choice.why[1].startswith(
        "the lab moves 3168 packets over its links and its agents 14520 datagrams of feedback and aggregation"
    )


def test_a_big_labs_senders_all_at_once_need_room_for_the_last_of_them() -> None:
    # bsl256's 1,024-expert MoE step in unicast, 2026-12-05: 8151 datagrams at t=0 from 256 hosts, a
    # host agent 195 µs of CPU each: 0.795 s of 2 cores before the last sender has a core. Run at
    # 1:500000 (the machine's bound), hosts left their links idle with data due for up to 1.52 s of
    # 9.98 s; the verdict allows 5% of the run, so the run must last 15.9 s: 1:2000000 for 9.7 µs.
    calibration = MEASURED.model_copy(update={"host_cpu_per_packet_s": 195e-6})
    demand = Demand(9.7e-6, {"h1": 82}, {}, 31644, issued_at_once=8151)
    choice = choose_scale(demand, calibration)
    assert choice.time_scale.factor == 2_000_000
    assert choice.why[0].startswith(
        "the hosts issue 8151 copies at one moment besides the busiest one's, 0.795 s of 2 cores here"
    )
    # One source alone (model distribution) keeps its own link busy from its first datagram: nothing asked.
    assert not any(
        "at one moment" in why for why in choose_scale(demand_of(_Prediction(), ROLES), MEASURED).why
    )
