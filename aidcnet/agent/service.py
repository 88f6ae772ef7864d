"""The one interface every feature of the node agent sits behind.

The agent (``aidcnet/agent/daemon.py``) builds its services once, in a fixed order, and from then on only
calls these methods: ``start`` when its event loop runs, ``reload`` with every node file it applies (and
again with the previous one if any service refuses), ``stop`` at exit; it serves the union of their
``handlers`` on the control socket and reports the union of their ``counters``. A service that needs
another one (the INA switch disseminates through BIER; BGP feeds BIER's tables) is handed it at
construction: no service holds the agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aidcnet.agent.control import Handler, Op

if TYPE_CHECKING:
    from aidcnet.config import NodeConfig


class Service:
    async def start(self) -> None:
        """Called once, inside the agent's running event loop, before the first reload."""

    async def reload(self, config: NodeConfig | None) -> None:
        """Bring the service to ``config`` (None: no node file applied). Raise ValueError or OSError when
        it cannot; the agent then reloads every service with the previous config."""

    async def stop(self) -> None:
        """Release sockets, tasks and child processes; called once at exit."""

    def links_down(self, down: frozenset[str]) -> None:
        """The node's interfaces without carrier (or set down) changed: ``down`` names them all now. Called
        on the event loop as the kernel announces it, before anything is re-applied."""

    def handlers(self) -> dict[Op, Handler]:
        return {}

    def counters(self) -> dict[str, int]:
        return {}
