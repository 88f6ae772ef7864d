"""Faults a lab declares in its vars (``faults:``): checked at configure, naming the entry, and carried in the
plan, where every replay of the lab finds them beside its own --fault."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.configure.plan import PlanError
from orchestrator.experiment.fault_runner import FaultRunner
from orchestrator.lab.fault_spec import parse_fault
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, plan_of

FLAP = "10us link spine1:eth2 flap 5us 2"
GRAY = "1ms link leaf1:eth1 loss 1 one-way for 2ms"


def test_the_vars_faults_are_in_the_plan_as_written() -> None:
    assert plan_of(leaf_spine_doc(2, 2, 1), {"faults": [FLAP, GRAY]}).faults == [FLAP, GRAY]
    assert plan_of(leaf_spine_doc(2, 2, 1)).faults == []


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("10us link spine9:eth2 down", "has no node spine9"),
        ("10us link spine1:eth2 flap 5us", "flap takes a duration and a count"),
        ("10us restart h1", "only a "),
        ("soon link spine1:eth1 down", "'soon' is not a time"),
    ],
)
def test_a_wrong_fault_stops_the_plan_naming_its_entry(fault: str, says: str) -> None:
    with pytest.raises(PlanError) as err:
        plan_of(leaf_spine_doc(2, 2, 1), {"faults": [FLAP, fault]})
    assert "faults.1" in str(err.value) and says in str(err.value)


def test_every_replay_gets_the_labs_faults_and_its_own_in_time_order() -> None:
    plan = plan_of(leaf_spine_doc(2, 2, 1), {"faults": [FLAP]})
    session = SimpleNamespace(plan=plan)
    own = SimpleNamespace(faults=(parse_fault("12us restart spine2"),))
    spec = SimpleNamespace(options=own, start_lead_s=0.0)
    topo = SimpleNamespace(name="x", lab_dir_name="clab-x")
    runner = FaultRunner.for_run(spec, session, topo, runtime=object())  # type: ignore[arg-type]
    got = [(round(r.fault.at_s * 1e6), r.fault.describe()) for r in runner.records]
    assert got == [
        (10, "link spine1:eth2 down"),
        (12, "restart spine2"),
        (15, "link spine1:eth2 up"),
        (20, "link spine1:eth2 down"),
        (25, "link spine1:eth2 up"),
    ]
