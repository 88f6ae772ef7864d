"""The time model (orchestrator/model/timing.py) on cases worked out by hand, in fabric seconds at the plan's
400G (50 GB/s), and properties that any flow-level prediction must keep.

Store and forward: a message crossing h hops of equal rate C takes bytes / C on its bottleneck plus one
packet's serialisation on each of the other h - 1 hops."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aidcnet.ina.header import DType, InaHeader, Op
from aidcnet.ina.worker import DEFAULT_CHUNK_ELEMENTS, ack_for
from aidcnet.modes import Mode
from orchestrator.configure.plan import build_plan
from orchestrator.lab.topology import load_topology, resolve_lab
from orchestrator.model.exact import ModelError, PlanModel, ecmp_member
from orchestrator.model.timing import HashDraw, LinkConditions, TimeModel
from orchestrator.model.wire import (
    bier_frame_overhead,
    replay_bier_frame_overhead,
    replay_frame_overhead,
    udp_frame_overhead,
)
from orchestrator.workloads.trace import TraceOp, TraceReader

C = 400e9 / 8  # bytes per fabric second of a 400G link
UDP = replay_frame_overhead()  # 54: Ethernet, IPv4, UDP and the RoCEv2 BTH
BIER = replay_bier_frame_overhead(256)  # 126
# The collectives' datagrams carry their own header, no BTH (docs/ina-header.md).
UDP0 = udp_frame_overhead()  # 42
BIER0 = bier_frame_overhead(256)  # 114
HOSTS = [f"h{i}" for i in range(1, 9)]


@cache
def leaf_spine() -> PlanModel:
    return PlanModel(build_plan(load_topology(resolve_lab("leaf-spine"))))


def timer(conditions: LinkConditions | None = None) -> TimeModel:
    return TimeModel(leaf_spine(), conditions)


def lab(name: str, nodes: dict[str, str], links: list[tuple[str, str]], ina: list | None = None) -> PlanModel:
    where = Path(tempfile.mkdtemp(prefix=f"timing-{name}-"))
    doc = {
        "name": name,
        "topology": {
            "defaults": {"kind": "linux"},
            "nodes": {n: {"image": f"aidclab/{image}:latest"} for n, image in nodes.items()},
            "links": [{"endpoints": [a, b]} for a, b in links],
        },
    }
    (where / f"{name}.clab.yml").write_text(yaml.safe_dump(doc))
    (where / f"{name}.vars.yml").write_text(yaml.safe_dump({"ina": {"jobs": ina}} if ina else {}))
    return PlanModel(build_plan(load_topology(where / f"{name}.clab.yml")))


def op(i: int, src: str, dst: list[str], size: int, t: float = 0.0) -> TraceOp:
    return TraceOp(t=t, op="unicast" if len(dst) == 1 else "multicast", src=src, dst=dst, bytes=size, id=i)


# -------------------------------------------------------------------------------------------- by hand


def test_one_flow_over_one_link_takes_its_bytes_over_the_bandwidth() -> None:
    pair = TimeModel(lab("pair", {"h1": "gpu-host", "h2": "gpu-host"}, [("h1:eth1", "h2:eth1")]))
    p = pair.predict([op(0, "h1", ["h2"], 20000)], Mode.UNICAST)
    # 20,000 bytes in three fragments of 6,667, 6,667 and 6,666, each in its 54 header bytes.
    assert p.completion_s == pytest.approx((20000 + 3 * UDP) / C, rel=1e-9)
    assert p.pace == "h1:eth1"
    assert p.link_packets == {"h1:eth1": pytest.approx(3)}


def test_every_link_end_counts_the_packets_it_sends() -> None:
    # h1 -> leaf1 -> h2, in three fragments: three packets on each of the path's two ends.
    p = timer().predict([op(0, "h1", ["h2"], 20000)], Mode.UNICAST)
    assert p.link_packets == {"h1:eth1": pytest.approx(3), "leaf1:eth4": pytest.approx(3)}


def test_two_hops_add_one_packet_on_the_second() -> None:
    p = timer().predict([op(0, "h1", ["h2"], 8000)], Mode.UNICAST)  # h1 -> leaf1 -> h2
    assert p.completion_s == pytest.approx(2 * (8000 + UDP) / C, rel=1e-9)


def test_two_flows_sharing_a_link_get_half_each() -> None:
    # h3 and h4 (leaf2) both send to h2 (leaf1): four hops each, and they share leaf1 -> h2.
    p = timer().predict([op(0, "h3", ["h2"], 8000), op(1, "h4", ["h2"], 8000)], Mode.UNICAST)
    frame = 8000 + UDP
    assert p.ops[0].finish == p.ops[1].finish == pytest.approx((2 * frame + 3 * frame) / C, rel=1e-9)
    # Full for as long: leaf1 -> h2, and the spine's port to leaf1 when the hash put both on one spine.
    assert p.pace in ("leaf1:eth4", "spine1:eth1", "spine2:eth1")


def test_a_flow_bottlenecked_elsewhere_leaves_its_share_to_the_other() -> None:
    # h1's own link runs at 100G: h1 -> h2 gets 100G, so h3 -> h2 gets the other 300G of leaf1 -> h2, and
    # with three times the bytes both end together.
    slow = timer(LinkConditions({"h1:eth1": 100_000_000_000}))
    frame = 8000 + UDP
    p = slow.predict([op(0, "h1", ["h2"], 8000), op(1, "h3", ["h2"], 24000)], Mode.UNICAST)
    both = frame / (C / 4)
    assert p.ops[0].finish == pytest.approx(both + frame / C, rel=1e-9)  # then leaf1 -> h2 at 400G
    assert p.ops[1].finish == pytest.approx(both + 3 * frame / C, rel=1e-9)  # three more hops at 400G


def test_a_multicast_tree_goes_at_the_pace_of_its_slowest_branch() -> None:
    slow = timer(LinkConditions({"leaf2:eth3": 100_000_000_000}))  # h3's link
    frame = 8000 + BIER
    p = slow.predict([op(0, "h1", ["h2", "h3"], 8000)], Mode.HOST_BIER)
    # One copy per tree edge at one rate: 100G. The last packet then crosses h1 -> leaf1 -> spine -> leaf2
    # at 400G before its 100G hop.
    assert p.completion_s == pytest.approx(frame / (C / 4) + 3 * frame / C, rel=1e-9)
    assert p.pace == "leaf2:eth3"


def test_model_distribution_unicast_is_bound_by_the_source_uplink_at_seven_times_the_bytes() -> None:
    size = 1 << 20
    one = [op(0, "h1", HOSTS[1:], size)]
    frags = -(-size // 8000)
    unicast = timer().predict(one, Mode.UNICAST)
    bier = timer().predict(one, Mode.HOST_BIER)
    copy, tree = size + frags * UDP, size + frags * BIER
    # Seven copies share h1's uplink and end together; the last packets then cross three more hops.
    assert unicast.completion_s == pytest.approx((7 * copy + 3 * copy / frags) / C, rel=1e-9)
    assert unicast.pace == "h1:eth1"
    assert bier.completion_s == pytest.approx((tree + 3 * tree / frags) / C, rel=1e-9)
    # About seven times as long (the fan-out, less BIER's larger headers and the pipeline's last packets).
    assert 6.5 < unicast.completion_s / bier.completion_s < 7


@pytest.mark.parametrize("mode", [Mode.UNICAST, Mode.HOST_BIER, Mode.NET_BIER])
def test_moe_sample_is_paced_by_the_busiest_downlink(mode: Mode) -> None:
    with TraceReader(Path(resolve_lab("leaf-spine")).parent.parent / "workloads" / "moe-sample.jsonl") as r:
        ops = list(r)
    counts = leaf_spine().run(ops, mode)
    busiest = max(
        ((lk.b, lk.b_to_a_bytes) for lk in counts.links if lk.a_node.startswith("h")), key=lambda x: x[1]
    )
    p = timer().predict(ops, mode)
    assert p.pace == busiest[0] == "leaf3:eth3"  # h5's downlink
    assert 1.0 <= p.completion_s / (busiest[1] / C) <= 1.05


# ------------------------------------------------------------------------------------- collectives


def star(n: int) -> PlanModel:
    """Workers w1..wn and a spare host p1 (the parameter server) on one INA switch s1, the job's root."""
    hosts = [f"w{i}" for i in range(1, n + 1)] + ["p1"]
    job = {"job": 1, "workers": hosts[:-1], "root": "s1", "abm": {"s1": hosts[:-1]}}
    return lab(
        f"star{n}",
        {"s1": "ina-switch", **dict.fromkeys(hosts, "gpu-host")},
        [(f"{h}:eth1", f"s1:eth{i}") for i, h in enumerate(hosts, 1)],
        [job],
    )


