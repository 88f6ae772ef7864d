"""A management network per lab: what the topology file decides, what the lab directory records, and how a
failed start or a destroy gets rid of endpoints Docker keeps for containers that are gone."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest
import yaml

from orchestrator.configure.plan import PlanError, addressing, build_plan
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab import deploy as deploy_mod
from orchestrator.lab import labdir
from orchestrator.lab.runtime.docker import ContainerSpec, DockerError, DockerRuntime, stale_endpoints
from orchestrator.lab.topology import DEFAULT_MGMT_SUBNET, MGMT_POOL, parse_topology
from tests.unit.orchestrator.lab.test_mgmt_room import Runtime

NODE = {"kind": "linux", "image": "aidclab/bfr:latest"}


def doc(mgmt: dict[str, Any] | None = None, nodes: int = 2, **node: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "mg-a",
        "topology": {"nodes": {f"n{i}": {**NODE, **node} for i in range(nodes)}},
    }
    if mgmt is not None:
        d["mgmt"] = mgmt
    return d


# --- what the file decides ---------------------------------------------------------------------------


def test_a_lab_that_names_no_network_gets_its_own_with_the_subnet_left_to_deploy():
    mgmt = parse_topology(doc(), "mg-a.clab.yml").mgmt
    assert (mgmt.network, mgmt.ipv4_subnet, mgmt.own) == ("clab-mg-a", None, True)


def test_a_named_network_is_kept_with_containerlab_default_subnet():
    mgmt = parse_topology(doc({"network": "clab"}), "mg-a.clab.yml").mgmt
    assert (mgmt.network, mgmt.ipv4_subnet, mgmt.own) == ("clab", DEFAULT_MGMT_SUBNET, False)
    mgmt = parse_topology(doc({"network": "x", "ipv4-subnet": "10.9.0.0/24"}), "mg-a.clab.yml").mgmt
    assert (mgmt.network, mgmt.ipv4_subnet, mgmt.own) == ("x", "10.9.0.0/24", False)


def test_an_own_network_keeps_a_subnet_the_file_sets_and_auto_means_chosen_at_deploy():
    mgmt = parse_topology(doc({"ipv4-subnet": "10.9.0.0/24"}), "mg-a.clab.yml").mgmt
    assert (mgmt.network, mgmt.ipv4_subnet, mgmt.own) == ("clab-mg-a", "10.9.0.0/24", True)
    assert parse_topology(doc({"ipv4-subnet": "auto"}), "mg-a.clab.yml").mgmt.ipv4_subnet is None


def test_a_pinned_management_address_needs_a_known_subnet():
    d = doc()
    d["topology"]["nodes"]["n0"]["mgmt-ipv4"] = "172.20.20.7"
    assert parse_topology(d, "mg-a.clab.yml").mgmt.ipv4_subnet == DEFAULT_MGMT_SUBNET


def test_an_undeployed_own_network_claims_no_addresses_in_the_plan():
    topo = parse_topology(doc(), "mg-a.clab.yml")
    # A loopback in containerlab's old default subnet is fine now: the lab's subnet is not known yet.
    plan = build_plan(topo, LabVars.model_validate({"nodes": {"n0": {"loopback": "172.20.20.9"}}}))
    assert str(plan.nodes["n0"].loopback) == "172.20.20.9/32"


# --- what the lab directory records -------------------------------------------------------------------


def test_the_subnet_deploy_chose_is_read_back_from_the_lab_directory(tmp_path):
    deployed = parse_topology(doc(), "mg-a.clab.yml")
    deployed.mgmt.ipv4_subnet = "172.16.0.0/28"
    path = tmp_path / deployed.lab_dir_name
    path.mkdir()
    data = labdir.topology_data(deployed, {}, 28)
    (path / "topology-data.json").write_text(json.dumps(data))

    fresh = parse_topology(doc(), "mg-a.clab.yml")
    assert labdir.settle_mgmt(fresh, tmp_path).mgmt.ipv4_subnet == "172.16.0.0/28"
    # A file that now names another network does not take the old record.
    renamed = parse_topology(doc({"network": "other"}), "mg-a.clab.yml")
    assert labdir.recorded_mgmt_subnet(renamed, tmp_path) is None
    assert labdir.recorded_mgmt_subnet(fresh, tmp_path / "nowhere") is None


def test_a_configure_plans_around_the_recorded_subnet(tmp_path, monkeypatch):
    deployed = parse_topology(doc(), "mg-a.clab.yml")
    deployed.mgmt.ipv4_subnet = "172.20.20.0/24"
    (tmp_path / deployed.lab_dir_name).mkdir()
    (tmp_path / deployed.lab_dir_name / "topology-data.json").write_text(
        json.dumps(labdir.topology_data(deployed, {}, 24))
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlanError, match=re.escape("lies inside mgmt.ipv4-subnet = 172.20.20.0/24")):
        build_plan(
            parse_topology(doc(), "mg-a.clab.yml"),
            LabVars.model_validate({"nodes": {"n0": {"loopback": "172.20.20.9"}}}),
        )


# --- deploy's room check -------------------------------------------------------------------------------


# the room check's fake engine: the one test_mgmt_room.py has
CountingRuntime = Runtime


def test_an_own_network_sized_at_deploy_is_never_too_small():
    topo = parse_topology(doc(nodes=3), "mg-a.clab.yml")
    deploy_mod._check_mgmt_room(CountingRuntime(10_000), topo)  # nothing to refuse: sized to the lab


def test_a_full_shared_network_suggests_leaving_mgmt_out():
    topo = parse_topology(doc({"network": "clab"}, nodes=3), "mg-a.clab.yml")
    with pytest.raises(deploy_mod.DeployError) as info:
        deploy_mod._check_mgmt_room(CountingRuntime(251), topo)
    msg = str(info.value)
    assert "3 nodes do not fit management network 'clab'" in msg and "251 attached by other labs" in msg
    assert "leave out mgmt.network" in msg and "ipv4-subnet: 172.17.0.0/29" in msg


# --- stale endpoints ---------------------------------------------------------------------------------


def test_stale_endpoints_are_those_of_gone_or_missing_containers():
    endpoints = {
        "aaa": {"Name": "clab-mg-a-n0"},  # removed just now (named in gone)
        "bbb": {"Name": "clab-mg-a-n1"},  # unknown to Docker
        "ccc": {"Name": "clab-other-n0"},  # another lab's, running
        "ep-ddd": {"Name": "clab-other-n1"},  # endpoint id key: asked by name, which exists
        "ep-eee": {"Name": "clab-mg-a-n2"},  # endpoint id key, no such container
        "fff": {"Name": ""},
    }
    alive = {"aaa", "ccc", "clab-other-n1"}
    assert stale_endpoints(endpoints, {"clab-mg-a-n0"}, alive.__contains__) == [
        "clab-mg-a-n0", "clab-mg-a-n1", "clab-mg-a-n2",
    ]  # fmt: skip


def test_a_container_id_key_is_asked_by_id_not_by_a_name_a_new_container_took():
    # The endpoint of a removed container "x" (id old) while a new "x" (id new) runs: still stale.
    assert stale_endpoints({"old": {"Name": "x"}}, set(), {"new", "x"}.__contains__) == ["x"]


class FakeAPI:
    """The slice of docker's APIClient that DockerRuntime.run and the network helpers call, recording
    the calls; ``start`` fails, as it does when the management subnet is out of addresses."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.endpoints = {"cid1": {"Name": "clab-mg-a-n0"}}
        self.containers = {"cid1"}

    def create_host_config(self, **_: Any) -> dict[str, Any]:
        return {}

    def create_container(self, *_: Any, **__: Any) -> dict[str, str]:
        return {"Id": "cid1"}

    def start(self, cid: str) -> None:
        response = SimpleNamespace(status_code=500, reason="", url="")
        raise docker.errors.APIError("500", response=response, explanation="no available IPv4 addresses")

    def disconnect_container_from_network(self, container: str, net: str, force: bool = False) -> None:
        self.calls.append(("disconnect", container, net, str(force)))
        self.endpoints = {k: v for k, v in self.endpoints.items() if container not in (k, v["Name"])}

    def remove_container(self, cid: str, force: bool = False, v: bool = False) -> None:
        self.calls.append(("remove", cid))
        self.containers.discard(cid)

    def inspect_container(self, name: str) -> dict[str, Any]:
        if name in self.containers:
            return {}
        raise docker.errors.NotFound("gone")


