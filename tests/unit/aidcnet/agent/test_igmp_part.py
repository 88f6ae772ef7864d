"""IgmpPart, the agent's wrapper: no section, no service; a section without net-BIER host ports is a
refusal that says what to add (the agent then keeps its previous config)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from aidcnet.agent.control import Op
from aidcnet.agent.igmp_service import IgmpPart
from aidcnet.config import Igmp


def test_without_a_section_nothing_runs_and_show_says_so() -> None:
    part = IgmpPart(SimpleNamespace(current=None))  # type: ignore[arg-type]
    asyncio.run(part.reload(None))
    assert part.current is None and part.counters() == {}
    with pytest.raises(ValueError, match="no igmp section"):
        asyncio.run(part.handlers()[Op.IGMP]({}))


def test_a_section_without_host_ports_is_refused() -> None:
    config = SimpleNamespace(igmp=Igmp(), interfaces=[])
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

    from aidcnet.agent.igmp_service import PACKET_STATISTICS, SOL_PACKET, _Port
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