def allreduce(n: int, elements: int) -> TraceOp:
    return TraceOp(
        t=0.0, op="allreduce", src="w1", dst=[f"w{i}" for i in range(2, n + 1)], bytes=4 * elements, id=0
    )


def chunk_frame(result: bool = False) -> tuple[int, int]:
    hdr = InaHeader(
        job_id=1, chunk=0, op=Op.SUM, dtype=DType.INT32, bsl=256, si=0, pbm=1,
        payload=memoryview(bytes(4 * DEFAULT_CHUNK_ELEMENTS)),
    )  # fmt: skip
    return UDP0 + hdr.encoded_len, UDP0 + len(ack_for(hdr))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_steps_wait_for_each_other(n: int) -> None:
    # One chunk: 2 (n - 1) messages around the ring, each two hops (w -> s1 -> w), each sent after the
    # one before arrived; from the second on, it shares its sender's link with that sender's ACK of the
    # one before (an ACK's frame more). The last receiver's ACK ends the AllReduce.
    f, a = chunk_frame()
    p = TimeModel(star(n)).predict([allreduce(n, DEFAULT_CHUNK_ELEMENTS)], Mode.RING)
    steps = 2 * (n - 1)
    assert p.completion_s == pytest.approx((steps * 2 * f + (steps - 1) * a + 2 * a) / C, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4])
