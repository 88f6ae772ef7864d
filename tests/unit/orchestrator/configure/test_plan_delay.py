"""The delay feature: one-way propagation delay per link class (host, fabric, dci), per-link pins, jitter."""

from __future__ import annotations

import copy

import pytest

from orchestrator.configure.plan import PlanError
from orchestrator.configure.plan.delay import SITE_LABEL
from orchestrator.lab.fabric import fabric_from_plan
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, plan_of


def two_sites() -> dict:
    """leaf1 and spine1 in site a, leaf2 and spine2 in site b: leaf1--spine2 and leaf2--spine1 are DCI."""
    doc = copy.deepcopy(leaf_spine_doc(2, 2, 1))
    nodes = doc["topology"]["nodes"]
    for name, site in (("leaf1", "a"), ("spine1", "a"), ("leaf2", "b"), ("spine2", "b")):
        nodes[name]["labels"] = {SITE_LABEL: site}
    return doc


def delays(plan) -> dict[str, tuple[str, float, float]]:
    return {f"{x.a}": (x.link_class, x.delay_s, x.jitter_s) for x in plan.links}


def test_by_default_no_link_is_delayed():
    plan = plan_of(leaf_spine_doc(1, 1, 1))
    assert {(c, d, j) for c, d, j in delays(plan).values()} == {("fabric", 0.0, 0.0), ("host", 0.0, 0.0)}
    assert fabric_from_plan(plan).delayed_ends() == {}


def test_links_between_sites_take_the_dci_default_of_2ms():
    plan = plan_of(two_sites())
    assert delays(plan) == {
        "leaf1:eth1": ("fabric", 0.0, 0.0),
        "leaf1:eth2": ("dci", 0.002, 0.0),
        "leaf2:eth1": ("dci", 0.002, 0.0),
        "leaf2:eth2": ("fabric", 0.0, 0.0),
        "h1:eth1": ("host", 0.0, 0.0),
        "h2:eth1": ("host", 0.0, 0.0),
    }
    delayed = {"leaf1:eth2", "spine2:eth1", "leaf2:eth1", "spine1:eth2"}
    assert set(fabric_from_plan(plan).delayed_ends()) == delayed


def test_class_defaults_and_pins_on_either_end_win_in_that_order():
    plan = plan_of(
        two_sites(),
        {
            "delay": {"host": "1us", "fabric": "500ns", "dci": "5ms", "jitter": "100ns"},
            "links": {"spine2:eth1": {"delay": "10ms"}, "h2:eth1": {"delay": "0", "jitter": "0"}},
        },
    )
    got = delays(plan)
    assert got["leaf1:eth2"] == ("dci", 0.01, 1e-7)  # pinned at the spine's end
    assert got["leaf2:eth1"] == ("dci", 0.005, 1e-7)
    assert got["leaf1:eth1"] == ("fabric", 5e-7, 1e-7)
    assert got["h1:eth1"] == ("host", 1e-6, 1e-7) and got["h2:eth1"] == ("host", 0.0, 0.0)


def test_a_jitter_above_a_delay_names_the_link_and_both_sources():
    needle = r"delay\.jitter: link leaf1:eth1--spine1:eth1 \(500 ns from delay\.fabric"
    with pytest.raises(PlanError, match=needle):
        plan_of(two_sites(), {"delay": {"fabric": "500ns", "jitter": "1us"}})


@pytest.mark.parametrize(
    ("vars_doc", "needle"),
    [
        ({"delay": {"dci": "2"}}, r"labs/x\.vars\.yml: delay\.dci: delay '2': give a unit"),
        ({"links": {"leaf1:eth1": {"delay": "soon"}}}, r"leaf1:eth1\.delay: delay 'soon' is not a duration"),
        ({"links": {"leaf1:eth1": {"delay": "1us", "jitter": "2us"}}}, "jitter 2 µs is above the delay 1 µs"),
        (
            {"links": {"leaf1:eth1": {"delay": "1us"}, "spine1:eth1": {"delay": "2us"}}},
            "disagrees with the other end's",
        ),
    ],
)
def test_bad_delays_name_the_key_and_the_file(vars_doc, needle):
    with pytest.raises(PlanError, match=needle):
        plan_of(two_sites(), vars_doc)


def test_a_node_without_a_site_never_makes_a_dci_link():
    doc = two_sites()
    del doc["topology"]["nodes"]["spine2"]["labels"], doc["topology"]["nodes"]["leaf2"]["labels"]
    assert {c for c, _d, _j in delays(plan_of(doc)).values()} == {"fabric", "host"}
