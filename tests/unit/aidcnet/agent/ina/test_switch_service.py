"""The INA switch service as a shell (aidcnet/agent/ina/switch.py), with its socket's send captured:
what goes to the next hop, what is disseminated by BIER, what is dropped and counted, injected loss.
Figure 1's s7 (A-BM {w3, w4}, parent s6) and s6 (root) with their planned next hops."""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import Any

import numpy as np
import pytest

from aidcnet.agent.ina.switch import InaSwitchService
from aidcnet.config import Ina, InaJob, InaTransit
from aidcnet.ina.header import DType, InaFlags, InaHeader, Op, payload_from_array
from aidcnet.ipv4 import parse_udp
from tests.unit.node_files import ina_job_knobs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeDataplane:
    def __init__(self) -> None:
        self.imposed: list[tuple[bytes, list[int]]] = []

    def impose(self, payload: bytes, receivers: list[int], **_kw: Any) -> int:
        self.imposed.append((bytes(payload), list(receivers)))
        return 1


class FakeBier:
    def __init__(self) -> None:
        self.dataplane = FakeDataplane()


def service(jobs: list[InaJob], transit: list[InaTransit] = ()):  # type: ignore[assignment]
    ina = Ina(port=free_port(), jobs=jobs, transit=list(transit))
    svc = InaSwitchService(ina, 256, "10.255.0.7", bier=FakeBier())
    sent: list[tuple[bytes, tuple[str, int]]] = []

    def capture(out, failed=None):
        sent.extend((bytes(d), a) for d, a in out)
        return len(out)

    svc.io.send = capture  # type: ignore[method-assign]
    return svc, sent


def feed(svc: InaSwitchService, *packets: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for p in packets:
            s.sendto(p, ("127.0.0.1", svc.ina.port))
    n = 0
    deadline = time.monotonic() + 5
    while n < len(packets):
        assert time.monotonic() < deadline, f"only {n} of {len(packets)} datagrams arrived on loopback"
        n += svc.poll_once()


def pkt(
    worker: int, values: list[int], chunk: int = 0, flags: InaFlags = InaFlags.NONE, pbm: int = 0
) -> bytes:
    return InaHeader(
        job_id=1, chunk=chunk, op=Op.SUM, dtype=DType.INT32, bsl=256, pbm=pbm or 1 << (worker - 1),
        flags=flags, payload=payload_from_array(np.array(values, dtype=np.int32), DType.INT32),
    ).encode()


S7 = InaJob(job_id=1, abm=[3, 4], parent="s6", next_hop=ipaddress.IPv4Address("10.0.0.3"), **ina_job_knobs())
S6 = InaJob(job_id=1, abm=[1, 2, 3, 4], root=True, **ina_job_knobs())


@pytest.fixture
def s7():
    svc, sent = service([S7], [InaTransit(job_id=2, next_hop=ipaddress.IPv4Address("10.0.0.1"))])
    yield svc, sent
    svc.close()


def test_s7_aggregates_its_workers_and_forwards_the_rest(s7):
    svc, sent = s7
    feed(svc, pkt(3, [1, 2]), pkt(4, [10, 20]))
    (data, dst), = sent
    hdr = InaHeader.decode(data)
    assert dst == ("10.0.0.3", svc.ina.port)
    assert hdr.pbm == 0b1100 and hdr.payload_array().tolist() == [11, 22]
    sent.clear()
    # s1's aggregate (P-BM {w1, w2}) fails the AND test at s7 and goes on unchanged toward the root.
    up = pkt(1, [5, 5], pbm=0b11)
    feed(svc, up)
    assert sent == [(up, ("10.0.0.3", svc.ina.port))]
    c = svc.counters()
    assert c["ina.aggregated"] == 1 and c["ina.completed"] == 1 and c["ina.forwarded"] == 1


def test_transit_job_and_unknown_job_and_garbage(s7):
    svc, sent = s7
    other = InaHeader.decode(pkt(5, [1]))
    job2 = InaHeader(**{**{f: getattr(other, f) for f in ("chunk", "op", "dtype", "bsl", "pbm")},
                        "job_id": 2, "payload": bytes(other.payload)}).encode()  # fmt: skip
    job9 = InaHeader(**{**{f: getattr(other, f) for f in ("chunk", "op", "dtype", "bsl", "pbm")},
                        "job_id": 9, "payload": bytes(other.payload)}).encode()  # fmt: skip
    feed(svc, job2, job9, b"\x00" * 20, pkt(3, [1]), pkt(3, [1]))
    assert (job2, ("10.0.0.1", svc.ina.port)) in sent and len(sent) == 1
    c = svc.counters()
    assert c["ina.transit"] == 2 and c["ina.dropped.no-next-hop"] == 1
    assert c["ina.dropped.malformed-bad-version"] == 1 and c["ina.dropped.duplicate"] == 1
    assert c["ina.rx.packets"] == 5


def test_root_disseminates_by_bier_to_the_abm_and_resends_to_requesters_only():
    svc, sent = service([S6])
    try:
        feed(svc, pkt(1, [1], pbm=0b11), pkt(3, [2], pbm=0b1100))
        ((payload, receivers),) = svc.bier.dataplane.imposed
        assert receivers == [1, 2, 3, 4] and sent == []
        datagram = parse_udp(payload)
        result = InaHeader.decode(datagram.payload)
        assert datagram.dport == svc.ina.port and result.result and result.pbm == 0b1111
        assert result.payload_array().tolist() == [3]
        feed(svc, pkt(3, [2], pbm=0b1100, flags=InaFlags.RETRANSMIT))
        assert svc.bier.dataplane.imposed[1][1] == [3, 4]
        assert svc.counters()["ina.disseminated"] == 2
    finally:
        svc.close()


def test_reset_forgets_the_slots_of_a_job(s7):
    svc, _sent = s7
    feed(svc, pkt(3, [1]))
    assert svc.show()["jobs"][0]["slots_in_use"] == 1
    assert svc.reset(1) and not svc.reset(7)
    assert svc.show()["jobs"][0]["slots_in_use"] == 0