def test_parameter_server_goes_up_then_down(n: int) -> None:
    # One chunk: n uploads share s1 -> p1 and arrive together after n frames and one more hop; the
    # server's n results leave its socket one after the other and the last crosses s1 -> w.
    f, _ = chunk_frame()
    p = TimeModel(star(n)).predict([allreduce(n, DEFAULT_CHUNK_ELEMENTS)], Mode.PS)
    assert p.completion_s == pytest.approx((n * f + f + n * f + f) / C, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4])
def test_ina_aggregates_at_the_switch_and_disseminates_by_bier(n: int) -> None:
    f, _ = chunk_frame()
    result = BIER0 - UDP0 + f  # the result in BIER: the INA packet in its BIER encapsulation
    p = TimeModel(star(n)).predict([allreduce(n, DEFAULT_CHUNK_ELEMENTS)], Mode.INA)
    assert p.completion_s == pytest.approx((f + result) / C, rel=1e-9)
    # s1's agent took in every worker's chunk and sent one result: its Python work, which the switch's
    # forwarding counts (``nodes``) do not show.
    assert p.aggregated == {"s1": n + 1}


@pytest.mark.parametrize("mode", [Mode.RING, Mode.PS])
def test_only_an_ina_switch_aggregates(mode: Mode) -> None:
    assert TimeModel(star(2)).predict([allreduce(2, DEFAULT_CHUNK_ELEMENTS)], mode).aggregated == {}


def test_windows_keep_a_parameter_server_at_its_link_rate() -> None:
    # 64 chunks: the PS's own link carries n times the data in, and n results out, at the same time.
    n, chunks = 4, 64
    p = TimeModel(star(n)).predict([allreduce(n, chunks * DEFAULT_CHUNK_ELEMENTS)], Mode.PS)
    f, _ = chunk_frame()
    assert p.pace in ("s1:eth5", "p1:eth1")
    assert 1.0 <= p.completion_s / (n * chunks * f / C) <= 1.05


# -------------------------------------------------------------------------------------- conditions


def test_conditions_come_from_a_runs_record() -> None:
    got = LinkConditions.of(
        {"scale": 20000, "loss": {"h1:eth1": 0.01, "h2:eth1": 0.0}, "down": ["leaf1:eth1"],
         "bandwidth_bps": {"leaf2:eth3": 100_000_000_000}}
    )  # fmt: skip
    assert got == LinkConditions({"leaf2:eth3": 100_000_000_000}, ("leaf1:eth1",), {"h1:eth1": 0.01})
    p = TimeModel(leaf_spine(), got).predict([op(0, "h3", ["h4"], 8000)], Mode.UNICAST)
    assert p.notes == ["loss 1.00% set on h1:eth1: the model assumes nothing is lost"]


def test_a_path_over_a_link_that_is_down_is_an_error_naming_it() -> None:
    down = TimeModel(leaf_spine(), LinkConditions(down=("h2:eth1",)))
    with pytest.raises(ModelError, match="leaf1:eth4, which is down"):
        down.predict([op(0, "h1", ["h2"], 8000)], Mode.UNICAST)


def test_an_unknown_link_end_is_named() -> None:
    with pytest.raises(ModelError, match="'h9:eth1' is not in lab leaf-spine"):
        TimeModel(leaf_spine(), LinkConditions({"h9:eth1": 1}))


def test_an_op_starts_at_its_t_in_fabric_time() -> None:
    # A trace's t is fabric time (docs/trace-format.md): a message 1 ms after another starts 1 ms later.
    ops = [op(0, "h1", ["h2"], 8000, t=0.0), op(1, "h1", ["h2"], 8000, t=0.001)]
    p = timer().predict(ops, Mode.UNICAST)
    assert p.ops[1].start == pytest.approx(0.001) and p.completion_s > 0.001


# ------------------------------------------------------------------------------------------- delay


def every_end(model: PlanModel, delay_s: float) -> LinkConditions:
    ends = [str(end) for link in model.plan.links for end in (link.a, link.b)]
    return LinkConditions(delay_s=dict.fromkeys(ends, delay_s))


def test_a_message_arrives_one_path_delay_after_its_last_byte_left() -> None:
    # h1 -> leaf1 -> h2: what h1:eth1 and leaf1:eth4 send is delayed; h2:eth1 sends nothing of it.
    delays = {"h1:eth1": 2e-6, "leaf1:eth4": 3e-6, "h2:eth1": 1.0}
    p = timer(LinkConditions(delay_s=delays)).predict([op(0, "h1", ["h2"], 8000)], Mode.UNICAST)
    assert p.completion_s == pytest.approx(2 * (8000 + UDP) / C + 5e-6, rel=1e-9)


def test_a_tree_ends_when_its_farthest_leaf_has_it() -> None:
    # host-BIER from h1 to h2 (same leaf) and h3 (over a spine): the far branch's length decides.
    near = timer().predict([op(0, "h1", ["h2", "h3"], 8000)], Mode.HOST_BIER)
    far = timer(every_end(leaf_spine(), 1e-6)).predict([op(0, "h1", ["h2", "h3"], 8000)], Mode.HOST_BIER)
    assert far.completion_s == pytest.approx(near.completion_s + 4e-6, rel=1e-6)


@pytest.mark.parametrize("mode", [Mode.PS, Mode.INA])
def test_a_collective_waits_on_its_round_trip(mode: Mode) -> None:
    # One chunk: up to the aggregation point and its result back, each hop 1 ms long. PS: w -> s1 -> p1
    # and back (four hops); INA: w -> s1, the root, and back (two).
    model = star(2)
    still = TimeModel(model).predict([allreduce(2, DEFAULT_CHUNK_ELEMENTS)], mode)
    long = TimeModel(model, every_end(model, 1e-3)).predict([allreduce(2, DEFAULT_CHUNK_ELEMENTS)], mode)
    hops = 4 if mode == Mode.PS else 2
    assert long.completion_s == pytest.approx(still.completion_s + hops * 1e-3, rel=1e-6)


