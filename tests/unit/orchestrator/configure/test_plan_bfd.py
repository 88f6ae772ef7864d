"""bfd in the vars: off by default; on, a session on every link whose two ends run our agent, the interval
in fabric microseconds (unset: the wall interval divided by the time scale), checked at plan time."""

from __future__ import annotations

import pytest

from aidcnet.roles import AGENT_ROLES
from orchestrator.configure.plan import PlanError, build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS


def plan_of(vars_doc: dict, lab: str = "leaf-spine"):
    return build_plan(load_topology(LABS / f"{lab}.clab.yml"), LabVars.model_validate(vars_doc))


def test_off_by_default():
    plan = plan_of({})
    assert plan.bfd is not None and not plan.bfd.enabled
    assert all(c.bfd is None for c in node_configs(plan).values())


def test_on_every_link_between_agents_with_the_interval_in_fabric_time():
    plan = plan_of({"bfd": {"enabled": True}, "time": {"scale": 10000}})
    # a BFD packet may wait behind a full 4 MiB queue at 400G (83.9 us): half that per interval, so three
    # intervals outlast it with one to spare
    assert plan.bfd.interval_us == pytest.approx(4 * 2**20 * 8 / 400e9 / 2 * 1e6, abs=0.001)
    # with shallow queues the wall-clock floor wins: 50 ms at 1:10000
    shallow = plan_of({"bfd": {"enabled": True}, "time": {"scale": 10000}, "bandwidth": {"queue": "64KiB"}})
    assert shallow.bfd.interval_us == pytest.approx(5.0)
    configs = node_configs(plan)
    for link in plan.links:
        for here in (link.a, link.b):
            assert here.interface in configs[here.node].bfd.interfaces, str(here)
    assert configs["leaf1"].bfd.multiplier == 3 and configs["leaf1"].bfd.loss_threshold is None


def test_links_to_a_node_without_our_agent_get_no_session():
    plan = plan_of({"bfd": {"enabled": True}}, "superpod-frr")
    configs = node_configs(plan)
    foreign = {n for n, node in plan.nodes.items() if node.role not in AGENT_ROLES}
    assert foreign, "superpod-frr has FRR nodes"
    for link in plan.links:
        for here, there in ((link.a, link.b), (link.b, link.a)):
            cfg = configs.get(here.node)
            if cfg is None or cfg.bfd is None:
                continue
            assert (here.interface in cfg.bfd.interfaces) == (there.node not in foreign), str(here)


def test_a_pinned_interval_is_kept_and_a_window_too_narrow_for_the_threshold_is_refused():
    assert plan_of({"bfd": {"enabled": True, "interval_us": 7}}).bfd.interval_us == 7
    assert plan_of({"bfd": {"enabled": True, "loss_threshold": 0.2}}).bfd.loss_threshold == 0.2
    with pytest.raises(PlanError, match=r"bfd: .*loss_threshold 0.05 over loss_window 20"):
        plan_of({"bfd": {"enabled": True, "loss_threshold": 0.05}})
