"""Lab commands: images, deploy, inspect, destroy, graph, exec, linkcheck and link set."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.args import add_lab_argument, lab_name, load_lab
from orchestrator.lab.linkset import ACTIONS
from orchestrator.lab.roles import ROLES
from orchestrator.progress import fail

if TYPE_CHECKING:
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.split import SplitLab


def cmd_images(args: argparse.Namespace) -> int:
    from orchestrator.lab.images import build_images

    build_images(force=args.force)
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from orchestrator.lab.deploy import deploy, print_table, status
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.split import is_manifest

    if is_manifest(args.lab):
        return _deploy_split(args)
    topo = load_lab(args.lab)
    runtime = DockerRuntime()
    if args.if_absent and not args.reconfigure:
        running = runtime.lab_containers(topo.name)
        if running:
            print(already_running(topo.name, len(running)))
            return 0
    deploy(
        topo,
        runtime,
        reconfigure=args.reconfigure,
        underlay_netns=args.underlay_netns,
        keep_failed=args.keep_failed,
    )
    if not args.quiet:
        print_table(status(runtime, topo.name))
    return 0


def _deploy_split(args: argparse.Namespace) -> int:
    """Every part of a split lab on this machine, each in its underlay namespace (split --local)."""
    from orchestrator.lab.deploy import print_table, status
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.split import load_split
    from orchestrator.lab.splitlab import deploy_split

    if args.reconfigure or args.if_absent or args.underlay_netns:
        fail("a split manifest deploys every part afresh in its own underlay namespace: leave out "
             "--reconfigure, --if-absent and --underlay-netns (or deploy a part file with them)")  # fmt: skip
        return 2
    split = load_split(args.lab)
    runtime = DockerRuntime()
    deploy_split(split, runtime, keep_failed=args.keep_failed)
    if not args.quiet:
        print_table([row for p in split.parts for row in status(runtime, p["lab"])])
    return 0


def already_running(lab: str, containers: int) -> str:
    """What `deploy --if-absent` (make deploy) says instead of replacing a running lab, as containerlab
    does."""
    return (
        f"lab {lab!r} is already running ({containers} containers); left as it is. "
        f"`make redeploy LAB={lab}` (aidclab deploy {lab} --reconfigure) replaces it, "
        f"`aidclab destroy {lab}` removes it"
    )


def cmd_inspect(args: argparse.Namespace) -> int:
    from orchestrator.lab.deploy import inspect_json, print_table, status
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.split import is_manifest, load_split

    runtime = DockerRuntime()
    # A split lab's manifest stands for all of its parts (those deployed on this machine's engine).
    split = load_split(args.lab) if args.lab and is_manifest(args.lab) else None
    labs = (
        [p["lab"] for p in split.parts]
        if split
        else [None if args.all or not args.lab else lab_name(args.lab)]
    )
    if args.address:
        return _print_address(runtime, labs, args.address)
    if args.format == "json":
        rows_json = [row for lab in labs for row in inspect_json(runtime, lab)["containers"]]
        print(json.dumps({"containers": rows_json}, indent=2))
        return 0
    rows = [row for lab in labs for row in status(runtime, lab)]
    if not rows:
        shown = "any lab" if labs == [None] else "lab " + ", ".join(repr(lab) for lab in labs)
        print(f"no containers found for {shown}")
    else:
        print_table(rows)
    _print_vxlan_links(args.lab, split)
    return 0


def _print_address(runtime: DockerRuntime, labs: list[str | None], node: str) -> int:
    """The management IPv4 of ``node`` alone, for scripts (the metrics endpoint, ssh)."""
    from orchestrator.lab.deploy import inspect_json

    rows = [row for lab in labs for row in inspect_json(runtime, lab)["containers"]]
    found = [r for r in rows if r["name"].endswith("-" + node) or r["name"] == node]
    if len(found) != 1:
        names = ", ".join(r["name"] for r in rows) or "none"
        what = "no node" if not found else "more than one node"
        raise SystemExit(f"inspect --address {node}: {what} of that name (running: {names}); name the lab")
    if not found[0]["ipv4_address"]:
        raise SystemExit(f"inspect --address {node}: {found[0]['name']} has no management IPv4 yet")
    print(found[0]["ipv4_address"].split("/")[0])
    return 0


def _print_vxlan_links(lab: str | None, split: SplitLab | None) -> None:
    """The VXLAN ends of the lab's file(s): what a container listing cannot show."""
    from orchestrator.lab.topology import TopologyError

    if not lab:
        return
    try:
        topos = [split.part_topology(p["host"]) for p in split.parts] if split else [load_lab(lab)]
    except TopologyError:
        return
    for topo in topos:
        for vx in topo.vxlan_links:
            print(f"{topo.name}: {vx} mtu {vx.mtu} (+{vx.overhead} bytes on the underlay)")


