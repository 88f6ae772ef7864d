"""The node agent process: loads its role, serves the control socket, keeps counters.

Later features (configuration, BIER, INA, BGP) plug in as services of this one process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections import Counter
from typing import Any

from aidcnet.agent import control

log = logging.getLogger("aidcnet.agent")

ROLES = ("bfr", "ina-switch", "gpu-host")


class Agent:
    def __init__(self, role: str):
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        self.role = role
        self.started = time.time()
        self.counters: Counter[str] = Counter()

    async def health(self, _request: dict[str, Any]) -> dict[str, Any]:
        self.counters["control.health"] += 1
        return {
            "ok": True,
            "role": self.role,
            "node": socket.gethostname(),
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
        }

    async def show_counters(self, _request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "counters": dict(self.counters)}

    async def run(self) -> None:
        server = await control.serve({"health": self.health, "counters": self.show_counters})
        log.info("aidcnet %s agent ready on %s", self.role, control.CONTROL_SOCKET)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()
        log.info("aidcnet agent stopping")


def run_agent(role: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(Agent(role).run())
