"""An extra ExaBGP speaker for BGP tests, started as the agent starts its own (``python -m
aidcnet.bgp.exabgp_main server CONF``): its API process appends ExaBGP's JSON messages to an events
file, which says whether the session came up. Used in namespaces (unit) and in lab nodes (e2e)."""

from __future__ import annotations

from aidcnet.bgp import exabgp

# The agent's ExaBGP settings with the reactor at full speed: a test waits for a session in seconds.
SPEAKER_ENV = {**exabgp.EXABGP_ENV, "exabgp_reactor_speed": "1.0"}


def event_sink_script(events: str) -> str:
    """The API process: every line ExaBGP writes to it, appended to ``events`` and flushed at once."""
    return (
        "import sys\n"
        f"with open({events!r}, 'a') as f:\n"
        "    for line in sys.stdin:\n"
        "        f.write(line)\n"
        "        f.flush()\n"
    )


def session_came_up(events_text: str) -> bool:
    return any(exabgp.parse_message(line).kind == "up" for line in events_text.splitlines() if line.strip())
