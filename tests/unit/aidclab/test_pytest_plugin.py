"""aidclab.pytest run by pytest itself (pytester), with the orchestrator's deploy, configure, destroy, link
set, replay and Docker runtime replaced by recorders: what is deployed when, that it is always destroyed, and
that the handle's methods reach the project's functions with the right arguments. No Docker."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import aidclab.pytest as plugin
from orchestrator.lab import owner
from orchestrator.paths import ROOT

pytest_plugins = ["pytester"]

LEAF_SPINE = ROOT / "labs" / "leaf-spine.clab.yml"


class FakeRuntime:
    """DockerRuntime's surface the plugin uses; answers exec from ``replies`` (command text -> code, out)."""

    def __init__(self, rec: Recorder):
        self.rec = rec

    def lab_containers(self, lab: str | None = None) -> list[dict]:
        labels = self.rec.labels.get(lab or "", {})
        return [
            {"Names": [f"/clab-{lab}-n{i}"], "Labels": labels}
            for i in range(self.rec.running.get(lab or "", 0))
        ]

    def exec(self, container: str, cmd: list[str] | str, timeout: float | None = None) -> tuple[int, str]:
        self.rec.calls.append(("exec", container, cmd))
        text = cmd if isinstance(cmd, str) else " ".join(cmd)
        return self.rec.replies.get(text, (0, ""))

    def agent(self, container: str, node: str | None = None, timeout: float = 10.0) -> tuple:
        self.rec.calls.append(("agent", container, node, timeout))
        return ("agent", container)


@dataclass
class Recorder:
    calls: list[tuple] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    owners: list[set[str]] = field(default_factory=list)
    replies: dict[str, tuple[int, str]] = field(default_factory=dict)
    fail: dict[str, BaseException] = field(default_factory=dict)

    def names(self) -> list[tuple[str, str]]:
        return [(c[0], c[1]) for c in self.calls if c[0] in ("deploy", "configure", "destroy")]


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    import orchestrator.configure.ansible as ansible
    import orchestrator.lab.deploy as deploy
    import orchestrator.lab.linkset as linkset
    import orchestrator.lab.runtime.docker as docker
    import orchestrator.run.driver as driver

    rec = Recorder()

    def step(name: str, lab: str, *extra: Any) -> None:
        rec.calls.append((name, lab, *extra))
        if name in rec.fail:
            raise rec.fail[name]

    def fake_deploy(topo, runtime=None, reconfigure=False, underlay_netns=None):
        step("deploy", topo.name, Path.cwd(), type(runtime).__name__)
        rec.owners.append({n.labels.get(owner.OWNER_LABEL, "") for n in topo.nodes.values()})
        (Path.cwd() / topo.lab_dir_name).mkdir()

    def fake_configure(topo, check=False, extra_vars=None, extra_groups=None):
        step("configure", topo.name, Path.cwd())
        return "report"

    def fake_destroy(lab, runtime=None, cleanup=False, lab_dir_root=None, quiet=False, underlay_netns=None):
        step("destroy", lab, lab_dir_root, cleanup)
        rec.running.pop(lab, None)

    def fake_link_set(runtime, lab_dir, endpoint, action, value=None, one_way=False, fabric_io=None):
        rec.calls.append(("link_set", type(runtime).__name__, lab_dir, endpoint, action, value, one_way))
        return [f"{endpoint} {action}"]

    def fake_run(topo, trace, mode, options=None, *, runtime=None, results_dir="results", progress=None):
        rec.calls.append(("replay", topo.name, trace, mode, options, type(runtime).__name__, results_dir))
        return "outcome"

    monkeypatch.setattr(deploy, "deploy", fake_deploy)
    monkeypatch.setattr(deploy, "destroy", fake_destroy)
    monkeypatch.setattr(ansible, "configure", fake_configure)
    monkeypatch.setattr(linkset, "link_set", fake_link_set)
    monkeypatch.setattr(driver, "run_experiment", fake_run)
    monkeypatch.setattr(docker, "DockerRuntime", lambda: FakeRuntime(rec))
    # Loaded by -p below, the way a user enables it when plugin autoloading is off.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return rec


# The plugin module is imported before the inner run (to patch what it calls), so pytest cannot rewrite it.
ARGS = ("-p", "aidclab.pytest", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*ARGS, *args)