def cmd_destroy(args: argparse.Namespace) -> int:
    from orchestrator.lab.deploy import destroy
    from orchestrator.lab.split import is_manifest

    if args.lab and is_manifest(args.lab) and not args.all:
        from orchestrator.lab.runtime.docker import DockerRuntime
        from orchestrator.lab.split import load_split
        from orchestrator.lab.splitlab import destroy_split

        destroy_split(load_split(args.lab), DockerRuntime(), cleanup=args.cleanup)
        return 0
    destroy(
        None if args.all else lab_name(args.lab),
        cleanup=args.cleanup,
        underlay_netns=args.underlay_netns,
        named_networks=[] if args.all else _named_network(args.lab),
    )
    return 0


def _named_network(lab: str | None) -> list[str]:
    """The Docker network the topology file of LAB names (mgmt.network), if it names one: destroy looks
    at it even with no container of the lab left on it."""
    from orchestrator.lab.topology import TopologyError, resolve_lab

    if not lab or not resolve_lab(lab).exists():
        return []
    try:
        topo = load_lab(lab)
    except TopologyError:
        return []
    return [] if topo.mgmt.own else [topo.mgmt.network]


def cmd_graph(args: argparse.Namespace) -> int:
    from orchestrator.lab.graph import to_dot, to_mermaid

    topo = load_lab(args.lab)
    text = to_mermaid(topo) if args.format == "mermaid" else to_dot(topo)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    from orchestrator.lab.split import MANIFEST_SUFFIX, SplitError, parse_pairs, plan_split, write_split

    topo = load_lab(args.lab)
    try:
        plan = plan_split(
            topo,
            [h.strip() for h in args.hosts.split(",") if h.strip()],
            assign=parse_pairs(args.assign or [], "--assign"),
            underlay=parse_pairs(args.underlay or [], "--underlay"),
            docker_hosts=parse_pairs(args.docker_host or [], "--docker-host"),
            vni_base=args.vni_base,
            dst_port=args.dst_port,
            underlay_mtu=args.underlay_mtu,
            local=args.local,
        )
    except SplitError as exc:
        fail(f"{topo.path}: {exc}")
        return 2
    out = Path(args.output or f"split-{topo.name}")
    for path in write_split(plan, out):
        print(f"wrote {path}")
    manifest = out / (topo.name + MANIFEST_SUFFIX)
    if args.local:
        _print_local_underlay(manifest)
    for part in plan.parts.values():
        where = f" (docker {part.docker_host})" if part.docker_host else ""
        print(f"  {part.host}: {len(part.nodes)} nodes, underlay {part.underlay}{where}")
    for cut in plan.cuts:
        print(
            f"  cut {cut.link}: vxlan vni {cut.vni} udp {plan.dst_port}, mtu {plan.inner_mtu(cut.link)} "
            f"(underlay {plan.underlay_mtu} - {plan.underlay_mtu - plan.inner_mtu(cut.link)} bytes of VXLAN)"
        )
    print(f"{len(plan.cuts)} cut links; configure/replay the whole lab with {manifest}")
    if args.local:
        print(f"deploy every part: aidclab deploy {manifest}")
        print(f"remove it all (parts, namespaces, lab dirs): aidclab destroy {manifest} --cleanup")
    return 0


