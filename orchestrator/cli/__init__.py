"""``aidclab``: deploy, inspect and destroy emulated AI data-center fabrics, and drive experiments on them."""

from __future__ import annotations

import argparse
import sys

from orchestrator.progress import fail

EPILOG = """\
a typical session:
  aidclab images                          build the node images locally (cached; seconds when current)
  aidclab deploy labs/leaf-spine.clab.yml start the lab: containers, veth links, lab dir clab-leaf-spine/
  aidclab inspect leaf-spine              what runs, with management addresses
  aidclab linkcheck leaf-spine            UDP across every link, both ways
  aidclab configure leaf-spine            plan (addresses, ASNs, BFR-IDs) + Ansible; --check for a dry run
  aidclab exec leaf-spine h1 -- ip -br addr
  aidclab graph leaf-spine --format mermaid
  aidclab link set leaf1:eth1 down        fault injection (down|up|bandwidth 400G|loss 0.02)
  aidclab capture leaf1:eth1 -c 4 --timeout 60   tcpdump on a link end while traffic runs (docs/capture.md)
  aidclab destroy leaf-spine --cleanup    remove everything the lab created, and its lab dir

A LAB argument is a lab name (labs/NAME.clab.yml) or a path to a containerlab topology file; configure,
plan, linkcheck, destroy, link set and capture take the one running lab when LAB is left out.
The Makefile mirrors these: make images | deploy | inspect | destroy LAB=leaf-spine.
"""


def build_parser() -> argparse.ArgumentParser:
    from orchestrator.cli import configure, experiment, lab, model, report

    parser = argparse.ArgumentParser(
        prog="aidclab",
        description="Emulation testbed for multicast (BIER), in-network aggregation and FARE in AI data "
        "centers: containerlab-format fabrics of Python software routers and GPU hosts on one machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    lab.add_parsers(sub)
    configure.add_parsers(sub)
    try:
        from orchestrator.cli.workload import add_parser as add_workload_parser
    except ImportError:  # the generators are optional for a lab-only install
        add_workload_parser = None
    if add_workload_parser is not None:
        add_workload_parser(sub)
    report.add_parser(sub)
    experiment.add_parser(sub)
    experiment.add_calibrate_parser(sub)
    model.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from orchestrator.configure.ansible import ConfigureError
    from orchestrator.lab.deploy import DeployError
    from orchestrator.lab.images import ImageBuildError
    from orchestrator.lab.runtime.docker import DockerError
    from orchestrator.lab.topology import TopologyError
    from orchestrator.lab.wiring import WiringError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (
        TopologyError,
        DeployError,
        DockerError,
        ImageBuildError,
        WiringError,
        ConfigureError,
        ValueError,
    ) as exc:
        fail(str(exc))
        return 1
    except KeyboardInterrupt:
        fail("interrupted; `aidclab destroy LAB` removes whatever was started")
        return 130


if __name__ == "__main__":
    sys.exit(main())
