"""bier.edge_policy in the vars: off by default; on, every BFR port gets its RFC 8296 §6 policy."""

from __future__ import annotations

from aidcnet.agent.bier_service import edge_policies
from aidcnet.bier.edge_policy import check
from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.model import LabVars
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS


def configs(vars_doc: dict):
    plan = build_plan(load_topology(LABS / "leaf-spine.clab.yml"), LabVars.model_validate(vars_doc))
    return node_configs(plan)


def test_off_by_default() -> None:
    assert all(not c.bier.edge_policy for c in configs({}).values() if c.bier)


def test_leaf_host_ports_and_fabric_ports() -> None:
    cs = configs({"bier": {"edge_policy": True}})
    leaf1 = cs["leaf1"].bier
    by_nbr = {n.name: n for n in leaf1.neighbors}
    policies, subnets = edge_policies(leaf1)
    h1, spine1 = by_nbr["h1"], by_nbr["spine1"]
    assert (
        leaf1.edge_policy[h1.interface].kind == "host"
        and leaf1.edge_policy[spine1.interface].kind == "fabric"
    )
    assert set(policies) == {n.interface for n in leaf1.neighbors}
    h1_id = cs["h1"].bier.bfr_id
    # h1 may impose with its own BFR-id to anyone in the domain, not with another's
    assert check(policies[h1.interface], str(h1.address), 0, 0b1111, h1_id) is None
    assert check(policies[h1.interface], str(h1.address), 0, 0b1, h1_id + 1) == "forged-bfir-id"
    assert check(policies[h1.interface], str(by_nbr["h2"].address), 0, 0b1, h1_id) == "not-bfir"
    assert check(policies[spine1.interface], str(spine1.address), 0, 1, 99) is None
    assert check(policies[spine1.interface], str(h1.address), 0, 1, h1_id) == "not-bfr-neighbor"
    # the host's own port to its leaf is a fabric port open to the leaf only
    h1_pol = cs["h1"].bier.edge_policy
    assert [p.kind for p in h1_pol.values()] == ["fabric"] and str(h1_pol[next(iter(h1_pol))].neighbors[0])
    assert all("/" in s for s in subnets.values())