def module(body: str) -> str:
    return f"from aidclab.pytest import lab_fixture\nLAB = {str(LEAF_SPINE)!r}\n" + textwrap.dedent(body)


def test_loading_the_plugin_deploys_nothing(pytester, rec):
    pytester.makepyfile(test_plain="def test_nothing_asked():\n    assert True\n")
    run(pytester).assert_outcomes(passed=1)
    assert rec.calls == []


def test_module_scope_deploys_once_per_module_configures_and_destroys_before_the_next(pytester, rec):
    body = """
        lab = lab_fixture(LAB, name=NAME)

        def test_one(lab):
            assert lab.name == NAME

        def test_two(lab):
            assert lab.name == NAME
    """
    pytester.makepyfile(test_a=module("NAME = 'la'\n" + textwrap.dedent(body)))
    pytester.makepyfile(test_b=module("NAME = 'lb'\n" + textwrap.dedent(body)))
    run(pytester).assert_outcomes(passed=4)
    assert rec.names() == [
        ("deploy", "la"), ("configure", "la"), ("destroy", "la"),
        ("deploy", "lb"), ("configure", "lb"), ("destroy", "lb"),
    ]  # fmt: skip
    deploy_cwd = rec.calls[0][2]
    # Deployed from its own work dir (where clab-<lab>/ goes), destroyed with its lab dir from there.
    assert deploy_cwd.name.startswith("aidclab-la") and rec.calls[1][2] == deploy_cwd
    assert rec.calls[2][2:] == (deploy_cwd, True)
    assert rec.calls[0][3] == "FakeRuntime"  # the aidclab_runtime fixture's runtime


def test_session_scope_is_shared_by_every_module_and_destroyed_once_at_the_end(pytester, rec):
    pytester.makeconftest(module("lab = lab_fixture(LAB, scope='session', name='shared')\n"))
    for m in ("a", "b"):
        pytester.makepyfile(**{f"test_{m}": "def test_uses(lab):\n    assert lab.name == 'shared'\n"})
    pytester.makepyfile(test_c="def test_no_lab():\n    pass\n")
    run(pytester, "-v").assert_outcomes(passed=3)
    assert rec.names() == [("deploy", "shared"), ("configure", "shared"), ("destroy", "shared")]


def test_a_lab_name_is_found_in_labs_under_the_rootdir(pytester, rec):
    (pytester.path / "labs").mkdir()
    mini = LEAF_SPINE.read_text().replace("leaf-spine", "mini")
    (pytester.path / "labs" / "mini.clab.yml").write_text(mini)
    pytester.makepyfile(test_a=module("lab = lab_fixture('mini')\ndef test_x(lab):\n    pass\n"))
    pytester.mkdir("elsewhere")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(pytester.path / "elsewhere")
        run(pytester, "--rootdir", str(pytester.path), str(pytester.path)).assert_outcomes(passed=1)
    assert rec.names() == [("deploy", "mini"), ("configure", "mini"), ("destroy", "mini")]


def test_configure_false_deploys_without_configuring(pytester, rec):
    pytester.makepyfile(
        test_a=module("lab = lab_fixture(LAB, name='raw', configure=False)\ndef test_x(lab):\n    pass\n")
    )
    run(pytester).assert_outcomes(passed=1)
    assert rec.names() == [("deploy", "raw"), ("destroy", "raw")]


def test_a_failing_test_still_destroys(pytester, rec):
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='f1')\ndef test_x(lab):\n    assert 0\n"))
    run(pytester).assert_outcomes(failed=1)
    assert rec.names()[-1] == ("destroy", "f1")


@pytest.mark.parametrize("stage", ["deploy", "configure"])
def test_a_deploy_or_configure_failing_half_way_still_destroys(pytester, rec, stage):
    rec.fail[stage] = RuntimeError(f"{stage} broke on node leaf1")
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='f2')\ndef test_x(lab):\n    pass\n"))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    assert rec.names()[-1] == ("destroy", "f2")
    assert f"{stage} broke on node leaf1" in result.stdout.str()


@pytest.mark.parametrize("where", ["deploy", "test"])
def test_ctrl_c_during_deploy_or_a_test_still_destroys(pytester, rec, where):
    if where == "deploy":
        rec.fail["deploy"] = KeyboardInterrupt()
    body = "    raise KeyboardInterrupt\n" if where == "test" else "    pass\n"
    pytester.makepyfile(test_a=module(f"lab = lab_fixture(LAB, name='ki')\ndef test_x(lab):\n{body}"))
    # As a real Ctrl-C: pytest stops the run, then tears the fixtures down.
    reprec = pytester.inline_run(*ARGS, no_reraise_ctrlc=True)
    assert reprec.ret == pytest.ExitCode.INTERRUPTED
    assert rec.names()[-1] == ("destroy", "ki")


