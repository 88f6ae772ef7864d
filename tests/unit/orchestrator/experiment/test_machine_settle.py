"""The wait before a run for a machine busy with something else (a lab just destroyed: the kernel tearing
down its namespaces) to settle: watch.wait_machine_settled on a fake clock and CPU counter."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from orchestrator.experiment.watch import MachineSettle, wait_machine_settled


class FakeMachine:
    """A machine whose cores are busy ``loads[i]`` (cores) during the i-th window, then the last."""

    def __init__(self, loads: list[float]) -> None:
        self.loads = loads
        self.now = 0.0
        self.cpu = 0.0
        self.windows = 0

    def clock(self) -> float:
        return self.now

    def read_cpu_s(self) -> float:
        return self.cpu

    def sleep(self, s: float) -> None:
        load = self.loads[min(self.windows, len(self.loads) - 1)]
        self.windows += 1
        self.now += s
        self.cpu += load * s


def settle(machine: FakeMachine, **kw) -> MachineSettle:
    return wait_machine_settled(2, machine.read_cpu_s, machine.clock, machine.sleep, **kw)


def test_a_quiet_machine_is_looked_at_once_and_not_waited_for() -> None:
    m = FakeMachine([0.05])
    got = settle(m, window_s=0.3)
    assert m.windows == 1
    assert got.left is None and got.waited_s == 0 and got.describe() is None


def test_a_busy_machine_is_waited_for_until_it_settles() -> None:
    # a core busy for three windows (a destroyed lab's namespaces going), then quiet
    m = FakeMachine([1.0, 1.0, 1.0, 0.1])
    got = settle(m, window_s=0.3)
    assert m.windows == 4
    assert got.left is None and abs(got.busy_at_first - 1.0) < 1e-9
    assert abs(got.waited_s - 0.9) < 1e-9
    line = got.describe()
    assert line is not None and "waited 0.9 s" in line and "1.00 of 2 cores" in line


def test_a_machine_that_stays_busy_is_given_up_on_and_named() -> None:
    m = FakeMachine([1.9])
    got = settle(m, window_s=0.5, timeout_s=3.0)
    assert got.left is not None and abs(got.left - 1.9) < 1e-9
    assert got.waited_s >= 3.0 and m.windows == 7  # the first window, then 3 s more
    line = got.describe()
    assert line is not None and "still busy (1.90 of 2 cores)" in line and "starts anyway" in line


@given(
    loads=st.lists(st.floats(min_value=0, max_value=2), min_size=1, max_size=50),
    share=st.floats(min_value=0.05, max_value=0.9),
)
def test_it_returns_at_the_first_window_below_the_share_or_at_the_timeout(loads: list[float], share: float):
    # A load on the bar itself is measured back as a difference of summed CPU seconds, which rounds either
    # way (0.1 core against a bar of 0.1 came back below it in the fourth window): not what this is about.
    assume(all(abs(load - share * 2) > 1e-9 for load in loads))
    m = FakeMachine(loads)
    got = settle(m, window_s=0.5, timeout_s=10.0, share=share)
    quiet = [i for i, load in enumerate(loads) if load < share * 2]
    if got.left is None:
        assert quiet and m.windows == quiet[0] + 1
    else:
        assert m.windows == 21 and not [i for i in quiet if i < 21]
