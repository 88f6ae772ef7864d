"""BGP session security on by default (issue 18, docs/fare.md "Session security"), on the SuperPoD scaled
down to two GPUs (L1..L4, G1, G2; eight sessions).

With the default vars every session is signed with the lab's own TCP-MD5 secret (clab-<lab>/bgp.md5) and
runs GTSM with one hop. Then G1 alone is given another secret for its session with L1 (links.G1:eth1.md5,
played on G1 only, so L1 keeps the lab's): that session stays down, the fare_bgp role fails naming L1,
`aidcnet ctl show bgp` in G1 names it, and FARE carries on over the three planes whose secret is right.
Last, GTSM across the fabric: two extra ExaBGP speakers, in G1 and G2, peer between the two loopbacks, two
hops apart through a plane leaf. With one hop (the default) the session never comes up; with two it does.
"""

from __future__ import annotations

import json
import shlex
import stat
import time

import pytest
import yaml

from aidcnet.bgp import exabgp
from orchestrator.configure.ansible import compute_plan, run_playbook, write_lab_plan
from orchestrator.lab.labdir import BGP_MD5_FILE
from tests.exabgp_speaker import SPEAKER_ENV, event_sink_script, session_came_up

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


# The images' agent interpreter, which has ExaBGP and aidcnet.bgp.exabgp_main.
NODE_PYTHON = "/opt/aidcnet/bin/python"
GTSM_DIR = "/tmp/gtsm-e2e"


def start_loopback_speaker(runtime, topo, node: str, local: str, peer: str, hops: int) -> str:
    """An ExaBGP in ``node`` (besides the agent's) with one session from its loopback to ``peer``,
    started as the agent starts its own; returns its PID. Its messages go to GTSM_DIR/<node>.events."""
    events = f"{GTSM_DIR}/{node}.events"
    sink = event_sink_script(events)
    neighbor = exabgp.Neighbor(
        address=peer,
        local_address=local,
        local_asn=65001 if node == "G1" else 65002,
        peer_asn=65002 if node == "G1" else 65001,
        router_id=local,
        hold_time=9,
        ttl_security_hops=hops,
        passive=node == "G2",
    )
    conf = exabgp.config_text([neighbor], f"{NODE_PYTHON} {GTSM_DIR}/sink.py")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in SPEAKER_ENV.items())
    script = (
        f"mkdir -p {GTSM_DIR} && rm -f {events} && printf %s {shlex.quote(sink)} > {GTSM_DIR}/sink.py && "
        f"printf %s {shlex.quote(conf)} > {GTSM_DIR}/{node}.conf && "
        f"(env {env} setsid {NODE_PYTHON} -m aidcnet.bgp.exabgp_main server {GTSM_DIR}/{node}.conf "
        f"> {GTSM_DIR}/{node}.log 2>&1 < /dev/null & echo $!)"
    )
    code, out = runtime.exec(topo.container_name(node), ["sh", "-c", script])
    assert code == 0 and out.strip().isdigit(), out
    return out.strip()


def loopback_session_up(runtime, topo, node: str) -> bool:
    _code, out = runtime.exec(
        topo.container_name(node), ["sh", "-c", f"cat {GTSM_DIR}/{node}.events 2>/dev/null"]
    )
    return session_came_up(out)


@pytest.mark.parametrize("hops", [1, 2])
def test_gtsm_refuses_a_peer_two_hops_away_across_the_fabric(runtime, lab, hops: int) -> None:
    topo, _ = lab
    g1, g2 = loopback(runtime, topo, "G1"), loopback(runtime, topo, "G2")
    # The path between the loopbacks crosses one router: a packet sent with TTL 255 arrives with 254.
    code, out = runtime.exec(topo.container_name("G1"), ["ip", "-o", "route", "get", g2, "from", g1])
    assert code == 0 and " via " in out, out
    pids = {}
    try:
        pids["G2"] = start_loopback_speaker(runtime, topo, "G2", g2, g1, hops)
        pids["G1"] = start_loopback_speaker(runtime, topo, "G1", g1, g2, hops)
        # The refusal is given as long as an accepted handshake takes with hops 2 (ExaBGP retries its
        # connect every few seconds).
        deadline = time.monotonic() + (12.0 if hops == 1 else 30.0)
        up = False
        while time.monotonic() < deadline and not up:
            up = loopback_session_up(runtime, topo, "G1") and loopback_session_up(runtime, topo, "G2")
            time.sleep(0.5)
        if hops == 1:
            assert not up, "a GTSM one-hop session came up over two hops"
            assert not loopback_session_up(runtime, topo, "G1") and not loopback_session_up(
                runtime, topo, "G2"
            )
        else:
            assert up, "with GTSM at two hops the loopback session should come up (the control of hops 1)"
    finally:
        for node, pid in pids.items():
            runtime.exec(topo.container_name(node), ["kill", pid])
