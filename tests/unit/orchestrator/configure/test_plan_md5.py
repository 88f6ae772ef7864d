"""TCP-MD5 secrets from the vars (RFC 2385, issue 18): on every session or per link, from the vars file, an
environment variable or a file; in the two node files of a session and nowhere else (plan.yml, repr, error
messages)."""

from __future__ import annotations

import pytest
import yaml

from aidcnet.config import parse_config
from orchestrator.configure.plan import LabVars, PlanError, build_plan, dump_plan, node_config
from orchestrator.configure.plan.schema import LabPlan
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, topo_of

SECRET = "s3cret-Bgp!"


def plan_with(bgp: dict | None = None, links: dict | None = None, source: str = "labs/x.vars.yml") -> LabPlan:
    doc = {"bgp": {"enabled": True, **(bgp or {})}, "links": links or {}}
    return build_plan(topo_of(leaf_spine_doc(2, 2, 1)), LabVars.model_validate(doc).with_source(source))


def secrets(plan: LabPlan) -> dict[tuple[str, str], str | None]:
    """(node, neighbor) -> the secret in that node's file."""
    return {
        (node, n.name): n.md5_password
        for node in plan.nodes
        if (cfg := node_config(plan, node)).bgp is not None
        for n in cfg.bgp.neighbors
    }


def test_one_secret_signs_every_session_at_both_ends():
    got = secrets(plan_with({"md5": SECRET}))
    assert len(got) > 8 and set(got.values()) == {SECRET}
    assert all(got[(b, a)] == got[(a, b)] for a, b in got)
    cfg = node_config(plan_with({"md5": SECRET}), "leaf1")
    assert parse_config(cfg.model_dump(mode="json")) == cfg  # the agent accepts it


def test_without_md5_no_session_is_signed():
    assert set(secrets(plan_with()).values()) == {None}


def test_a_link_overrides_the_secret_or_turns_it_off_for_its_session():
    plan = plan_with({"md5": SECRET}, {"leaf1:eth1": {"md5": "other-Key"}, "spine2:eth2": {"md5": False}})
    got = secrets(plan)
    a, b = plan.links[0].a.node, plan.links[0].b.node
    assert (a, b) == ("leaf1", "spine1")
    assert got[(a, b)] == got[(b, a)] == "other-Key"
    (off,) = [link for link in plan.links if "spine2:eth2" in (f"{link.a.node}:{link.a.interface}",
                                                                f"{link.b.node}:{link.b.interface}")]
    assert got[(off.a.node, off.b.node)] is None and got[(off.b.node, off.a.node)] is None
    assert sum(v == SECRET for v in got.values()) == len(got) - 4


def test_a_secret_only_on_links_signs_only_those():
    got = secrets(plan_with(links={"leaf1:eth1": {"md5": SECRET}}))
    assert {k for k, v in got.items() if v} == {("leaf1", "spine1"), ("spine1", "leaf1")}


def test_secret_from_an_environment_variable(monkeypatch):
    monkeypatch.setenv("LAB_BGP_MD5", SECRET)
    assert set(secrets(plan_with({"md5": {"env": "LAB_BGP_MD5"}})).values()) == {SECRET}
    monkeypatch.delenv("LAB_BGP_MD5")
    with pytest.raises(PlanError, match=r"bgp.md5: the environment variable LAB_BGP_MD5 is not set"):
        plan_with({"md5": {"env": "LAB_BGP_MD5"}})


def test_secret_from_a_file_beside_the_vars_file(tmp_path):
    (tmp_path / "bgp.key").write_text(SECRET + "\n")
    source = str(tmp_path / "lab.vars.yml")
    plan = plan_with(links={"leaf1:eth1": {"md5": {"file": "bgp.key"}}}, source=source)
    assert secrets(plan)[("leaf1", "spine1")] == SECRET
    with pytest.raises(PlanError, match=r"links.leaf1:eth1.md5: cannot read the secret file .*missing.key"):
        plan_with(links={"leaf1:eth1": {"md5": {"file": "missing.key"}}}, source=source)


def test_a_secret_the_node_file_would_refuse_is_named_by_key_not_shown():
    bad = "has space;"
    with pytest.raises(PlanError) as exc:
        plan_with({"md5": bad})
    assert "bgp.md5: not a valid secret: TCP-MD5 secret: 1-80 printable ASCII" in str(exc.value)
    assert bad not in str(exc.value)


def test_the_secret_stays_out_of_plan_yml_repr_and_vars_errors():
    plan = plan_with({"md5": SECRET}, {"leaf1:eth1": {"md5": "other-Key"}})
    text = dump_plan(plan)
    assert SECRET not in text and "other-Key" not in text
    assert SECRET not in repr(plan) and SECRET not in repr(LabVars.model_validate({"bgp": {"md5": SECRET}}))
    assert "md5: true" in text  # what plan.yml says: the session is signed
    # Both ends pinned with different secrets: the clash names the keys, not the secrets.
    with pytest.raises(PlanError) as exc:
        plan_with(links={"leaf1:eth1": {"md5": SECRET}, "spine1:eth1": {"md5": "other-Key"}})
    said = str(exc.value)
    assert "disagrees" in said and SECRET not in said and "other-Key" not in said


def test_a_plan_read_back_from_plan_yml_cannot_render_a_signed_session():
    back = LabPlan.model_validate(yaml.safe_load(dump_plan(plan_with({"md5": SECRET}))))
    with pytest.raises(PlanError, match=r"read from plan\.yml, which never holds secrets"):
        node_config(back, "leaf1")
    # An unsigned lab reads back and renders as before.
    assert node_config(LabPlan.model_validate(yaml.safe_load(dump_plan(plan_with()))), "leaf1").bgp


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"bgp": {"md5": {"env": "A", "file": "b"}}}, "bgp.md5: give the secret's source as exactly one of"),
        ({"links": {"leaf1:eth1": {"md5": True}}}, "links.leaf1:eth1.md5: Input should be False"),
    ],
)
def test_vars_shape_errors_name_the_key(doc, message, tmp_path):
    from orchestrator.configure.plan import load_vars

    path = tmp_path / "x.vars.yml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PlanError, match=message):
        load_vars(path)
