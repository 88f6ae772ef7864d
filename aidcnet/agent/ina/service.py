"""The agent's INA service: builds the switch or worker from the node file's ``ina`` section, and the
control ops ``ina``, ``ina_reset``, ``allreduce``, ``ps_serve``.

A switch disseminates results through the running BIER service, so it is rebuilt when that is; a worker
takes the BIER deliveries addressed to it before the replay service sees them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.service import Service
from aidcnet.roles import Role

if TYPE_CHECKING:
    from aidcnet.agent.bier.service import BierPart
    from aidcnet.agent.ina.switch import InaSwitchService
    from aidcnet.agent.ina.worker import InaWorkerService
    from aidcnet.config import NodeConfig
    from aidcnet.ipv4 import UdpDatagram


class InaPart(Service):
    def __init__(self, role: Role, bier: BierPart) -> None:
        self.role = role
        self.bier = bier
        self.switch: InaSwitchService | None = None
        self.worker: InaWorkerService | None = None
        self._built_for: tuple[Any, Any] | None = None
        bier.add_listener(self.on_bier_udp)

    async def reload(self, config: NodeConfig | None) -> None:
        """(Re)build when the ina section or the BIER service changed; raises ValueError/OSError when it
        cannot be built (the agent then rolls back)."""
        loop = asyncio.get_running_loop()
        ina = config.ina if config else None
        key = (ina, self.bier.current)
        if key == self._built_for:
            return
        self._close(loop)
        if ina is None or config is None:
            return
        bsl = config.bier.bsl if config.bier else 256
        if self.role == Role.GPU_HOST:
            if config.bier is None:
                raise ValueError("ina: a worker needs a bier section (its BFR-id is its bit in the A-BM)")
            from aidcnet.agent.ina.worker import InaWorkerService

            self.worker = InaWorkerService(
                ina, config.bier.bfr_id, bsl, str(config.loopback.ip), queue_bytes=config.smallest_queue_bytes
            )
            self.worker.attach(loop)
        else:
            from aidcnet.agent.ina.switch import InaSwitchService

            self.switch = InaSwitchService(
                ina, bsl, str(config.loopback.ip), bier=self.bier.current,
                queue_bytes=config.smallest_queue_bytes,
            )
            self.switch.attach(loop)
        self._built_for = key

    def _close(self, loop: asyncio.AbstractEventLoop) -> None:
        for service in (self.switch, self.worker):
            if service is not None:
                service.close(loop)
        self.switch = self.worker = None
        self._built_for = None

    async def stop(self) -> None:
        self._close(asyncio.get_running_loop())

    def on_bier_udp(self, datagram: UdpDatagram) -> bool:
        return self.worker is not None and self.worker.on_bier_udp(datagram)

    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for service in (self.switch, self.worker):
            if service is not None:
                out.update(service.counters())
        return out

    # -- control ops ------------------------------------------------------------------------------
    def _worker(self) -> InaWorkerService:
        if self.worker is None:
            raise ValueError("this node runs no INA worker (a gpu-host with an ina section applied)")
        return self.worker

    async def show(self, _request: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if self.switch is not None:
            info["switch"] = self.switch.show()
        if self.worker is not None:
            info["worker"] = {"jobs": sorted(self.worker.members), "ps_jobs": sorted(self.worker.ps_workers)}
        return {"ok": True, **info}

    async def reset(self, request: dict[str, Any]) -> dict[str, Any]:
        job = int(request["job"])
        if self.switch is None:
            return {"ok": True, "job": job, "reset": False}
        return {"ok": True, "job": job, "reset": self.switch.reset(job)}

    async def allreduce(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._worker().allreduce(request)

    async def ps_serve(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._worker().ps_serve(request)

    def handlers(self) -> dict[Op, Handler]:
        return {
            Op.INA: self.show,
            Op.INA_RESET: self.reset,
            Op.ALLREDUCE: self.allreduce,
            Op.PS_SERVE: self.ps_serve,
        }
