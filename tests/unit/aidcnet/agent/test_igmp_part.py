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
