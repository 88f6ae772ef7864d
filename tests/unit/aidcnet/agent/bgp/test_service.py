"""The agent's BGP service without ExaBGP or netlink: what it tells ExaBGP when things change (only the
differences), and how ExaBGP's messages reach the RIB and the routes it would install."""

from __future__ import annotations

import asyncio
import json

from aidcnet.agent.bgp.service import BgpService
from aidcnet.bgp.rib import Link
from aidcnet.config import parse_config
from aidcnet.rtnl import LinkState
from tests.unit.node_files import bgp_knobs

G1 = {
    "version": 1,
    "node": "G1",
    "role": "gpu-host",
    "loopback": "10.255.0.5/32",
    "interfaces": [
        {"name": f"eth{p}", "ipv4": f"10.0.0.{2 * p - 2}/31", "bandwidth_bps": 800e9} for p in range(1, 5)
    ],
    "bgp": {
        "asn": 4200000000,
        "router_id": "10.255.0.5",
        **bgp_knobs(),
        "transit": False,
        "neighbors": [
            {
                "name": f"L{p}",
                "address": f"10.0.0.{2 * p - 1}",
                "local_address": f"10.0.0.{2 * p - 2}",
                "interface": f"eth{p}",
                "asn": 65099 + p,
            }
            for p in range(1, 5)
        ],
    },
}


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, data: bytes) -> None:
        self.lines += data.decode().splitlines()

    def take(self) -> list[str]:
        out, self.lines = self.lines, []
        return out


def update(peer: str, asn: int, prefix: str, community: int) -> str:
    """An UPDATE as ExaBGP's JSON encoder prints it (see test_bgp_exabgp.py for a verbatim capture)."""
    attribute = {
        "as-path": {"0": {"element": "as-sequence", "value": [asn, 4200000001]}},
        "extended-community": [{"value": community, "string": ""}],
    }
    message = {"update": {"attribute": attribute, "announce": {"ipv4 unicast": {peer: [{"nlri": prefix}]}}}}
    neighbor = {"address": {"local": "x", "peer": peer}, "direction": "receive", "message": message}
    return json.dumps({"type": "update", "neighbor": neighbor})


def service(tmp_path) -> tuple[BgpService, Writer]:
    svc = BgpService(parse_config(G1), run_dir=tmp_path)
    writer = Writer()
    svc._writer = writer  # type: ignore[assignment]
    return svc, writer


def test_announces_once_and_only_changes(tmp_path) -> None:
    async def run() -> None:
        svc, writer = service(tmp_path)
        svc.recompute()
        sent = writer.take()
        assert len(sent) == 4 and all(
            " announce route 10.255.0.5/32 next-hop self as-path [ 4200000000 ]" in s for s in sent
        )
        # 800G per port, transitive, AS_TRANS for the 4-octet ASN
        assert sent[0].endswith("extended-community [ 0x00045BA051BA43B7 ]")
        svc.recompute()
        assert writer.take() == []  # nothing changed, nothing sent
        svc.set_bandwidth("eth2", 400e9)
        assert writer.take() == [
            "neighbor 10.0.0.3 announce route 10.255.0.5/32 next-hop self as-path [ 4200000000 ] "
            "extended-community [ 0x00045BA0513A43B7 ]"
        ]
        link = svc.links["10.0.0.5"]
        svc.links["10.0.0.5"] = Link(link.peer, link.neighbor, link.dev, link.asn, link.bandwidth, up=False)
        svc.recompute()
        assert writer.take() == ["neighbor 10.0.0.5 withdraw route 10.255.0.5/32 next-hop self"]

    asyncio.run(run())


def test_updates_reach_the_rib_and_the_kernel_view(tmp_path) -> None:
    async def run() -> None:
        svc, writer = service(tmp_path)
        svc.recompute()
        writer.take()
        bw800 = 0x00045BA051BA43B7
        bw400 = 0x00045BA0513A43B7
        for p in range(1, 5):
            svc._on_line(
                update(f"10.0.0.{2 * p - 1}", 65099 + p, "10.255.0.6/32", bw400 if p == 2 else bw800)
            )
        svc._on_line("garbage")
        await asyncio.sleep(0)  # the coalesced recompute runs
        assert svc.weights_for("10.255.0.6") == {"eth1": 2, "eth2": 1, "eth3": 2, "eth4": 2}
        assert svc._kernel_wanted["10.255.0.6/32"][1] == ("10.0.0.3", "eth2", 1)
        assert svc.counters["exabgp.bad-message"] == 1
        assert writer.take() == []  # a GPU host is a stub: it re-advertises nothing
        svc._on_line('{"type": "state", "neighbor": {"address": {"peer": "10.0.0.1"}, "state": "down"}}')
        await asyncio.sleep(0)
        assert svc.weights_for("10.255.0.6") == {"eth2": 1, "eth3": 2, "eth4": 2}
        assert (tmp_path / "bgp-sessions").read_text() == "0 4\n"

    asyncio.run(run())


