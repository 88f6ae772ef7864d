"""FARE in the model: BGP converged in memory with the agents' own RIB code gives the weights of
docs/fare.md's SuperPoD example, and the unicast shares per plane follow them."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.configure.plan import build_plan
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology, resolve_lab
from orchestrator.model.exact import PlanModel
from orchestrator.workloads.trace import TraceOp


@pytest.fixture(scope="module")
def superpod_bgp():
    topo = load_topology(resolve_lab("superpod"))
    doc = yaml.safe_load((topo.path.parent / "superpod.vars.yml").read_text())
    doc["bgp"] = {"enabled": True}
    return build_plan(topo, LabVars.model_validate(doc))


# docs/fare.md, "Example: SuperPoD, one sub-link of G2's plane-2 Y-cable fails": G1's weights eth1..eth4.
CASES = [
    ({}, (), {"eth1": 1, "eth2": 1, "eth3": 1, "eth4": 1}),
    ({"G2:eth2": 400e9}, (), {"eth1": 2, "eth2": 1, "eth3": 2, "eth4": 2}),
    ({"G2:eth2": 400e9}, ("G1:eth3",), {"eth1": 2, "eth2": 1, "eth4": 2}),
]


@pytest.mark.parametrize(("bandwidth", "down", "weights"), CASES)
def test_superpod_weights_and_plane_shares(superpod_bgp, bandwidth, down, weights) -> None:
    model = PlanModel(superpod_bgp, bandwidth=bandwidth, down=down)
    assert {dev: w for dev, _nbr, w in model.fare_routes["G1"]["G2"]} == weights
    op = TraceOp(t=0.0, op="unicast", src="G1", dst=["G2"], bytes=80_000, id=0)
    run = model.run([op], "unicast")
    total = sum(weights.values())
    want = {f"eth{p}": weights.get(f"eth{p}", 0) / total for p in range(1, 5)}
    assert run.stats["plane_shares"]["G1"] == pytest.approx(want)
    # The kernel's hash picks the plane of a flow: every plane link is an expectation, the tier sum exact.
    for lk in run.links:
        if lk.a_node == "G1":
            dev = lk.a.split(":")[1]
            assert lk.a_to_b_exact is (dev not in weights), lk.link  # a plane with no weight carries 0
    assert sum(run.tier_sums[k][1] for k in run.tier_sums if k.startswith("0>")) == 10


def test_a_link_down_on_the_far_end_also_counts(superpod_bgp) -> None:
    # Taking the leaf's end down is the same link: G1 loses plane 3 all the same.
    model = PlanModel(superpod_bgp, down=("L3:eth1",))
    assert [dev for dev, _n, _w in model.fare_routes["G1"]["G2"]] == ["eth1", "eth2", "eth4"]


def test_a_signed_plan_read_back_from_plan_yml_models_the_same_weights(superpod_bgp) -> None:
    """TCP-MD5 is on by default in a lab's plan, and plan.yml keeps ``md5: true`` without the secret:
    the model (e2e crossval reads plan.yml) must still converge, to the same weights."""
    signed = superpod_bgp.model_copy(
        update={
            "links": [
                link.model_copy(update={"md5": True, "md5_secret": None}) for link in superpod_bgp.links
            ]
        }
    )
    model = PlanModel(signed)
    assert {dev: w for dev, _nbr, w in model.fare_routes["G1"]["G2"]} == CASES[0][2]
    assert model.bier_tables("G1") is not None  # node configs again, for the BIER tables


def test_the_readme_says_the_weights_the_kernel_gets_for_a_halved_y_cable(superpod_bgp) -> None:
    """The README's FARE quick start halves G2's plane-2 Y-cable and says what G1's route to G2 becomes:
    the same numbers as the agents' own RIB code gives (the kernel shows them as ``weight N``)."""
    import re

    from orchestrator.paths import ROOT

    readme = (ROOT / "README.md").read_text().splitlines()
    line = next(ln for ln in readme if "link set superpod G2:eth2 bandwidth 400G" in ln)
    said = re.search(r"weights (\d(?: \d)*) become (\d(?: \d)*)", line)
    assert said, f"README no longer says which weights the halved Y-cable gives: {line}"
    for words, bandwidth in ((said[1], {}), (said[2], {"G2:eth2": 400e9})):
        model = PlanModel(superpod_bgp, bandwidth=bandwidth)
        weights = {dev: w for dev, _nbr, w in model.fare_routes["G1"]["G2"]}
        assert words.split() == [str(weights[f"eth{p}"]) for p in range(1, 5)], (words, weights)