def _print_local_underlay(manifest: Path) -> None:
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.split import load_split
    from orchestrator.lab.splitlab import make_local_underlay

    split = load_split(manifest)
    for host, netns in make_local_underlay(split, DockerRuntime()).items():
        part = next(p for p in split.parts if p["host"] == host)
        print(f"  {host}: underlay namespace {netns} ({part['underlay']}): aidclab deploy "
              f"{manifest.parent / part['file']} --underlay-netns {netns}")  # fmt: skip


def cmd_exec(args: argparse.Namespace) -> int:
    from orchestrator.lab.runtime.docker import DockerRuntime

    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        fail("give the command after --, e.g. aidclab exec leaf-spine h1 -- ip -br addr")
        return 2
    runtime = DockerRuntime()
    lab = lab_name(args.lab)
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


def cmd_linkcheck(args: argparse.Namespace) -> int:
    from orchestrator.lab.linkcheck import check_lab
    from orchestrator.progress import Phases

    topo = load_lab(args.lab)
    phases = Phases(f"linkcheck {topo.name}")
    with phases.phase("probe", f"{len(topo.links)} links, UDP over IPv6 link-local both ways"):
        results = check_lab(topo)
    bad = [r for r in results if not r.ok]
    for r in results:
        if args.verbose or not r.ok:
            print(f"{'ok  ' if r.ok else 'FAIL'} {r.link}: {r.detail}")
    phases.summary(f"{len(results) - len(bad)}/{len(results)} links pass")
    return 1 if bad else 0


UNDERLAY_HELP = (
    "network namespace whose addresses carry this part's VXLAN links (default: the host's); only for "
    "parts of one split lab side by side on one machine, see docs/beyond-one-machine.md"
)


def add_deploy_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "deploy",
        help="start a lab from a containerlab topology file",
        description="Validate the topology (containerlab schema, then links, interfaces, "
        "images, management addresses), start the containers in parallel, wire the veth "
        "links, run each node's exec commands, wait until every node's agent answers its "
        "health check, and write clab-<lab>/ (ansible-inventory.yml, topology-data.json). A deploy that "
        "fails once it has started something removes it again (containers, links, VXLAN devices, the "
        "management network it made) and says so; --keep-failed leaves it up and names the destroy "
        "command. A split manifest (LAB.split.yml of `aidclab split --local`) deploys every part, each in "
        "the namespace that stands in for its host.",
        epilog="example: aidclab deploy labs/superpod.clab.yml",
    )
    add_lab_argument(p)
    p.add_argument(
        "--reconfigure",
        action="store_true",
        help="destroy the lab's existing containers first instead of refusing",
    )
    p.add_argument(
        "--if-absent",
        action="store_true",
        help="a lab that already has containers is left running and said so, with exit 0 (make deploy)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no node table at the end")
    p.add_argument(
        "--keep-failed",
        action="store_true",
        help="a deploy that fails leaves what it started (to read `docker logs`, look at links) instead of "
        "removing it; the error names the command that removes it",
    )
    p.add_argument("--underlay-netns", metavar="NETNS", help=UNDERLAY_HELP)
    p.set_defaults(func=cmd_deploy)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "images",
        help="build the node images from a local Debian rootfs (cached)",
        description="Build aidclab/base (mmdebstrap + docker import), a wheelhouse, "
        f"aidclab/node and the role images {', '.join(r.name for r in ROLES.values() if r.has_image)}. "
        "No registry is used. A rebuild with unchanged inputs takes seconds.",
    )
    p.add_argument("--force", action="store_true", help="rebuild the rootfs and wheelhouse even if current")
    p.set_defaults(func=cmd_images)

    add_deploy_parser(sub)

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
    p.add_argument(
        "--address",
        metavar="NODE",
        help="print only NODE's management IPv4 address, e.g. "
        "`curl http://$(aidclab inspect leaf-spine --address leaf2):9464/metrics`",
    )
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "destroy",
        help="remove a lab's containers, netns links and management network",
        description="Finds everything by containerlab's labels and the management hub's interface alias "
        "(aidclab-mgmt:<lab>), so it also cleans up after a crashed or interrupted deploy. A Docker "
        "network the topology names (mgmt.network) is removed only when no other lab uses it. "
        "A split manifest (LAB.split.yml of split --local) destroys every part, the namespaces that "
        "stood in for their hosts and, with --cleanup, the whole lab's clab-<lab>/ too. "
        "Idempotent: destroying twice is fine.",
    )
    add_lab_argument(p, optional=True)
    p.add_argument("--all", action="store_true", help="every lab on this machine")
    p.add_argument("--cleanup", action="store_true", help="also delete the lab directory clab-<lab>/")
    p.add_argument("--underlay-netns", metavar="NETNS", help=UNDERLAY_HELP)
    p.set_defaults(func=cmd_destroy)

    p = sub.add_parser("graph", help="draw a lab as Mermaid or Graphviz dot")
    add_lab_argument(p)
    p.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_graph)

    add_node_parsers(sub)
    add_split_parser(sub)
    add_link_parser(sub)
    add_capture_parser(sub)