class FakeNetwork:
    def __init__(self, api: FakeAPI) -> None:
        self.api, self.name, self.id = api, "clab-mg-a", "netid"
        self.attrs: dict[str, Any] = {}

    def reload(self) -> None:
        self.attrs = {"Containers": dict(self.api.endpoints)}


def test_a_failed_start_disconnects_the_endpoint_with_force_before_removing_the_container():
    api = FakeAPI()
    net = FakeNetwork(api)
    client = SimpleNamespace(api=api, networks=SimpleNamespace(list=lambda names=None, **_: [net]))
    runtime = DockerRuntime(client)  # type: ignore[arg-type]
    spec = ContainerSpec(name="clab-mg-a-n0", image="aidclab/bfr:latest", hostname="n0", network="clab-mg-a")
    with pytest.raises(DockerError, match=r"starting clab-mg-a-n0: .*no available IPv4"):
        runtime.run(spec)
    assert api.calls[:2] == [("disconnect", "cid1", "clab-mg-a", "True"), ("remove", "cid1")]
    assert api.endpoints == {} and api.containers == set()


def test_a_start_that_times_out_is_undone_too(monkeypatch):
    import requests.exceptions

    api = FakeAPI()

    def slow_start(cid: str) -> None:
        raise requests.exceptions.ReadTimeout("read timed out")

    api.start = slow_start  # type: ignore[method-assign]
    net = FakeNetwork(api)
    client = SimpleNamespace(api=api, networks=SimpleNamespace(list=lambda names=None, **_: [net]))
    spec = ContainerSpec(name="clab-mg-a-n0", image="aidclab/bfr:latest", hostname="n0", network="clab-mg-a")
    with pytest.raises(DockerError, match="no answer from dockerd"):
        DockerRuntime(client).run(spec)  # type: ignore[arg-type]
    assert api.calls[:2] == [("disconnect", "cid1", "clab-mg-a", "True"), ("remove", "cid1")]


