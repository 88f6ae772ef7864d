"""The fare_bgp role's wait for Established sessions, run with sh against a stand-in `aidcnet` that prints
the table of tests/unit/aidcnet/test_show.py: when a session stays down for a wrong TCP-MD5 secret, the
peer is named within the part of the task's output that configure's failure line keeps."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys

import jinja2
import yaml

from orchestrator.configure.ansible import _failure_text
from orchestrator.paths import ROOT
from tests.unit.aidcnet.test_show import BGP

TASKS = ROOT / "playbooks" / "roles" / "fare_bgp" / "tasks" / "main.yml"


def test_a_session_down_for_a_wrong_secret_is_named_in_the_failure(tmp_path) -> None:
    (task,) = [t for t in yaml.safe_load(TASKS.read_text()) if "ansible.builtin.raw" in t]
    # fare_bgp_wait_s 0: no wait (and no /run/aidcnet/bgp-sessions here), straight to the report.
    script = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined).from_string(
        task["ansible.builtin.raw"]
    ).render(fare_bgp_wait_s=0)
    reply = tmp_path / "reply.json"
    # Several neighbours up before the one that is down, as on a leaf: the table alone would fill 600 chars.
    up = BGP["neighbors"][0]
    neighbors = [{**up, "peer": f"10.0.0.{100 + i}"} for i in range(8)] + BGP["neighbors"][1:]
    many = {**BGP, "neighbors": neighbors}
    reply.write_text(json.dumps(many))
    fake = tmp_path / "aidcnet"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\nfrom aidcnet.show import format_bgp\n"
        f"assert sys.argv[1:] == ['ctl', 'show', 'bgp'], sys.argv\n"
        f"print(format_bgp(json.load(open({str(reply)!r}))))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=30)
    assert run.returncode == 1, run.stderr
    line = _failure_text({"res": {"msg": "non-zero return code", "stdout": run.stdout, "stderr": run.stderr}})
    assert "10.0.0.3 (L2 via eth2): TCP-MD5 secret mismatch suspected" in line, line
    assert "10.255.0.9/32" not in run.stdout  # no routes table
    assert re.search(r"^10\.0\.0\.3 +L2 +eth2 .* idle ", run.stdout, re.M), run.stdout  # then the table
