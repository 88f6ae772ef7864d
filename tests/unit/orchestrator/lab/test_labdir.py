"""The lab directory files keep containerlab's shape and let plain ansible-playbook connect."""


from orchestrator.lab.labdir import NSENTER_CONNECTION, container_labels, inventory, topology_data
from orchestrator.lab.roles.base import image_role_name
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS as LABS_DIR

LABS = LABS_DIR


def test_inventory_groups_by_kind_and_role():
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    inv = inventory(topo, {"h1": "172.20.20.9"})
    children = inv["all"]["children"]
    assert set(children) >= {"linux", "bfr", "gpu_host", "spine", "leaf", "gpu"}
    assert len(children["linux"]["hosts"]) == 14
    h1 = children["gpu_host"]["hosts"]["clab-leaf-spine-h1"]
    assert h1["ansible_host"] == "172.20.20.9"
    assert h1["ansible_docker_host"] == "clab-leaf-spine-h1"
    assert inv["all"]["vars"]["ansible_connection"] == "community.docker.docker"
    assert inventory(topo, {}, NSENTER_CONNECTION)["all"]["vars"]["ansible_connection"] == "aidclab_nsenter"
    # each group gets its own dict so YAML carries no anchors a reader must chase
    assert (
        children["gpu_host"]["hosts"]["clab-leaf-spine-h1"]
        is not children["linux"]["hosts"]["clab-leaf-spine-h1"]
    )


def test_topology_data_shape():
    topo = load_topology(LABS / "ina-fig1.clab.yml")
    data = topology_data(topo, {}, 24)
    assert data["name"] == "ina-fig1" and data["type"] == "clab"
    assert data["nodes"]["s6"]["longname"] == "clab-ina-fig1-s6"
    assert len(data["links"]) == 14
    assert data["links"][0]["a"] == {"node": "s7", "interface": "eth1", "mac": "", "peer": "z"}


def test_labels_are_containerlabs():
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    labels = container_labels(topo, "spine1")
    assert labels["containerlab"] == "leaf-spine"
    assert labels["clab-node-name"] == "spine1"
    assert labels["clab-node-kind"] == "linux"
    assert labels["clab-node-group"] == "spine"
    assert labels["aidclab-role"] == "bfr"


def test_image_role_name():
    assert image_role_name("aidclab/ina-switch:latest") == "ina-switch"
    assert image_role_name("localhost:5000/aidclab/frr") == "frr"
    assert image_role_name("debian:bookworm") is None
