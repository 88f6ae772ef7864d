"""Loss injection (aidcnet.loss) and how its and the INA switch's counters reach Prometheus."""

from __future__ import annotations

import pytest

from aidcnet.agent.metrics import split_counter
from aidcnet.loss import EgressLoss


def test_drop_probability_per_interface_is_applied_and_counted():
    loss = EgressLoss(seed=1)
    loss.set("eth1", 0.25)
    kept = sum(loss.keep("eth1") for _ in range(4000))
    assert 2800 < kept < 3200  # 4000 * 0.75 = 3000, binomial sd ~27
    assert loss.counters() == {"loss.injected.eth1": 4000 - kept}
    assert all(loss.keep("eth2") for _ in range(100)) and all(loss.keep(None) for _ in range(10))
    loss.set("eth1", 1.0)
    assert not any(loss.keep("eth1") for _ in range(10))
    loss.set("eth1", 0)
    assert "eth1" not in loss.probability and loss.keep("eth1")


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_probability_out_of_range_is_refused(p):
    with pytest.raises(ValueError, match="between 0 and 1"):
        EgressLoss().set("eth1", p)


def test_ina_and_loss_counters_become_labelled_families():
    assert split_counter("ina.dropped.slot-budget-exceeded") == (
        "aidcnet_ina_dropped_by_reason", {"reason": "slot-budget-exceeded"}
    )
    assert split_counter("loss.injected.eth3") == ("aidcnet_loss_injected", {"interface": "eth3"})
    assert split_counter("ina.completed") == ("aidcnet_ina_completed", {})
