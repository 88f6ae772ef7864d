"""``aidclab``: deploy, inspect and destroy emulated AI data-center fabrics, and drive experiments on them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
  aidclab destroy leaf-spine --cleanup    remove everything the lab created, and its lab dir

A LAB argument is a lab name (labs/NAME.clab.yml) or a path to a containerlab topology file.
The Makefile mirrors these: make images | deploy | inspect | destroy LAB=leaf-spine.
"""


def _topology(lab: str):
    from orchestrator.topology import load_topology, resolve_lab

    return load_topology(resolve_lab(lab))


def _lab_name(lab: str) -> str:
    """A lab name from a name or a topology file, without requiring the file to still be valid."""
    from orchestrator.topology import TopologyError, resolve_lab

    path = resolve_lab(lab)
    if path.exists():
        try:
            return _topology(lab).name
        except TopologyError:
            import yaml

            doc = yaml.safe_load(path.read_text()) or {}
            return str(doc.get("name") or path.name.split(".")[0])
    return Path(lab).name.split(".")[0]


def cmd_images(args: argparse.Namespace) -> int:
    from orchestrator.images import build_images

    build_images(force=args.force)
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from orchestrator.lab import deploy, print_table, status
    from orchestrator.runtime.docker import DockerRuntime

    topo = _topology(args.lab)
    runtime = DockerRuntime()
    deploy(topo, runtime, reconfigure=args.reconfigure)
    if not args.quiet:
        print_table(status(runtime, topo.name))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from orchestrator.lab import inspect_json, print_table, status
    from orchestrator.runtime.docker import DockerRuntime

    runtime = DockerRuntime()
    lab = None if args.all or not args.lab else _lab_name(args.lab)
    if args.format == "json":
        print(json.dumps(inspect_json(runtime, lab), indent=2))
        return 0
    rows = status(runtime, lab)
    if not rows:
        print(f"no containers found for {'any lab' if lab is None else 'lab ' + repr(lab)}")
        return 0
    print_table(rows)
    return 0


def cmd_destroy(args: argparse.Namespace) -> int:
    from orchestrator.lab import destroy

    if not args.lab and not args.all:
        fail("say which lab to destroy (aidclab destroy leaf-spine) or --all")
        return 2
    destroy(None if args.all else _lab_name(args.lab), cleanup=args.cleanup)
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    from orchestrator.graph import to_dot, to_mermaid

    topo = _topology(args.lab)
    text = to_mermaid(topo) if args.format == "mermaid" else to_dot(topo)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    from orchestrator.runtime.docker import DockerRuntime

    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        fail("give the command after --, e.g. aidclab exec leaf-spine h1 -- ip -br addr")
        return 2
    runtime = DockerRuntime()
    lab = _lab_name(args.lab)
    matches = [
        c
        for c in runtime.lab_containers(lab)
        if (c.get("Labels") or {}).get("clab-node-name") == args.node
        or c["Names"][0].lstrip("/") == args.node
    ]
    if not matches:
        fail(f"lab {lab!r} has no node {args.node!r}; see `aidclab inspect {lab}`")
        return 1
    container = matches[0]["Names"][0].lstrip("/")
    code, out = runtime.exec(container, cmd)
    sys.stdout.write(out)
    return code


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.configure import write_lab_plan

    topo = _topology(args.lab)
    path = write_lab_plan(topo)
    print(f"wrote {path / 'plan.yml'} and {path / 'host_vars'}/ ({len(topo.nodes)} nodes)", file=sys.stderr)
    return 0


def cmd_configure(args: argparse.Namespace) -> int:
    from orchestrator.configure import configure

    extra = {}
    for item in args.extra_vars or []:
        import yaml

        if item.startswith("@"):
            extra.update(yaml.safe_load(Path(item[1:]).read_text()) or {})
        else:
            key, _, value = item.partition("=")
            extra[key] = yaml.safe_load(value)
    configure(_topology(args.lab), check=args.check, extra_vars=extra)
    return 0


