"""The agent's control channel: one JSON request and one JSON reply per line on a Unix socket.

A request is ``{"op": <Op>, ...fields}``; a reply is ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.
The operations are the :class:`Op` names, defined here once: the daemon's handler table, ``aidcnet ctl``
and :class:`aidcnet.agent.client.AgentClient` (inside a node, or from the host through
``/proc/PID/root``) all take them from here. Nothing listens on the network.

One deliberate exception: the node's half of the Ansible action ``aidcnet_node_file``
(``playbooks/roles/aidcnet_node/files/aidcnet_node_file.py``) writes its two requests (validate, reload) by
hand: importing this module and its asyncio would cost more than that whole configure step.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from aidcnet.paths import CONTROL_SOCKET

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# The longest request line the agent reads (asyncio's default stream limit): a longer one is refused
# unanswered, so a client cuts what it sends (a replay load: ``ReplayLoad.lines``).
REQUEST_LINE_BYTES = 64 << 10


class Op(StrEnum):
    """Every operation the agent serves. The value is what travels in ``"op"``."""

    HEALTH = "health"
    COUNTERS = "counters"
    CONFIG = "config"
    RELOAD = "reload"
    VALIDATE = "validate"
    RESTART = "restart"
    BIFT = "bift"
    BIER_SEND = "bier_send"
    BIER_RECEIVED = "bier_received"
    REPLAY_LOAD = "replay_load"
    REPLAY_START = "replay_start"
    REPLAY_STATUS = "replay_status"
    REPLAY_RESULTS = "replay_results"
    REPLAY_STOP = "replay_stop"
    INA = "ina"
    INA_RESET = "ina_reset"
    RELIABLE_RESET = "reliable_reset"
    ALLREDUCE = "allreduce"
    PS_SERVE = "ps_serve"
    BGP = "bgp"
    BGP_LINK = "bgp_link"
    FARE_SEND = "fare_send"
    IGMP = "igmp"
    BFD = "bfd"
    TIME_SCALE = "time_scale"


class ControlError(RuntimeError):
    """The agent could not be reached, or answered something that is not a reply."""


async def serve(handlers: Mapping[Op, Handler], path: Path = CONTROL_SOCKET) -> asyncio.AbstractServer:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    table: dict[str, Handler] = {str(op): handler for op, handler in handlers.items()}

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                request = json.loads(line)
                handler = table.get(request.get("op", ""))
                if handler is None:
                    reply = {"ok": False, "error": f"unknown op {request.get('op')!r}; know {sorted(table)}"}
                else:
                    reply = await handler(request)
            except Exception as exc:  # a bad request must never take the agent down
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_unix_server(on_client, path=str(path), limit=REQUEST_LINE_BYTES)


def request(op: Op, timeout: float = 5.0, path: Path = CONTROL_SOCKET, **fields: Any) -> dict[str, Any]:
    """One blocking round trip; the reply as the agent sent it (``ok`` may be false)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as exc:
        raise ControlError(
            f"no agent answers on {path} ({exc.strerror}); is the node agent running? "
            "(check the container's log: docker logs <container>)"
        ) from exc
    try:
        with sock:
            sock.sendall(json.dumps({"op": str(op), **fields}).encode() + b"\n")
            # A list, not bytes +=: replies carrying whole AllReduce results run to megabytes.
            parts: list[bytes] = []
            while not parts or not parts[-1].endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                parts.append(chunk)
    except OSError as exc:  # timeouts included: a paused container accepts but never answers
        raise ControlError(f"agent on {path} did not answer {op} ({exc})") from exc
    try:
        return json.loads(b"".join(parts))
    except ValueError as exc:
        raise ControlError(f"agent on {path} sent no valid reply to {op} ({exc})") from exc
