"""The ExaBGP API process: ExaBGP starts it (``process aidcnet { run ...; }``) and talks to it over
stdin/stdout; it connects to the node agent's BGP socket and moves lines both ways, nothing else.

ExaBGP → stdin → socket → agent (JSON updates and state changes, one per line)
agent → socket → stdout → ExaBGP (``neighbor X announce|withdraw route ...`` commands, one per line)

When the agent's socket closes the relay exits, and the agent restarts ExaBGP with it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aidcnet.bgp.relay AGENT_SOCKET", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(100):
        try:
            sock.connect(args[0])
            break
        except OSError:
            time.sleep(0.1)
    else:
        print(f"aidcnet.bgp.relay: no agent listens on {args[0]}", file=sys.stderr)
        return 1

    def to_agent() -> None:
        # Raw fd reads: sys.stdin's buffering would hold a line back until more arrive.
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                sock.sendall(data)
        finally:
            os._exit(0)

    threading.Thread(target=to_agent, daemon=True).start()
    while True:
        data = sock.recv(65536)
        if not data:
            return 0
        os.write(1, data)


if __name__ == "__main__":
    raise SystemExit(main())
