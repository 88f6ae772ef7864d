"""The agent's loss-injection service: the ``drop`` op and the ``loss.injected.*`` counters.

The :class:`aidcnet.loss.EgressLoss` it drives is shared with the senders that consult it (the BIER
dataplane and the INA switch), which are handed the same object at construction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.service import Service

if TYPE_CHECKING:
    from aidcnet.config import NodeConfig
    from aidcnet.loss import EgressLoss


class LossPart(Service):
    def __init__(self, loss: EgressLoss) -> None:
        self.loss = loss
        self.interfaces: list[str] = []

    async def reload(self, config: NodeConfig | None) -> None:
        self.interfaces = [i.name for i in config.interfaces] if config else []

    async def drop(self, request: dict[str, Any]) -> dict[str, Any]:
        iface, p = str(request["interface"]), float(request["probability"])
        if iface not in self.interfaces:
            known = ", ".join(self.interfaces)
            raise ValueError(f"no data interface {iface!r} on this node (its interfaces: {known})")
        self.loss.set(iface, p)
        return {"ok": True, "drop": dict(self.loss.probability)}

    def counters(self) -> dict[str, int]:
        return self.loss.counters()

    def handlers(self) -> dict[Op, Handler]:
        return {Op.DROP: self.drop}