def add_node_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "exec",
        help="run a command in a lab node",
        epilog="example: aidclab exec leaf-spine spine1 -- ip -br link",
    )
    add_lab_argument(p)
    p.add_argument("node", help="node name (as in the topology) or container name")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser(
        "linkcheck",
        help="check every data link of a running lab with UDP, both ways",
        description="Sends a UDP probe to ff02::1 out of every data interface of every node "
        "and checks that exactly the peer named in the topology answers. Needs no addressing.",
    )
    add_lab_argument(p, optional=True)
    p.add_argument("-v", "--verbose", action="store_true", help="print passing links too")
    p.set_defaults(func=cmd_linkcheck)


def add_split_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "split",
        help="split a lab into one containerlab file per host, cut links as VXLAN links",
        description="Writes DIR/<lab>-<host>.clab.yml per host and DIR/<lab>.split.yml. Each cut link "
        "becomes a `type: vxlan` link at both ends with VNI = --vni-base + the link's index in the file "
        "(unique across the lab) and MTU = min(link MTU, --underlay-mtu - 50). Nodes go where --assign "
        "says; the rest: single-homed nodes stay with their switch, switches are dealt in file order "
        "into container-balanced blocks. Deploy each part on its host (aidclab deploy FILE, or "
        "containerlab deploy -t FILE); plan, configure and replay take the .split.yml as the lab.",
        epilog="examples:\n  aidclab split leaf-spine --hosts a,b\n"
        "  aidclab split leaf-spine --hosts a,b --local   (both parts on this machine)\n"
        "  aidclab split leaf-spine --hosts a,b --assign spine2=b --underlay a=10.0.0.1,b=10.0.0.2 "
        "--docker-host b=ssh://root@10.0.0.2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_lab_argument(p)
    p.add_argument("--hosts", required=True, help="host names, comma-separated: one part per host")
    p.add_argument("--assign", action="append", metavar="NODE=HOST", help="pin nodes to hosts (repeatable)")
    p.add_argument(
        "--underlay",
        action="append",
        metavar="HOST=IP",
        help="each host's underlay address, the VXLAN remote of the other parts "
        "(default 198.18.0.1, .2, ...: for parts side by side on one machine)",
    )
    p.add_argument(
        "--docker-host",
        action="append",
        metavar="HOST=URL",
        help="Docker endpoint of a remote part for the inventory, e.g. b=ssh://root@10.0.0.2",
    )
    p.add_argument(
        "--vni-base", type=int, default=1000, help="VNI of the file's link 0; others add their index"
    )
    p.add_argument("--dst-port", type=int, default=14789, help="UDP port of every VXLAN link")
    p.add_argument("--underlay-mtu", type=int, default=9500, help="MTU of the hosts' underlay interfaces")
    p.add_argument("-o", "--output", help="folder for the files (default split-<lab>/)")
    p.add_argument(
        "--local",
        action="store_true",
        help="every part on this machine: also make the network namespaces that stand in for the hosts "
        "(aidclab-<lab>-<host>, joined by a bridge, each with its underlay address); `aidclab deploy "
        "MANIFEST` then deploys every part in its namespace and `aidclab destroy MANIFEST` removes it all",
    )
    p.set_defaults(func=cmd_split)


