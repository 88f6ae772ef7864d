"""BIER on a running leaf-spine: host-BIER delivery is exact for random receiver sets from every host,
and a packet captured on a fabric link decodes field by field under RFC 8296."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from .conftest import DATAPLANES, agent, deployed, on_dataplane

LAB = "t-bier"
GROUP = {"group": "239.1.1.1", "receivers": ["h2", "h3", "h5", "h8"]}
HOSTS = [f"h{i}" for i in range(1, 9)]
# One source-specific group per host, each with its own random receivers: (S,G) from every host.
_rng = random.Random(8279)
SG_GROUPS = [
    {
        "group": f"239.2.0.{i}",
        "source": h,
        "receivers": sorted(_rng.sample([x for x in HOSTS if x != h], _rng.randint(1, 7))),
    }
    for i, h in enumerate(HOSTS, 1)
]
MCAST_APP = Path(__file__).with_name("mcast_app.py")


# BSL 64 with h7 and h8 pinned into SI 1 (BFR-ids 100 and 90): one packet per SI. Network-BIER: one (*,G)
# group with static receivers on three of the four leaves (h2 shares leaf1 with the sender h1), and one
# (S,G) group per host.
LAB_VARS = {
    "bier": {"bsl": 64, "groups": [GROUP, *SG_GROUPS]},
    "nodes": {"h7": {"bfr_id": 100}, "h8": {"bfr_id": 90}},
}


@pytest.fixture(scope="module")
def deployed_lab(runtime, tmp_path_factory):
    with deployed(runtime, tmp_path_factory.mktemp("bier"), "leaf-spine", LAB) as topo:
        yield topo


@pytest.fixture(scope="module", params=DATAPLANES)
def lab(runtime, deployed_lab, request):
    """The one deployed lab, configured for each dataplane in turn: every test runs on both."""
    on_dataplane(runtime, deployed_lab, LAB_VARS, request.param)
    return deployed_lab


def plan_nodes(topo) -> dict[str, dict]:
    return yaml.safe_load((Path.cwd() / topo.lab_dir_name / "plan.yml").read_text())["nodes"]


def bfr_ids(topo) -> dict[str, int]:
    return {name: node["bfr_id"] for name, node in plan_nodes(topo).items() if node.get("bfr_id")}


def collect(
    runtime, topo, hosts: list[str], expected_total: int, timeout: float = 10.0
) -> dict[str, list[dict]]:
    got: dict[str, list[dict]] = {h: [] for h in hosts}
    deadline = time.monotonic() + timeout
    while True:
        for h in hosts:
            got[h] += agent(runtime, topo, h).bier_received(clear=True)
        if sum(map(len, got.values())) >= expected_total or time.monotonic() > deadline:
            time.sleep(0.3)  # late duplicates would show up now
            for h in hosts:
                got[h] += agent(runtime, topo, h).bier_received(clear=True)
            return got


def test_host_bier_random_receiver_sets_are_delivered_exactly(runtime, lab):
    ids = bfr_ids(lab)
    hosts = [f"h{i}" for i in range(1, 9)]
    host_ids = {h: ids[h] for h in hosts}
    rng = random.Random(8279)
    expected: dict[str, list[str]] = {h: [] for h in hosts}
    for h in hosts:
        agent(runtime, lab, h).bier_received(clear=True)
    # h3's application listens where host-BIER hands payloads (127.0.0.1:4791 in h3's namespace).
    app = subprocess.Popen(
        ["ip", "netns", "exec", lab.container_name("h3"), sys.executable, str(MCAST_APP), "app", "4791", "8"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert app.stdout.readline().strip() == "ready"
    for src in hosts:
        for round_ in range(4):
            receivers = rng.sample(hosts, rng.randint(1, 8))  # may include the sender itself
            tag = f"{src}-{round_}"
            to = [host_ids[r] for r in receivers]
            reply = agent(runtime, lab, src).bier_send(
                to, count=3, size=200, tag=tag, entropy=rng.randrange(1 << 20)
            )
            assert reply["messages"] == 3
            for r in receivers:
                expected[r] += [f"{host_ids[src]}:{tag}:{seq}" for seq in range(3)]
    total = sum(map(len, expected.values()))
    got = collect(runtime, lab, hosts, total)
    app_got = json.loads(app.communicate(timeout=30)[0].splitlines()[-1])
    assert sorted(":".join(m.split(":")[:3]) for m in app_got) == sorted(expected["h3"])
    for h in hosts:
        seen = sorted(":".join(bytes.fromhex(d["payload"]).decode().split(":")[:3]) for d in got[h])
        assert seen == sorted(expected[h]), f"{h} got the wrong set of messages"
        for d in got[h]:
            assert d["dport"] == 4791 and d["dst"] == "232.1.0.1" and len(bytes.fromhex(d["payload"])) == 200
    # Every BFR accounts for every packet: nothing dropped anywhere in a healthy fabric.
    for node in lab.nodes:
        counters = agent(runtime, lab, node).counters()
        drops = {k: v for k, v in counters.items() if k.startswith("bier.dropped") and v}
        assert drops == {}, f"{node} dropped: {drops}"


def test_receivers_in_two_sis_get_one_packet_per_si(runtime, lab):
    ids = bfr_ids(lab)
    assert ids["h7"] == 100 and ids["h8"] == 90 and ids["h2"] <= 64
    for h in ("h2", "h7", "h8"):
        agent(runtime, lab, h).bier_received(clear=True)
    reply = agent(runtime, lab, "h1").bier_send([ids[h] for h in ("h2", "h7", "h8")], count=5, tag="si")
    assert reply["messages"] == 5 and reply["packets"] == 10  # SI 0 (h2) and SI 1 (h7, h8)
    got = collect(runtime, lab, ["h2", "h7", "h8"], 15)
    for h in ("h2", "h7", "h8"):
        assert len(got[h]) == 5, f"{h} got {len(got[h])} of 5"
    bift = agent(runtime, lab, "spine1").bift()
    assert set(bift["bift"]) == {"0", "1"}


def test_bift_is_visible(runtime, lab):
    ids = bfr_ids(lab)
    bift = agent(runtime, lab, "leaf1").bift()
    assert bift["bfr_id"] == ids["leaf1"] and bift["bsl"] == 64
    rows = {row["bfr_id"]: row["entries"] for row in bift["bift"]["0"]}
    assert {e["bfr_nbr"] for e in rows[ids["h3"]]} == {"spine1", "spine2"}  # ECMP kept
    assert [e["bfr_nbr"] for e in rows[ids["h1"]]] == ["h1"]


def test_captured_packet_decodes_as_rfc8296(runtime, lab, tmp_path):
    from tests.rfc8296_scapy import decode_bier_capture

    ids = bfr_ids(lab)
    pcap = tmp_path / "spine-link.pcap"
    ns = lab.container_name("leaf4")
    dump = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            "tcpdump",
            "-U",
            "-n",
            "-i",
            "eth1",
            "-c",
            "1",
            "-w",
            str(pcap),
            "udp dst port 6635",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)
        # h7 (behind leaf4) to h1 (behind leaf1): the packet leaves leaf4 on a spine link. Send until
        # tcpdump has its packet (it may still be starting up).
        deadline = time.monotonic() + 5
        while dump.poll() is None and time.monotonic() < deadline:
            agent(runtime, lab, "h7").bier_send([ids["h1"]], size=100, tag="cap")
            time.sleep(0.2)
        dump.wait(timeout=5)
    finally:
        if dump.poll() is None:
            dump.kill()
    (layers,) = decode_bier_capture(pcap)
    assert layers["udp.dport"] == 6635
    assert layers["bier.nibble"] == 0b0101 and layers["bier.ver"] == 0 and layers["bier.s"] == 1
    assert layers["bier.bsl"] == 1  # 64 bits
    assert layers["bier.proto"] == 4 and layers["bier.bfir_id"] == ids["h7"]
    assert layers["bier.bitstring"] == 1 << (ids["h1"] - 1)
    assert layers["bier.ttl"] == 63  # h7 sent 64, leaf4 forwarded once
    assert layers["inner.proto"] == 17 and layers["inner.dport"] == 4791
    assert layers["inner.payload"].startswith(f"{ids['h7']}:cap:".encode())


def multicast_round(lab, group: str, sender: str, count: int, source: str = "") -> dict[str, list[str]]:
    """Every host listens on ``group``; ``sender`` sends ``count`` datagrams; what each host got."""
    listeners = {
        h: subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                lab.container_name(h),
                sys.executable,
                str(MCAST_APP),
                "recv",
                group,
                "5000",
                "eth1",
                "60",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for h in HOSTS
    }
    try:
        for proc in listeners.values():
            assert proc.stdout.readline().strip() == "ready"
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                lab.container_name(sender),
                sys.executable,
                str(MCAST_APP),
                "send",
                group,
                "5000",
                "eth1",
                str(count),
                sender,
                *([source] if source else []),
            ],
            check=True,
            timeout=30,
        )
        time.sleep(0.5)  # in flight through two leaves and a spine at most
        return {
            h: sorted(
                r["payload"] for r in json.loads(p.communicate("stop\n", timeout=30)[0].splitlines()[-1])
            )
            for h, p in listeners.items()
        }
    finally:
        for p in listeners.values():
            if p.poll() is None:
                p.kill()


def test_network_bier_delivers_ip_multicast_to_members_only(runtime, lab):
    # Every host joins the group in its kernel; only the plan's receivers are members at their leaf,
    # so only they may get the traffic. The sender h1 must not get its own packets back.
    got = multicast_round(lab, GROUP["group"], "h1", 20)
    expected = sorted(f"h1:{seq}" for seq in range(20))
    for h, payloads in got.items():
        want = expected if h in GROUP["receivers"] else []
        assert payloads == want, f"{h}: got {len(payloads)}, want {len(want)}"
    counters = agent(runtime, lab, "leaf1").counters()
    assert counters["net-bier.imposed"] >= 20


def net_bier_counters(runtime, lab, node: str) -> dict[str, int]:
    counters = agent(runtime, lab, node).counters()
    return {k: v for k, v in counters.items() if k.startswith("net-bier.") and ".port." not in k and v}


def test_network_bier_source_specific_groups_from_every_host(runtime, lab):
    loopbacks = {h: n["loopback"].split("/")[0] for h, n in plan_nodes(lab).items()}
    for g in SG_GROUPS:
        got = multicast_round(lab, g["group"], g["source"], 5, source=loopbacks[g["source"]])
        for h, payloads in got.items():
            want = sorted(f"{g['source']}:{seq}" for seq in range(5)) if h in g["receivers"] else []
            assert payloads == want, (
                f"{g['group']} from {g['source']}: {h} got {len(payloads)}, want {len(want)}; all: {got}; "
                + "; ".join(f"{leaf}: {net_bier_counters(runtime, lab, leaf)}" for leaf in ("leaf1", "leaf2"))
            )
