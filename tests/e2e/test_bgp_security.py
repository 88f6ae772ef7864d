"""BGP session security on by default (issue 18, docs/fare.md "Session security"), on the SuperPoD scaled
down to two GPUs (L1..L4, G1, G2; eight sessions).

With the default vars every session is signed with the lab's own TCP-MD5 secret (clab-<lab>/bgp.md5) and
runs GTSM with one hop. Then G1 alone is given another secret for its session with L1 (links.G1:eth1.md5,
played on G1 only, so L1 keeps the lab's): that session stays down, the fare_bgp role fails naming L1,
`aidcnet ctl show bgp` in G1 names it, and FARE carries on over the three planes whose secret is right.
"""

from __future__ import annotations

import json
import stat

import pytest
import yaml

from orchestrator.configure.ansible import compute_plan, run_playbook, write_lab_plan
from orchestrator.lab.labdir import BGP_MD5_FILE

from .conftest import agent, deployed, scale_superpod
from .test_fare import kernel_weights, loopback, session_when, weights_when

NAME = "t-bgpsec"
LAB_VARS = {
    "bandwidth": {"host": "800G", "host_sublinks": 2},
    "planes": 4,
    # hold time 3: L1 drops its old session with G1 quickly once G1 changed its secret.
    "bgp": {"enabled": True, "hold_time": 3},
}
WRONG = "not-the-Lab-secret-1"


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bgpsec")
    with deployed(runtime, tmp, "superpod", NAME, LAB_VARS, configured=True, edit=scale_superpod(2)) as topo:
        yield topo, tmp / f"clab-{NAME}"
    assert not (tmp / f"clab-{NAME}").exists(), "destroy left the lab dir (and its bgp.md5) behind"


def test_by_default_every_session_is_up_with_md5_and_gtsm(runtime, lab) -> None:
    topo, lab_dir = lab
    secret_file = lab_dir / BGP_MD5_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    assert secret not in (lab_dir / "plan.yml").read_text()
    for node in ("G1", "G2", "L1"):
        assert session_when(runtime, topo, node, "eth1", lambda s: s == "up") == "up", node
        reply = agent(runtime, topo, node).bgp()
        assert reply["neighbors"] and all(
            n["session"] == "up" and n["md5"] is True and n["gtsm_hops"] == 1 for n in reply["neighbors"]
        ), reply["neighbors"]
        assert secret not in json.dumps(reply) + json.dumps(agent(runtime, topo, node).config())


def test_a_wrong_secret_keeps_its_session_down_and_is_named(runtime, lab) -> None:
    topo, lab_dir = lab
    g2 = loopback(runtime, topo, "G2")
    vars_file = topo.path.parent / f"{topo.name}.vars.yml"
    vars_file.write_text(yaml.safe_dump({**LAB_VARS, "links": {"G1:eth1": {"md5": WRONG}}}))
    write_lab_plan(topo, compute_plan(topo))
    # Played on G1 only: L1 keeps the lab's secret, so the two ends of G1:eth1 disagree.
    report = run_playbook(
        lab_dir / "ansible-inventory.yml", limit=topo.container_name("G1"), extra_vars={"fare_bgp_wait_s": 20}
    )
    assert not report.ok
    failure = "\n".join(report.failures)
    assert "Session problems:" in failure and "(L1 via eth1): TCP-MD5 secret mismatch" in failure, failure
    assert WRONG not in failure

    g1 = agent(runtime, topo, "G1").bgp()
    eth1 = next(n for n in g1["neighbors"] if n["interface"] == "eth1")
    assert eth1["session"] != "up" and eth1["name"] == "L1" and "mismatch" in (eth1["problem"] or ""), eth1
    assert g1["tcp_md5_counters"]["TCPMD5Failure"] > 0
    code, out = runtime.exec(topo.container_name("G1"), ["aidcnet", "ctl", "show", "bgp"])
    assert code == 0 and "(L1 via eth1): TCP-MD5 secret mismatch" in out and WRONG not in out, out

    # FARE goes on over the three planes whose sessions have the right secret.
    three = {"eth2": 1, "eth3": 1, "eth4": 1}
    route = weights_when(runtime, topo, "G1", g2, three, wait_s=30)
    assert {h["dev"]: h["weight"] for h in route.get("nexthops", [])} == three, route
    assert kernel_weights(runtime, topo, "G1", g2) == three
    sent = agent(runtime, topo, "G1").fare_send(g2, mode="per-flow", flows=600)
    assert sent["tx_packets"].get("eth1", 0) == 0 and sum(sent["tx_packets"].values()) >= 600, sent
    # and the session is still down after FARE's own waits
    assert session_when(runtime, topo, "G1", "eth1", lambda s: s == "up", wait_s=2) != "up"
