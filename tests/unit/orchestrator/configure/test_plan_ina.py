"""The INA plan feature on Figure 1 (labs/ina-fig1): A-BMs as BFR-ids, parents, the paths packets take
toward the root (VAT nodes, transit hops, first hops), the node-file sections, and refusals that name
the vars key for jobs that could never complete."""

from __future__ import annotations

import copy

import pytest
import yaml

from aidcnet.config import parse_config
from orchestrator.configure.plan import LabVars, PlanError, build_plan, node_configs
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS as LABS_DIR

LABS = LABS_DIR
TOPO = load_topology(LABS / "ina-fig1.clab.yml")
VARS = yaml.safe_load((LABS / "ina-fig1.vars.yml").read_text())


def plan_with(vars_doc: dict):
    return build_plan(TOPO, LabVars.model_validate(vars_doc).with_source("test.vars.yml"))


def link_address(plan, node: str, peer: str) -> str:
    for link in plan.links:
        for here, there in ((link.a, link.b), (link.b, link.a)):
            if here.node == node and there.node == peer:
                return str(here.address.ip)
    raise AssertionError(f"no link {node}-{peer}")


def test_figure1_job1_as_drawn():
    plan = plan_with(VARS)
    job = next(j for j in plan.ina if j.job == 1)
    assert {n: (v.abm_bfr_ids, v.parent) for n, v in job.vat.items()} == {
        "s1": ([1, 2], "s6"), "s6": ([1, 2, 3, 4], None), "s7": ([3, 4], "s6"),
    }  # fmt: skip
    # s1 -> s5 -> s7 -> s6: s5 and (for w3, w4) s2 only pass packets on; s7 is a VAT node, not transit.
    assert str(job.vat["s1"].next_hop) == link_address(plan, "s5", "s1")
    assert str(job.transit["s5"]) == link_address(plan, "s7", "s5")
    assert str(job.vat["s7"].next_hop) == link_address(plan, "s6", "s7")
    assert set(job.transit) == {"s2", "s5"}
    assert {w: str(a) for w, a in job.first_hop.items()} == {
        "w1": link_address(plan, "s1", "w1"), "w2": link_address(plan, "s1", "w2"),
        "w3": link_address(plan, "s2", "w3"), "w4": link_address(plan, "s2", "w4"),
    }  # fmt: skip
    assert job.window == job.slot_budget // 2


def test_second_job_on_other_switches_crosses_job1_switches_as_transit():
    plan = plan_with(VARS)
    j1, j2 = plan.ina
    assert not set(j1.vat) & set(j2.vat)
    assert set(j2.transit) == {"s6", "s7"} and j2.root == "s5"


def test_node_files_round_trip_through_the_agent_model():
    configs = node_configs(plan_with(VARS))
    s6 = configs["s6"].ina
    assert [(j.job_id, j.abm, j.root) for j in s6.jobs] == [(1, [1, 2, 3, 4], True)]
    assert [t.job_id for t in s6.transit] == [2]
    assert [m.job_id for m in configs["w3"].ina.members] == [1] and configs["w3"].ina.jobs == []
    assert configs["s2"].ina.jobs == [] and [t.job_id for t in configs["s2"].ina.transit] == [1]
    for cfg in configs.values():
        assert parse_config(cfg.model_dump(mode="json")) == cfg


def test_no_jobs_gives_every_switch_an_empty_section():
    configs = node_configs(plan_with({}))
    assert configs["s1"].ina is not None and configs["s1"].ina.jobs == []
    assert configs["w1"].ina is None


def bad(mutate) -> str:
    doc = copy.deepcopy(VARS)
    mutate(doc["ina"]["jobs"][0])
    with pytest.raises(PlanError) as info:
        plan_with(doc)
    return str(info.value)


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda j: j["abm"].update(s1=["w1", "w3"]), "overlap without one containing"),
        (lambda j: j["abm"].update(s6=["w1", "w2"]), "root's A-BM must hold every worker"),
        (lambda j: j["abm"].update(s1=["w1", "w9"]), "not in the job's workers"),
        (lambda j: j.update(root="w1"), "ina.jobs.0.root"),
        (lambda j: j["workers"].append("s2"), "not a gpu-host"),
        # w1, w2 at s7 and w3, w4 at s1: w3's packets never cross s1, they meet s7 first.
        (lambda j: j["abm"].update(s1=["w3", "w4"], s7=["w1", "w2"]), "before their parent"),
        (lambda j: j.update(dtype="fixed32", op="prod"), "fixed32 cannot carry prod"),
    ],
)
def test_refusals_name_the_key(mutate, expect):
    message = bad(mutate)
    assert expect in message and "test.vars.yml" in message


def test_duplicate_job_id_is_refused():
    doc = copy.deepcopy(VARS)
    doc["ina"]["jobs"][1]["job"] = 1
    with pytest.raises(PlanError, match=r"ina\.jobs\.1\.job"):
        plan_with(doc)
