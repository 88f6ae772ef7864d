"""The Ansible module that installs node files, run as Ansible runs it (a script given its arguments), against
a stand-in agent socket: a node file with TCP-MD5 secrets is installed 0600 and no secret reaches its output,
diff included; and the node checks it runs before installing one."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.paths import PLAYBOOKS

MODULE = PLAYBOOKS / "roles" / "aidcnet_node" / "library" / "aidcnet_node_file.py"
NODE_FILE = """\
node: leaf1
bgp:
  neighbors:
  - name: spine1
    md5_password: s3cret-Bgp!
  - name: spine2
    md5_password: '!quoted-Key'
"""


@pytest.fixture
def agent(tmp_path):
    """A control socket that accepts every validate/reload, like an agent given a good file."""
    path = tmp_path / "control.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    asked: list[dict] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                asked.append(json.loads(conn.makefile().readline()))
                conn.sendall(b'{"ok": true, "applied": true}\n')

    threading.Thread(target=serve, daemon=True).start()
    yield path, asked
    server.close()


def run_module(tmp_path: Path, control: Path, dest: Path, check: bool, diff: bool = True) -> dict:
    args = tmp_path / "args.json"
    params = {
        "content": NODE_FILE, "dest": str(dest), "socket": str(control), "_ansible_check_mode": check,
        "_ansible_diff": diff,
    }
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    cmd = [sys.executable, str(MODULE), str(args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert "s3cret-Bgp!" not in proc.stdout + proc.stderr and "!quoted-Key" not in proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("check", [True, False])
def test_secrets_never_reach_the_modules_output(tmp_path, agent, check):
    control, asked = agent
    dest = tmp_path / "etc" / "node.yml"
    out = run_module(tmp_path, control, dest, check)
    assert out["changed"] is True and not out.get("failed"), out
    assert asked[0]["op"] == ("validate" if check else "reload")
    # The diff still shows what changes, with each secret masked.
    assert "md5_password: ********" in out["diff"]["after"] and "node: leaf1" in out["diff"]["after"]
    if check:
        assert not dest.exists()
    else:
        assert dest.read_text() == NODE_FILE and dest.stat().st_mode & 0o777 == 0o600


def test_the_diff_is_returned_only_under_diff_mode(tmp_path, agent):
    control, _asked = agent
    out = run_module(tmp_path, control, tmp_path / "node.yml", check=False, diff=False)
    assert out["changed"] is True and "diff" not in out, out
    out = run_module(tmp_path, control, tmp_path / "other.yml", check=True, diff=False)
    assert out["changed"] is True and "diff" not in out, out


def _module():
    spec = importlib.util.spec_from_file_location("aidcnet_node_file", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_missing_interface_and_a_wrong_sysctl_are_named():
    node_problems = _module().node_problems
    forwarding = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    ports = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    expected = {"ipv4/ip_forward": forwarding, "ipv4/ip_local_port_range": " ".join(ports)}
    assert node_problems(["lo"], expected) == []
    wrong = "0" if forwarding == "1" else "1"
    problems = node_problems(["lo", "nosuch9"], {"ipv4/ip_forward": wrong})
    assert problems == [
        "interface nosuch9 is missing: is the lab deployed as planned? (aidclab linkcheck)",
        f"net.ipv4.ip_forward is {forwarding}, want {wrong} (set at docker run by aidclab deploy)",
    ]
