"""``aidclab drop LAB NODE:IFACE PROB``: loss injection in our own dataplane, from the host.

The kernel has no netem, so each node agent drops on egress itself (``aidcnet.loss``); this command
sets the drop probability of one interface of one node at runtime through the agent's control socket.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DESCRIPTION = """\
Drop a share of everything a node's agent sends on one data interface (INA packets and BIER copies),
at runtime. The kernel has no netem: loss injection lives in our dataplane. Dropped datagrams are
counted as loss.injected.<ifname> in the node's counters. A probability of 0 removes the rule.
"""


def cmd_drop(args: argparse.Namespace) -> int:
    from orchestrator.progress import fail
    from orchestrator.replay import ReplayError, ask, node_pids
    from orchestrator.runtime.docker import DockerRuntime
    from orchestrator.topology import load_topology, resolve_lab

    node, sep, iface = args.endpoint.partition(":")
    if not sep or not node or not iface:
        fail(f"{args.endpoint!r}: give NODE:IFACE, e.g. s5:eth1")
        return 2
    topo = load_topology(resolve_lab(args.lab))
    if node not in topo.nodes:
        fail(f"lab {topo.name} has no node {node!r} (its nodes: {', '.join(topo.nodes)})")
        return 1
    try:
        pid = node_pids(topo, DockerRuntime())[node]
        reply = ask(pid, "drop", node, interface=iface, probability=args.probability)
    except ReplayError as exc:
        fail(str(exc))
        return 1
    print(json.dumps({"node": node, "drop": reply["drop"]}), file=sys.stdout)
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "drop",
        help="inject loss: drop a share of what a node sends on an interface (runtime, no netem)",
        description=DESCRIPTION,
        epilog="examples:\n  aidclab drop ina-fig1 s5:eth1 0.02\n  aidclab drop ina-fig1 s5:eth1 0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("lab", help="lab name or topology file (deployed and configured)")
    p.add_argument("endpoint", metavar="NODE:IFACE", help="the node and its data interface, e.g. s5:eth1")
    p.add_argument("probability", type=float, help="0..1 (0 removes the rule)")
    p.set_defaults(func=cmd_drop)
    return p
