"""RFC 8296 §6 edge policy on a running leaf-spine, on both dataplanes, with the plan's default (on):
a host's BIER with a forged BFIR-id or with a BitString outside its tenant, and BIER from a non-BFR
source on a fabric port, are each dropped and counted per port and reason at the leaf; a legitimate
host still delivers.

The crafted packets are sent with a plain UDP socket from inside the containers, so they take the path
an attacker's would.  Not run by the helper that wrote it (e2e needs the shared images): the lead runs it.
"""

from __future__ import annotations

import time

import pytest

from .conftest import DATAPLANES, agent, deployed, on_dataplane

LAB = "t-edge"
# edge_policy left to the default (on); h1 and h3 form tenant red: h1 may address only h1 and h3
LAB_VARS = {"bier": {"bsl": 64, "tenants": {"red": ["h1", "h3"]}}}


@pytest.fixture(scope="module")
def deployed_lab(runtime, tmp_path_factory):
    with deployed(runtime, tmp_path_factory.mktemp("edge"), "leaf-spine", LAB) as topo:
        yield topo


@pytest.fixture(scope="module", params=DATAPLANES)
def lab(runtime, deployed_lab, request):
    on_dataplane(runtime, deployed_lab, LAB_VARS, request.param)
    return deployed_lab, request.param


def bier_conf(runtime, topo, node: str) -> dict:
    conf = agent(runtime, topo, node).config()
    assert conf is not None and conf.get("bier"), f"{node} has no bier section"
    return conf["bier"]


def send_raw(runtime, topo, node: str, dst: str, label: int, bfir_id: int, bits: int, src: str = "") -> None:
    """One BIER packet (BSL 64, SI 0) from ``node`` to ``dst``:6635, bound to ``src`` if given."""
    script = (
        "import socket\n"
        "from aidcnet.bier.header import BierHeader\n"
        f"pkt = BierHeader(bift_id={label}, bsl=64, ttl=64, bfir_id={bfir_id}, bitstring={bits}).encode()\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"s.bind(({src!r}, 0))\n"
        f"s.sendto(pkt + b'edge-policy-test', ({dst!r}, 6635))\n"
    )
    code, out = runtime.exec(topo.container_name(node), ["/opt/aidcnet/bin/python3", "-c", script])
    assert code == 0, f"sending from {node} failed: {out}"


def wait_for(runtime, topo, key: str, want: int, timeout: float = 5.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        c = agent(runtime, topo, "leaf1").counters()
        if c.get(key, 0) >= want or time.monotonic() > deadline:
            return c
        time.sleep(0.2)


def test_edge_policy_drops_and_counts_and_legit_host_delivers(runtime, lab):
    topo, dataplane = lab
    leaf = bier_conf(runtime, topo, "leaf1")
    assert leaf["edge_policy"], "the plan did not turn the edge policy on at leaf1 (default on)"
    nbrs = {n["name"]: n for n in leaf["neighbors"]}
    h1_id, h2_id, h3_id, h4_id = (bier_conf(runtime, topo, h)["bfr_id"] for h in ("h1", "h2", "h3", "h4"))
    h1_pol = leaf["edge_policy"][nbrs["h1"]["interface"]]
    assert list(h1_pol["hosts"].values()) == [{"bfr_id": h1_id, "allowed": sorted([h1_id, h3_id])}], h1_pol
    # where h1 and spine1 send to: leaf1's address on their link, leaf1's SI-0 label
    h1_leaf = next(n for n in bier_conf(runtime, topo, "h1")["neighbors"] if n["name"] == "leaf1")
    s1_leaf = next(n for n in bier_conf(runtime, topo, "spine1")["neighbors"] if n["name"] == "leaf1")
    label = leaf["label_base"]
    host_port, fabric_port = nbrs["h1"]["interface"], nbrs["spine1"]["interface"]
    agent(runtime, topo, "h3").bier_received(clear=True)
    agent(runtime, topo, "h4").bier_received(clear=True)
    before = agent(runtime, topo, "leaf1").counters()

    def delta(c: dict[str, int], key: str) -> int:
        return c.get(key, 0) - before.get(key, 0)

    # a forged BFIR-id (h2's) from h1, then a non-BFR source (the spine's loopback) on a fabric port
    send_raw(runtime, topo, "h1", h1_leaf["address"], label, h2_id, 1 << (h3_id - 1))
    send_raw(runtime, topo, "h1", h1_leaf["address"], label, h1_id, 1 << (h4_id - 1))  # outside red
    lo = str(agent(runtime, topo, "spine1").config()["loopback"]).split("/")[0]
    send_raw(runtime, topo, "spine1", s1_leaf["address"], label, 1, 1 << (h3_id - 1), src=lo)
    c = wait_for(runtime, topo, "bier.dropped-policy", before.get("bier.dropped-policy", 0) + 3)
    assert delta(c, f"bier.dropped-policy.{host_port}.forged-bfir-id") == 1, c
    assert delta(c, f"bier.dropped-policy.{host_port}.bitstring-outside-set") == 1, c
    # both dataplanes judge the port the packet came in on, whatever source it claims
    assert delta(c, f"bier.dropped-policy.{fabric_port}.not-bfr-neighbor") == 1, c
    assert delta(c, "bier.dropped-policy") == 3, c
    assert agent(runtime, topo, "h3").bier_received(clear=True) == []
    assert agent(runtime, topo, "h4").bier_received(clear=True) == []

    # the legitimate host, with its own BFR-id, still delivers
    reply = agent(runtime, topo, "h1").bier_send([h3_id], count=3, tag="legit")
    assert reply["messages"] == 3
    deadline = time.monotonic() + 5
    got: list = []
    while len(got) < 3 and time.monotonic() < deadline:
        got += agent(runtime, topo, "h3").bier_received(clear=True)
        time.sleep(0.2)
    assert len(got) == 3, got
    assert delta(agent(runtime, topo, "leaf1").counters(), "bier.dropped-policy") == 3
    # on ebpf the program held the table (and so judged the packets), not a Python fallback
    rows = agent(runtime, topo, "leaf1").bift()
    assert (rows.get("dataplane"), rows.get("dataplane_error")) == (dataplane, None), rows
