"""Who owns a deployed lab, so a lab that a killed run left behind can be told from one that is in use.

A test run (the aidclab.pytest plugin, the docs harness) labels every container it deploys with a token
naming its own process. When that process is gone (SIGKILL, a CI job stopped, a reboot), nothing will ever
destroy the lab, and the next run may clear it; a lab with no owner label is someone's own and is never
touched. A CLI deploy under such a process (a doc's ``make deploy``) is labelled through ``AIDCLAB_OWNER``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

OWNER_LABEL = "aidclab-owner"
OWNER_ENV = "AIDCLAB_OWNER"


def process_token(pid: int) -> str | None:
    """``boot/pid/start``: the machine's boot, the PID and the tick it started at, so a PID the kernel hands
    to another process later, or a PID from before a reboot, never matches. None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # Field 22 (starttime), counted after the command name, which may itself hold spaces and ")".
    start = stat.rsplit(")", 1)[1].split()[19]
    return f"{boot}/{pid}/{start}"


def owner_labels() -> dict[str, str]:
    """The owner label a deploy adds when a test run asked for it through ``AIDCLAB_OWNER``."""
    token = os.environ.get(OWNER_ENV, "")
    return {OWNER_LABEL: token} if token else {}


def left_by_a_killed_run(containers: Sequence[Mapping[str, Any]]) -> bool:
    """Every container carries a well-formed owner label and no owner is still running."""
    owners = {(c.get("Labels") or {}).get(OWNER_LABEL) or "" for c in containers}
    pairs = [(owner, owner.split("/")[1]) for owner in owners if owner.count("/") == 2]
    if not owners or len(pairs) != len(owners) or not all(pid.isdigit() for _, pid in pairs):
        return False
    return all(process_token(int(pid)) != owner for owner, pid in pairs)


def lab_dir_root(containers: Sequence[Mapping[str, Any]]) -> Path | None:
    """Where the lab's directory was made (``ROOT/clab-LAB/NODE``), for destroy to find what it holds."""
    for c in containers:
        node_dir = (c.get("Labels") or {}).get("clab-node-lab-dir")
        if node_dir:
            return Path(node_dir).parent.parent
    return None