def test_status_names_the_peer_whose_md5_session_stays_down(tmp_path, monkeypatch) -> None:
    import copy

    import aidcnet.agent.bgp.service as bgp_service

    conf = copy.deepcopy(G1)
    conf["bgp"]["neighbors"][0]["md5_password"] = "right-Key1"
    counters = {"TCPMD5Failure": 5}
    monkeypatch.setattr(bgp_service.BgpService, "_read_md5_counters", staticmethod(lambda: dict(counters)))
    svc = BgpService(parse_config(conf), run_dir=tmp_path)
    svc.sessions["10.0.0.3"] = "up"
    by_peer = {n["peer"]: n for n in svc.status()["neighbors"]}
    assert all(n["problem"] is None for n in by_peer.values())  # nothing grew since start
    counters["TCPMD5Failure"] = 8
    status = svc.status()
    by_peer = {n["peer"]: n for n in status["neighbors"]}
    assert by_peer["10.0.0.1"]["md5"] is True and by_peer["10.0.0.1"]["gtsm_hops"] is None
    assert "TCPMD5Failure +3" in by_peer["10.0.0.1"]["problem"] and by_peer["10.0.0.1"]["name"] == "L1"
    assert by_peer["10.0.0.3"]["problem"] is None  # up
    assert "right-Key1" not in json.dumps(status)


class Netlink:
    """A link watch that hands out the given batches of link states, then stays quiet."""

    def __init__(self, batches: list[list[LinkState]]) -> None:
        self.batches = batches

    async def changes(self) -> list[LinkState]:
        if not self.batches:
            await asyncio.Event().wait()  # nothing more: block as a quiet socket does
        return self.batches.pop(0)


def test_a_link_event_hands_its_link_to_the_route_table_instead_of_a_dump(tmp_path) -> None:
    """After a link event the kernel table is not read back: the route table learns which link changed
    (and rewrites the routes through it, test_kernel_routes_netns.py) and keeps what it installed."""

    async def run() -> None:
        svc, _writer = service(tmp_path)
        installed = {"10.255.0.6/32": (("10.0.0.1", "eth1", 1), ("10.0.0.5", "eth3", 1))}
        svc._routes.installed = dict(installed)
        down = LinkState("eth3", 4, 0x1)  # admin up, no carrier
        task = asyncio.create_task(svc._netlink_events(Netlink([[down, LinkState("eth9", 10, 0x1)]])))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        assert not svc.links["10.0.0.5"].up
        assert svc._routes._changed_devs == {"eth3"}  # eth9 carries no session
        assert svc._routes.installed == installed
        assert svc._kernel_events[-1]["event"] == "eth3 down"

    asyncio.run(run())


def test_a_reload_that_changes_only_bier_flows_keeps_the_sessions() -> None:
    """A net-bier replay's prepare rewrites bier.flows on the leaves: BGP must not restart for that (it
    reset every session of the lab in the middle of the model crossval's replays). What BGP announces
    from the BIER section (RFC 9793's attribute on the loopback) still restarts it."""
    from aidcnet.agent.bgp.service import BgpPart
    from orchestrator.configure.plan import node_config
    from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, plan_of

    plan = plan_of(leaf_spine_doc(2, 2, 1), {"bgp": {"enabled": True}, "bier": {"bift": "bgp"}})
    config = node_config(plan, "leaf1")
    assert config.bier is not None and config.bgp is not None and config.bgp.neighbors
    flow = {"source": "10.9.9.9", "group": "232.1.2.3", "bitstring": [1]}
    regrouped = config.model_copy(update={"bier": config.bier.model_copy(update={"flows": [flow]})})
    assert regrouped != config
    assert BgpPart._inputs(regrouped) == BgpPart._inputs(config)
    renumbered = config.model_copy(update={"bier": config.bier.model_copy(update={"bfr_id": 999})})
    assert BgpPart._inputs(renumbered) != BgpPart._inputs(config)
    static = config.model_copy(update={"bier": config.bier.model_copy(update={"bift": "static"})})
    assert BgpPart._inputs(static) != BgpPart._inputs(config)

    class Running:
        """The running BgpService, as far as a reload sees it."""

        def __init__(self) -> None:
            self.config, self.resent = config, 0

        def resend_selection(self) -> None:
            self.resent += 1

    part = BgpPart()
    running = Running()
    part.current = running  # type: ignore[assignment]
    asyncio.run(part.reload(regrouped))
    # Kept, and the BIER service (reloaded just before, maybe afresh) got BGP's best paths again.
    assert part.current is running and running.resent == 1
