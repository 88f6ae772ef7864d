"""A user's own test of a lab, written with the aidclab.pytest plugin: the complete example of
docs/testing-your-lab.md (a unit test keeps the two identical), run by `make test` like every e2e module."""

from aidclab.pytest import lab_fixture

# labs/leaf-spine.clab.yml, deployed and configured once for this module, under a name of its own so a
# leaf-spine you have running is never touched; destroyed after the last test, pass or fail.
lab = lab_fixture("leaf-spine", name="user-example")


def loopback(lab, node: str) -> str:
    return str(lab.plan.nodes[node].loopback.ip)


def test_every_node_is_configured(lab):
    for node in lab.topo.nodes:
        assert lab.ctl(node, "health")["configured"], node


def test_h1_reaches_h8(lab):
    lab.exec("h1", f"ping -c1 -W2 {loopback(lab, 'h8')}")  # a non-zero exit fails the test


def test_bier_from_h1_is_on_the_wire(lab):
    h5 = lab.plan.nodes["h5"].bfr_id
    with lab.capture("h1:eth1") as cap:
        sent = lab.ctl("h1", "bier", "send", "--to", str(h5), "--count", "5")
    assert sent["messages"] == sent["packets"] == 5
    # MPLS-in-UDP (RFC 7510) to port 6635 carries BIER from the host to its leaf.
    assert cap.count("udp dst port 6635") == 5, cap.lines()


def test_a_link_down_cuts_h8_off_and_up_brings_it_back(lab):
    h8 = loopback(lab, "h8")
    lab.link_set("h8:eth1", "down")
    try:
        assert lab.exec("h1", f"ping -c1 -W1 {h8}", check=False).code != 0
    finally:
        lab.link_set("h8:eth1", "up")
    lab.exec("h1", f"for i in 1 2 3 4 5; do ping -c1 -W1 {h8} && exit 0; sleep 1; done; exit 1")


def test_model_distribution_over_host_bier_reaches_every_host(lab):
    run = lab.replay("workloads/model-dist-sample.jsonl", "host-bier")  # from pytest's rootdir
    assert run.ok, f"missing {run.missing[:3]}, see {run.run_dir}"