def test_sigterm_while_a_lab_is_up_stops_the_run_and_destroys(pytester, rec):
    import signal

    before = signal.getsignal(signal.SIGTERM)
    pytester.makepyfile(
        test_a=module("""
        import os, signal

        lab = lab_fixture(LAB, name='term')

        def test_x(lab):
            os.kill(os.getpid(), signal.SIGTERM)

        def test_never_runs(lab):
            pass
    """)
    )
    reprec = pytester.inline_run(*ARGS, no_reraise_ctrlc=True)
    assert reprec.ret == pytest.ExitCode.INTERRUPTED
    assert rec.names()[-1] == ("destroy", "term")
    assert signal.getsignal(signal.SIGTERM) == before  # restored once the lab is gone


def test_a_lab_already_running_under_that_name_is_refused_and_never_touched(pytester, rec):
    rec.running["mine"] = 3
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='mine')\ndef test_x(lab):\n    pass\n"))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    assert rec.names() == []  # neither deployed over nor destroyed
    result.stdout.fnmatch_lines(["*lab 'mine' already has 3 container(s) (none running)*"])


def test_every_node_deployed_names_this_run_as_its_owner(pytester, rec):
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='own')\ndef test_x(lab):\n    pass\n"))
    run(pytester).assert_outcomes(passed=1)
    assert rec.owners == [{owner.process_token(os.getpid())}]


def test_a_lab_a_killed_run_left_is_destroyed_and_deployed_again(pytester, rec, tmp_path):
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    token = owner.process_token(child.pid)
    child.communicate()  # the run that deployed the lab is gone now, killed or not
    assert token is not None and owner.process_token(child.pid) is None
    rec.running["left"] = 4
    rec.labels["left"] = {owner.OWNER_LABEL: token, "clab-node-lab-dir": str(tmp_path / "clab-left" / "h1")}
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='left')\ndef test_x(lab):\n    pass\n"))
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert rec.names()[0] == ("destroy", "left") and rec.names()[1][0] == "deploy"
    first_destroy = next(c for c in rec.calls if c[0] == "destroy")
    assert first_destroy[2] == tmp_path  # where the killed run kept its lab dir (and its delay relay)
    result.stdout.fnmatch_lines(["*lab 'left': 4 container(s) left by a test run that was killed*"])


@pytest.mark.parametrize(
    "label",
    [
        pytest.param("self", id="a-live-run"),
        pytest.param("", id="unlabelled"),
        pytest.param("junk", id="garbled"),
    ],
)
def test_a_lab_whose_owner_may_be_alive_is_never_touched(pytester, rec, label):
    token = owner.process_token(os.getpid()) if label == "self" else label
    rec.running["busy"] = 2
    rec.labels["busy"] = {owner.OWNER_LABEL: token} if label else {}
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='busy')\ndef test_x(lab):\n    pass\n"))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    assert rec.names() == []
    result.stdout.fnmatch_lines(["*lab 'busy' already has 2 container(s) (none running)*"])


def test_a_destroy_that_fails_is_an_error_naming_the_lab(pytester, rec):
    rec.fail["destroy"] = RuntimeError("docker said no")
    pytester.makepyfile(test_a=module("lab = lab_fixture(LAB, name='d1')\ndef test_x(lab):\n    pass\n"))
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*destroying lab 'd1' failed: docker said no*aidclab destroy d1*"])


