"""IGMP memberships on a running leaf-spine (issue 14, docs/igmp.md), on both BIER dataplanes:

* kernel receivers joining and leaving change the BFIR's BitString within the configured timers, and
  delivery is exact (every joined host gets every datagram once, no other host gets any);
* a Receiver Proxy Report changes the BitString within one packet: the datagram right behind it reaches
  exactly the named receivers' leaves (a BitString names BFERs; behind them, IGMP member ports);
* a proxy report from a port the plan does not allow is dropped and counted;
* FRR's pimd as a second querier on one link (an FRR node q1 on leaf4:eth9, with the lower address):
  our leaf yields, and both tables agree with the kernel receiver's joins and leave (FRR's table only on
  a kernel with IP multicast routing, where pimd hears IGMP at all: skipped, and said, elsewhere).

Timers: the plan's defaults, 20 s / 2 s / 0.2 s on the wall clock (QI / QRI / LMQI).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.lab.kernel import NO_MULTICAST_ROUTING, has_multicast_routing

from .conftest import DATAPLANES, agent, deployed, on_dataplane

LAB = "t-igmp"
HOSTS = [f"h{i}" for i in range(1, 9)]
MCAST_APP = Path(__file__).with_name("mcast_app.py")
IGMP_APP = Path(__file__).with_name("igmp_app.py")
LAB_VARS = {"igmp": {"enabled": True, "proxy_hosts": ["h1"], "querier_off": []}}
G_ASM, G_PROXY = "239.14.0.1", "239.14.0.2"
# A join reaches the BFIR as fast as the kernel's unsolicited report and one BIER hop; a leave takes
# LMQT at the BFER's port and LMQT at the BFIR (2 x 2 x 0.2 s), plus the agents' scheduling.
JOIN_S, LEAVE_S = 2.0, 3.0


def add_frr_querier(doc: dict) -> None:
    doc["topology"]["nodes"]["q1"] = {"image": "aidclab/frr:latest"}
    # q1 first: endpoint a gets the low address of the /31, so FRR wins the election (RFC 3376 §6.6.2).
    doc["topology"]["links"].append({"endpoints": ["q1:eth1", "leaf4:eth9"]})


@pytest.fixture(scope="module")
def deployed_lab(runtime, tmp_path_factory):
    with deployed(runtime, tmp_path_factory.mktemp("igmp"), "leaf-spine", LAB, edit=add_frr_querier) as topo:
        yield topo


@pytest.fixture(scope="module", params=DATAPLANES)
def lab(runtime, deployed_lab, request):
    on_dataplane(runtime, deployed_lab, LAB_VARS, request.param)
    return deployed_lab


def plan(topo) -> dict:
    return yaml.safe_load((Path.cwd() / topo.lab_dir_name / "plan.yml").read_text())


def netns(topo, node: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", topo.container_name(node), sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **kw,
    )


def until(probe, ok, wait_s: float):
    """(value, seconds it took) once ``ok(value)``, or the last value and the full wait."""
    t0 = time.monotonic()
    while True:
        value = probe()
        took = time.monotonic() - t0
        if ok(value) or took > wait_s:
            return value, took
        time.sleep(0.05)


def flows(runtime, topo, leaf: str) -> dict[tuple[str | None, str], list[int]]:
    return {(f["source"], f["group"]): f["bfers"] for f in agent(runtime, topo, leaf).igmp()["flows"]}


class Receivers:
    """Kernel receivers: each host joins its groups through igmp_app.py, and leaves on demand."""

    def __init__(self, topo, joins: dict[str, list[str]]) -> None:
        self.procs = {h: netns(topo, h, str(IGMP_APP), "join", "eth1", *g) for h, g in joins.items()}
        for p in self.procs.values():
            assert p.stdout.readline().strip() == "ready"

    def leave(self, host: str, group: str) -> None:
        p = self.procs[host]
        p.stdin.write(f"leave {group}\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == f"left {group}"

    def close(self) -> None:
        for p in self.procs.values():
            p.stdin.close()
            p.wait(timeout=10)


def deliveries(
    topo, group: str, sender: str, count: int, send_args: list[str], ready
) -> dict[str, list[str]]:
    """Every host but the sender listens on ``group`` (mcast_app joins too: the kernel accepts only
    joined groups); once ``ready()`` (the joins have reached the BFIR), ``send_args`` runs in the
    sender; what each host got."""
    listeners = {
        h: netns(topo, h, str(MCAST_APP), "recv", group, "5000", "eth1", "30") for h in HOSTS if h != sender
    }
    try:
        for p in listeners.values():
            assert p.stdout.readline().strip() == "ready"
        assert ready(), "the listeners' joins did not reach the BFIR"
        subprocess.run(
            ["ip", "netns", "exec", topo.container_name(sender), sys.executable, *send_args],
            check=True,
            timeout=30,
        )
        time.sleep(0.5)
    finally:
        got = {}
        for h, p in listeners.items():
            out, _ = p.communicate("stop\n", timeout=30)
            got[h] = sorted(m["payload"] for m in json.loads(out.strip().splitlines()[-1]))
    return got


def test_kernel_joins_and_leaves_move_the_bfir_bitstring(runtime, lab):
    ids = {n: v["bfr_id"] for n, v in plan(lab)["nodes"].items() if v.get("bfr_id")}
    # h3 (leaf2) and h5 (leaf3) join; h1 at leaf1 is the source.
    rx = Receivers(lab, {"h3": [G_ASM], "h5": [G_ASM]})
    try:
        want = sorted([ids["leaf2"], ids["leaf3"]])
        got, took = until(
            lambda: flows(runtime, lab, "leaf1").get((None, G_ASM)), lambda v: v == want, JOIN_S
        )
        assert got == want, f"leaf1 (*,{G_ASM}) -> {got} after {took:.2f}s; want {want}"
        print(f"join -> BFIR BitString: {took:.2f} s")
        every_leaf = sorted(ids[f"leaf{i}"] for i in range(1, 5))

        def all_joined() -> bool:
            v, _ = until(
                lambda: flows(runtime, lab, "leaf1").get((None, G_ASM)), lambda v: v == every_leaf, JOIN_S
            )
            return v == every_leaf

        send = [str(MCAST_APP), "send", G_ASM, "5000", "eth1", "20", "h1"]
        got_rx = deliveries(lab, G_ASM, "h1", 20, send, all_joined)
        # mcast_app's listeners join too, so every host's leaf learns G now: the BitString grows to every
        # leaf with a listener and delivery must be exact for exactly those hosts
        expected = sorted(f"h1:{i}" for i in range(20))
        for h, payloads in got_rx.items():
            assert payloads == expected, f"{h}: got {len(payloads)} of 20"
        rx.leave("h5", G_ASM)
        want = [ids["leaf2"]]
        got, took = until(
            lambda: flows(runtime, lab, "leaf1").get((None, G_ASM)), lambda v: v == want, LEAVE_S
        )
        assert got == want, f"after h5 left: {got} ({took:.2f}s)"
        print(f"leave -> BFIR BitString: {took:.2f} s")
        status = agent(runtime, lab, "leaf3").igmp()
        assert all(G_ASM not in p["groups"] for p in status["ports"].values()), status["ports"]
    finally:
        rx.close()


def test_proxy_report_changes_the_next_packet(runtime, lab):
    loopbacks = {h: n["loopback"].split("/")[0] for h, n in plan(lab)["nodes"].items() if h in HOSTS}
    before = agent(runtime, lab, "leaf1").igmp()["counters"]
    named = ["h4", "h7"]  # every other host listens (and so is an IGMP member) but is not named
    ids = {n: v["bfr_id"] for n, v in plan(lab)["nodes"].items() if v.get("bfr_id")}
    every_leaf = sorted(ids[f"leaf{i}"] for i in range(1, 5))

    def all_joined() -> bool:  # without the proxy report, IGMP alone would send to every listener
        v, _ = until(
            lambda: flows(runtime, lab, "leaf1").get((None, G_PROXY)), lambda v: v == every_leaf, JOIN_S
        )
        return v == every_leaf

    got = deliveries(
        lab,
        G_PROXY,
        "h1",
        5,
        [
            str(IGMP_APP),
            "proxy",
            "eth1",
            loopbacks["h1"],
            G_PROXY,
            "5000",
            "5",
            "px",
            *[loopbacks[h] for h in named],
        ],
        all_joined,
    )
    # The BitString names BFERs (leaves): behind leaf2 and leaf4 every member port gets the packet (h3 and
    # h8 listen too); leaf1's and leaf3's listeners, IGMP members all, get nothing.
    reached = {"h3", "h4", "h7", "h8"}
    for h, payloads in got.items():
        want = sorted(f"px:{i}" for i in range(5)) if h in reached else []
        assert payloads == want, f"{h}: {payloads}; want {want}"
    status = agent(runtime, lab, "leaf1").igmp()
    assert status["counters"]["proxy-reports"] == before.get("proxy-reports", 0) + 1
    assert {(p["source"], p["group"]) for p in status["proxy"]} >= {(loopbacks["h1"], G_PROXY)}


def test_proxy_report_from_a_port_not_allowed_is_dropped(runtime, lab):
    loopbacks = {h: n["loopback"].split("/")[0] for h, n in plan(lab)["nodes"].items() if h in HOSTS}
    counter = "dropped.proxy-port-not-allowed"
    before = agent(runtime, lab, "leaf1").igmp()["counters"].get(counter, 0)
    subprocess.run(
        ["ip", "netns", "exec", lab.container_name("h2"), sys.executable, str(IGMP_APP), "proxy", "eth1",
         loopbacks["h2"], "239.14.0.3", "5000", "0", "x", loopbacks["h3"]],
        check=True, timeout=30,
    )  # fmt: skip
    got, _ = until(
        lambda: agent(runtime, lab, "leaf1").igmp()["counters"].get(counter, 0), lambda v: v > before, 2.0
    )
    assert got == before + 1
    assert all(p["group"] != "239.14.0.3" for p in agent(runtime, lab, "leaf1").igmp()["proxy"])


def vtysh(runtime, topo, *commands: str) -> str:
    args = ["vtysh"] + [x for c in commands for x in ("-c", c)]
    code, out = runtime.exec(topo.container_name("q1"), args)
    assert code == 0, f"q1: {args}: {out}"
    return out


def test_frr_pimd_as_second_querier(runtime, deployed_lab):
    topo = deployed_lab
    on_dataplane(runtime, topo, LAB_VARS, "ebpf")
    # leaf4:eth9 toward q1 is not a host port in the plan (q1 is no gpu-host): make it one for this test.
    leaf4 = agent(runtime, topo, "leaf4")
    config = leaf4.config()
    config["bier"]["host_ports"] = sorted({*config["bier"]["host_ports"], "eth9"})
    config["igmp"]["ports"] = [*config["igmp"]["ports"], {"name": "eth9", "querier": True, "proxy": False}]
    text = yaml.safe_dump(config, sort_keys=False)
    code, out = runtime.exec(
        topo.container_name("leaf4"), ["sh", "-c", f"cat > /tmp/igmp-node.yml <<'EOF'\n{text}EOF"]
    )
    assert code == 0, out
    leaf4.reload("/tmp/igmp-node.yml")
    # FRR's IGMP querier on q1:eth1 (pimd), with the same wall-clock timers as ours.
    code, out = runtime.exec(
        topo.container_name("q1"),
        "sed -i 's/^pimd=no/pimd=yes/' /etc/frr/daemons && /usr/lib/frr/frrinit.sh restart",
    )
    assert code == 0, out
    vtysh(runtime, topo, "configure terminal", "interface eth1", "ip igmp", "ip igmp version 3",
          "ip igmp query-interval 20", "ip igmp query-max-response-time 20",
          "ip igmp last-member-query-interval 2")  # fmt: skip
    leaf_addr = next(i["ipv4"].split("/")[0] for i in config["interfaces"] if i["name"] == "eth9")

    def ours() -> dict:
        return agent(runtime, topo, "leaf4").igmp()["ports"]["eth9"]

    # Election: q1 has the lower address, so our leaf hears its queries and stops querying.
    port, _ = until(ours, lambda p: p["querier"] is False, 30.0)
    q1_addr = str(ipaddress.IPv4Address(leaf_addr) - 1)  # q1 is endpoint a of the /31
    assert port["querier"] is False and port["other_querier"] == q1_addr, port
    # FRR's view (pimd's JSON: "querier" true while it queries, "querierIp" the elected address)
    frr_if = json.loads(vtysh(runtime, topo, "show ip igmp interface json")).get("eth1", {})
    assert frr_if.get("querierIp", q1_addr) == q1_addr and frr_if.get("querier", True) is True, frr_if

    # A kernel receiver on q1 itself (the link's host side): both routers must list exactly its groups.
    rx = Receivers(topo, {})
    rx.procs["q1"] = netns(topo, "q1", str(IGMP_APP), "join", "eth1", "239.14.1.1", "232.14.1.1/10.14.0.1")
    assert rx.procs["q1"].stdout.readline().strip() == "ready"
    try:
        want = {"239.14.1.1", "232.14.1.1"}
        port, _ = until(ours, lambda p: set(p["groups"]) == want, 5.0)
        assert set(port["groups"]) == want, port
        assert port["groups"]["232.14.1.1"]["requested"] == ["10.14.0.1"]
        if not has_multicast_routing():
            # FRR's side needs the kernel: pimd takes IGMP from its mroute socket, so it lists no group
            # and never asks Q(G) on the leave, which our non-querier leaf waits for.
            pytest.skip(f"FRR's group table and the leave it queries are not checked: {NO_MULTICAST_ROUTING}")
        frr_groups, _ = until(
            lambda: vtysh(runtime, topo, "show ip igmp groups json"),
            lambda out: all(g in out for g in want),
            5.0,
        )
        assert all(g in frr_groups for g in want), frr_groups
        rx.leave("q1", "239.14.1.1")  # FRR (the querier) asks Q(G); nobody answers; both drop it
        port, _ = until(ours, lambda p: set(p["groups"]) == {"232.14.1.1"}, LEAVE_S)
        assert set(port["groups"]) == {"232.14.1.1"}, port
        frr_groups, _ = until(
            lambda: vtysh(runtime, topo, "show ip igmp groups json"),
            lambda out: "239.14.1.1" not in out,
            LEAVE_S,
        )
        assert "239.14.1.1" not in frr_groups and "232.14.1.1" in frr_groups, frr_groups
    finally:
        rx.close()
