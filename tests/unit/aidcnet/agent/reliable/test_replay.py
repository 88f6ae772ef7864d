"""The replay service in the reliable modes: a schedule loaded and run on three hosts whose reliable
transports are wired in memory (each datagram handed over on the event loop's next turn, with an
optional seeded loss), so the glue is under test: flow per op, one sequence per fragment, deliveries
into the reassembly exactly once, ``done`` only when every flow is acknowledged, counters in status."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from typing import Any

import pytest

from aidcnet.agent.reliable.node import NET_SPORT, ReliableNode
from aidcnet.agent.replay.protocol import Receiver, ReplayLoad, ReplayOp
from aidcnet.agent.replay.service import ReplayService
from aidcnet.ipv4 import UdpDatagram
from aidcnet.modes import Mode
from aidcnet.reliable.header import RELIABLE_UDP_PORT
from aidcnet.replay import fragment_sizes

ADDR = {"h1": "10.1.0.1", "h2": "10.1.0.2", "h3": "10.1.0.3"}
IDS = {"h1": 1, "h2": 2, "h3": 3}
BY_ID = {i: n for n, i in IDS.items()}
BY_ADDR = {a: n for n, a in ADDR.items()}
GROUPS = {"239.100.0.1": ["h2", "h3"], "239.100.0.2": ["h3"]}


class FakeBier:
    """Only what ReplayService.load checks for host-BIER: that a host API exists."""

    host = object()


class Part:
    """Stands in for ReliablePart: the node, and a kick that polls it."""

    def __init__(self, node: ReliableNode) -> None:
        self._node = node
        self.endpoint = None

    def node(self) -> ReliableNode:
        return self._node

    def kick(self) -> None:
        self._node.poll(time.monotonic())

    def open_multicast(self, _interface: str, _ttl: int) -> None:
        self._node.multicast = self._node.multicast_to  # type: ignore[attr-defined]

    def close_multicast(self) -> None:
        self._node.multicast = None


class Wire:
    def __init__(self, loss: float, seed: int) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.nodes: dict[str, ReliableNode] = {}
        self.dropped = 0

    def _later(self, fn: Any, *args: Any) -> None:
        if self.rng.random() < self.loss:
            self.dropped += 1
            return
        asyncio.get_running_loop().call_soon(fn, *args)

    def make(self, name: str) -> ReliableNode:
        def send(msg: bytes, addr: str) -> None:
            self._later(lambda: self.nodes[BY_ADDR[addr]].on_datagram(msg, ADDR[name], time.monotonic()))

        def impose(wire: bytes, ids: list[int], _entropy: int, sport: int) -> None:
            for i in ids:
                d = UdpDatagram(ADDR[name], "232.1.0.1", sport, RELIABLE_UDP_PORT, 64, wire)
                self._later(lambda d=d, i=i: self.nodes[BY_ID[i]].on_bier_delivery(d, time.monotonic()))

        # Feedback "hop by hop" goes straight to the source here: the fabric has no BFRs (and for
        # network-BIER each host is its own BFER: the ops name the hosts' ids as their groups' BFERs).
        node = ReliableNode(None, send, toward=lambda _bfir: ADDR["h1"], impose=impose)
        node.multicast_to = lambda wire, group: [  # type: ignore[attr-defined]
            self._later(
                lambda r=r: self.nodes[r].on_datagram(wire, ADDR[name], time.monotonic(), NET_SPORT)
            )
            for r in GROUPS[group]
        ]
        self.nodes[name] = node
        return node


async def _poller(parts: list[Part], stop: asyncio.Event) -> None:
    while not stop.is_set():
        for p in parts:
            p.kick()
        await asyncio.sleep(0.001)


def run_replay(mode: Mode, loss: float = 0.0, seed: int = 1) -> tuple[dict[str, ReplayService], Wire]:
    async def main() -> tuple[dict[str, ReplayService], Wire]:
        wire = Wire(loss, seed)
        services, parts = {}, []
        for name in ADDR:
            part = Part(wire.make(name))
            parts.append(part)
            svc = ReplayService(ADDR[name], bier=FakeBier(), reliable=part)  # type: ignore[arg-type]
            services[name] = svc
        receivers = {n: Receiver(ADDR[n], IDS[n]) for n in ("h2", "h3")}
        ops = [ReplayOp(i, 0.002 * i, 20_000 + 977 * i, ("h2", "h3") if i % 2 else ("h3",)) for i in range(6)]
        interface = None
        if mode == Mode.RELIABLE_NET_BIER:
            for k, op in enumerate(ops):
                g = "239.100.0.1" if len(op.receivers) == 2 else "239.100.0.2"
                ops[k] = replace(op, group=g, bfers=tuple(IDS[r] for r in GROUPS[g]))
            interface = "lo"
        for name, svc in services.items():
            # Without loss no timer may fire, even on a busy machine: generous RTOs; with loss, short
            # ones so the test ends soon (the loss, not the timers, is what it is about).
            rto = 0.02 if loss else 0.5
            reliable = {"self_id": IDS[name], "isn": 0xFFFF_FFF8, "initial_rto": rto, "min_rto": rto / 2}
            mine = tuple(ops) if name == "h1" else ()
            load = ReplayLoad(
                mode, mine, receivers, interface=interface, max_datagram=4000, reliable=reliable
            )
            reply = svc.load(load.to_wire())
            assert reply["ok"] and reply["ops"] == len(mine)
        stop = asyncio.Event()
        poller = asyncio.create_task(_poller(parts, stop))
        services["h1"].start({"start_ns": time.time_ns()})
        assert services["h1"].task is not None
        await asyncio.wait_for(services["h1"].task, 20.0)
        await asyncio.sleep(0.05)  # late duplicates would show up now
        stop.set()
        await poller
        return services, wire

    return asyncio.run(main())


@pytest.mark.parametrize(
    "mode",
    [Mode.RELIABLE_UNICAST, Mode.RELIABLE_HOST_BIER, Mode.RELIABLE_HOST_BIER_E2E, Mode.RELIABLE_NET_BIER],
)
@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_reliable_replay_delivers_every_message_exactly_once(mode: Mode, loss: float) -> None:
    services, wire = run_replay(mode, loss)
    status = services["h1"].status()
    assert status["done"] and status["sent_ops"] == 6 and status["send_errors"] == {}
    expect = {"h2": {1, 3, 5}, "h3": set(range(6))}
    for name, ids in expect.items():
        records = services[name].reassembly.records
        assert set(records) == ids, name
        for rec in records.values():
            assert rec.checksum_ok and rec.duplicates == 0, (name, rec.to_dict())
    rel = status["reliable"]
    flows = 9 if mode == Mode.RELIABLE_UNICAST else 6
    assert rel["sender.flows"] == rel["sender.flows-done"] == flows
    assert rel.get("sender.receivers-failed", 0) == 0
    if loss:
        assert wire.dropped > 0 and rel["sender.retransmitted"] > 0
    else:
        assert rel.get("sender.retransmitted", 0) == 0
    # Per op, its DATA as the transport handed it on: every fragment once per flow, and what was resent.
    times = {t["id"]: t for t in services["h1"].results()["op_times"]}
    assert sorted(times) == list(range(6))
    sent = 0
    for i, t in times.items():
        flows = (2 if i % 2 else 1) if mode == Mode.RELIABLE_UNICAST else 1
        first = len(fragment_sizes(20_000 + 977 * i, 4000)) * flows
        assert t["due_ns"] <= t["first_ns"] <= t["last_ns"]
        assert t["datagrams"] >= first and t["bytes"] > (20_000 + 977 * i) * flows
        sent += t["datagrams"]
    assert sent == rel["sender.sent"] + rel.get("sender.retransmitted", 0)


def test_reliable_load_refuses_what_it_cannot_run() -> None:
    def load(
        mode: Mode,
        ops: tuple[ReplayOp, ...] = (),
        receivers: dict[str, Receiver] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        return ReplayLoad(mode, ops, receivers or recv, **fields).to_wire()

    recv = {"h2": Receiver("10.1.0.2", 2)}
    me = {"self_id": 1}

    async def main() -> None:
        svc = ReplayService("10.1.0.1", bier=None, reliable=Part(Wire(0, 1).make("h1")))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="BIER service"):
            svc.load(load(Mode.RELIABLE_HOST_BIER, reliable=me))
        with pytest.raises(ValueError, match="self_id"):
            svc.load(load(Mode.RELIABLE_UNICAST))
        with pytest.raises(ValueError, match="no BFR-id"):
            svc.load(
                load(Mode.RELIABLE_UNICAST, (ReplayOp(0, 0.0, 10, ("h2",)),), {"h2": Receiver("10.1.0.2")})
            )
        with pytest.raises(ValueError, match="24 bits"):
            svc.load(load(Mode.RELIABLE_UNICAST, (ReplayOp(1 << 24, 0.0, 10, ("h2",)),), reliable=me))
        with pytest.raises(ValueError, match=r"op 0 needs its group's BFER BFR-ids \(bfers\)"):
            op = ReplayOp(0, 0.0, 10, ("h2",), group="239.100.0.1")
            svc.load(load(Mode.RELIABLE_NET_BIER, (op,), interface="lo", reliable=me))
        # A refused load leaves nothing behind: the next status is of no run at all.
        assert svc.sender is None and svc.status()["mode"] is None
        no_part = ReplayService("10.1.0.1")
        with pytest.raises(ValueError, match="reliable service"):
            no_part.load(load(Mode.RELIABLE_UNICAST, reliable=me))

    asyncio.run(main())
