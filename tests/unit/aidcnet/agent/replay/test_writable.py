"""A sender waits for room in its socket without a trip through the event loop when there is room."""

from __future__ import annotations

import asyncio
import socket

from aidcnet.agent.replay.sockets import writable


def test_a_socket_with_room_is_writable_without_the_event_loop() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()

        def no_loop(*_args: object) -> None:
            raise AssertionError("a socket with room went through the event loop to be found writable")

        loop.add_writer = no_loop  # type: ignore[method-assign]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            await asyncio.wait_for(writable(loop, sock), 1)

    asyncio.run(run())
