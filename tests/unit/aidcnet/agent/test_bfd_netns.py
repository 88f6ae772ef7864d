"""The agent's BFD service on a real veth between two namespaces (``fab-<pid>-<n>a``/``b``), with the
link-fault tc program dropping one direction only: both ends see a one-way cut within the detection time,
a 40% one-way loss is caught by the loss threshold, and both come back when the link does. Needs root,
iproute2, clang and bpftool (fabric_netns fails the test naming what is missing)."""

from __future__ import annotations

import asyncio
import time

from aidcnet.agent.bfd.service import BfdService
from aidcnet.bfd.packet import State
from aidcnet.config import CONFIG_VERSION, Bfd, Interface, NodeConfig
from aidcnet.ebpf.link_fault import LinkFault
from orchestrator.lab.shaping import set_link_fault
from tests.dataplane.netlab import in_netns
from tests.unit.aidcnet.ebpf.test_link_fault import faulty  # noqa: F401  (the fixture)

INTERVAL_US = 10_000  # unshaped: fabric time is wall time, 10 ms
MULT = 3


def node(name: str, ifname: str, ip: str) -> NodeConfig:
    return NodeConfig(
        version=CONFIG_VERSION,
        node=name,
        role="bfr",
        loopback=f"10.255.0.{1 if name == 'a' else 2}/32",
        interfaces=[Interface(name=ifname, ipv4=f"{ip}/31")],
        bfd=Bfd(
            interval_us=INTERVAL_US, multiplier=MULT, loss_threshold=0.2, loss_window=20, interfaces=[ifname]
        ),
    )


def test_one_way_cuts_and_gray_loss_are_seen_at_both_ends(faulty):  # noqa: F811
    pair, _obj, _prog = faulty
    heard: dict[str, list[tuple[float, frozenset[str]]]] = {"a": [], "b": []}
    services = {}
    for end, ns, ifname, ip in (("a", pair.a, pair.a_if, pair.a_ip), ("b", pair.b, pair.b_if, pair.b_ip)):
        with in_netns(ns):
            cfg = node(end, ifname, ip)
            services[end] = BfdService(
                cfg.bfd, cfg, lambda down, end=end: heard[end].append((time.time(), down))
            )

    def state(end: str) -> State:
        return next(iter(services[end].ends.values())).session.state

    async def until(cond, timeout: float) -> float:
        start = time.time()
        while not cond():
            assert time.time() - start < timeout, {e: s.status()["sessions"] for e, s in services.items()}
            await asyncio.sleep(0.002)
        return time.time() - start

    async def scenario() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        for s in services.values():
            s.attach(loop)
        took = {}
        await until(lambda: state("a") == state("b") == State.UP, 2.0)
        await asyncio.sleep(0.3)
        # a -> b only: b stops hearing a; a hears b's Down and follows
        set_link_fault(pair.a_path, pair.a_if, LinkFault.independent(1.0))
        took["cut"] = await until(lambda: state("a") != State.UP and state("b") != State.UP, 2.0)
        set_link_fault(pair.a_path, pair.a_if, LinkFault())
        took["back"] = await until(lambda: state("a") == state("b") == State.UP, 2.0)
        await asyncio.sleep(0.3)
        set_link_fault(pair.a_path, pair.a_if, LinkFault.independent(0.4))
        took["gray"] = await until(lambda: state("b") != State.UP and state("a") != State.UP, 5.0)
        await asyncio.sleep(0.5)
        took["held"] = float(state("b") != State.UP)  # no flapping while the loss lasts
        set_link_fault(pair.a_path, pair.a_if, LinkFault())
        took["cleared"] = await until(lambda: state("a") == state("b") == State.UP, 10.0)
        return took

    try:
        took = asyncio.run(scenario())
    finally:
        for s in services.values():
            s.close()
    detection = MULT * INTERVAL_US / 1e6
    # b: the detection time after a's last packet; a: b's next packet after that tells it
    assert took["cut"] <= detection + 2 * INTERVAL_US / 1e6 + 0.05, took
    assert took["held"] == 1.0, took
    went_down = {
        end: [e["reason"] for e in s.events if e["state"] == "down" and e["reason"] != "loss-cleared"]
        for end, s in services.items()
    }
    reasons_a, reasons_b = went_down["a"], went_down["b"]
    # the cut: the detection time; the gray loss: at most one detection time (its window still half
    # clean), then the loss threshold, which holds it down
    assert reasons_b[0] == "detection-time" and reasons_b[-1] == "loss", reasons_b
    assert len(reasons_b) <= 3 and "neighbor-down" in reasons_a, (reasons_a, reasons_b)
    # each end told the agent its link was down, then up again, as often as it went
    for end, ifname in (("a", pair.a_if), ("b", pair.b_if)):
        sets = [down for _t, down in heard[end]]
        assert 2 <= sets.count(frozenset({ifname})) <= 3 and sets[-1] == frozenset(), (end, sets)
    assert services["b"].c["tx.late"] <= services["b"].c["tx"] * 0.05
