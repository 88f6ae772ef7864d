# aidclab's connection to its own lab containers: enter the container's namespaces with nsenter(1) instead
# of going through `docker exec`.
from __future__ import annotations

import http.client
import json
import os
import shlex
import shutil
import socket
import subprocess
from urllib.parse import quote

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

DOCUMENTATION = r"""
name: aidclab_nsenter
short_description: Run tasks in a local lab container by entering its namespaces (root only)
description:
  - Runs a task's command inside a running container on this machine with C(nsenter), in the container's
    mount, UTS, IPC, network and PID namespaces, as root, with the environment of the container's first
    process. Files are copied in and out through the same command.
  - C(community.docker.docker) runs a C(docker version) and a C(docker exec) per task, each a CLI process,
    and dockerd, containerd and runc set the exec up; here a task costs one local fork. On the 280-node
    bsl256, a one-task play took 68.8 s this way against 89.0 s through C(docker exec). The inventory
    `aidclab deploy` writes uses it when aidclab runs as root, and C(community.docker.docker) otherwise
    (docs/configuring-a-lab.md).
  - The container's PID is asked of Docker once per connection, on the engine's socket (C(DOCKER_HOST) when it
    names one, else /var/run/docker.sock), or with C(docker inspect) when the engine is not on a local
    socket. A CLI process costs about 20 ms of CPU, 6 s over a 280-node play on two cores.
options:
  remote_addr:
    description: The container's name.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_docker_host
"""

display = Display()


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to the engine's API on a unix socket (the standard library speaks HTTP, not the socket)."""

    def __init__(self, path: str, timeout: float = 30.0):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)

NAMESPACES = ("--mount", "--uts", "--ipc", "--net", "--pid")


class Connection(ConnectionBase):
    transport = "aidclab_nsenter"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pid: int | None = None
        self._env: dict[str, str] = {}

    def _connect(self):
        super()._connect()
        if not self._connected:
            container = self.get_option("remote_addr")
            self._pid = self._container_pid(container)
            self._env = self._container_env(container, self._pid)
            display.vvv(f"ENTER NAMESPACES OF PID {self._pid}", host=container)
            self._connected = True
        return self

    @classmethod
    def _container_pid(cls, container: str) -> int:
        try:
            state = cls._engine_state(container)
        except (OSError, http.client.HTTPException, ValueError):
            state = None  # no engine socket here: the CLI finds the engine its own way
        if state is None:
            pid, error = cls._cli_pid(container)
        else:
            pid, error = str(state.get("Pid") or ""), state.get("Error") or "not running"
        if not pid.isdigit() or pid == "0":
            raise AnsibleConnectionFailure(
                f"aidclab_nsenter: container {container} is not running here "
                f"({error or 'no PID'}); `aidclab status` shows the lab's containers"
            )
        return int(pid)

    @staticmethod
    def _engine_state(container: str) -> dict | None:
        """The container's State from the engine's API on its unix socket; None when there is none."""
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if not host.startswith("unix://"):
            return None
        conn = _UnixHTTPConnection(host.removeprefix("unix://"))
        try:
            conn.request("GET", f"/containers/{quote(container, safe='')}/json")
            reply = conn.getresponse()
            body = reply.read()
        finally:
            conn.close()
        if reply.status == 404:
            return {"Error": "no such container"}
        if reply.status != 200:
            raise ValueError(f"engine answered {reply.status}")
        return json.loads(body).get("State") or {}

    @staticmethod
    def _cli_pid(container: str) -> tuple[str, str]:
        docker = shutil.which("docker")
        if docker is None:
            raise AnsibleConnectionFailure("aidclab_nsenter: the docker command is not on PATH")
        done = subprocess.run(
            [docker, "inspect", "--format", "{{.State.Pid}}", container], capture_output=True, text=True
        )
        return (done.stdout.strip() if done.returncode == 0 else ""), done.stderr.strip()

    @staticmethod
    def _container_env(container: str, pid: int) -> dict[str, str]:
        # The controller's environment (a virtualenv's PYTHONPATH, ANSIBLE_*) must not leak into the
        # container's Python; docker exec would give the container's own.
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                raw = environ.read()
        except OSError as exc:
            raise AnsibleConnectionFailure(f"aidclab_nsenter: container {container}: {exc}") from exc
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        env.setdefault("HOME", "/root")
        return env

    def _argv(self, cmd: str) -> list[str]:
        return [
            "nsenter",
            "--target",
            str(self._pid),
            *NAMESPACES,
            "--root",
            "--wd",
            "--",
            "/bin/sh",
            "-c",
            cmd,
        ]

    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        display.vvv(f"EXEC {cmd}", host=self.get_option("remote_addr"))
        proc = subprocess.Popen(
            self._argv(cmd),
            stdin=subprocess.PIPE if in_data else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
        )
        stdout, stderr = proc.communicate(in_data)
        return proc.returncode, stdout, stderr

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self.get_option("remote_addr"))
        if not os.path.exists(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound(f"file or module does not exist: {to_native(in_path)}")
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as src:
            done = subprocess.run(
                self._argv(f"cat > {shlex.quote(out_path)}"), stdin=src, capture_output=True, env=self._env
            )
        if done.returncode != 0:
            raise AnsibleError(f"failed to copy {in_path} to {out_path}: {to_native(done.stderr)}")

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self.get_option("remote_addr"))
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as dst:
            done = subprocess.run(
                self._argv(f"cat {shlex.quote(in_path)}"), stdout=dst, stderr=subprocess.PIPE, env=self._env
            )
        if done.returncode != 0:
            raise AnsibleError(f"failed to fetch {in_path} to {out_path}: {to_native(done.stderr)}")

    def close(self):
        self._connected = False