def test_a_window_smaller_than_the_update_waits_a_round_trip_per_window() -> None:
    # 64 chunks through a window of 32: the second half leaves only as the first half's results return,
    # so two round trips of 4 ms (w -> s1 -> p1 and back), and the bytes' own time besides.
    model = star(2)
    update = allreduce(2, 64 * DEFAULT_CHUNK_ELEMENTS)
    still = TimeModel(model).predict([update], Mode.PS)
    long = TimeModel(model, every_end(model, 1e-3)).predict([update], Mode.PS)
    assert 2 * 4e-3 < long.completion_s <= 2 * 4e-3 + still.completion_s


def test_a_plans_delays_are_its_links_and_a_runs_conditions_override_them() -> None:
    # interdc: h1 (DC 1) to h5 (DC 2) crosses one 2 ms DCI link; inside a DC hops have no delay.
    interdc = PlanModel(build_plan(load_topology(resolve_lab("interdc"))))
    msg = [op(0, "h1", ["h5"], 8000)]
    short = TimeModel(interdc, every_end(interdc, 0.0)).predict(msg, Mode.UNICAST).completion_s
    assert TimeModel(interdc).predict(msg, Mode.UNICAST).completion_s == pytest.approx(short + 2e-3, rel=1e-9)
    same_dc = [op(0, "h1", ["h2"], 8000)]
    assert TimeModel(interdc).predict(same_dc, Mode.UNICAST).completion_s == pytest.approx(
        TimeModel(interdc, every_end(interdc, 0.0)).predict(same_dc, Mode.UNICAST).completion_s, rel=1e-9
    )
    dci_ends = [str(e) for link in interdc.plan.links for e in (link.a, link.b) if link.delay_s]
    assert dci_ends, "interdc's plan has no delayed link"
    shorter = LinkConditions.of({"delay_s": dict.fromkeys(dci_ends, 5e-4)})
    got = TimeModel(interdc, shorter).predict(msg, Mode.UNICAST).completion_s
    assert got == pytest.approx(short + 5e-4, rel=1e-9)
    with pytest.raises(ModelError, match="'x9:eth1' is not in lab interdc"):
        TimeModel(interdc, LinkConditions(delay_s={"x9:eth1": 1e-3}))


def test_peak_packets_per_second_over_a_window() -> None:
    # Two single-packet messages 1 µs apart: each takes 0.16 µs at h1's uplink.
    ops = [op(0, "h1", ["h2"], 8000, t=0.0), op(1, "h1", ["h2"], 8000, t=1e-6)]
    p = timer().predict(ops, Mode.UNICAST)
    frame_s = (8000 + UDP) / C
    assert p.peak_pps(frame_s)["h1"] == pytest.approx(1 / frame_s, rel=1e-6)
    assert p.peak_pps(1e-6)["h1"] == pytest.approx(1e6, rel=1e-6)  # one whole packet in any 1 µs
    assert p.nodes()["h1"].mean_pps == pytest.approx(2 / p.completion_s)
    assert p.peak_pps(1e-6, received=True)["h2"] == pytest.approx(1e6, rel=1e-6)  # h2 receives them
    assert p.nodes()["leaf1"].packets == pytest.approx(2)  # and leaf1 sends each on
    assert "h2" not in p.peak_pps(1e-6)  # h2 sends nothing


# -------------------------------------------------------------------------------------- properties

op_lists = st.lists(
    st.tuples(
        st.sampled_from(HOSTS),
        st.sets(st.sampled_from(HOSTS), min_size=1, max_size=4),
        st.integers(40, 40_000),
        st.sampled_from([0.0, 0.0, 1e-7, 5e-7, 2e-6]),
    ),
    min_size=1,
    max_size=6,
)


