"""INA aggregator: job config, arithmetic, loss handling, slot budget, and an end-to-end property
through a simulated two-level VAT with reordering, duplication and loss-with-retransmit."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from aidcnet.bier.bitstring import ids_from_bitstring
from aidcnet.ina.aggregator import Aggregator, JobConfig
from aidcnet.ina.fixedpoint import (
    INT32_LIMIT,
    choose_fixed_point_scale,
    error_bound,
    from_fixed,
    saturated_count,
    to_fixed,
)
from aidcnet.ina.header import DType, InaFlags, InaHeader, Op, payload_from_array
from aidcnet.ina.vat import Action

I32 = np.int32


def pkt(
    job: int,
    chunk: int,
    ids_bits: int,
    values: list[float] | np.ndarray,
    *,
    op: Op = Op.SUM,
    dtype: DType = DType.INT32,
    bsl: int = 64,
    si: int = 0,
    scale: int = 0,
    flags: InaFlags = InaFlags.NONE,
) -> InaHeader:
    arr = np.asarray(values, dtype=np.float32 if dtype is DType.FLOAT32 else np.int32)
    hdr = InaHeader(
        job_id=job,
        chunk=chunk,
        op=op,
        dtype=dtype,
        bsl=bsl,
        si=si,
        pbm=ids_bits,
        scale=scale,
        flags=flags,
        payload=payload_from_array(arr, dtype),
    )
    # Through the wire format, so that the aggregator always sees decoded, big-endian views.
    return InaHeader.decode(hdr.encode())


def root_job(job: int = 1, abm: tuple[int, ...] = (1, 2), **kw: object) -> JobConfig:
    return JobConfig(job_id=job, bsl=64, abm=abm, root=True, **kw)  # type: ignore[arg-type]


# --- job configuration --------------------------------------------------------------------------------


def test_job_config_bitmaps() -> None:
    cfg = JobConfig(job_id=9, bsl=256, abm=[258, 257, 260], parent="10.0.0.1", op="max", dtype="float32")
    assert cfg.abm == (257, 258, 260)
    assert cfg.si == 1
    assert cfg.abm_bits == 0b1011
    assert (cfg.op, cfg.dtype, cfg.root, cfg.slot_budget) == (Op.MAX, DType.FLOAT32, False, 64)
    node = cfg.vat_node()
    assert (node.abm, node.si, node.bsl, node.root, node.parent) == (0b1011, 1, 256, False, "10.0.0.1")


@pytest.mark.parametrize(
    ("overrides", "field_name"),
    [
        ({"bsl": 100}, "bsl"),
        ({"abm": []}, "abm"),
        ({"abm": [0, 1]}, "abm"),
        ({"abm": [1, 1]}, "abm"),
        ({"abm": [1, 70000]}, "abm"),
        ({"abm": [1, 65]}, "abm"),  # BFR-id 65 is SI 1 at BSL 64
        ({"op": "avg"}, "op"),
        ({"op": 9}, "op"),
        ({"dtype": "float64"}, "dtype"),
        ({"op": "prod", "dtype": "fixed32"}, "dtype"),
        ({"root": False, "parent": None}, "parent"),
        ({"root": False, "parent": ""}, "parent"),
        ({"root": True, "parent": "s6"}, "parent"),
        ({"slot_budget": 0}, "slot_budget"),
        ({"job_id": -1}, "job_id"),
        ({"job_id": 2**32}, "job_id"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_job_config_errors_name_the_field(overrides: dict[str, object], field_name: str) -> None:
    fields: dict[str, object] = {"job_id": 1, "bsl": 64, "abm": [1, 2], "root": True}
    fields.update(overrides)
    with pytest.raises(ValidationError) as info:
        JobConfig(**fields)  # type: ignore[arg-type]
    assert [err["loc"][0] for err in info.value.errors()] == [field_name]


def test_job_config_is_immutable() -> None:
    with pytest.raises(ValidationError):
        root_job().slot_budget = 3  # type: ignore[misc]


# --- arithmetic ---------------------------------------------------------------------------------------


def run_two(op: Op, dtype: DType, a: list[float], b: list[float]) -> np.ndarray:
    agg = Aggregator([root_job(op=op, dtype=dtype)])
    assert agg.handle(pkt(1, 0, 0b01, a, op=op, dtype=dtype)).action is Action.ABSORB
    done = agg.handle(pkt(1, 0, 0b10, b, op=op, dtype=dtype))
    assert done.action is Action.DISSEMINATE and done.packet is not None
    return done.packet.payload_array()


def test_int32_sum_wraps_like_twos_complement() -> None:
    got = run_two(Op.SUM, DType.INT32, [2**31 - 1, -(2**31), 5], [1, -1, -7])
    assert got.tolist() == [-(2**31), 2**31 - 1, -2]


def test_int32_prod_wraps_modulo_2_32() -> None:
    got = run_two(Op.PROD, DType.INT32, [65536, 3, -4], [65536, 65537, 5])
    assert got.tolist() == [0, 196611, -20]


def test_min_max_prod_float() -> None:
    assert run_two(Op.MIN, DType.INT32, [1, -5, 7], [2, -6, 7]).tolist() == [1, -6, 7]
    assert run_two(Op.MAX, DType.FLOAT32, [1.5, -5, 0], [2, -6, -0.5]).tolist() == [2, -5, 0]
    assert run_two(Op.PROD, DType.FLOAT32, [1.5, -2], [4, 0.25]).tolist() == [6, -0.5]
    assert run_two(Op.SUM, DType.FLOAT32, [0.5, 1], [0.25, -3]).tolist() == [0.75, -2]


def test_fixed32_sum_path() -> None:
    xs = [np.array([0.1, -0.7, 3.25], dtype=np.float32), np.array([0.2, 0.7, -1.0], dtype=np.float32)]
    scale = choose_fixed_point_scale(max(float(np.abs(x).max()) for x in xs), 2)
    agg = Aggregator([root_job(dtype=DType.FIXED32)])
    agg.handle(pkt(1, 0, 0b01, to_fixed(xs[0], scale), dtype=DType.FIXED32, scale=scale))
    done = agg.handle(pkt(1, 0, 0b10, to_fixed(xs[1], scale), dtype=DType.FIXED32, scale=scale))
    assert done.packet is not None and done.packet.scale == scale
    got = from_fixed(done.packet.payload_array(), scale)
    exact = xs[0].astype(np.float64) + xs[1]
    assert np.all(np.abs(got - exact) <= error_bound(2, scale, got))


def test_fixed32_scale_mismatch_is_dropped() -> None:
    agg = Aggregator([root_job(dtype=DType.FIXED32)])
    agg.handle(pkt(1, 0, 0b01, [1], dtype=DType.FIXED32, scale=10))
    d = agg.handle(pkt(1, 0, 0b10, [1], dtype=DType.FIXED32, scale=11))
    assert (d.action, d.reason) == (Action.DROP, "scale-mismatch")
    assert agg.handle(pkt(1, 0, 0b10, [1], dtype=DType.FIXED32, scale=10)).action is Action.DISSEMINATE


# --- fixed point --------------------------------------------------------------------------------------


@given(st.floats(0, 1e30, allow_subnormal=False), st.integers(1, 4096))
def test_choose_fixed_point_scale_is_the_largest_safe_scale(max_abs: float, n: int) -> None:
    s = choose_fixed_point_scale(max_abs, n)
    assert n * (math.ldexp(max_abs, s) + 0.5) <= INT32_LIMIT
    if s < 127:
        assert n * (math.ldexp(max_abs, s + 1) + 0.5) > INT32_LIMIT


@pytest.mark.parametrize(("max_abs", "n"), [(-1.0, 2), (math.inf, 2), (math.nan, 2), (1.0, 0), (1.0, 2**31)])
def test_choose_fixed_point_scale_rejects(max_abs: float, n: int) -> None:
    with pytest.raises(ValueError):
        choose_fixed_point_scale(max_abs, n)


def test_to_fixed_saturates_symmetrically_and_refuses_nan() -> None:
    x = np.array([np.inf, -np.inf, 3e9, -3e9, 1.5, -2.5, 0.0], dtype=np.float32)
    assert to_fixed(x, 0).tolist() == [INT32_LIMIT, -INT32_LIMIT, INT32_LIMIT, -INT32_LIMIT, 2, -2, 0]
    assert saturated_count(x, 0) == 4
    assert to_fixed(np.array([1.0], dtype=np.float32), 3).tolist() == [8]
    with pytest.raises(ValueError):
        to_fixed(np.array([1.0, np.nan], dtype=np.float32), 0)


@given(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=20), st.integers(1, 64))
def test_fixed_round_trip_within_half_a_unit(values: list[float], n: int) -> None:
    x = np.array(values, dtype=np.float32)
    s = choose_fixed_point_scale(float(np.abs(x).max()), n)
    back = from_fixed(to_fixed(x, s), s)
    assert np.all(np.abs(back.astype(np.float64) - x) <= error_bound(1, s, back))


# --- loss handling ------------------------------------------------------------------------------------


def test_duplicate_is_not_added_twice() -> None:
    agg = Aggregator([root_job()])
    agg.handle(pkt(1, 0, 0b01, [10]))
    d = agg.handle(pkt(1, 0, 0b01, [10]))
    assert (d.action, d.reason) == (Action.DROP, "duplicate")
    d = agg.handle(pkt(1, 0, 0b01, [10], flags=InaFlags.RETRANSMIT))
    assert (d.action, d.reason) == (Action.DROP, "duplicate")
    done = agg.handle(pkt(1, 0, 0b10, [1]))
    assert done.packet is not None and done.packet.payload_array().tolist() == [11]


def test_late_retransmit_gets_the_result_again() -> None:
    leaf = Aggregator([JobConfig(job_id=1, bsl=64, abm=[1, 2], parent="s6")])
    leaf.handle(pkt(1, 4, 0b01, [3, 4]))
    first = leaf.handle(pkt(1, 4, 0b10, [5, 6]))
    assert first.action is Action.TO_PARENT and first.packet is not None
    assert first.packet.flags == InaFlags.NONE and first.packet.pbm == 0b11
    again = leaf.handle(pkt(1, 4, 0b10, [5, 6], flags=InaFlags.RETRANSMIT))
    assert (again.action, again.reason, again.parent) == (Action.TO_PARENT, "resend-result", "s6")
    assert again.packet is not None and again.packet.retransmit
    assert bytes(again.packet.payload) == bytes(first.packet.payload)
    assert leaf.result(1, 4) == first.packet
    # Without the R flag a copy of a finished chunk is just a network duplicate.
    assert leaf.handle(pkt(1, 4, 0b10, [5, 6])).reason == "duplicate"


def test_root_resends_by_bier_to_the_requesters_only() -> None:
    agg = Aggregator([root_job(abm=(1, 2, 3, 4))])
    agg.handle(pkt(1, 0, 0b0011, [1]))
    done = agg.handle(pkt(1, 0, 0b1100, [2]))
    assert (done.action, done.bitstring) == (Action.DISSEMINATE, 0b1111)
    assert done.packet is not None and done.packet.result and done.packet.pbm == 0b1111
    again = agg.handle(pkt(1, 0, 0b1100, [2], flags=InaFlags.RETRANSMIT))
    assert (again.action, again.reason, again.bitstring) == (Action.DISSEMINATE, "resend-result", 0b1100)
    assert again.packet is not None and again.packet.result and again.packet.retransmit
    assert again.packet.payload_array().tolist() == [3]


@pytest.mark.parametrize(
    ("hdr", "reason"),
    [
        (pkt(1, 0, 0b01, [1], op=Op.MAX), "op-mismatch"),
        (pkt(1, 0, 0b01, [1], dtype=DType.FLOAT32), "dtype-mismatch"),
        (pkt(1, 0, 0b01, [1], dtype=DType.FIXED32), "dtype-mismatch"),
        (pkt(1, 0, 0b01, [1], bsl=128), "bsl-mismatch"),
        (pkt(1, 0, 0b01, [1], flags=InaFlags.RESULT), "unexpected-result"),
        (pkt(1, 0, 0b101, [1]), "pbm-outside-abm"),
        (pkt(1, 0, 0b100, [1]), "not-in-vat"),
        (pkt(1, 0, 0, [1]), "empty-pbm"),
    ],
)
def test_drop_reasons(hdr: InaHeader, reason: str) -> None:
    agg = Aggregator([root_job()])
    d = agg.handle(hdr)
    assert (d.action, d.reason) == (Action.DROP, reason)
    assert agg.counters == Counter({reason: 1})
    assert agg.slots_in_use(1) == 0


def test_element_count_mismatch_is_dropped() -> None:
    agg = Aggregator([root_job()])
    agg.handle(pkt(1, 0, 0b01, [1, 2]))
    d = agg.handle(pkt(1, 0, 0b10, [1, 2, 3]))
    assert (d.action, d.reason) == (Action.DROP, "count-mismatch")


def test_unknown_job_is_transit() -> None:
    d = Aggregator([root_job()]).handle(pkt(2, 0, 0b01, [1]))
    assert (d.action, d.reason) == (Action.FORWARD, "transit")


# --- slot budget and tenants --------------------------------------------------------------------------


def test_slot_budget_drop_and_reuse() -> None:
    agg = Aggregator([root_job(slot_budget=2), root_job(job=2, slot_budget=1)])
    agg.handle(pkt(1, 0, 0b01, [1]))
    agg.handle(pkt(1, 1, 0b01, [1]))
    d = agg.handle(pkt(1, 2, 0b01, [1]))
    assert (d.action, d.reason) == (Action.DROP, "slot-budget-exceeded")
    assert agg.counters["slot-budget-exceeded"] == 1 and agg.slots_in_use(1) == 2

    # Another tenant's slots are its own, even for the same chunk numbers.
    assert agg.handle(pkt(2, 2, 0b01, [7])).action is Action.ABSORB
    assert agg.handle(pkt(2, 2, 0b10, [7])).packet.payload_array().tolist() == [14]  # type: ignore[union-attr]

    # A finished chunk's slot is reused, and its late retransmit is then recognised as stale.
    assert agg.handle(pkt(1, 1, 0b10, [2])).action is Action.DISSEMINATE
    assert agg.handle(pkt(1, 2, 0b01, [5])).action is Action.ABSORB
    assert agg.result(1, 1) is None and agg.slots_in_use(1) == 2
    d = agg.handle(pkt(1, 1, 0b10, [2], flags=InaFlags.RETRANSMIT))
    assert (d.action, d.reason) == (Action.DROP, "stale-chunk")
    # Chunk 0 is still in progress and unaffected by the reuse.
    assert agg.handle(pkt(1, 0, 0b10, [1])).packet.payload_array().tolist() == [2]  # type: ignore[union-attr]
    assert agg.counters == Counter(
        {"aggregated": 4, "completed": 3, "slot-budget-exceeded": 1, "stale-chunk": 1}
    )


def test_release_frees_a_stuck_slot() -> None:
    agg = Aggregator([root_job(slot_budget=1)])
    agg.handle(pkt(1, 0, 0b01, [1]))
    assert agg.handle(pkt(1, 1, 0b01, [1])).reason == "slot-budget-exceeded"
    agg.release(1, 0)
    assert agg.handle(pkt(1, 1, 0b01, [1])).action is Action.ABSORB


def test_replacing_a_job_discards_its_slots() -> None:
    agg = Aggregator([root_job()])
    agg.handle(pkt(1, 0, 0b01, [1]))
    agg.add_job(root_job(abm=(1, 3)))
    assert agg.slots_in_use(1) == 0
    assert agg.job(1) is not None and agg.job(1).abm == (1, 3)  # type: ignore[union-attr]
    agg.remove_job(1)
    assert agg.handle(pkt(1, 0, 0b01, [1])).reason == "transit"


# --- Figure 1 with payloads ---------------------------------------------------------------------------


def test_figure1_job1_with_payloads() -> None:
    switches = {
        "s1": Aggregator([JobConfig(job_id=1, bsl=64, abm=[1, 2], parent="s6")]),
        "s7": Aggregator([JobConfig(job_id=1, bsl=64, abm=[3, 4], parent="s6")]),
        "s6": Aggregator([JobConfig(job_id=1, bsl=64, abm=[1, 2, 3, 4], root=True)]),
        "s2": Aggregator(),
        "s5": Aggregator(),
    }
    path = {
        "w1": ["s1"],
        "w2": ["s1"],
        "w3": ["s2", "s5", "s7"],
        "w4": ["s2", "s5", "s7"],
        "s1": ["s5", "s7", "s6"],
        "s7": ["s6"],
    }
    arrays = {f"w{i}": np.arange(4, dtype=I32) * i for i in range(1, 5)}
    out = []

    def send(origin: str, hdr: InaHeader) -> None:
        for hop in path[origin]:
            d = switches[hop].handle(InaHeader.decode(hdr.encode()))
            if d.action is Action.FORWARD:
                continue
            if d.action is Action.TO_PARENT:
                assert d.packet is not None and d.parent == "s6"
                send(hop, d.packet)
            elif d.action is Action.DISSEMINATE:
                out.append(d)
            return

    for i in range(1, 5):
        send(f"w{i}", pkt(1, 0, 1 << (i - 1), arrays[f"w{i}"]))

    (d,) = out
    assert ids_from_bitstring(d.si, d.bitstring, d.bsl) == [1, 2, 3, 4]
    assert d.packet is not None and d.packet.result and d.packet.pbm == 0b1111
    assert d.packet.payload_array().tolist() == (np.arange(4) * 10).tolist()
    assert switches["s5"].counters == Counter({"transit": 3})
    assert switches["s7"].counters == Counter({"aggregated": 1, "completed": 1, "forwarded": 1})
    assert switches["s6"].counters == Counter({"aggregated": 1, "completed": 1})


# --- property: a two-level VAT under reordering, duplication and loss with retransmit -----------------


@dataclass
class Net:
    """Leaf switches under one root; worker k of group g has BFR-id base + k (one SI)."""

    groups: list[list[int]]
    op: Op
    dtype: DType
    chunks: int
    switches: dict[str, Aggregator] = field(default_factory=dict)
    leaf_of: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        every = [w for g in self.groups for w in g]
        common = {"job_id": 77, "bsl": 64, "op": self.op, "dtype": self.dtype, "slot_budget": self.chunks}
        self.switches["root"] = Aggregator([JobConfig(abm=every, root=True, **common)])  # type: ignore[arg-type]
        for i, group in enumerate(self.groups):
            self.switches[f"leaf{i}"] = Aggregator([JobConfig(abm=group, parent="root", **common)])  # type: ignore[arg-type]
            self.leaf_of.update({w: f"leaf{i}" for w in group})


def simulate(
    net: Net,
    sent: dict[tuple[int, int], InaHeader],
    rng: random.Random,
    loss: float,
    dup: float,
    budget: int = 40,
) -> tuple[dict[tuple[int, int], InaHeader], Counter[str]]:
    """Deliver packets in random order; lose or duplicate any packet; pending workers retransmit
    (R flag) whenever the network falls quiet, i.e. at their timeout.

    Hypothesis drives ``rng`` and may make it adversarial (lose every packet forever), so losses and
    duplicates are capped at ``budget`` each: the property is convergence under finitely many faults."""
    stats: Counter[str] = Counter()
    got: dict[tuple[int, int], InaHeader] = {}
    in_flight: list[tuple[str | int, bytes]] = [(net.leaf_of[w], h.encode()) for (w, _), h in sent.items()]
    while len(got) < len(sent):
        if not in_flight:
            stats["timeouts"] += 1
            # A round with no loss delivers every pending result, so budget + 1 rounds always suffice.
            assert stats["timeouts"] <= budget + 1, "the VAT never converged"
            for key, hdr in sent.items():
                if key not in got:
                    again = dataclasses.replace(hdr, flags=InaFlags.RETRANSMIT)
                    in_flight.append((net.leaf_of[key[0]], again.encode()))
            continue
        dest, wire = in_flight.pop(rng.randrange(len(in_flight)))
        if stats["lost"] < budget and rng.random() < loss:
            stats["lost"] += 1
            continue
        if stats["duplicated"] < budget and rng.random() < dup:
            stats["duplicated"] += 1
            in_flight.append((dest, wire))
        hdr = InaHeader.decode(wire)
        if isinstance(dest, int):
            assert hdr.result and hdr.pbm == net.switches["root"].job(77).abm_bits  # type: ignore[union-attr]
            got.setdefault((dest, hdr.chunk), hdr)
            continue
        d = net.switches[dest].handle(hdr)
        if d.action is Action.TO_PARENT:
            assert d.parent is not None and d.packet is not None
            in_flight.append((d.parent, d.packet.encode()))
        elif d.action is Action.DISSEMINATE:
            assert d.packet is not None
            in_flight += [(w, d.packet.encode()) for w in ids_from_bitstring(d.si, d.bitstring, d.bsl)]
        else:
            assert (d.action, d.reason) in {(Action.ABSORB, "aggregated"), (Action.DROP, "duplicate")}
    for sw in net.switches.values():
        stats.update(sw.counters)
    return got, stats


def make_net(draw: st.DrawFn, kinds: list[tuple[Op, DType]]) -> Net:
    op, dtype = draw(st.sampled_from(kinds))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    base = 64 * draw(st.integers(0, 2))  # SI 0..2
    ids = iter(range(base + 1, base + 65))
    groups = [[next(ids) for _ in range(s)] for s in sizes]
    return Net(groups, op, dtype, chunks=draw(st.integers(1, 3)))


def send_all(
    net: Net, arrays: dict[tuple[int, int], np.ndarray], scales: dict[int, int] | None = None
) -> dict[tuple[int, int], InaHeader]:
    """Each worker's first packet for each chunk; ``scales`` is the per-chunk FIXED32 exponent."""
    return {
        (w, c): InaHeader(
            job_id=77,
            chunk=c,
            op=net.op,
            dtype=net.dtype,
            bsl=64,
            si=(w - 1) // 64,
            pbm=1 << ((w - 1) % 64),
            scale=(scales or {}).get(c, 0),
            payload=payload_from_array(a, net.dtype),
        )
        for (w, c), a in arrays.items()
    }


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LOSS = st.sampled_from([0.0, 0.1, 0.3])
DUP = st.sampled_from([0.0, 0.1, 0.3])


