"""Every playbook, with its roles, passes ``ansible-playbook --syntax-check``: Ansible loads each task and
splits free-form arguments (``raw``, ``shell``, ``command``) there, so a lone quote in a raw script (a
comment's apostrophe once broke every lab with BGP) fails here instead of at configure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.paths import ANSIBLE_CFG, PLAYBOOKS

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


@pytest.mark.parametrize("playbook", sorted(PLAYBOOKS.glob("*.yml")), ids=lambda p: p.name)
def test_playbook_passes_the_syntax_check(playbook: Path) -> None:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_CFG), "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles")}
    run = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", "localhost,", str(playbook)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
