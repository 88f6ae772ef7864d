"""An agent's ``restart`` op: it answers with its counters as it leaves them, and stops on the loop's next
turn, so a fault's restart takes effect when it is answered (docs/faults.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aidcnet.agent import control
from aidcnet.agent.control import Op
from aidcnet.agent.daemon import Agent


def test_a_restart_answers_with_its_counters_and_stops_at_once(tmp_path: Path) -> None:
    async def scenario() -> tuple[dict, bool, bool]:
        agent = Agent("bfr", config_path=tmp_path / "node.json")
        agent._stop = asyncio.Event()
        agent.counters["control.requests"] = 7
        path = tmp_path / "control.sock"
        server = await control.serve({Op.RESTART: agent.restart}, path)
        try:
            reply = await asyncio.to_thread(control.request, Op.RESTART, 5.0, path)
            stopped_by_reply = agent._stop.is_set()
            await asyncio.sleep(0)
            return reply, stopped_by_reply or agent._stop.is_set(), agent._restart
        finally:
            server.close()

    reply, stopped, restarting = asyncio.run(scenario())
    assert reply["ok"] and reply["counters"]["control.requests"] == 7
    assert stopped and restarting
