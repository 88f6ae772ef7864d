"""The climbing confirmation: each comparison starts from the more dilated run of the last one, and the
climb stops at the first agreement or after its steps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.experiment.fidelity import Confirmation
from orchestrator.run import driver

# fabric completion (µs) of the run at 1:1000 x 2**k: software paced the first ones, then it settles
SETTLES_AT_THIRD = [40.0, 35.0, 31.0, 30.5, 30.4]


def _fake_confirm(completions: list[float], calls: list[int]) -> Any:
    def confirm(topo, trace, mode, first, options=None, *, factor, **_kw):
        k = first.step
        calls.append(k)
        second = SimpleNamespace(step=k + 1)
        check = Confirmation(
            scales=(1000 * 2**k, 1000 * 2 ** (k + 1)),
            fabric_s=(completions[k] * 1e-6, completions[k + 1] * 1e-6),
            payload_bytes=(100, 100),
            link_bytes=(1000, 1000),
        )
        return second, check

    return confirm


def _climb(monkeypatch: pytest.MonkeyPatch, completions: list[float], steps: int) -> tuple[list, Any, list]:
    calls: list[int] = []
    monkeypatch.setattr(driver, "confirm", _fake_confirm(completions, calls))
    runs, check = driver.confirm_rising(
        None, "t.jsonl", "unicast", SimpleNamespace(step=0), steps=steps, progress=lambda _: None
    )
    return runs, check, calls


def test_it_climbs_from_the_more_dilated_run_until_two_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    runs, check, calls = _climb(monkeypatch, SETTLES_AT_THIRD, steps=5)
    # 40 vs 35 (12.5 % apart), 35 vs 31 (11.4 %), 31 vs 30.5 (1.6 %): confirmed at the third comparison
    assert calls == [0, 1, 2]
    assert [r.step for r in runs] == [0, 1, 2, 3]
    assert check.confirmed and check.scales == (4000, 8000)


def test_one_step_is_the_plain_confirmation(monkeypatch: pytest.MonkeyPatch) -> None:
    runs, check, calls = _climb(monkeypatch, SETTLES_AT_THIRD, steps=1)
    assert calls == [0] and len(runs) == 2
    assert not check.confirmed


def test_an_agreement_at_once_ends_the_climb(monkeypatch: pytest.MonkeyPatch) -> None:
    runs, check, calls = _climb(monkeypatch, [30.0, 30.3, 50.0], steps=3)
    assert calls == [0] and check.confirmed and len(runs) == 2


@given(
    completions=st.lists(st.floats(min_value=1.0, max_value=100.0), min_size=6, max_size=6),
    steps=st.integers(min_value=1, max_value=5),
)
def test_it_never_makes_more_comparisons_than_its_steps(completions: list[float], steps: int) -> None:
    calls: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(driver, "confirm", _fake_confirm(completions, calls))
        runs, check = driver.confirm_rising(
            None, "t.jsonl", "unicast", SimpleNamespace(step=0), steps=steps, progress=lambda _: None
        )
    assert 1 <= len(calls) <= steps and len(runs) == len(calls) + 1
    # it stops early only on an agreement, and climbs only from the run the last comparison made
    assert check.confirmed or len(calls) == steps
    assert calls == list(range(len(calls)))


def test_no_steps_is_refused_by_name() -> None:
    import argparse

    from orchestrator.cli.args import at_least_one

    with pytest.raises(ValueError, match="confirm steps must be 1 or more, not 0"):
        driver.confirm_rising(None, "t.jsonl", "unicast", SimpleNamespace(step=0), steps=0)
    assert at_least_one("3") == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="a whole number of 1 or more"):
            at_least_one(bad)