def _lab_dir(lab: str | None) -> Path:
    """The lab dir of LAB (clab-<lab>/ here), or of the one running lab, wherever it was deployed from."""
    from orchestrator.cli.args import default_lab
    from orchestrator.lab.topology import lab_dir_name

    if lab:
        return Path.cwd() / lab_dir_name(lab_name(lab))
    running = default_lab()
    return running.lab_dir or Path.cwd() / lab_dir_name(running.name)


def split_lab(words: list[str]) -> tuple[str | None, list[str]]:
    """``[LAB] NODE:IF ...``: LAB is there when the first word is not NODE:IF (a lab name or topology
    file has no colon, an endpoint always has one)."""
    if words and ":" not in words[0]:
        return words[0], words[1:]
    return None, words


def cmd_link(args: argparse.Namespace) -> int:
    import time

    from orchestrator.lab.linkset import LinkSetError, link_set
    from orchestrator.lab.runtime.docker import DockerRuntime

    started = time.monotonic()
    try:
        lines = link_set(
            DockerRuntime(),
            _lab_dir(args.lab_option or args.lab),
            args.endpoint,
            args.action,
            args.value,
            one_way=args.one_way,
        )
    except LinkSetError as exc:
        fail(str(exc))
        return 1
    for line in lines:
        print(line)
    print(f"link set done in {time.monotonic() - started:.2f} s")
    return 0


_DESCRIPTION = """\
aidclab link set [LAB] NODE:IF down|up|bandwidth BW|loss P [burst B]|loss gilbert P R [LB [LG]]
                                |delay D [jitter J]

  LAB             lab name or topology file; left out: the one lab running on this machine

  down / up       set the interface down/up in the node: the peer loses carrier, and both agents
                  withdraw or re-weight through netlink at once (not at hold-timer expiry)
  bandwidth BW    the link's new speed (bits/s, e.g. 400G for a Y-cable that lost one of its two
                  400G sub-links): both shapers go to BW / time scale, and FARE re-weights and
                  re-advertises at both ends
  loss P          every packet leaving either end is lost with probability P (0..1, or 5%), by a tc
                  program on the link itself: unicast, BIER, network-BIER, INA, BGP and IGMP alike
  loss P burst B  the same mean loss P, in bursts of B packets on average (simple Gilbert model)
  loss gilbert P R [LB [LG]]
                  the whole Gilbert-Elliott chain: P = Good->Bad and R = Bad->Good per packet,
                  LB = loss probability in Bad (default 1), LG = in Good (default 0)
  loss 0          removes the loss
  delay D [jitter J]
                  propagation delay, fabric time (2ms, 5us): every packet either end sends is held
                  for D after its shaper (D x time scale of wall time, by the lab's delay relay),
                  varied by up to +-J and never reordered; delay 0 removes it (docs/delay.md)

  Drops are counted per link end and cause: the shaper's queue (qdisc drops) apart from injected
  loss (the program's counters, lost in Good and in Bad). clab-<lab>/fabric.json records every
  link's rate, loss and delay.
"""

_EPILOG = """\
examples:
  aidclab link set G1:eth2 down
  aidclab link set G1:eth2 up
  aidclab link set superpod G2:eth1 bandwidth 400G
  aidclab link set ina-fig1 s5:eth1 loss 0.02
  aidclab link set ina-fig1 s5:eth1 loss 5% burst 4
  aidclab link set --one-way ina-fig1 s5:eth1 loss gilbert 0.01 0.25 0.8
  aidclab link set ina-fig1 s5:eth1 loss 0
  aidclab link set interdc b1:eth1 delay 5ms
  aidclab link set --one-way leaf-spine leaf1:eth1 delay 1us jitter 200ns
"""


