"""``aidcnet``: the command inside every lab node.

aidcnet agent --role bfr        run the node agent (the container's main process)
aidcnet ctl health              ask the running agent whether it is up
aidcnet ctl show counters       the agent's counters
"""

from __future__ import annotations

import argparse
import json
import sys

from aidcnet.agent import control


def _ctl(args: argparse.Namespace) -> int:
    op = args.what if args.verb == "show" else args.verb
    if args.verb == "show" and args.what is None:
        print("aidcnet ctl show: say what to show: counters", file=sys.stderr)
        return 2
    try:
        reply = control.request(op)
    except control.ControlError as exc:
        print(f"aidcnet ctl: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(reply, indent=2, sort_keys=True))
    return 0 if reply.get("ok") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="aidcnet",
        description="aidclab's node software: the agent inside each lab container, and its control.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    agent = sub.add_parser("agent", help="run the node agent (foreground)")
    agent.add_argument(
        "--role", required=True, choices=["bfr", "ina-switch", "gpu-host"], help="which node software to run"
    )
    ctl = sub.add_parser("ctl", help="talk to the running agent over its control socket")
    ctl.add_argument("verb", choices=["health", "show"], help="health: is the agent up; show: print state")
    ctl.add_argument("what", nargs="?", choices=["counters"], help="with show: what to print")
    args = parser.parse_args(argv)
    if args.command == "agent":
        from aidcnet.agent.daemon import run_agent

        run_agent(args.role)
        return 0
    return _ctl(args)


if __name__ == "__main__":
    sys.exit(main())
