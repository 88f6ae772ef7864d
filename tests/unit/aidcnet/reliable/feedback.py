"""AGG-ACKs for the reliable tests, written with sequence numbers relative to a test's ISN."""

from __future__ import annotations

from collections.abc import Iterable

from aidcnet.reliable import serial
from aidcnet.reliable.header import AggAck
from aidcnet.reliable.sender import id_mask


def agg_ack(
    isn: int,
    cum_k: int,
    acked: Iterable[int],
    missing: Iterable[int] = (),
    first_k: int | None = None,
    reporter: int = 0,
) -> AggAck:
    """AGG-ACK of flow (BFIR 1, Flow ID 7), BSL 64, SI 0: BFR-ids ``acked`` hold everything before
    ``isn + cum_k`` (from ``isn + first_k`` only, when given: selective), ``missing`` have not confirmed
    it."""
    return AggAck(
        bfir_id=1,
        flow_id=7,
        cum=serial.add(isn, cum_k),
        reporter=reporter,
        bsl=64,
        si=0,
        acked=id_mask(acked),
        missing=id_mask(missing),
        first=None if first_k is None else serial.add(isn, first_k),
    )