def test_the_handle_forwards_to_the_project_functions(pytester, rec, tmp_path):
    rec.replies["exit 3"] = (3, "boom\n")
    rec.replies["aidcnet ctl health"] = (0, '{"ok": true, "configured": true}\n')
    rec.replies["aidcnet ctl show bift"] = (0, "BIFT table\n")
    trace = pytester.path / "t.jsonl"
    trace.write_text("")
    out = tmp_path / "calls.json"
    pytester.makepyfile(
        test_a=module(f"""
        import json
        from pathlib import Path

        import pytest

        from aidclab.pytest import CommandFailed, LabError

        lab = lab_fixture(LAB, name="fw")

        def test_methods(lab):
            assert lab.exec("h1", "ip -br link") == "" and lab.exec("h1", ["ip", "r"]).code == 0
            with pytest.raises(CommandFailed) as failed:
                lab.exec("h2", "exit 3")
            assert failed.value.code == 3 and "h2: `exit 3` exited 3" in str(failed.value)
            assert lab.exec("h2", "exit 3", check=False).code == 3
            assert lab.ctl("leaf1", "health") == {{"ok": True, "configured": True}}
            assert lab.ctl("leaf1", "show", "bift") == "BIFT table\\n"
            with pytest.raises(LabError, match="no node 'h99'; its nodes: spine1, spine2"):
                lab.exec("h99", "true")
            assert lab.link_set("h1:eth1", "loss", "5%", "burst", "4", one_way=True) == ["h1:eth1 loss"]
            assert lab.replay("t.jsonl", "host-bier", drain_s=1.5, qps=2) == "outcome"  # from the rootdir
            assert lab.agent("leaf2") == ("agent", "clab-fw-leaf2")
            where = {{"lab_dir": str(lab.lab_dir), "workdir": str(lab.workdir)}}
            Path({str(out)!r}).write_text(json.dumps(where))
    """)
    )
    run(pytester).assert_outcomes(passed=1)
    where = json.loads(out.read_text())
    execs = [c for c in rec.calls if c[0] == "exec"]
    assert execs[:3] == [
        ("exec", "clab-fw-h1", "ip -br link"),
        ("exec", "clab-fw-h1", ["ip", "r"]),
        ("exec", "clab-fw-h2", "exit 3"),
    ]
    assert ("exec", "clab-fw-leaf1", ["aidcnet", "ctl", "health"]) in execs
    (link,) = [c for c in rec.calls if c[0] == "link_set"]
    lab_dir = Path(where["lab_dir"])
    assert link == ("link_set", "FakeRuntime", lab_dir, "h1:eth1", "loss", ["5%", "burst", "4"], True)
    assert Path(where["lab_dir"]) == Path(where["workdir"]) / "clab-fw"
    (replay,) = [c for c in rec.calls if c[0] == "replay"]
    _, name, got_trace, mode, options, runtime, results = replay
    assert (name, got_trace, mode, runtime) == ("fw", trace, "host-bier", "FakeRuntime")
    assert (options.drain_s, options.qps, options.timeout_s) == (1.5, 2, 60.0)
    assert results == Path(where["workdir"]) / "results"
    assert ("agent", "clab-fw-leaf2", "leaf2", 30.0) in rec.calls


FAKE_TCPDUMP = """\
import pathlib, signal, sys, time
signal.signal(signal.SIGINT, lambda *_: (print("7 packets captured", file=sys.stderr), sys.exit(0)))
pathlib.Path(sys.argv[1]).write_bytes(b"pcap")
print("tcpdump: listening on eth1, link-type EN10MB", file=sys.stderr, flush=True)
time.sleep(30)
"""


def test_capture_is_armed_before_the_block_and_stopped_after_it(pytester, rec, tmp_path, monkeypatch):
    import orchestrator.lab.capture as capture

    script = tmp_path / "fake_tcpdump.py"
    script.write_text(FAKE_TCPDUMP)
    seen: dict[str, Any] = {}

    def target(lab_dir, endpoint):
        seen["target"] = (lab_dir, endpoint)
        return "clab-cap-leaf1", "eth1"

    def command(netns, interface, count=None, write=None, snaplen=0):
        seen["command"] = (netns, interface, count, Path(write).name)
        return [sys.executable, str(script), write]

    monkeypatch.setattr(capture, "capture_target", target)
    monkeypatch.setattr(capture, "tcpdump_command", command)
    pytester.makepyfile(
        test_a=module("""
        lab = lab_fixture(LAB, name="cap")

        def test_capture(lab):
            with lab.capture("leaf1:eth1", settle=0.0) as cap:
                assert cap.path.read_bytes() == b"pcap"  # armed: tcpdump said it listens
                assert cap.packets is None
            assert cap.packets == 7 and cap.path.parent == lab.workdir
    """)
    )
    run(pytester).assert_outcomes(passed=1)
    assert seen["target"][1] == "leaf1:eth1" and seen["target"][0].name == "clab-cap"
    assert seen["command"] == ("/run/netns/clab-cap-leaf1", "eth1", None, "leaf1-eth1-1.pcap")


