"""The agent's INA part: builds the switch or worker service from the node file's ``ina`` section, and
the control ops ``ina``, ``ina_reset``, ``drop``, ``allreduce``, ``ps_serve``. Kept out of daemon.py so
the agent core stays small; the daemon calls :func:`restart` after BIER on every reload.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aidcnet.loss import EgressLoss

if TYPE_CHECKING:
    from aidcnet.agent.daemon import Agent
    from aidcnet.config import NodeConfig


class InaPart:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.loss = EgressLoss()
        self.switch: Any = None  # InaSwitchService
        self.worker: Any = None  # InaWorkerService
        self._built_for: tuple[Any, Any] | None = None

    def restart(self, target: NodeConfig | None) -> None:
        """(Re)build the INA service when the ina section or the BIER service changed; raises
        ValueError/OSError when it cannot be built (the daemon then rolls back)."""
        agent = self.agent
        loop = asyncio.get_running_loop()
        if agent.bier is not None:
            agent.bier.dataplane.loss = self.loss
            agent.bier.on_udp = self.on_bier_udp
        ina = target.ina if target else None
        key = (ina, agent.bier)
        if key == self._built_for:
            return
        for service in (self.switch, self.worker):
            if service is not None:
                service.close(loop)
        self.switch = self.worker = None
        self._built_for = None
        if ina is None or target is None:
            return
        bsl = target.bier.bsl if target.bier else 256
        if agent.role == "gpu-host":
            if target.bier is None:
                raise ValueError("ina: a worker needs a bier section (its BFR-id is its bit in the A-BM)")
            from aidcnet.agent.ina_worker import InaWorkerService

            self.worker = InaWorkerService(ina, target.bier.bfr_id, bsl, str(target.loopback.ip))
            self.worker.attach(loop)
        else:
            from aidcnet.agent.ina_switch import InaSwitchService

            self.switch = InaSwitchService(
                ina, bsl, str(target.loopback.ip), target.interfaces, bier=agent.bier, loss=self.loss
            )
            self.switch.attach(loop)
        self._built_for = key

    def on_bier_udp(self, datagram: Any) -> bool:
        if self.worker is not None and self.worker.on_bier_udp(datagram):
            return True
        replay = self.agent.replay
        return bool(replay is not None and replay.on_bier_datagram(datagram))

    def counters(self) -> dict[str, int]:
        out = self.loss.counters()
        for service in (self.switch, self.worker):
            if service is not None:
                out.update(service.counters())
        return out

    # -- control ops ------------------------------------------------------------------------------
    def _switch(self) -> Any:
        if self.switch is None:
            raise ValueError("this node runs no INA switch (an ina-switch with an ina section applied)")
        return self.switch

    def _worker(self) -> Any:
        if self.worker is None:
            raise ValueError("this node runs no INA worker (a gpu-host with an ina section applied)")
        return self.worker

    async def show(self, _request: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"drop": dict(self.loss.probability)}
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

    async def drop(self, request: dict[str, Any]) -> dict[str, Any]:
        iface, p = str(request["interface"]), float(request["probability"])
        config = self.agent.config
        known = [i.name for i in config.interfaces] if config else []
        if iface not in known:
            raise ValueError(f"no data interface {iface!r} on this node (its interfaces: {', '.join(known)})")
        self.loss.set(iface, p)
        return {"ok": True, "drop": dict(self.loss.probability)}

    async def allreduce(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._worker().allreduce(request)

    async def ps_serve(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._worker().ps_serve(request)

    def handlers(self) -> dict[str, Any]:
        return {
            "ina": self.show,
            "ina_reset": self.reset,
            "drop": self.drop,
            "allreduce": self.allreduce,
            "ps_serve": self.ps_serve,
        }
