"""destroy's kill of a container's init (DockerRuntime.kill): only a process in the container's cgroup is
ever signalled. Real processes stand in for containers; the Docker API is faked."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import docker.errors

from orchestrator.lab.runtime.docker import DockerRuntime


def runtime_seeing(state: dict, cid: str) -> DockerRuntime:
    rt = DockerRuntime.__new__(DockerRuntime)

    def inspect_container(name: str) -> dict:
        if state is None:
            raise docker.errors.NotFound("gone")
        return {"Id": cid, "State": state}

    rt.api = SimpleNamespace(inspect_container=inspect_container)  # type: ignore[attr-defined]
    return rt


def test_a_process_in_the_container_cgroup_is_killed():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        # A container's id appears in its processes' cgroup paths; a line of this process's own stands in.
        marker = Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()[0].split(":", 2)[2]
        rt = runtime_seeing({"Running": True, "Pid": proc.pid}, marker)
        assert rt.kill("clab-x-n1") is True
        assert proc.wait(timeout=5) == -9
    finally:
        proc.kill()


def test_a_pid_of_another_process_is_never_signalled():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        rt = runtime_seeing({"Running": True, "Pid": proc.pid}, "0123456789abcdef" * 4)
        assert rt.kill("clab-x-n1") is False
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_stopped_or_missing_container_is_left_to_remove():
    assert runtime_seeing({"Running": False, "Pid": 0}, "abc").kill("clab-x-n1") is False
    assert runtime_seeing(None, "abc").kill("clab-x-n1") is False  # type: ignore[arg-type]
