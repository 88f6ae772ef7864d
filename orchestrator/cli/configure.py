"""Configuration commands: plan and configure."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.cli.args import add_lab_argument, load_lab


def _split_inventory(lab: str | None) -> None:
    """A split lab has no deploy of its own that writes the whole inventory: write it from the manifest."""
    from orchestrator.lab.split import is_manifest, load_split, write_inventory

    if lab and is_manifest(lab):
        print(f"wrote {write_inventory(load_split(lab))}", file=sys.stderr)


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.configure.ansible import write_lab_plan
    from orchestrator.configure.plan import describe_vars

    topo = load_lab(args.lab)
    print(describe_vars(topo), file=sys.stderr)
    _split_inventory(args.lab)
    path = write_lab_plan(topo).path
    print(f"wrote {path / 'plan.yml'} and {path / 'host_vars'}/ ({len(topo.nodes)} nodes)", file=sys.stderr)
    return 0


def cmd_configure(args: argparse.Namespace) -> int:
    from orchestrator.configure.ansible import configure

    extra = {}
    for item in args.extra_vars or []:
        import yaml

        if item.startswith("@"):
            extra.update(yaml.safe_load(Path(item[1:]).read_text()) or {})
        else:
            key, _, value = item.partition("=")
            extra[key] = yaml.safe_load(value)
    from orchestrator.configure.plan import describe_vars

    topo = load_lab(args.lab)
    print(describe_vars(topo), file=sys.stderr)
    _split_inventory(args.lab)
    configure(topo, check=args.check, extra_vars=extra)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="compute the lab plan (addresses, ASNs, BFR-IDs, BIFTs) into clab-<lab>/",
        description="Compute the deterministic lab plan from the topology and labs/<lab>.vars.yml and write "
        "clab-<lab>/plan.yml, host_vars/ and group_vars/ where Ansible finds them. configure does this "
        "itself; plan alone is for reading it or for running ansible-playbook by hand.",
    )
    add_lab_argument(p, optional=True)
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
    add_lab_argument(p, optional=True)
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