def test_a_capture_that_cannot_start_says_why(pytester, rec, monkeypatch):
    import orchestrator.lab.capture as capture

    monkeypatch.setattr(capture, "capture_target", lambda lab_dir, endpoint: ("clab-c2-h1", "eth9"))
    monkeypatch.setattr(
        capture, "tcpdump_command",
        lambda *a, **k: [sys.executable, "-c", "import sys; sys.exit('tcpdump: eth9: No such device')"],
    )  # fmt: skip
    pytester.makepyfile(
        test_a=module("""
        import pytest
        from aidclab.pytest import LabError

        lab = lab_fixture(LAB, name="c2")

        def test_capture(lab):
            with pytest.raises(LabError, match="capture on h1:eth9 did not start: .*No such device"):
                with lab.capture("h1:eth9", timeout=5):
                    pass
    """)
    )
    run(pytester).assert_outcomes(passed=1)


def test_topology_file_copies_under_a_new_name_with_vars(tmp_path):
    edited = []
    path = plugin.topology_file(LEAF_SPINE, tmp_path, "cp", {"time": {"scale": 100}}, edited.append)
    doc = yaml.safe_load(path.read_text())
    assert path == tmp_path / "cp.clab.yml" and doc["name"] == "cp" and edited == [doc | {"name": "cp"}]
    assert yaml.safe_load((tmp_path / "cp.vars.yml").read_text()) == {"time": {"scale": 100}}


def test_topology_file_brings_the_labs_own_vars_along_unless_given(tmp_path):
    path = plugin.topology_file(LEAF_SPINE, tmp_path / "own", "own")
    assert (path.parent / "own.vars.yml").read_text() == (ROOT / "labs" / "leaf-spine.vars.yml").read_text()
    plugin.topology_file(LEAF_SPINE, tmp_path / "none", "none", {})
    assert yaml.safe_load((tmp_path / "none" / "none.vars.yml").read_text()) == {}


def test_topology_file_unchanged_is_the_labs_own_file(tmp_path):
    assert plugin.topology_file(LEAF_SPINE, tmp_path) == LEAF_SPINE
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_scope_is_refused_at_definition():
    with pytest.raises(ValueError, match=r"scope='modul'.*session, package, module, class, function"):
        plugin.lab_fixture("leaf-spine", scope="modul")


def test_pyproject_registers_the_plugin_under_its_module_name():
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert doc["project"]["entry-points"]["pytest11"] == {"aidclab.pytest": "aidclab.pytest"}


SEND_THREE = """\
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(3):
    s.sendto(b"bier?", (sys.argv[1], 6635))
"""


def test_capture_with_the_hosts_tcpdump_in_a_namespace(veth_pair, tmp_path, monkeypatch):
    """The real thing, without a lab: the host's tcpdump (through nsenter) in one end of a veth pair, armed
    before three datagrams leave and stopped after them, with its own count and a filter on reading."""
    import orchestrator.lab.capture as capture
    from orchestrator.lab.topology import load_topology

    monkeypatch.setattr(capture, "capture_target", lambda lab_dir, endpoint: (veth_pair.a, veth_pair.a_if))
    lab = plugin.Lab(load_topology(LEAF_SPINE), tmp_path, runtime=None)  # type: ignore[arg-type]
    with lab.capture("leaf1:eth1") as cap:
        sent = veth_pair.run_in(veth_pair.a, SEND_THREE, veth_pair.b_ip)
        assert sent.returncode == 0, sent.stderr
    assert cap.path == tmp_path / "leaf1-eth1-1.pcap"
    assert cap.count("udp dst port 6635") == 3, cap.lines()
    assert cap.packets == cap.count() >= 3 + 3, cap.stderr  # the datagrams, ICMP unreachables, maybe ARP
    assert "10.99.0.1.6635: MPLS" in cap.lines("udp dst port 6635")[0]


