"""IgmpPart, the agent's wrapper: no section, no service; a section without net-BIER host ports is a
refusal that says what to add (the agent then keeps its previous config)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from aidcnet.agent.control import Op
from aidcnet.agent.igmp.service import IgmpPart
from aidcnet.config import Igmp
from tests.unit.node_files import igmp_knobs


def test_without_a_section_nothing_runs_and_show_says_so() -> None:
    part = IgmpPart(SimpleNamespace(current=None))  # type: ignore[arg-type]
    asyncio.run(part.reload(None))
    assert part.current is None and part.counters() == {}
    with pytest.raises(ValueError, match="no igmp section"):
        asyncio.run(part.handlers()[Op.IGMP]({}))


def test_a_section_without_host_ports_is_refused() -> None:
    config = SimpleNamespace(igmp=Igmp(**igmp_knobs()), interfaces=[])
    part = IgmpPart(SimpleNamespace(current=SimpleNamespace(edge=None)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"bier\.host_ports"):
        asyncio.run(part.reload(config))  # type: ignore[arg-type]
    part = IgmpPart(SimpleNamespace(current=None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a bier section"):
        asyncio.run(part.reload(config))  # type: ignore[arg-type]


def test_a_ports_kernel_drops_add_up_across_reads_and_spoil_the_run() -> None:
    """PACKET_STATISTICS zeroes itself on each read: the port keeps the sum, which the fidelity verdict
    counts as our software's loss (a report dropped at a full buffer is a join lost)."""
    import struct

    from aidcnet.agent.igmp.service import PACKET_STATISTICS, SOL_PACKET, _Port
    from orchestrator.experiment.fidelity import agent_losses

    reads = iter([(40, 3), (10, 0), (25, 5)])

    def getsockopt(level: int, name: int, size: int) -> bytes:
        assert (level, name, size) == (SOL_PACKET, PACKET_STATISTICS, 8)
        return struct.pack("=II", *next(reads))

    port = _Port.__new__(_Port)
    port.dropped = 0
    port.rx = SimpleNamespace(getsockopt=getsockopt)  # type: ignore[assignment]
    assert [port.drops(), port.drops(), port.drops()] == [3, 3, 8]
    assert agent_losses({"leaf1": {"igmp.shell.rx-drops": 8}}) == {"leaf1": {"agent igmp.shell.rx-drops": 8}}


def test_a_new_time_scale_rescales_the_running_leaf_and_anything_else_rebuilds_it(monkeypatch) -> None:
    """The automatic scale tells every agent its new scale just before a run (Op.TIME_SCALE): the leaf
    must keep its memberships and follow, not be rebuilt (which forgot them and queried every host at
    once, into the run)."""
    from aidcnet.agent.igmp import service as svc

    made: list[FakeService] = []

    class FakeService:
        def __init__(self, igmp, bier, config) -> None:
            self.igmp, self.rescaled, self.closed = igmp, [], False
            made.append(self)

        def attach(self, loop) -> None:
            pass

        def rescale(self, igmp) -> None:
            self.rescaled.append(igmp.time_scale)

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(svc, "IgmpService", FakeService)
    part = IgmpPart(SimpleNamespace(current=object()))  # type: ignore[arg-type]
    fabric = dict(query_interval=0.001, query_response_interval=0.0001, last_member_query_interval=1e-5)
    igmp = Igmp(**igmp_knobs(time_scale=20000, **fabric))

    def at(section: Igmp):
        return SimpleNamespace(igmp=section, interfaces=[])

    asyncio.run(part.reload(at(igmp)))  # type: ignore[arg-type]
    asyncio.run(part.reload(at(igmp.model_copy(update={"time_scale": 60000}))))  # type: ignore[arg-type]
    assert len(made) == 1 and made[0].rescaled == [60000] and not made[0].closed
    # Another knob (here the modelled cost) is a new service, as before.
    asyncio.run(part.reload(at(igmp.model_copy(update={"time_scale": 60000, "control_cost": 5e-6}))))  # type: ignore[arg-type]
    assert len(made) == 2 and made[0].closed and made[1].rescaled == []
