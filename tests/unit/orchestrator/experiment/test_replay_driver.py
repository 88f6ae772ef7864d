"""The replay driver's pure part: receiver records to results messages."""

from __future__ import annotations

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
