"""One way to name a lab: positional LAB, defaulting to the one running lab (containers, not lab folders),
for link set and capture too; and the capture command line."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli import lab as lab_cli
from orchestrator.cli.args import NoDefaultLab, default_lab, lab_name, running_labs
from orchestrator.lab.capture import capture_target, run_capture, tcpdump_command
from orchestrator.lab.linkset import LinkSetError
from tests.unit.orchestrator.lab.test_linkset import TOPO_DATA


def container(lab: str, node: str, state: str = "running", lab_dir: str = "/srv/x") -> dict:
    return {
        "State": state,
        "Labels": {
            "containerlab": lab,
            "clab-node-name": node,
            "clab-node-lab-dir": f"{lab_dir}/clab-{lab}/{node}",
            "clab-topo-file": f"/srv/labs/{lab}.clab.yml",
        },
    }


def test_only_labs_with_running_containers_count():
    labs = running_labs(
        [
            container("ina-fig1", "s5"),
            container("ina-fig1", "s6"),
            container("old", "h1", state="exited"),
            {"State": "running", "Labels": {}},
        ]
    )
    assert [(lab.name, str(lab.lab_dir), lab.topology_file) for lab in labs] == [
        ("ina-fig1", "/srv/x/clab-ina-fig1", "/srv/labs/ina-fig1.clab.yml")
    ]


def test_default_lab_is_the_single_running_one_or_an_error_naming_them():
    assert default_lab([container("a", "n1"), container("b", "n1", state="exited")]).name == "a"
    with pytest.raises(NoDefaultLab, match="no lab is running"):
        default_lab([container("b", "n1", state="exited")])
    with pytest.raises(NoDefaultLab, match=r"2 labs are running \(a, b\)"):
        default_lab([container("a", "n1"), container("b", "n1")])


@pytest.fixture
def one_running(monkeypatch, tmp_path):
    import orchestrator.lab.runtime.docker as docker_mod

    class Runtime:
        def lab_containers(self, lab=None):
            return [container("ina-fig1", "s5", lab_dir=str(tmp_path))]

    monkeypatch.setattr(docker_mod, "DockerRuntime", Runtime)
    return tmp_path


def test_commands_without_lab_take_the_running_one_and_its_lab_dir(one_running):
    assert lab_name(None) == "ina-fig1"
    assert lab_cli._lab_dir(None) == one_running / "clab-ina-fig1"


@pytest.mark.parametrize(
    ("argv", "lab", "endpoint", "action", "value"),
    [
        (["link", "set", "s5:eth1", "loss", "0.02"], None, "s5:eth1", "loss", ["0.02"]),
        (["link", "set", "ina-fig1", "s5:eth1", "loss", "0.02"], "ina-fig1", "s5:eth1", "loss", ["0.02"]),
        (
            ["link", "set", "labs/superpod.clab.yml", "G2:eth1", "bandwidth", "400G"],
            "labs/superpod.clab.yml",
            "G2:eth1",
            "bandwidth",
            ["400G"],
        ),
        (
            ["link", "set", "--one-way", "ina-fig1", "s5:eth1", "loss", "gilbert", "0.01", "0.25"],
            "ina-fig1",
            "s5:eth1",
            "loss",
            ["gilbert", "0.01", "0.25"],
        ),
        (["link", "set", "G1:eth2", "down"], None, "G1:eth2", "down", []),
    ],
)
def test_link_set_takes_an_optional_positional_lab(argv, lab, endpoint, action, value):
    args = build_parser().parse_args(argv)
    assert (args.lab, args.endpoint, args.action, args.value) == (lab, endpoint, action, value)


def test_link_set_old_lab_option_still_works_and_bad_actions_are_usage_errors(capsys):
    args = build_parser().parse_args(["link", "set", "--lab", "superpod", "G2:eth1", "bandwidth", "400G"])
    assert (args.lab_option, args.lab, args.endpoint) == ("superpod", None, "G2:eth1")
    for argv in (["link", "set", "s5:eth1", "lose", "0.1"], ["link", "set", "ina-fig1", "s5:eth1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
    assert "one of down, up, bandwidth, loss" in capsys.readouterr().err


def test_capture_arguments():
    args = build_parser().parse_args(["capture", "leaf-spine", "leaf1:eth1", "-c", "20", "-w", "x.pcap"])
    assert (args.lab, args.endpoint, args.count, args.write) == ("leaf-spine", "leaf1:eth1", 20, "x.pcap")
    args = build_parser().parse_args(["capture", "leaf1:eth1"])
    assert (args.lab, args.endpoint, args.count, args.write) == (None, "leaf1:eth1", None, None)
    assert args.timeout is None
    args = build_parser().parse_args(["capture", "leaf-spine", "leaf1:eth1", "--timeout", "2.5"])
    assert (args.lab, args.endpoint, args.timeout) == ("leaf-spine", "leaf1:eth1", 2.5)


# Stands in for tcpdump on an idle link: waits for packets forever, and on SIGINT (Ctrl-C) prints its
# closing count and exits 0, as tcpdump does.
IDLE_TCPDUMP = """
import signal, sys, time
def stop(*_):
    print("0 packets captured", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
print("listening", flush=True)
while True:
    time.sleep(1)
"""


def test_a_capture_on_an_idle_link_stops_at_its_timeout_as_ctrl_c_stops_it(capfd):
    import sys
    import time

    started = time.monotonic()
    # 3 s: time for the stand-in to start and install its handler on a loaded machine
    assert run_capture([sys.executable, "-c", IDLE_TCPDUMP], timeout_s=3.0) == (0, True)
    assert time.monotonic() - started < 3.0 + 5
    assert capfd.readouterr().out.splitlines() == ["listening", "0 packets captured"]


def test_a_capture_that_ends_by_itself_is_not_cut_and_keeps_its_exit_code():
    import sys

    assert run_capture([sys.executable, "-c", "raise SystemExit(3)"], timeout_s=30) == (3, False)
    assert run_capture([sys.executable, "-c", "pass"]) == (0, False)
    with pytest.raises(ValueError, match="--timeout 0"):
        run_capture([sys.executable, "-c", "pass"], timeout_s=0)


def test_tcpdump_command():
    assert tcpdump_command("/run/netns/clab-x-L1", "eth1", 5, "out.pcap") == [
        "nsenter",
        "--net=/run/netns/clab-x-L1",
        "tcpdump",
        "-i",
        "eth1",
        "-n",
        "--immediate-mode",
        "-s",
        "0",
        "-c",
        "5",
        "-U",
        "-w",
        "out.pcap",
    ]
    assert tcpdump_command("/run/netns/n", "eth2")[-1] == "-l"
    with pytest.raises(ValueError, match="at least one packet"):
        tcpdump_command("/run/netns/n", "eth2", 0)


def test_capture_target_checks_the_endpoint_against_the_lab(tmp_path):
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    assert capture_target(tmp_path, "L1:eth1") == ("clab-x-L1", "eth1")
    with pytest.raises(LinkSetError, match="its links: eth1, eth2"):
        capture_target(tmp_path, "G1:eth7")
    with pytest.raises(LinkSetError, match="is the lab deployed"):
        capture_target(tmp_path / "nope", "G1:eth1")
