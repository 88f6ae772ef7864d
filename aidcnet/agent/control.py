"""The agent's control channel: one JSON request and one JSON reply per line on a Unix socket.

``aidcnet ctl`` and the orchestrator (through ``docker exec``) speak it; nothing listens on the network.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aidcnet.paths import CONTROL_SOCKET

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class ControlError(RuntimeError):
    pass


async def serve(handlers: dict[str, Handler], path: Path = CONTROL_SOCKET) -> asyncio.AbstractServer:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                request = json.loads(line)
                handler = handlers.get(request.get("op", ""))
                if handler is None:
                    reply = {
                        "ok": False,
                        "error": f"unknown op {request.get('op')!r}; know {sorted(handlers)}",
                    }
                else:
                    reply = await handler(request)
            except Exception as exc:  # a bad request must never take the agent down
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_unix_server(on_client, path=str(path))


def request(op: str, timeout: float = 5.0, path: Path = CONTROL_SOCKET, **fields: Any) -> dict[str, Any]:
    """Blocking client used by ``aidcnet ctl``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as exc:
        raise ControlError(
            f"no agent answers on {path} ({exc.strerror}); is the node agent running? "
            "(check the container's log: docker logs <container>)"
        ) from exc
    with sock:
        sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
        # A list, not bytes +=: replies carrying whole AllReduce results run to megabytes.
        parts: list[bytes] = []
        while not parts or not parts[-1].endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            parts.append(chunk)
    return json.loads(b"".join(parts))