def test_an_endpoint_left_after_the_removal_is_dropped_by_name():
    api = FakeAPI()
    api.endpoints = {"cid1": {"Name": "clab-mg-a-n0"}, "cid9": {"Name": "clab-mg-a-n9"}}
    api.containers = {"cid9"}
    net = FakeNetwork(api)
    client = SimpleNamespace(api=api, networks=SimpleNamespace(list=lambda names=None, **_: [net]))
    runtime = DockerRuntime(client)  # type: ignore[arg-type]
    assert runtime.drop_stale_endpoints("clab-mg-a", force=False) == ["clab-mg-a-n0"]
    assert api.calls == []  # only listed
    assert runtime.drop_stale_endpoints("clab-mg-a") == ["clab-mg-a-n0"]
    assert api.calls == [("disconnect", "clab-mg-a-n0", "netid", "True")]
    assert list(api.endpoints) == ["cid9"]


def test_the_own_subnet_pool_is_clear_of_the_plan_pools():
    defaults = yaml.safe_load((Path(addressing.__file__).with_suffix(".yml")).read_text())["pools"]
    for kind in ("loopback", "links"):
        assert not ipaddress.ip_network(MGMT_POOL).overlaps(ipaddress.ip_network(defaults[kind])), kind


def test_an_endpoint_the_network_hides_but_still_counts_is_disconnected_by_the_removed_name(monkeypatch):
    """``docker network rm`` says "has active endpoints" while inspect lists none: destroy disconnects the
    containers it removed by name, with force, and the network goes."""
    monkeypatch.setattr("orchestrator.lab.runtime.docker.time.sleep", lambda _s: None)
    api = FakeAPI()
    api.endpoints, api.containers = {}, set()
    hidden = {"clab-mg-a-n0"}
    net = FakeNetwork(api)
    net.attrs = {"Labels": {"aidclab.managed": "true"}}
    removed: list[bool] = []

    def disconnect(container: str, _net: str, force: bool = False) -> None:
        api.calls.append(("disconnect", container, _net, str(force)))
        hidden.discard(container)

    def remove() -> None:
        if hidden:
            response = SimpleNamespace(status_code=403, reason="", url="")
            raise docker.errors.APIError("403", response=response, explanation="has active endpoints")
        removed.append(True)

    api.disconnect_container_from_network = disconnect  # type: ignore[method-assign]
    net.remove = remove  # type: ignore[attr-defined]
    client = SimpleNamespace(api=api, networks=SimpleNamespace(list=lambda names=None, **_: [net]))
    runtime = DockerRuntime(client)  # type: ignore[arg-type]
    assert runtime.remove_network_if_unused("clab-mg-a", ["clab-mg-a-n0"]) is True
    assert removed == [True] and ("disconnect", "clab-mg-a-n0", "netid", "True") in api.calls
