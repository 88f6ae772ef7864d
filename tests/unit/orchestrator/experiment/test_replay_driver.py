"""The replay driver's pure part: receiver records to results messages."""

from __future__ import annotations

import pytest

from orchestrator.experiment.modes.messages import build_messages
from orchestrator.workloads.trace import TraceOp

HOSTS = ["h1", "h2", "h3", "h4"]


def _op(i: int, dst: list[str], t: float = 0.0) -> TraceOp:
    return TraceOp.model_validate(
        {"t": t, "op": "multicast", "src": "h1", "dst": dst, "bytes": 100, "id": i}, context={"hosts": HOSTS}
    )


def _rec(i: int, send_ns: int, complete_ns: int | None, ok: bool = True, dups: int = 0) -> dict:
    return {"id": i, "send_ns": send_ns, "complete_ns": complete_ns, "checksum_ok": ok, "duplicates": dups}


def test_delivered_missing_wrong_and_latency() -> None:
    start = 10_000_000_000
    ops = [_op(0, ["h2", "h3"]), _op(1, ["h4"], t=0.5)]
    records = {
        "h2": {0: _rec(0, start + 1_000, start + 2_001_000, dups=1)},
        "h3": {0: _rec(0, start + 1_000, None, ok=False)},
        "h4": {0: _rec(0, start + 1_000, start + 3_000_000), 7: _rec(7, start, start + 1)},
    }
    messages, missing, wrong = build_messages(ops, records, start)
    m0, m1 = messages
    assert m0.delivered == ["h2", "h4"] and m0.missing == ["h3"] and m0.wrong == ["h4"]
    assert abs(m0.latency["h2"] - 0.002) < 1e-12 and m0.duplicates == {"h2": 1}
    assert abs(m0.sent_at - 1e-6) < 1e-12
    assert m1.delivered == [] and m1.sent_at == 0.5
    assert missing == [(0, "h3"), (1, "h4")]
    assert wrong == [(0, "h4"), (7, "h4")]


def test_a_reliable_sources_protocol_waits_come_off_the_time_its_data_was_due() -> None:
    from aidcnet.agent.replay.protocol import OpTimes
    from orchestrator.experiment.modes.base import ModeOutcome
    from orchestrator.experiment.modes.replaying import op_times, protocol_waits
    from orchestrator.run.driver import due_spans

    s = 10**9
    replies = {
        "h1": {
            "op_times": [OpTimes(0, 1 * s, 1 * s, 5 * s).to_wire(), OpTimes(1, 6 * s).to_wire()],
            "protocol_waits": [[2 * s, 3 * s], [4 * s, 4 * s + s // 2]],
        },
        "h2": {"op_times": [OpTimes(2, 1 * s, 1 * s, 2 * s).to_wire()], "protocol_waits": []},
    }
    outcome = ModeOutcome([])
    outcome.op_times, outcome.protocol_waits = op_times(replies), protocol_waits(replies)
    assert outcome.protocol_waits == {"h1": [(2.0, 3.0), (4.0, 4.5)]}
    # Op 1 was never sent: due to the run's end (8 s).
    assert due_spans(outcome, 8.0) == {
        "h1": [(1.0, 2.0), (3.0, 4.0), (4.5, 5.0), (6.0, 8.0)],
        "h2": [(1.0, 2.0)],
    }
    with pytest.raises(ValueError, match="h3: protocol_waits must be"):
        protocol_waits({"h3": {"protocol_waits": [[1]]}})