def test_our_e2e_suite_deploys_through_the_plugin(rec, tmp_path):
    """tests/e2e/conftest.py's deployed(): the plugin's lifecycle, with the suite's conventions kept (a
    renamed copy with vars and node edits, the lab's work dir as the working directory while it is up)."""
    import os

    from tests.e2e.conftest import deployed

    runtime = FakeRuntime(rec)
    before = Path.cwd()
    frr = {"spine2": {"kind": "linux", "image": "aidclab/frr:latest"}}
    mgmt = {"network": "e2e-x"}
    with deployed(runtime, tmp_path, "leaf-spine", "e2e-x", {"time": {"scale": 100}}, nodes=frr,
                  configured=True, edit=lambda doc: doc.update(mgmt=mgmt)) as topo:  # fmt: skip
        assert Path.cwd() == tmp_path.resolve() and topo.name == "e2e-x"
        doc = yaml.safe_load((tmp_path / "e2e-x.clab.yml").read_text())
        assert doc["topology"]["nodes"]["spine2"]["image"] == "aidclab/frr:latest"
        assert doc["mgmt"] == {"network": "e2e-x"}
        assert yaml.safe_load((tmp_path / "e2e-x.vars.yml").read_text()) == {"time": {"scale": 100}}
    assert Path.cwd() == before
    (tmp_path / "y").mkdir()
    assert rec.names() == [("deploy", "e2e-x"), ("configure", "e2e-x"), ("destroy", "e2e-x")]
    with pytest.raises(RuntimeError, match="boom"), deployed(runtime, tmp_path / "y", "leaf-spine", "e2e-y"):
        os.makedirs("inside", exist_ok=True)
        raise RuntimeError("boom")
    assert rec.names()[-2:] == [("deploy", "e2e-y"), ("destroy", "e2e-y")]  # unconfigured, destroyed
    assert yaml.safe_load((tmp_path / "y" / "e2e-y.vars.yml").read_text()) == {}  # every default


def test_a_child_forked_while_a_lab_is_up_ends_on_sigterm_instead_of_raising():
    # pyroute2 forks a child per namespace handle and stops it with SIGTERM; a child that raised
    # KeyboardInterrupt ran on in the parent's code and hung the deploy waiting for it.
    import signal
    import time

    from aidclab.pytest import _terminate_as_interrupt

    with _terminate_as_interrupt():
        pid = os.fork()
        if pid == 0:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
                os._exit(0)
            except KeyboardInterrupt:
                os._exit(7)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM


def test_an_ina_job_over_every_gpu_has_each_leaf_aggregate_its_hosts_under_a_spine():
    job = plugin.ina_job_over_every_gpu("leaf-spine")
    hosts = [f"h{i}" for i in range(1, 9)]
    assert job["workers"] == hosts and job["root"] == "spine1"
    assert job["abm"] == {**{f"leaf{k}": hosts[2 * k - 2 : 2 * k] for k in range(1, 5)}, "spine1": hosts}
    assert plugin.ina_job_over_every_gpu("leaf-spine", job=7, root="spine2")["abm"]["spine2"] == hosts


def test_an_ina_job_needs_a_spine_and_every_host_on_a_switch(tmp_path):
    flat = {"name": "flat", "topology": {"nodes": {
        "leaf1": {"kind": "linux", "image": "aidclab/bfr:latest"},
        "h1": {"kind": "linux", "image": "aidclab/gpu-host:latest"},
        "h2": {"kind": "linux", "image": "aidclab/gpu-host:latest"},
    }, "links": [{"endpoints": ["h1:eth1", "leaf1:eth1"]}]}}  # fmt: skip
    (tmp_path / "flat.clab.yml").write_text(yaml.safe_dump(flat))
    with pytest.raises(plugin.LabError, match="GPU host h2 has no link to a switch"):
        plugin.ina_job_over_every_gpu(tmp_path / "flat.clab.yml")
    flat["topology"]["links"].append({"endpoints": ["h2:eth1", "leaf1:eth2"]})
    (tmp_path / "flat.clab.yml").write_text(yaml.safe_dump(flat))
    with pytest.raises(plugin.LabError, match="none is a spine"):
        plugin.ina_job_over_every_gpu(tmp_path / "flat.clab.yml")
    assert plugin.ina_job_over_every_gpu(tmp_path / "flat.clab.yml", root="leaf1")["root"] == "leaf1"


def test_ina_switches_turns_every_bfr_into_an_ina_switch_and_nothing_else():
    doc = yaml.safe_load((ROOT / "labs" / "leaf-spine.clab.yml").read_text())
    plugin.ina_switches(doc)
    groups = doc["topology"]["groups"]
    assert groups["spine"]["image"] == groups["leaf"]["image"] == "aidclab/ina-switch:latest"
    assert groups["gpu"]["image"] == "aidclab/gpu-host:latest"