@PROPERTY_SETTINGS
@given(st.data(), LOSS, DUP)
def test_int32_result_is_bit_exact(data: st.DataObject, loss: float, dup: float) -> None:
    net = make_net(
        data.draw,
        [(Op.SUM, DType.INT32), (Op.PROD, DType.INT32), (Op.MIN, DType.INT32), (Op.MAX, DType.INT32)],
    )
    n_el = data.draw(st.integers(1, 8))
    workers = [w for g in net.groups for w in g]
    arrays = {
        (w, c): np.array(
            data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n_el, max_size=n_el)), dtype=I32
        )
        for w in workers
        for c in range(net.chunks)
    }
    got, _ = simulate(net, send_all(net, arrays), data.draw(st.randoms(use_true_random=False)), loss, dup)
    reduce = {Op.SUM: np.add, Op.PROD: np.multiply, Op.MIN: np.minimum, Op.MAX: np.maximum}[net.op]
    for c in range(net.chunks):
        stack = np.stack([arrays[w, c] for w in workers])
        expected = reduce.reduce(stack, axis=0, dtype=I32)
        if net.op is Op.SUM:  # the wraparound, independently of numpy's int32 arithmetic
            wide = stack.astype(object).sum(axis=0)
            assert expected.tolist() == [(v + 2**31) % 2**32 - 2**31 for v in wide]
        for w in workers:
            assert got[w, c].payload_array().tolist() == expected.tolist()