def trace(raw: list[tuple[str, set[str], int, float]]) -> list[TraceOp]:
    ops = []
    for src, dst, size, t in sorted(raw, key=lambda x: x[3]):
        dst = sorted(dst - {src}) or [HOSTS[HOSTS.index(src) - 1]]
        ops.append(op(len(ops), src, dst, size, t))
    return ops


SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MESSAGE_MODES = st.sampled_from([Mode.UNICAST, Mode.HOST_BIER, Mode.NET_BIER])


@SETTINGS
@given(op_lists, MESSAGE_MODES)
def test_completion_is_never_below_a_links_bytes_or_an_ops_own_serialisation(raw: list, mode: Mode) -> None:
    ops = trace(raw)
    p = timer().predict(ops, mode)
    first = min(o.t for o in ops)
    for lk in leaf_spine().run(ops, mode).links:
        assert p.completion_s >= max(lk.a_to_b_bytes, lk.b_to_a_bytes) / C * (1 - 1e-9)
    for o in ops:
        own = max(max(lk.a_to_b_bytes, lk.b_to_a_bytes) for lk in leaf_spine().run([o], mode).links) / C
        assert p.ops[o.id].finish >= o.t + own * (1 - 1e-9)
        assert p.completion_s >= o.t - first + own * (1 - 1e-9)


@SETTINGS
# Not network-BIER: the replay numbers its groups over the whole trace (orchestrator.experiment.groups), so
# an added op can move the others to other groups, Entropies and spines: that trace is not the old one
# plus an op.
@given(op_lists, op_lists, st.sampled_from([Mode.UNICAST, Mode.HOST_BIER]))
def test_adding_ops_never_makes_completion_earlier(raw: list, more: list, mode: Mode) -> None:
    ops = trace(raw)
    extra = [o.model_copy(update={"id": o.id + len(ops)}) for o in trace(more)]
    merged = sorted(ops + extra, key=lambda o: o.t)
    before = timer().predict(ops, mode)
    after = timer().predict(merged, mode)
    end = max(t.finish for t in before.ops.values())
    assert max(t.finish for t in after.ops.values()) >= end * (1 - 1e-9)


@SETTINGS
@given(op_lists, MESSAGE_MODES, st.sampled_from([2, 3, 0.5]))
def test_k_times_the_bandwidth_takes_a_kth_of_the_time(raw: list, mode: Mode, k: float) -> None:
    ops = trace(raw)
    faster = LinkConditions({str(link.a): round(400e9 * k) for link in leaf_spine().plan.links})
    base = timer().predict(ops, mode)
    scaled = timer(faster).predict(ops, mode, {o.id: o.t / k for o in ops})
    assert scaled.completion_s == pytest.approx(base.completion_s / k, rel=1e-6)


@pytest.mark.parametrize("mode", [Mode.UNICAST, Mode.HOST_BIER])
def test_what_the_hosts_issue_at_one_moment(mode: Mode) -> None:
    # At t=0 h1 sends 2 fragments to three hosts and h2 one to two; at 1 µs h3 one fragment to one host.
    model = leaf_spine()
    big = model.max_datagram + 1  # two fragments
    ops = [
        op(0, "h1", ["h4", "h5", "h6"], big),
        op(1, "h2", ["h7", "h8"], 1000),
        op(2, "h3", ["h4"], 1000, 1e-6),
    ]
    p = TimeModel(model).predict(ops, mode)
    # A copy per fragment and receiver in both modes: a BIER source's agent works per receiver as well.
    assert p.issued_at_once == {"h1": 2 * 3, "h2": 2}


# ------------------------------------------------------------------------------- the kernel's ECMP hash


