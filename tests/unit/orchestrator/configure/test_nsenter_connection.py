"""playbooks/connection_plugins/aidclab_nsenter.py against a process in namespaces of its own, as a
container holds, made here with unshare(1): commands, piped module input and files in and out run inside its
mount, UTS and network namespaces, with its environment and not the controller's. Needs root, like
tests/unit/fabric_netns.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext

from orchestrator.paths import ROOT
from tests.unit.fabric_netns import require_root, require_tool

PLUGIN = ROOT / "playbooks" / "connection_plugins" / "aidclab_nsenter.py"


def load_connection():
    """The plugin as Ansible loads it (ansible.cfg's connection_plugins), with its options set."""
    from ansible.plugins.loader import connection_loader

    connection_loader.add_directory(str(PLUGIN.parent))
    conn = connection_loader.get("aidclab_nsenter", PlayContext(), None)
    assert conn is not None, f"Ansible did not load {PLUGIN}"
    conn.set_options(var_options={"inventory_hostname": "clab-test-n1"})
    return conn


@pytest.fixture
def container() -> Iterator[int]:
    """A sleeping process in new mount, UTS, IPC, network and PID namespaces, with a tmpfs on /mnt that only
    it sees and MARK=inside in its environment; yields its host PID."""
    require_root()
    require_tool("unshare", "util-linux")
    require_tool("nsenter", "util-linux")
    script = "mount -t tmpfs none /mnt && hostname ns-test && exec sleep 60"
    holder = subprocess.Popen(
        ["unshare", "--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "--propagation", "private",
         "sh", "-c", script],
        env={"PATH": os.environ["PATH"], "MARK": "inside"},
    )  # fmt: skip
    try:
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pid = children.read_text().split()
            if pid and Path(f"/proc/{pid[0]}/cmdline").read_bytes().startswith(b"sleep"):
                yield int(pid[0])
                break
            time.sleep(0.02)
        else:
            pytest.fail("the namespace holder never started sleep")
    finally:
        holder.kill()
        holder.wait()


def connection(pid: int):
    conn = load_connection()
    conn._pid, conn._env = pid, conn._container_env("clab-test-n1", pid)
    conn._connected = True  # what _connect does, without asking Docker for the PID
    return conn


def test_commands_run_in_the_containers_namespaces_with_its_environment(container, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/controller/only")
    conn = connection(container)
    command = "hostname; echo ${MARK}-${PYTHONPATH:-unset}; ip -o link show | cut -d: -f2"
    rc, out, err = conn.exec_command(command)
    assert rc == 0, err
    assert out.decode().split() == ["ns-test", "inside-unset", "lo"]
    rc, out, _err = conn.exec_command("cat; exit 3", in_data=b"module source")  # pipelining's stdin
    assert (rc, out) == (3, b"module source")


def test_files_go_in_and_out_of_the_containers_mount_namespace(container, tmp_path):
    conn = connection(container)
    src, back = tmp_path / "src", tmp_path / "back"
    src.write_bytes(b"node file\n" * 1000)
    conn.put_file(str(src), "/mnt/node.yml")
    assert not Path("/mnt/node.yml").exists()  # the tmpfs is the namespace's own
    conn.fetch_file("/mnt/node.yml", str(back))
    assert back.read_bytes() == src.read_bytes()
    with pytest.raises(Exception, match="/mnt/missing"):
        conn.fetch_file("/mnt/missing", str(tmp_path / "x"))


def test_a_container_that_is_not_running_is_named_in_the_error():
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed (make setup installs it)")
    with pytest.raises(AnsibleConnectionFailure, match="clab-no-such-lab-x1 is not running"):
        load_connection()._container_pid("clab-no-such-lab-x1")


def test_the_pid_comes_from_the_engine_socket_and_from_the_cli_when_there_is_none(monkeypatch):
    if shutil.which("docker") is None or not Path("/var/run/docker.sock").exists():
        pytest.skip("no Docker engine on /var/run/docker.sock (make setup starts one)")
    name = f"aidclab-nsenter-pid-{os.getpid()}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    started = subprocess.run(
        ["docker", "run", "-d", "--rm", "--network", "none", "--name", name, "aidclab/base", "sleep", "60"],
        capture_output=True, text=True,
    )
    assert started.returncode == 0, f"aidclab/base does not start (make images builds it): {started.stderr}"
    try:
        inspect = ["docker", "inspect", "--format", "{{.State.Pid}}", name]
        want = int(subprocess.run(inspect, capture_output=True, text=True).stdout)
        conn = load_connection()
        assert conn._container_pid(name) == want  # through the socket
        # An engine that is not on a local socket: the CLI is asked, and its complaint is passed on.
        monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
        assert conn._engine_state(name) is None
        with pytest.raises(AnsibleConnectionFailure, match=rf"{name} is not running here \(.*tcp://127\.0\.0\.1:9"):
            conn._container_pid(name)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
