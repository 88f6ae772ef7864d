"""bier.edge_policy in the vars: on by default, every BFR port gets its RFC 8296 §6 policy; off, none."""

from __future__ import annotations

import pytest

from aidcnet.agent.bier.service import edge_policies
from aidcnet.bier.bitstring import bitstrings_from_ids
from aidcnet.bier.edge_policy import check
from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS


def configs(vars_doc: dict):
    plan = build_plan(load_topology(LABS / "leaf-spine.clab.yml"), LabVars.model_validate(vars_doc))
    return node_configs(plan)


def test_on_by_default_and_off_on_request() -> None:
    bfrs = [c.bier for c in configs({}).values() if c.bier]
    assert bfrs and all(b.edge_policy for b in bfrs)
    assert all(not c.bier.edge_policy for c in configs({"bier": {"edge_policy": False}}).values() if c.bier)


def test_leaf_host_ports_and_fabric_ports() -> None:
    cs = configs({})
    leaf1 = cs["leaf1"].bier
    by_nbr = {n.name: n for n in leaf1.neighbors}
    policies = edge_policies(leaf1)
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


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".clab.yml") for p in LABS.glob("*.clab.yml")))
def test_every_shipped_labs_bier_passes_its_policy(name: str) -> None:
    """With the default (on), every BFR accepts what its BIER neighbours legitimately send it: a BFR
    forwarding or imposing (INA dissemination, network-BIER leaves) any header on a fabric port, a
    host imposing (host-BIER, replays, reliable DATA) with its own BFR-id to the whole domain.  ACKs
    and AGG-ACKs are unicast UDP (aidcnet/agent/reliable/node.py), not BIER, so no policy sees them.
    The port is the interface the neighbour's packets come in on, on both dataplanes."""
    cs = node_configs(build_plan(load_topology(LABS / f"{name}.clab.yml")))
    bfrs = {n: c.bier for n, c in cs.items() if c.bier}
    bsl = next(iter(bfrs.values())).bsl
    domain = bitstrings_from_ids([b.bfr_id for b in bfrs.values()], bsl)
    checked = 0
    for node, bier in bfrs.items():
        assert bier.edge_policy, f"{name}: {node} has no edge policy"
        policies = edge_policies(bier)
        for nbr in bier.neighbors:
            port = nbr.interface
            sender = bfrs[nbr.name]
            for si, bits in domain.items():
                why = check(policies[port], str(nbr.address), si, bits, sender.bfr_id)
                assert why is None, f"{name}: {node} drops {nbr.name}'s BIER on {port}: {why}"
                checked += 1
    assert checked >= len(bfrs)


def test_tenant_hosts_may_address_only_their_tenant() -> None:
    cs = configs({"bier": {"tenants": {"red": ["h3", "h1"]}}})
    ids = {h: cs[h].bier.bfr_id for h in ("h1", "h2", "h3", "h4")}
    leaf1 = cs["leaf1"].bier
    by_nbr = {n.name: n for n in leaf1.neighbors}
    policies = edge_policies(leaf1)
    h1, h2 = by_nbr["h1"], by_nbr["h2"]
    bit = {h: 1 << (i - 1) for h, i in ids.items()}  # all in SI 0 at BSL 256
    assert check(policies[h1.interface], str(h1.address), 0, bit["h3"] | bit["h1"], ids["h1"]) is None
    assert check(policies[h1.interface], str(h1.address), 0, bit["h4"], ids["h1"]) == "bitstring-outside-set"
    # h2 is in no tenant: the whole domain
    assert check(policies[h2.interface], str(h2.address), 0, bit["h4"] | bit["h1"], ids["h2"]) is None


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        ({"red": ["spine1"]}, "tenant red: 'spine1' is not a gpu-host node"),
        ({"red": ["nohost"]}, "tenant red: 'nohost' is not a gpu-host node"),
        ({"red": ["h1"], "blue": ["h1", "h2"]}, "h1 is in tenants red and blue"),
    ],
)
def test_tenants_name_the_fault(tenants: dict, message: str) -> None:
    from orchestrator.configure.plan.schema import PlanError

    with pytest.raises(PlanError, match=message) as err:
        configs({"bier": {"tenants": tenants}})
    assert "bier.tenants" in str(err.value)
