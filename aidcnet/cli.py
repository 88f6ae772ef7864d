"""``aidcnet``: the command inside every lab node.

aidcnet agent --role bfr            run the node agent (the container's main process)
aidcnet ctl health                  is the agent up, and is it configured
aidcnet ctl reload [--file F]       validate F (default /etc/aidcnet/node.yml) and apply it atomically;
                                    on any error the running config is kept and the field is named
aidcnet ctl validate F              check a node file without applying it (Ansible's validate= uses it)
aidcnet ctl show config|counters    the running config, or the agent's counters
aidcnet ctl ina show                INA jobs and slots in use on this node
aidcnet ctl ina reset JOB           forget the slots of a job (before reusing its chunk numbers)
aidcnet ctl ina allreduce --job 1   run one AllReduce of a generated array here (docs/allreduce.md)
aidcnet ctl show bgp|bift [--json]  BGP sessions and routes with FARE weights (docs/fare.md), or the
                                    BIFT per SI, as tables (--json: the agent's reply)
aidcnet ctl link-bandwidth IF BW    FARE: the link on IF now carries BW (aidclab link set ... bandwidth)
aidcnet ctl fare-send --dst IP      FARE: send per-flow/per-packet test traffic, report tx per interface
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from aidcnet.agent.control import Op
from aidcnet.modes import Mode
from aidcnet.paths import DEFAULT_CONFIG_PATH
from aidcnet.roles import AGENT_ROLES


def _ask(op: Op, render: Callable[[dict], str] | None = None, **fields: object) -> int:
    from aidcnet.agent.client import AgentClient, AgentError
    from aidcnet.agent.control import ControlError

    try:
        reply = AgentClient(timeout=30.0).call(op, **fields)
    except AgentError as exc:
        print(f"aidcnet ctl {op}: {exc.reply.get('error')}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        if exc.kept:
            print(f"  the running config is unchanged: {exc.kept}", file=sys.stderr)
        return 1
    except ControlError as exc:
        print(f"aidcnet ctl: {exc}", file=sys.stderr)
        return 1
    print(render(reply) if render is not None else json.dumps(reply, indent=2, sort_keys=True))
    return 0


def _validate(path: str) -> int:
    from aidcnet.config import ConfigError, load_config

    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"aidcnet: {exc.source} is not a valid node file:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"{path}: valid node file for {config.node} ({config.role}, version {config.version})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aidcnet",
        description="aidclab's node software: the agent inside each lab container, and its control.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    agent = sub.add_parser("agent", help="run the node agent (foreground)")
    agent.add_argument("--role", required=True, choices=list(AGENT_ROLES), help="which node software to run")
    agent.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="node file to load and reload")
    ctl = sub.add_parser("ctl", help="talk to the running agent over its control socket")
    verbs = ctl.add_subparsers(dest="verb", required=True)
    verbs.add_parser("health", help="is the agent up")
    reload_ = verbs.add_parser("reload", help="validate and apply the node file atomically")
    reload_.add_argument("--file", help=f"node file to apply (default {DEFAULT_CONFIG_PATH})")
    validate = verbs.add_parser("validate", help="check a node file without applying it")
    validate.add_argument("file")
    show = verbs.add_parser("show", help="print the running state")
    show.add_argument("what", choices=[Op.CONFIG, Op.COUNTERS, Op.BIFT, Op.BGP, Op.IGMP, Op.BFD])
    show.add_argument(
        "--json", action="store_true", help="bgp, bift, bfd: the agent's reply as JSON, not a table"
    )
    link_bw = verbs.add_parser("link-bandwidth", help="FARE: set a BGP link's bandwidth (aidclab link set)")
    link_bw.add_argument("interface", help="the local interface, e.g. eth2")
    link_bw.add_argument("bandwidth", help="bits/s with an SI prefix, e.g. 400G")
    _add_traffic_verbs(verbs)
    return parser


def _add_traffic_verbs(verbs: Any) -> None:
    """``ctl fare-send``, ``ctl bier ...`` and ``ctl ina ...``: the verbs that send or aggregate."""
    fare = verbs.add_parser("fare-send", help="FARE: send test traffic to a loopback, report tx per plane")
    fare.add_argument("--dst", required=True, help="destination loopback address")
    fare.add_argument("--mode", choices=["per-flow", "per-packet"], help="default: the node's bgp.mode")
    fare.add_argument("--flows", type=int, default=1000, help="per-flow: QPs (UDP source ports)")
    fare.add_argument("--packets", type=int, default=1, help="per-flow: packets per QP; per-packet: total")
    fare.add_argument("--size", type=int, default=64, help="UDP payload bytes")
    bier = verbs.add_parser("bier", help="host-BIER: send to BFR-ids, read what was delivered")
    bier_verbs = bier.add_subparsers(dest="bier_verb", required=True)
    send = bier_verbs.add_parser("send", help="send messages to a set of BFR-ids (BFERs)")
    send.add_argument("--to", required=True, help="comma-separated BFR-ids, e.g. 3,5,8")
    send.add_argument("--count", type=int, default=1, help="how many messages (default 1)")
    send.add_argument("--size", type=int, default=64, help="bytes per message (default 64)")
    send.add_argument("--tag", default="t", help="tag written into each payload")
    send.add_argument("--entropy", type=int, default=0, help="BIER entropy of the first message")
    received = bier_verbs.add_parser("received", help="payloads delivered here (and --clear them)")
    received.add_argument("--clear", action="store_true")
    ina = verbs.add_parser("ina", help="in-network aggregation: jobs, slots, AllReduce (docs/allreduce.md)")
    ina_verbs = ina.add_subparsers(dest="ina_verb", required=True)
    ina_verbs.add_parser("show", help="jobs and slots in use")
    reset = ina_verbs.add_parser("reset", help="forget every slot of a job")
    reset.add_argument("job", type=int)
    ar = ina_verbs.add_parser(
        "allreduce",
        help="AllReduce this worker's generated array over the job's INA switches (gpu-host; the ring and "
        "parameter-server baselines need every worker told the others: aidclab replay --mode ring or ps)",
    )
    ar.add_argument("--job", type=int, required=True)
    ar.add_argument("--elements", type=int, default=4096, help="array length (default 4096)")
    ar.add_argument("--seed", type=int, default=0, help="seed of the generated arrays (same on every worker)")
    ar.add_argument("--chunk-base", type=int, default=0, help="first chunk number (default 0)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "agent":
        from pathlib import Path

        from aidcnet.agent.daemon import run_agent

        run_agent(args.role, Path(args.config))
        return 0
    if args.verb == "validate":
        return _validate(args.file)
    if args.verb == "reload":
        return _ask(Op.RELOAD, **({"file": args.file} if args.file else {}))
    if args.verb == "show":
        from aidcnet.show import format_bfd, format_bgp, format_bift

        tables = {Op.BGP: format_bgp, Op.BIFT: format_bift, Op.BFD: format_bfd}
        return _ask(Op(args.what), None if args.json else tables.get(Op(args.what)))
    if args.verb == "link-bandwidth":
        return _ask(Op.BGP_LINK, interface=args.interface, bandwidth=args.bandwidth)
    if args.verb == "fare-send":
        fields = {"dst": args.dst, "flows": args.flows, "packets": args.packets, "size": args.size}
        return _ask(Op.FARE_SEND, **fields, **({"mode": args.mode} if args.mode else {}))
    if args.verb == "bier" and args.bier_verb == "send":
        receivers = [int(r) for r in args.to.split(",") if r.strip()]
        return _ask(
            Op.BIER_SEND,
            receivers=receivers,
            count=args.count,
            size=args.size,
            tag=args.tag,
            entropy=args.entropy,
        )
    if args.verb == "bier":
        return _ask(Op.BIER_RECEIVED, clear=args.clear)
    if args.verb == "ina" and args.ina_verb == "reset":
        return _ask(Op.INA_RESET, job=args.job)
    if args.verb == "ina" and args.ina_verb == "allreduce":
        return _ask(
            Op.ALLREDUCE,
            job=args.job,
            mode=Mode.INA,
            elements=args.elements,
            seed=args.seed,
            chunk_base=args.chunk_base,
        )
    if args.verb == "ina":
        return _ask(Op.INA)
    return _ask(Op.HEALTH)


if __name__ == "__main__":
    sys.exit(main())