def test_the_kernel_takes_the_first_next_hop_whose_upper_bound_the_hash_does_not_exceed() -> None:
    # Four equal next hops: upper bounds 2^29 - 1, 2^30 - 1, 3 * 2^29 - 1, 2^31 - 1 of the 31-bit hash.
    assert [ecmp_member([1, 1, 1, 1], f) for f in (0.0, 0.2499, 0.25, 0.5, 0.7499, 0.75, 0.9999)] == [
        0, 0, 1, 2, 2, 3, 3,
    ]  # fmt: skip
    # Weights 1 and 3: the first takes a quarter of the range.
    assert [ecmp_member([1, 3], f) for f in (0.2499, 0.25, 0.9)] == [0, 1, 1]


@given(st.lists(st.integers(1, 255), min_size=1, max_size=16), st.floats(0, 1, exclude_max=True))
def test_a_larger_hash_never_takes_an_earlier_next_hop_and_every_next_hop_is_taken(
    weights: list[int], fraction: float
) -> None:
    i = ecmp_member(weights, fraction)
    assert 0 <= i < len(weights)
    assert ecmp_member(weights, min(fraction + 1e-3, 1 - 1e-12)) >= i
    total = sum(weights)
    for j in range(len(weights)):
        middle = (sum(weights[:j]) + weights[j] / 2) / total
        assert ecmp_member(weights, middle) == j


def test_paths_over_the_hash_range_carry_the_expected_shares() -> None:
    model = leaf_spine()
    for src, dst in (("h1", "h3"), ("h1", "h8"), ("h1", "h2")):
        n = 1000
        crossed: dict[int, int] = {}
        for k in range(n):
            for d in model.unicast_path(src, dst, (k + 0.5) / n):
                crossed[d] = crossed.get(d, 0) + 1
        assert {d: c / n for d, c in crossed.items()} == {
            d: float(s) for d, s in model.unicast_flow(src, dst).items()
        }
        assert model.hashed(src, dst) == (dst != "h2")  # h2 shares h1's leaf


def test_a_flow_is_one_path_and_a_qps_flows_share_it() -> None:
    # Ops 0 and 8 from h1 to h3 go on QP 0 both (8 QPs): one 5-tuple, one path under every draw; op 1 is
    # QP 1, its own flow.
    tm = timer()
    ops = [op(0, "h1", ["h3"], 8000), op(8, "h1", ["h3"], 8000), op(1, "h1", ["h3"], 8000)]
    apart = 0
    for key in range(16):
        tm.draw = HashDraw(key, 8)
        first, same, other = (tm.message_flows(o, Mode.UNICAST)[0] for o in ops)
        assert list(first.directions) == list(same.directions)
        assert len(first.directions) == 4 and set(first.weight) == {1.0}
        apart += list(first.directions) != list(other.directions)
    assert 0 < apart < 16


def test_a_unicast_prediction_is_the_median_of_the_hash_draws() -> None:
    # h1 and h2 (leaf1) send to h3 and h4 (leaf2): on two spines each takes the bytes' time over one link;
    # hashed onto one spine they share its links and take twice as long.
    ops = [op(0, "h1", ["h3"], 80_000), op(1, "h2", ["h4"], 80_000)]
    even = TimeModel(leaf_spine(), hash_draws=1).predict(ops, Mode.UNICAST)
    assert even.hash_draws_s == ()
    p = TimeModel(leaf_spine(), hash_draws=9).predict(ops, Mode.UNICAST)
    draws = p.hash_draws_s
    assert len(draws) == 9 and list(draws) == sorted(draws) and p.completion_s == draws[4]
    frames = sum(frag + UDP for frag in leaf_spine().unicast_message(80_000)[0]) / C
    apart = [d for d in draws if d < 1.5 * frames]
    shared = [d for d in draws if d >= 1.5 * frames]
    assert apart and shared, draws
    assert len(set(apart)) == len(set(shared)) == 1
    assert shared[0] - apart[0] == pytest.approx(frames, rel=1e-9)  # one message's bytes more on the spine
    assert "the median of 9 draws of the kernel's ECMP hash" in p.describe()
    # BIER's paths are the BFRs' own (its Entropy): no draws.
    assert TimeModel(leaf_spine(), hash_draws=9).predict(ops, Mode.HOST_BIER).hash_draws_s == ()
