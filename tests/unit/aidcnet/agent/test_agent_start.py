"""What a fresh agent loads before it can answer its health check. In a deploy, every node's agent starts
at once on the machine's two cores, so what it imports at start is paid by every node before the lab is
ready: no pyroute2 (netlink is aidcnet.rtnl's), and nothing only some nodes need (numpy for INA)."""

from __future__ import annotations

import subprocess
import sys

DEFERRED = ("pyroute2", "numpy", "exabgp")


def test_a_fresh_agent_leaves_what_it_may_never_need_unloaded() -> None:
    code = (
        "import sys\n"
        "from aidcnet.agent.daemon import Agent\n"
        "agents = [Agent(role) for role in ('bfr', 'gpu-host', 'ina-switch')]\n"
        f"print(' '.join(m for m in {DEFERRED!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []
