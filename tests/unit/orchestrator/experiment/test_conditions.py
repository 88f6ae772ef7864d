"""Like with like: the conditions a run was made under, what tells two apart, and what summary.json keeps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.experiment.conditions import Conditions
from tests.unit.orchestrator.experiment import results_fixtures as fx

CLEAN = {"scale": 20000, "loss": {}, "down": [], "bandwidth_bps": {}}
FAULT = {
    "fault": "15us restart spine2",
    "at_s": 15e-6,
    "started_s": 0.301,
    "done_s": 0.9,
    "lines": [],
    "error": None,
}


def _run(conditions: dict | None, faults: list | None = None, scale: int | None = 20000):
    settings = {"conditions": conditions} if conditions is not None else {}
    if faults:
        settings["faults"] = faults
    return fx.run("unicast", timing=fx.faithful(scale) if scale else None, settings=settings)


def test_a_run_s_conditions_come_from_its_record() -> None:
    got = Conditions.of(_run({**CLEAN, "loss": {"s5:eth1": 0.02}, "down": ["s2:eth1"]}, [FAULT]))
    assert got == Conditions(
        True, 20000, (("s5:eth1", 0.02),), ("s2:eth1",), (), (("15us restart spine2", 15e-6),)
    )
    # Before runs recorded their conditions: only the time scale of the timing record is known.
    assert Conditions.of(_run(None)) == Conditions(False, 20000)
    assert Conditions.of(_run(None, scale=None)) == Conditions(False, None)


def test_equal_conditions_are_equal_whatever_the_order_or_the_fault_s_outcome() -> None:
    a = Conditions.of(_run({**CLEAN, "loss": {"b:eth1": 0.01, "a:eth1": 0.02}}, [FAULT]))
    later = {**FAULT, "started_s": 0.35, "done_s": 1.2}
    b = Conditions.of(_run({**CLEAN, "loss": {"a:eth1": 0.02, "b:eth1": 0.01}}, [later]))
    assert a == b and hash(a) == hash(b)


def test_differences_name_each_thing_changed() -> None:
    clean = Conditions.from_parts(CLEAN, None, None)
    other = Conditions.from_parts(
        {
            "scale": 40000,
            "loss": {"s5:eth1": 0.02},
            "down": ["s2:eth1"],
            "bandwidth_bps": {"s1:eth1": 4 * 10**11},
        },
        [FAULT],
        None,
    )
    # Another scale is no other condition (a faithful time is the same at any); unshaped links are.
    assert [str(d) for d in other.differences(clean)] == [
        "loss on s5:eth1 2.00% against none",
        "s2:eth1 down against up",
        "bandwidth of s1:eth1 400G against as planned",
        "faults 15us restart spine2 against none",
    ]
    assert clean.differences(clean) == []
    unshaped = Conditions.from_parts({**CLEAN, "scale": None}, None, None)
    assert [str(d) for d in unshaped.differences(clean)] == ["time scale unshaped against 1:20000"]
    (recorded,) = Conditions(False, 20000).differences(clean)
    assert (recorded.what, recorded.here, recorded.there) == ("link conditions", "not recorded", "recorded")


def test_labels_and_order_clean_first() -> None:
    clean = Conditions.from_parts(CLEAN, None, None)
    lossy = Conditions.from_parts({**CLEAN, "loss": {"s5:eth1": 0.02}}, None, None)
    faulty = Conditions.from_parts(CLEAN, [FAULT], None)
    assert clean.label == "shaped, clean"
    assert lossy.label == "shaped, loss 2.00% s5:eth1"
    assert faulty.label == "shaped, clean; faults: restart spine2 at 15.0 µs fabric"
    assert Conditions(False, None).label == "unshaped, conditions not recorded"
    assert Conditions(False, 20000).label == "shaped, conditions not recorded"
    assert sorted([faulty, Conditions(False, None), lossy, clean], key=lambda c: c.rank)[0] == clean


ENDS = st.sampled_from(["s1:eth1", "s2:eth1", "leaf1:eth3", "h1:eth1"])


@given(
    recorded=st.booleans(),
    scale=st.none() | st.integers(1, 10**6),
    loss=st.dictionaries(ENDS, st.floats(0.0001, 1.0)),
    down=st.sets(ENDS),
    bandwidth=st.dictionaries(ENDS, st.integers(1, 10**12)),
    faults=st.lists(
        st.tuples(st.sampled_from(["1 restart spine1", "2 link s1:eth1 down"]), st.floats(0, 100))
    ),
)
def test_what_summary_json_keeps_reads_back_equal(recorded, scale, loss, down, bandwidth, faults) -> None:
    fault_records = [{"fault": text, "at_s": at} for text, at in faults]
    settings = {"scale": scale, "loss": loss, "down": sorted(down), "bandwidth_bps": bandwidth}
    c = Conditions.from_parts(settings if recorded else None, fault_records, scale)
    assert Conditions.from_dict(c.to_dict()) == c
