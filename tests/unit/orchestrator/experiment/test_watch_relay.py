"""The delay relay's part of the verdict: what it lost, and delayed links with no relay to carry them."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.experiment.fidelity import Verdict
from orchestrator.experiment.watch import with_relay
from orchestrator.lab import relayctl
from orchestrator.lab.delay import LinkDelay
from orchestrator.lab.fabric import EndShaper, Fabric


def _fabric(delay_s: float) -> Fabric:
    end = EndShaper("a", "eth1", "b:eth1", 400 * 10**9, 20_000_000, 4 << 20, 19028, 9500)
    fabric = Fabric("lab", 20000, {end.name: end})
    return fabric.with_delay(end.name, LinkDelay(delay_s, 0.0), one_way=True)[0] if delay_s else fabric


CLEAN = Verdict(True, [], [])


def test_a_lab_without_delay_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relayctl, "status", lambda _d: pytest.fail("no relay to ask"))
    assert with_relay(CLEAN, _fabric(0.0), Path("x"), {}) == CLEAN


def test_frames_the_relay_lost_spoil_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relayctl, "status", lambda _d: {"delay.dropped": 3})
    v = with_relay(CLEAN, _fabric(1e-6), Path("x"), {"the delay relay": 3})
    assert not v.faithful and v.reasons == ["the delay relay lost 3 frames"]
    assert with_relay(CLEAN, _fabric(1e-6), Path("x"), {"the delay relay": 0}) == CLEAN


def test_delayed_links_without_a_relay_spoil_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relayctl, "status", lambda _d: None)
    v = with_relay(CLEAN, _fabric(2e-3), Path("x"), {})
    assert not v.faithful and "no delay relay runs" in v.reasons[0]
