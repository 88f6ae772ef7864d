"""A lab's owner token: what tells a lab a killed test run left from one in use or someone's own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.lab.labdir import container_labels
from orchestrator.lab.owner import (
    OWNER_ENV,
    OWNER_LABEL,
    lab_dir_root,
    left_by_a_killed_run,
    process_token,
)
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS


def owned(*tokens: str) -> list[dict]:
    return [{"Labels": {OWNER_LABEL: token}} for token in tokens]


def test_a_process_token_names_this_boot_this_pid_and_when_it_started():
    token = process_token(os.getpid())
    boot, pid, start = token.split("/")
    assert pid == str(os.getpid()) and int(start) > 0
    assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert process_token(os.getppid()) != token
    assert process_token(os.getpid()) == token  # stable while the process lives


def test_a_lab_is_left_only_when_every_owner_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    gone = process_token(child.pid)
    child.communicate()
    alive = process_token(os.getpid())
    boot, pid, start = alive.split("/")
    assert left_by_a_killed_run(owned(gone, gone))
    assert not left_by_a_killed_run(owned(alive))
    assert not left_by_a_killed_run(owned(gone, alive))  # a run that is still going owns part of it
    # The same PID with another start tick, or from another boot, is not the run that deployed it.
    assert left_by_a_killed_run(owned(f"{boot}/{pid}/{int(start) + 1}"))
    assert left_by_a_killed_run(owned(f"another-boot/{pid}/{start}"))


@pytest.mark.parametrize("labels", [{}, {OWNER_LABEL: ""}, {OWNER_LABEL: "a/b/c"}, {OWNER_LABEL: "x"}])
def test_a_lab_without_a_well_formed_owner_is_never_taken_for_left(labels):
    assert not left_by_a_killed_run([{"Labels": labels}])
    assert not left_by_a_killed_run([{"Labels": labels}, *owned("boot/1/1")])


def test_no_containers_are_not_a_left_lab():
    assert not left_by_a_killed_run([])


def test_a_deploy_under_a_test_run_carries_its_owner(monkeypatch):
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    monkeypatch.delenv(OWNER_ENV, raising=False)
    assert OWNER_LABEL not in container_labels(topo, "h1")
    monkeypatch.setenv(OWNER_ENV, "boot/12/34")
    assert container_labels(topo, "h1")[OWNER_LABEL] == "boot/12/34"


def test_the_lab_dir_root_comes_from_a_node_dir_label(tmp_path):
    node_dir = tmp_path / "clab-x" / "h1"
    assert lab_dir_root([{"Labels": {}}, {"Labels": {"clab-node-lab-dir": str(node_dir)}}]) == tmp_path
    assert lab_dir_root([{"Labels": {}}]) is None
