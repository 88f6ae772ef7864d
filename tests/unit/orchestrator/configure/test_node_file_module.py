"""The node's half of the aidcnet_node_file action (playbooks/roles/aidcnet_node/files/aidcnet_node_file.py),
run as the action runs it (a Python given the request on stdin) against a stand-in agent socket: a node file
with TCP-MD5 secrets is installed 0600 and no secret reaches the reply, diff and errors included; an
unchanged file is no change and no reload; and the node checks it runs before installing one."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from orchestrator.paths import PLAYBOOKS

SCRIPT = PLAYBOOKS / "roles" / "aidcnet_node" / "files" / "aidcnet_node_file.py"
# The second one YAML can only write quoted and escaped, so it is not in the text as it is.
SECRETS = ("s3cret-Bgp!", "'quoted: Key\u00e9\t\\")
NODE = {
    "node": "leaf1",
    "bgp": {"neighbors": [{"name": f"spine{i}", "md5_password": s} for i, s in enumerate(SECRETS, 1)]},
}


@pytest.fixture
def agent(tmp_path):
    """A control socket that answers every validate/reload with ``answer``, like an agent."""
    path = tmp_path / "control.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    asked: list[dict] = []
    answer = {"ok": True, "applied": {"routes_replaced": 1}}

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                asked.append(json.loads(conn.makefile().readline()))
                conn.sendall(json.dumps(answer).encode() + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    yield path, asked, answer
    server.close()


def install(control: Path, dest: Path, node: dict = NODE, check: bool = False, diff: bool = True) -> dict:
    request = {"node": node, "dest": str(dest), "socket": str(control), "check": check, "diff": diff,
               "interfaces": ["lo"], "sysctls": {}}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", SCRIPT.read_text()], input=json.dumps(request), capture_output=True,
        text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    seen = proc.stdout + proc.stderr + json.dumps(json.loads(proc.stdout or "null"), ensure_ascii=False)
    assert not any(secret in seen or secret.encode("unicode_escape").decode() in seen for secret in SECRETS)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("check", [True, False])
def test_secrets_never_reach_the_reply(tmp_path, agent, check):
    control, asked, _answer = agent
    dest = tmp_path / "etc" / "node.yml"
    out = install(control, dest, check=check)
    assert out["changed"] is True and not out.get("failed"), out
    assert asked[0]["op"] == ("validate" if check else "reload")
    # The diff still shows what changes, with each secret masked.
    after = yaml.safe_load(out["diff"]["after"])
    assert after["node"] == "leaf1" and {n["md5_password"] for n in after["bgp"]["neighbors"]} == {"********"}
    if check:
        assert not dest.exists()
    else:
        assert yaml.safe_load(dest.read_text()) == NODE and dest.stat().st_mode & 0o777 == 0o600
        assert out["applied"] == {"routes_replaced": 1}


def test_an_unchanged_file_is_no_change_and_no_reload(tmp_path, agent):
    control, asked, _answer = agent
    dest = tmp_path / "node.yml"
    install(control, dest)
    before = dest.read_bytes()
    out = install(control, dest)
    assert out == {"changed": False, "dest": str(dest)} and len(asked) == 1 and dest.read_bytes() == before
    plain = {"node": "h1", "role": "gpu-host"}
    out = install(control, dest, node=plain, diff=False)
    assert out["changed"] is True and "diff" not in out and dest.stat().st_mode & 0o777 == 0o644


def test_a_rejected_file_is_named_masked_and_left_out(tmp_path, agent):
    control, _asked, answer = agent
    dest = tmp_path / "node.yml"
    answer.clear()
    answer.update(ok=False, error=f"bad value near {SECRETS[0]}", problems=["interfaces.0.mtu: >= 68"])
    answer["kept"] = "leaf1 (version 1)"
    out = install(control, dest)
    assert out["failed"] is True and not dest.exists()
    assert "rejected" in out["msg"] and "interfaces.0.mtu" in out["msg"] and "********" in out["msg"]
    assert "keeps running its previous config: leaf1 (version 1)" in out["msg"]


def test_no_agent_is_named(tmp_path):
    out = install(tmp_path / "missing.sock", tmp_path / "node.yml")
    assert out["failed"] is True and "no aidcnet agent answers on" in out["msg"]


def _script():
    spec = importlib.util.spec_from_file_location("aidcnet_node_file", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_missing_interface_and_a_wrong_sysctl_are_named():
    node_problems = _script().node_problems
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


def test_a_changed_secret_shows_masked_on_both_sides_of_the_diff(tmp_path, agent):
    control, _asked, _answer = agent
    dest = tmp_path / "node.yml"
    install(control, dest)
    rotated = json.loads(json.dumps(NODE))
    rotated["bgp"]["neighbors"][0]["md5_password"] = "rotated-Secret"
    out = install(control, dest, node=rotated)  # install() checks the old secrets appear nowhere
    assert "rotated-Secret" not in json.dumps(out) and out["diff"]["before"] == out["diff"]["after"]