def add_link_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "link",
        help="fault injection: take a link down/up, change its bandwidth (and shaper), make it lossy or long",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="link_verb", required=True, metavar="set")
    s = verbs.add_parser(
        "set",
        usage="aidclab link set [-h] [--one-way] [LAB] NODE:IF ACTION [VALUE ...]",
        help="change one link",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # --lab is what this command took before LAB became positional, as everywhere else; kept working.
    s.add_argument("--lab", dest="lab_option", help=argparse.SUPPRESS)
    s.add_argument(
        "--one-way",
        action="store_true",
        help="loss, delay: only on what NODE sends on IF (default: both directions of the link)",
    )
    s.add_argument(
        "words",
        nargs="+",
        action=LinkWords,
        metavar="[LAB] NODE:IF ACTION [VALUE ...]",
        help=f"ACTION: {', '.join(ACTIONS)}; VALUE: bandwidth: bits/s with an SI prefix, e.g. 400G; "
        "loss: P, P burst B, or gilbert P R [LB [LG]]; delay: D [jitter J], e.g. 2ms jitter 100us",
    )
    s.set_defaults(func=cmd_link)


class LinkWords(argparse.Action):
    """Splits ``[LAB] NODE:IF ACTION [VALUE ...]`` into lab, endpoint, action and value at parse time, so
    a wrong action is a usage error like any other."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        lab, rest = split_lab(list(values))
        if len(rest) < 2:
            parser.error("give NODE:IF and an action, e.g. aidclab link set leaf1:eth1 down")
        if rest[1] not in ACTIONS:
            parser.error(f"action {rest[1]!r}: one of {', '.join(ACTIONS)}")
        namespace.lab, namespace.endpoint, namespace.action, namespace.value = lab, rest[0], rest[1], rest[2:]


class CaptureWords(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        lab, rest = split_lab(list(values))
        if len(rest) != 1:
            parser.error("give one NODE:IF, e.g. aidclab capture leaf-spine leaf1:eth1 -c 20")
        namespace.lab, namespace.endpoint = lab, rest[0]


def cmd_capture(args: argparse.Namespace) -> int:
    from orchestrator.lab.capture import capture_target, run_capture, tcpdump_command
    from orchestrator.lab.linkset import LinkSetError
    from orchestrator.lab.shaping import node_netns

    try:
        container, interface = capture_target(_lab_dir(args.lab), args.endpoint)
    except LinkSetError as exc:
        fail(str(exc))
        return 1
    cmd = tcpdump_command(node_netns(container), interface, args.count, args.write)
    print(f"capturing on {args.endpoint} ({container}): {' '.join(cmd)}", file=sys.stderr)
    try:
        code, timed_out = run_capture(cmd, args.timeout)
    except FileNotFoundError as exc:
        fail(f"{exc.filename} is not installed on this host (apt-get install tcpdump util-linux)")
        return 1
    if timed_out:
        print(
            f"capture on {args.endpoint} stopped after --timeout {args.timeout:g} s (wall); a link carries "
            "little while the lab is idle: start traffic, e.g. `aidclab linkcheck` or a replay "
            "(docs/capture.md)",
            file=sys.stderr,
        )
    return code


def add_capture_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "capture",
        usage="aidclab capture [-h] [-c N] [-w FILE] [--timeout S] [LAB] NODE:IF",
        help="capture packets on a link end (tcpdump in the node's namespace, from the host)",
        description="Runs the host's tcpdump inside NODE's network namespace on IF: decoded lines on "
        "stdout, or a pcap file with -w (open it in Wireshark; docs/capture.md shows BIER decoded). "
        "Runs until -c packets, --timeout seconds or Ctrl-C, whichever comes first. An idle lab sends "
        "almost nothing on its links: start traffic while it runs (linkcheck, a replay). Needs root, "
        "like deploy.",
        epilog="examples:\n  aidclab capture leaf-spine leaf1:eth1 -c 4 --timeout 60 &\n"
        "  aidclab linkcheck leaf-spine          (traffic on every link for the capture)\n"
        "  aidclab capture leaf-spine spine1:eth1 -c 200 -w bier.pcap --timeout 120",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "words",
        nargs="+",
        action=CaptureWords,
        metavar="[LAB] NODE:IF",
        help="lab name or topology file (default: the one running lab), then NODE:INTERFACE, e.g. leaf1:eth1",
    )
    p.add_argument("-c", "--count", type=int, help="stop after this many packets")
    p.add_argument("-w", "--write", metavar="FILE", help="write a pcap file instead of printing")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="stop after S seconds (wall) even if fewer than -c packets came, as Ctrl-C stops it",
    )
    p.set_defaults(func=cmd_capture)
