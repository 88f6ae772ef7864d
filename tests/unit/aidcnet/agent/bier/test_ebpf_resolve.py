"""The eBPF BFR keeps asking for the neighbours it could not resolve at its start (pure: a fake runner)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aidcnet.agent.bier import ebpf
from aidcnet.agent.bier.ebpf import EbpfBier


def _bfr(commands: list[list[str]], resolved_after: int) -> EbpfBier:
    """An EbpfBier with two BFR-NBRs, h1 unresolved, whose table shows h1 once ``resolved_after`` reads
    have passed; every command it runs is kept in ``commands``."""
    bfr = object.__new__(EbpfBier)
    bfr.maps = object()
    bfr.dp = SimpleNamespace(neighbors={"h1": ("10.0.1.2", "eth1"), "spine1": ("10.0.0.1", "eth2")})
    bfr.unresolved = ["h1"]
    bfr.run = lambda cmd: commands.append(cmd) or ""
    reads = []

    def resolve_neighbors(solicit_missing: bool = False) -> list[str]:
        reads.append(solicit_missing)
        bfr.unresolved = [] if len(reads) >= resolved_after else ["h1"]
        return bfr.unresolved

    bfr.resolve_neighbors = resolve_neighbors  # type: ignore[method-assign]
    bfr.reads = reads  # type: ignore[attr-defined]
    return bfr


def test_an_unresolved_neighbour_is_asked_for_again_until_the_table_has_it(monkeypatch) -> None:
    monkeypatch.setattr(ebpf, "RESOLVE_RETRY_MAX_S", 0.02)
    commands: list[list[str]] = []
    bfr = _bfr(commands, resolved_after=3)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        bfr._retry_resolve(loop, 0.01)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if not bfr.unresolved:
                break

    asyncio.run(run())
    assert bfr.unresolved == [] and len(bfr.reads) == 3  # type: ignore[attr-defined]
    # Each retry pinged the unresolved neighbour out of its interface, and only it.
    pings = [c for c in commands if "ping" in " ".join(c)]
    assert len(pings) == 3
    assert all("-I eth1 10.0.1.2" in " ".join(c) and "10.0.0.1" not in " ".join(c) for c in pings)


def test_a_neighbour_that_stays_unresolved_is_asked_for_less_and_less_often(monkeypatch) -> None:
    monkeypatch.setattr(ebpf, "RESOLVE_RETRY_MAX_S", 0.08)
    commands: list[list[str]] = []
    bfr = _bfr(commands, resolved_after=10**6)
    waits: list[float] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        call_later = loop.call_later

        def recorded(delay, callback, *args):  # type: ignore[no-untyped-def]
            if callback == bfr._retry_resolve:
                waits.append(delay)
            return call_later(delay, callback, *args)

        loop.call_later = recorded  # type: ignore[method-assign]
        bfr._retry_resolve(loop, 0.01)
        while len(waits) < 5:
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(run(), 10))
    # Each ask that still finds the neighbour missing doubles the wait, up to the longest.
    assert waits[:5] == [0.02, 0.04, 0.08, 0.08, 0.08]