@PROPERTY_SETTINGS
@given(st.data(), LOSS, DUP)
def test_float32_result_within_tolerance(data: st.DataObject, loss: float, dup: float) -> None:
    """FLOAT32 sum: any order or tree of n-1 float32 additions is within (n-1)·2^-24·Σ|x| of the exact
    sum (standard summation bound, u = 2^-24); FIXED32: within fixedpoint.error_bound."""
    net = make_net(data.draw, [(Op.SUM, DType.FLOAT32), (Op.SUM, DType.FIXED32)])
    n_el = data.draw(st.integers(1, 8))
    workers = [w for g in net.groups for w in g]
    n = len(workers)
    floats = st.floats(-1e6, 1e6, width=32, allow_subnormal=False)
    xs = {
        (w, c): np.array(data.draw(st.lists(floats, min_size=n_el, max_size=n_el)), dtype=np.float32)
        for w in workers
        for c in range(net.chunks)
    }
    # SwitchML picks the scale per chunk from the largest magnitude any worker has in it.
    scales = {
        c: choose_fixed_point_scale(max(float(np.abs(xs[w, c]).max()) for w in workers), n)
        for c in range(net.chunks)
    }
    arrays = {k: to_fixed(x, scales[k[1]]) for k, x in xs.items()} if net.dtype is DType.FIXED32 else xs
    rng = data.draw(st.randoms(use_true_random=False))
    got, _ = simulate(net, send_all(net, arrays, scales), rng, loss, dup)
    for c in range(net.chunks):
        stack = np.stack([xs[w, c] for w in workers]).astype(np.float64)
        exact = np.array([math.fsum(col) for col in stack.T])  # correctly rounded float64 reference
        reference_slack = 2.0**-52 * np.abs(exact)
        for w in workers:
            res = got[w, c]
            if net.dtype is DType.FIXED32:
                assert res.scale == scales[c]
                value = from_fixed(res.payload_array(), res.scale).astype(np.float64)
                bound = error_bound(n, scales[c], value)
            else:
                value = res.payload_array().astype(np.float64)
                gamma = (n - 1) * 2.0**-24 / (1 - (n - 1) * 2.0**-24)
                bound = gamma * np.abs(stack).sum(axis=0)
            assert np.all(np.abs(value - exact) <= bound + reference_slack), (value, exact, bound)


def test_simulator_really_loses_duplicates_and_retransmits() -> None:
    """Guards the property tests against a simulator that never exercises the loss paths."""
    net = Net([[1, 2, 3], [4, 5], [6]], Op.SUM, DType.INT32, chunks=3)
    arrays = {(w, c): np.full(4, w * 10 + c, dtype=I32) for w in range(1, 7) for c in range(3)}
    got, stats = simulate(net, send_all(net, arrays), random.Random(1), loss=0.3, dup=0.3)
    assert stats["lost"] > 0 and stats["duplicated"] > 0 and stats["timeouts"] > 0
    assert stats["duplicate"] > 0 and stats["resend-result"] > 0
    for (w, c), hdr in got.items():
        assert hdr.payload_array().tolist() == [sum(v * 10 + c for v in range(1, 7))] * 4, (w, c)
