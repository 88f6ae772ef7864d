"""The worker service's asyncio shell (aidcnet/agent/ina/worker.py) on loopback, no containers: one host
that is both the only worker and its own parameter server, and a one-rank ring. Checks the digest
against numpy's reduction and that a dropped first result is recovered by the retransmit timer."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket

import numpy as np
import pytest

from aidcnet.agent.ina.worker import InaWorkerService, counter_label
from aidcnet.config import Ina, InaMember
from aidcnet.ina.fixedpoint import from_fixed, to_fixed
from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import digest, job_fixed_point_scale, reference, worker_array
from orchestrator.experiment.modes.collective import judge
from tests.unit.node_files import ina_member_knobs


def free_port_pair() -> int:
    # The service binds PORT and PORT + 1 (the ring); find two free neighbours.
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
            a.bind(("0.0.0.0", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
                try:
                    b.bind(("0.0.0.0", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two adjacent free UDP ports")


def make_service(dtype: str = "int32") -> InaWorkerService:
    lo = ipaddress.IPv4Address("127.0.0.1")
    member = InaMember(
        job_id=4, workers=[3], next_hop=lo, root="s6", window=2, **ina_member_knobs(dtype=dtype)
    )
    return InaWorkerService(Ina(port=free_port_pair(), members=[member]), bfr_id=3, bsl=256, loopback=str(lo))


async def run(
    mode: str, lose_first_result: bool = False, dtype: str = "int32", **extra: object
) -> tuple[dict, InaWorkerService]:
    svc = make_service(dtype)
    svc.attach(asyncio.get_running_loop())
    svc.ps_serve({"job": 4, "workers": {"3": "127.0.0.1"}, "reduce": "sum", "dtype": dtype})
    if lose_first_result:
        real = svc._send
        dropped = []

        def lossy(out, io):
            results = [d for d in out if d[0][:1] == b"\x14"]  # version 1 with the S flag: 0x14
            if results and not dropped:
                dropped.append(results[0])
                out = [d for d in out if d is not results[0]]
            real(out, io)

        svc._send = lossy  # type: ignore[method-assign]
    try:
        # what the host's mode class puts in the request: the tree's root, or the ring's ranks
        carries = {"ps": {"to": "127.0.0.1"}, "ring": {"addresses": {"3": "127.0.0.1"}}}.get(mode, {})
        reply = await svc.allreduce(
            {"job": 4, "mode": mode, "elements": 5000, "seed": 2, **carries,
             "chunk_elements": 1000, "timeout_s": 0.05, "deadline_s": 20, **extra}
        )  # fmt: skip
    finally:
        svc.close(asyncio.get_running_loop())
    return reply, svc


def expected() -> str:
    return digest(reference([worker_array(2, 3, 5000, DType.INT32)], Op.SUM))


def test_parameter_server_on_loopback_gives_the_exact_result():
    reply, svc = asyncio.run(run("ps"))
    assert reply["digest"] == expected() and reply["retransmits"] == 0
    assert svc.c["ps.completed"] == 5 and svc.c["results"] == 5


def test_a_lost_result_is_recovered_by_the_retransmit_timer():
    reply, svc = asyncio.run(run("ps", lose_first_result=True))
    assert reply["digest"] == expected() and reply["retransmits"] >= 1
    assert svc.c["ps.resend-result"] >= 1


def test_one_rank_ring_is_its_own_result():
    reply, svc = asyncio.run(run("ring"))
    assert reply["digest"] == expected()
    assert svc.c["allreduce.ring"] == 1 and svc.c["ps.completed"] == 0


def test_the_request_says_what_runs_and_a_mixed_or_odd_one_is_refused():
    """The worker runs what the request carries (a ring's addresses, a tree's root), whatever its mode is
    called; a request that is both, or whose counter label is not a name, is refused before anything
    runs."""
    reply, svc = asyncio.run(run("my-ps", to="127.0.0.1"))
    assert reply["digest"] == expected() and svc.c["allreduce.my-ps"] == 1 and svc.c["ps.completed"] == 5
    with pytest.raises(ValueError, match=r"a ring \(addresses\) or a tree \(to\), not both"):
        asyncio.run(run("ring", to="127.0.0.1"))
    with pytest.raises(ValueError, match="counter label"):
        asyncio.run(run("PS!", to="127.0.0.1"))
    with pytest.raises(ValueError, match="names its mode"):
        counter_label({"job": 4, "to": "127.0.0.1"})
    assert counter_label({"mode": "ring", "addresses": {}}) == "ring"


@pytest.mark.parametrize("mode", ["ps", "ring"])
@pytest.mark.parametrize("dtype", [DType.FIXED32, DType.FLOAT32])
def test_float_jobs_return_values_the_driver_judges(mode: str, dtype: DType):
    """The values a float job returns hash to its digest and pass the driver's judgement; a wrong
    Scale (another worker's) or tampered values are caught."""
    scale = job_fixed_point_scale(1)
    reply, _svc = asyncio.run(run(mode, dtype=dtype.name.lower(), values=True, scale=scale))
    assert reply["dtype"] == dtype.name.lower() and reply["scale"] == (scale if dtype is DType.FIXED32 else 0)
    arrays = [worker_array(2, 3, 5000, dtype)]
    assert judge(arrays, Op.SUM, dtype, scale, {"w3": reply})[0] == []
    # One worker of one: its own array is the sum, so fixed32 is exactly rint(x * 2**s) * 2**-s.
    got = np.frombuffer(base64.b64decode(reply["values"]), ">f4")
    if dtype is DType.FIXED32:
        assert digest(got) == digest(from_fixed(to_fixed(arrays[0], scale), scale))
    else:
        assert got.tolist() == arrays[0].tolist()
    tampered = dict(reply, values=base64.b64encode((got + np.float32(0.5)).astype(">f4").tobytes()).decode())
    assert judge(arrays, Op.SUM, dtype, scale, {"w3": tampered})[0] == ["w3"]