def cmd_linkcheck(args: argparse.Namespace) -> int:
    from orchestrator.linkcheck import check_lab
    from orchestrator.progress import Phases

    topo = _topology(args.lab)
    phases = Phases(f"linkcheck {topo.name}")
    with phases.phase("probe", f"{len(topo.links)} links, UDP over IPv6 link-local both ways"):
        results = check_lab(topo)
    bad = [r for r in results if not r.ok]
    for r in results:
        if args.verbose or not r.ok:
            print(f"{'ok  ' if r.ok else 'FAIL'} {r.link}: {r.detail}")
    phases.summary(f"{len(results) - len(bad)}/{len(results)} links pass")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aidclab",
        description="Emulation testbed for multicast (BIER), in-network aggregation and FARE in AI data "
        "centers: containerlab-format fabrics of Python software routers and GPU hosts on one machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "images",
        help="build the node images from a local Debian rootfs (cached)",
        description="Build aidclab/base (mmdebstrap + docker import), a wheelhouse, "
        "aidclab/node and the role images bfr, ina-switch, gpu-host, frr. No registry is "
        "used. A rebuild with unchanged inputs takes seconds.",
    )
    p.add_argument("--force", action="store_true", help="rebuild the rootfs and wheelhouse even if current")
    p.set_defaults(func=cmd_images)

    p = sub.add_parser(
        "deploy",
        help="start a lab from a containerlab topology file",
        description="Validate the topology (containerlab schema, then links, interfaces, "
        "images, management addresses), start the containers in parallel, wire the veth "
        "links, run each node's exec commands, wait until every node's agent answers its "
        "health check, and write clab-<lab>/ (ansible-inventory.yml, topology-data.json).",
        epilog="example: aidclab deploy labs/superpod.clab.yml",
    )
    p.add_argument("lab", help="lab name (labs/NAME.clab.yml) or topology file")
    p.add_argument(
        "--reconfigure",
        action="store_true",
        help="destroy the lab's existing containers first instead of refusing",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no node table at the end")
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("inspect", help="list a lab's nodes (table or containerlab JSON)")
    p.add_argument("lab", nargs="?", help="lab name or topology file (default: every lab)")
    p.add_argument("--all", action="store_true", help="every aidclab/containerlab lab on this machine")
    p.add_argument(
        "-f",
        "--format",
        choices=["table", "json"],
        default="table",
        help="json follows containerlab's `inspect --format json` shape",
    )
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "destroy",
        help="remove a lab's containers, netns links and unused mgmt network",
        description="Finds everything by containerlab's labels, so it also cleans up after "
        "a crashed or interrupted deploy. Idempotent: destroying twice is fine.",
    )
    p.add_argument("lab", nargs="?", help="lab name or topology file")
    p.add_argument("--all", action="store_true", help="every lab on this machine")
    p.add_argument("--cleanup", action="store_true", help="also delete the lab directory clab-<lab>/")
    p.set_defaults(func=cmd_destroy)

    p = sub.add_parser("graph", help="draw a lab as Mermaid or Graphviz dot")
    p.add_argument("lab", help="lab name or topology file")
    p.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser(
        "exec",
        help="run a command in a lab node",
        epilog="example: aidclab exec leaf-spine spine1 -- ip -br link",
    )
    p.add_argument("lab", help="lab name or topology file")
    p.add_argument("node", help="node name (as in the topology) or container name")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser(
        "plan",
        help="compute the lab plan (addresses, ASNs, BFR-IDs, BIFTs) into clab-<lab>/",
        description="Compute the deterministic lab plan from the topology and labs/<lab>.vars.yml and write "
        "clab-<lab>/plan.yml, host_vars/ and group_vars/ where Ansible finds them. configure does this "
        "itself; plan alone is for reading it or for running ansible-playbook by hand.",
    )
    p.add_argument("lab", help="lab name or topology file")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "configure",
        help="configure a deployed lab with Ansible (plan + playbooks/site.yml)",
        description="Writes the plan, then runs playbooks/site.yml through ansible-runner against "
        "clab-<lab>/ansible-inventory.yml, showing progress by task and a recap. Exits non-zero naming "
        "the failing host, task and message. A second run reports changed=0.",
        epilog="examples:\n  aidclab configure leaf-spine\n  aidclab configure leaf-spine --check\n"
        "  by hand: aidclab plan leaf-spine && "
        "ansible-playbook -i clab-leaf-spine/ansible-inventory.yml playbooks/site.yml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("lab", help="lab name or topology file")
    p.add_argument(
        "--check", action="store_true", help="Ansible check mode: report what would change, change nothing"
    )
    p.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        metavar="K=V|@FILE",
        help="extra Ansible variables (override the plan; for experiments)",
    )
    p.set_defaults(func=cmd_configure)

    p = sub.add_parser(
        "linkcheck",
        help="check every data link of a running lab with UDP, both ways",
        description="Sends a UDP probe to ff02::1 out of every data interface of every node "
        "and checks that exactly the peer named in the topology answers. Needs no addressing.",
    )
    p.add_argument("lab", help="lab name or topology file")
    p.add_argument("-v", "--verbose", action="store_true", help="print passing links too")
    p.set_defaults(func=cmd_linkcheck)

    from orchestrator.linkset import add_parser as add_link_parser

    add_link_parser(sub)

    try:
        from orchestrator.workloads.cli import add_parser as add_workload_parser
    except ImportError:  # the generators are optional for a lab-only install
        add_workload_parser = None
    if add_workload_parser is not None:
        add_workload_parser(sub)
    from orchestrator.replay_cli import add_parser as add_replay_parser
    from orchestrator.report_cli import add_parser as add_report_parser

    add_report_parser(sub)
    add_replay_parser(sub)

    from orchestrator.model.cli import add_parser as add_model_parser

    add_model_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from orchestrator.configure import ConfigureError
    from orchestrator.images import ImageBuildError
    from orchestrator.lab import DeployError
    from orchestrator.runtime.docker import RuntimeError_
    from orchestrator.topology import TopologyError
    from orchestrator.wiring import WiringError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (
        TopologyError,
        DeployError,
        RuntimeError_,
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
