"""Shapers, qdisc counters and node CPU time, read and written from the host into each node's namespace.

Everything here works for any node image (ours, FRR, plain linux): shapers go in through netlink
(pyroute2) into the namespace at ``/run/netns/clab-<lab>-<node>`` (docs/design.md §2), and CPU time is read
from the container's cgroup on the host. Nothing runs inside the node.

The shaper is a root TBF per link end: rate = the plan's bandwidth / time.scale, limit = the plan's queue
in bytes (TBF's own byte FIFO), burst = :func:`orchestrator.lab.fabric.tbf_burst`. ``replace`` changes a
running shaper in place (the kernel keeps its queue), so ``link set bandwidth`` loses nothing.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from aidcnet.ebpf.link_fault import FaultStats, LinkFault
from orchestrator.lab.fabric import FABRIC_FILE, EndShaper, Fabric, FabricError
from orchestrator.lab.netns import open_handle, parse_net_dev, swap_neigh_params

NETNS_DIR = Path("/run/netns")
# TBF is the root qdisc at handle 1: (tc's "1:").
ROOT_HANDLE = 0x10000
CGROUP_ROOT = Path("/sys/fs/cgroup")


class FabricIOError(RuntimeError):
    pass


def node_netns(container: str) -> str:
    """The named namespace deploy links for every container (``ip netns exec clab-<lab>-<node>`` works)."""
    return str(NETNS_DIR / container)


def open_netns(netns: str) -> IPRoute:
    """A netlink handle inside an existing namespace (never creates one)."""
    try:
        return open_handle(netns)
    except FileNotFoundError:
        raise FabricIOError(f"{netns} does not exist: is the lab deployed (aidclab deploy)?") from None


def _index(ns: IPRoute, netns: str, interface: str) -> int:
    found = ns.link_lookup(ifname=interface)
    if not found:
        raise FabricIOError(f"{netns}: no interface {interface} (is the lab deployed and wired?)")
    return found[0]


def _unshape(ns: Any, index: int) -> None:
    try:
        ns.tc("del", index=index, handle=ROOT_HANDLE, root=True)
    except NetlinkError as exc:
        if exc.code not in (errno.ENOENT, errno.EINVAL):  # nothing to delete: already unshaped
            raise


# How long a shaped link end's kernel keeps its peer's ARP entry reachable without a confirmation. The
# kernel's 30 s of wall time lets entries go stale during a replay, and UDP confirms none: the probe that
# revives one then waits in the shaper's queue behind the data, which at a large time scale takes longer
# than the 3 s after which the kernel calls the neighbour failed and drops what is sent to it. On bsl256 at
# 1:800000 a unicast run lost 334 of 8151 deliveries that way (its leaves' entries in DELAY, PROBE and
# INCOMPLETE mid-run), at 1:4000000 1373; host-BIER on eBPF, which keeps its own MACs, lost none. A
# fabric's own ARP refresh is tens of seconds of fabric time, far beyond any run: a day of wall time
# stands for it.
NEIGH_REACHABLE_MS = 24 * 3600 * 1000


def apply_shapers(netns: str, ends: Iterable[EndShaper]) -> int:
    """Put (or change) the TBF of each end, all in one namespace, and hold its peer's ARP entry reachable
    (:data:`NEIGH_REACHABLE_MS`); returns how many were set."""
    ends = list(ends)
    count = 0
    with open_netns(netns) as ns:
        for end in ends:
            index = _index(ns, netns, end.interface)
            if end.rate_bps <= 0:
                _unshape(ns, index)  # no time scale: the veth's default qdisc, as deploy left it
                continue
            try:
                ns.tc(
                    "replace",
                    "tbf",
                    index,
                    handle=ROOT_HANDLE,
                    rate=end.rate_bps // 8,
                    burst=end.burst_bytes,
                    limit=end.queue_bytes,
                )
            except NetlinkError as exc:
                raise FabricIOError(
                    f"{end.name} ({netns}): netlink refused the TBF shaper at {end.rate_bps} bit/s, "
                    f"queue {end.queue_bytes} B: {exc.args[-1]} (errno {exc.code}); does this kernel "
                    "have sch_tbf (modprobe sch_tbf)?"
                ) from exc
            count += 1
    shaped = {end.interface: str(NEIGH_REACHABLE_MS) for end in ends if end.rate_bps > 0}
    if shaped:
        swap_neigh_params(netns, "base_reachable_time_ms", shaped)
    return count


@dataclass(frozen=True)
class QdiscStats:
    """A root qdisc's counters. ``drops`` are queue overflows at the shaper; ``backlog`` is what waits."""

    kind: str
    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog: int
    qlen: int
    rate_bps: int | None  # the TBF's configured rate; None for other qdiscs
    # When the kernel answered (monotonic s): the middle of the dump, give or take ``read_within_s``.
    read_at_s: float = 0.0
    read_within_s: float = 0.0


def set_link_state(netns: str, interface: str, up: bool) -> None:
    """Set one interface administratively up or down inside a node's namespace, over netlink from the
    host: a fault's moment is then this call's few milliseconds, not a ``docker exec``'s 100 or more."""
    with open_netns(netns) as ns:
        ns.link("set", index=_index(ns, netns, interface), state="up" if up else "down")


def qdisc_stats(netns: str, interfaces: Iterable[str] | None = None) -> dict[str, QdiscStats]:
    """Root qdisc counters per interface (every interface that has one when ``interfaces`` is None)."""
    with open_netns(netns) as ns:
        return read_qdisc_stats(ns, netns, interfaces)


def read_qdisc_stats(
    ns: IPRoute, netns: str, interfaces: Iterable[str] | None = None
) -> dict[str, QdiscStats]:
    """:func:`qdisc_stats` through a namespace handle already open: a sampler polling every few tens of
    milliseconds keeps one open (opening one costs a few ms)."""
    out: dict[str, QdiscStats] = {}
    names = {msg["index"]: msg.get_attr("IFLA_IFNAME") for msg in ns.get_links()}
    wanted = set(names.values()) if interfaces is None else set(interfaces)
    missing = wanted - set(names.values())
    if missing:
        raise FabricIOError(f"{netns}: no interface {', '.join(sorted(missing))}")
    # The counters' moment lies between these two clock reads, and nowhere else: a stall before the dump
    # (a garbage collection, the scheduler) would otherwise pass for time the shaper had.
    asked = time.monotonic()
    dump = list(ns.get_qdiscs())
    answered = time.monotonic()
    for msg in dump:
        name = names.get(msg["index"])
        if name not in wanted or msg["parent"] != 0xFFFFFFFF:
            continue
        stats2 = msg.get_attr("TCA_STATS2")
        basic = (stats2.get_attr("TCA_STATS_BASIC") or {}) if stats2 else {}
        queue = (stats2.get_attr("TCA_STATS_QUEUE") or {}) if stats2 else {}
        kind = msg.get_attr("TCA_KIND")
        rate = None
        if kind == "tbf":
            parms = msg.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")
            rate = int(parms["rate"]) * 8
        out[name] = QdiscStats(
            kind=kind,
            bytes=int(basic.get("bytes", 0)),
            packets=int(basic.get("packets", 0)),
            drops=int(queue.get("drops", 0)),
            overlimits=int(queue.get("overlimits", 0)),
            backlog=int(queue.get("backlog", 0)),
            qlen=int(queue.get("qlen", 0)),
            rate_bps=rate,
            read_at_s=(asked + answered) / 2,
            read_within_s=(answered - asked) / 2,
        )
    return out


def cgroup_cpu_usec(pid: int, proc: Path = Path("/proc"), cgroup_root: Path = CGROUP_ROOT) -> int:
    """CPU time (µs, all threads, user + system) of the cgroup that process ``pid`` (a container's init)
    is in, read on the host. cgroup v2 (``cpu.stat`` usage_usec) or v1 (``cpuacct.usage``, ns)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError as exc:
        raise FabricIOError(f"pid {pid}: cannot read its cgroup ({exc}); did the container stop?") from None
    v1 = v2 = None
    for line in lines:
        _hier, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            v1 = path
        elif controllers == "":
            v2 = path
    tried = []
    if v1 is not None:
        for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
            usage = cgroup_root / mount / v1.lstrip("/") / "cpuacct.usage"
            tried.append(str(usage))
            if usage.exists():
                return int(usage.read_text()) // 1000
    if v2 is not None:
        for base in (cgroup_root, cgroup_root / "unified"):
            stat = base / v2.lstrip("/") / "cpu.stat"
            tried.append(str(stat))
            if stat.exists():
                for line in stat.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value)
    raise FabricIOError(
        f"pid {pid}: no CPU accounting for its cgroup (tried {', '.join(tried) or 'nothing'}); "
        "mount the cpuacct (v1) or cpu (v2) controller"
    )


# /proc/PID/net/snmp "Udp:" counters that mean a datagram was lost to a full socket buffer. Not
# SndbufErrors: it also counts every EAGAIN of a full send buffer, which is a lossless sender waiting.
UDP_DROP_COUNTERS = ("RcvbufErrors",)


def node_drop_counters(pid: int, interfaces: Iterable[str], proc: Path = Path("/proc")) -> dict[str, int]:
    """Drops inside a node that are neither a shaper's nor an injected fault's, read on the host from the
    node's own /proc (its namespace's view): UDP socket buffer overflows, and each data interface's rx and
    tx drops (a full receive backlog, a peer that could not take the frame)."""
    out: dict[str, int] = {}
    base = proc / str(pid) / "net"
    try:
        snmp = (base / "snmp").read_text().splitlines()
        dev = (base / "dev").read_text()
    except OSError as exc:
        raise FabricIOError(f"pid {pid}: cannot read its /proc/net ({exc}); did the node stop?") from None
    udp = [line.split()[1:] for line in snmp if line.startswith("Udp:")]
    if len(udp) >= 2:
        fields = dict(zip(udp[0], udp[1], strict=False))
        for name in UDP_DROP_COUNTERS:
            out[f"udp {name}"] = int(fields.get(name, 0))
    counters = parse_net_dev(dev)
    for name in interfaces:
        if name in counters:
            out[f"{name} rx drop"] = counters[name]["rx_drop"]
            out[f"{name} tx drop"] = counters[name]["tx_drop"]
    return out


def machine_cpu_s(proc: Path = Path("/proc")) -> float:
    """CPU seconds the whole machine has been busy since boot, all cores (``/proc/stat``: user, nice,
    system, irq, softirq and steal; not idle or iowait): our agents, the kernel forwarding for them, Docker
    and the orchestrator alike."""
    fields = (proc / "stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def udp_rx_backlog(pid: int, proc: Path = Path("/proc")) -> int:
    """Bytes waiting in the receive queues of every UDP socket of a node (its namespace's
    ``/proc/PID/net/udp``, ``rx_queue`` in hex): what arrived and its software has not read yet."""
    try:
        lines = (proc / str(pid) / "net" / "udp").read_text().splitlines()[1:]
    except OSError as exc:
        raise FabricIOError(f"pid {pid}: cannot read its /proc/net/udp ({exc}); did the node stop?") from None
    total = 0
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            total += int(fields[4].partition(":")[2] or "0", 16)
    return total


def container_pid(netns: str) -> int:
    """The PID behind a ``/run/netns`` link deploy made (a symlink to ``/proc/PID/ns/net``)."""
    target = os.readlink(netns)
    parts = Path(target).parts
    if len(parts) >= 3 and parts[1] == "proc" and parts[2].isdigit():
        return int(parts[2])
    raise FabricIOError(f"{netns} -> {target}: not a /proc/PID/ns/net link; redeploy the lab")


# -- the link-fault tc program (aidcnet/ebpf/link_fault.c) ----------------------------------------------
# One filter per end at clsact egress, preference 1, handle 1: "replace" swaps the program in one step.
FAULT_PREF = "1"
FAULT_HANDLE = "1"
INSTALL_BPFTOOL = "apt-get install -y bpftool (scripts/setup.sh does it)"


def _in_netns(netns: str) -> list[str]:
    """Run a host tool inside a node's namespace. ``ip netns exec`` for named ones (it also gives the tool
    a private /sys, where tc may mount a bpffs without touching the host's); nsenter otherwise."""
    path = Path(netns)
    if path.parent == NETNS_DIR:
        return ["ip", "netns", "exec", path.name]
    return ["nsenter", f"--net={netns}"]


def _run(cmd: list[str], what: str, stdin: str | None = None) -> str:
    import subprocess

    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, input=stdin)
    except FileNotFoundError:
        raise FabricIOError(f"{what}: {cmd[0]} is missing ({INSTALL_BPFTOOL}; iproute2 for ip/tc)") from None
    if done.returncode != 0:
        raise FabricIOError(f"{what}: {' '.join(cmd)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def _bpftool() -> str:
    import shutil

    found = shutil.which("bpftool") or ("/usr/sbin/bpftool" if Path("/usr/sbin/bpftool").exists() else None)
    if found is None:
        raise FabricIOError(f"bpftool is missing: {INSTALL_BPFTOOL}")
    return found


def link_fault_programs(netns: str) -> dict[str, int]:
    """interface -> id of the link-fault program at its egress, for every interface of one namespace that
    has one (one ``bpftool net show``, where ``tc filter show`` takes a process per interface)."""
    import json

    from aidcnet.ebpf.link_fault import PROGRAM

    out = _run([*_in_netns(netns), _bpftool(), "-j", "net", "show"], f"{netns}: listing tc programs")
    return egress_programs(json.loads(out or "[]"), PROGRAM)


def link_fault_prog_id(netns: str, interface: str) -> int | None:
    """The id of the link-fault program at ``interface``'s egress, or None when there is none."""
    return link_fault_programs(netns).get(interface)


def attach_link_faults(
    netns: str, interfaces: Iterable[str], obj: Path, replace: bool = False
) -> dict[str, int]:
    """Attach the program at the egress (clsact, direct-action) of each of ``interfaces`` of one namespace,
    unless it is there already (``replace`` swaps in fresh copies, counters and settings reset). One ``tc
    -batch`` for all of them: a node's ends cost three processes, not four per end. Returns interface ->
    program id."""
    interfaces = list(interfaces)
    have = {} if replace else link_fault_programs(netns)
    missing = [i for i in interfaces if i not in have]
    if missing:
        # tc's batch parser splits on blanks but keeps a double-quoted word whole.
        batch = "".join(
            f"qdisc replace dev {i} clsact\n"
            f"filter replace dev {i} egress pref {FAULT_PREF} handle {FAULT_HANDLE} "
            f'bpf direct-action obj "{obj}" sec tc\n'
            for i in missing
        )
        what = f"{netns}: attaching {obj.name} at {', '.join(missing)}"
        _run([*_in_netns(netns), "tc", "-batch", "-"], what, batch)
        have = link_fault_programs(netns)
    absent = [i for i in interfaces if i not in have]
    if absent:
        raise FabricIOError(
            f"{netns}: tc took {obj.name} but no link_fault program shows at the egress of "
            + ", ".join(absent)
        )
    return {i: have[i] for i in interfaces}


def attach_link_fault(netns: str, interface: str, obj: Path, replace: bool = False) -> int:
    """:func:`attach_link_faults` for one interface."""
    return attach_link_faults(netns, [interface], obj, replace)[interface]


def program_maps(prog_id: int) -> dict[str, int]:
    """name -> id of every map a loaded program uses (``bpftool prog show`` and ``map show``)."""
    import json

    tool = _bpftool()
    prog = json.loads(_run([tool, "-j", "prog", "show", "id", str(prog_id)], f"program {prog_id}"))
    maps = {}
    for map_id in prog.get("map_ids", []):
        info = json.loads(_run([tool, "-j", "map", "show", "id", str(map_id)], f"map {map_id}"))
        maps[str(info.get("name"))] = int(map_id)
    return maps


def _fault_maps(prog_id: int) -> dict[str, int]:
    from aidcnet.ebpf.link_fault import MAPS

    maps = {name: map_id for name, map_id in program_maps(prog_id).items() if name in MAPS}
    if set(maps) != set(MAPS):
        raise FabricIOError(f"program {prog_id} lacks maps {sorted(set(MAPS) - set(maps))}: not link_fault?")
    return maps


def map_write(map_id: int, value: bytes) -> None:
    """Key 0 of an array map set to ``value`` (its bytes as the program reads them)."""
    _run(
        [_bpftool(), "map", "update", "id", str(map_id), "key", "hex", "00", "00", "00", "00",
         "value", "hex", *(f"{b:02x}" for b in value)],
        f"map {map_id}: update",
    )


def _map_read(map_id: int) -> bytes:
    import json

    cmd = [_bpftool(), "-j", "map", "lookup", "id", str(map_id), "key", "0", "0", "0", "0"]
    out = _run(cmd, f"map {map_id}")
    return bytes(int(b, 16) for b in json.loads(out)["value"])


def _prog(netns: str, interface: str) -> int:
    prog_id = link_fault_prog_id(netns, interface)
    if prog_id is None:
        raise FabricIOError(
            f"{netns} {interface}: no link-fault program at egress; "
            "aidclab configure attaches one at every link end"
        )
    return prog_id


def set_link_fault(netns: str, interface: str, fault: LinkFault) -> None:
    """Change the loss of one link end at runtime (the chain restarts in Good)."""
    maps = _fault_maps(_prog(netns, interface))
    map_write(maps["lf_config"], fault.encode())
    map_write(maps["lf_state"], bytes(4))


def read_link_fault(netns: str, interface: str) -> tuple[LinkFault, FaultStats]:
    """The loss set on one link end and its counters (packets passed, lost in Good, lost in Bad)."""
    maps = _fault_maps(_prog(netns, interface))
    return LinkFault.decode(_map_read(maps["lf_config"])), FaultStats.decode(_map_read(maps["lf_stats"]))


def egress_programs(net_show: list[dict[str, Any]], name: str | None = None) -> dict[str, int]:
    """interface -> id of the tc program at its egress, from ``bpftool -j net show`` in one namespace. With
    ``name``, only filters tc named after that program's object (tc calls one "link_fault.o:[tc]")."""
    return tc_programs(net_show, "egress", name)


def tc_programs(net_show: list[dict[str, Any]], hook: str, name: str | None = None) -> dict[str, int]:
    """interface -> id of the tc program at its clsact ``hook`` (``ingress`` or ``egress``); see
    :func:`egress_programs`. An interface with several filters there gives the last one listed."""
    out: dict[str, int] = {}
    for section in net_show:
        for entry in section.get("tc", []):
            here = entry.get("kind") == f"clsact/{hook}" and "devname" in entry and "id" in entry
            if here and (name is None or str(entry.get("name", "")).startswith(f"{name}.o:")):
                out[entry["devname"]] = int(entry["id"])
    return out


def tc_list(netns: str) -> list[dict[str, Any]]:
    """``bpftool -j net show`` inside one namespace."""
    import json

    out = _run([*_in_netns(netns), _bpftool(), "-j", "net", "show"], f"{netns}: listing tc programs")
    return json.loads(out or "[]")


def fault_stats_maps(progs: list[dict[str, Any]], maps: list[dict[str, Any]]) -> dict[int, int]:
    """program id -> its ``lf_stats`` map id, for the link-fault programs among ``bpftool -j prog show``
    (``maps``: ``bpftool -j map show``)."""
    from aidcnet.ebpf.link_fault import PROGRAM

    stats_ids = {int(m["id"]) for m in maps if m.get("name") == "lf_stats"}
    out: dict[int, int] = {}
    for prog in progs:
        if prog.get("name") != PROGRAM:
            continue
        found = [int(m) for m in prog.get("map_ids", []) if int(m) in stats_ids]
        if len(found) == 1:
            out[int(prog["id"])] = found[0]
    return out


def _map_read_many(map_ids: list[int]) -> dict[int, bytes]:
    """The key-0 value of each map, in one ``bpftool batch`` (a process per map costs ~10 ms)."""
    import json

    if not map_ids:
        return {}
    lines = "".join(f"map lookup id {m} key 0 0 0 0\n" for m in map_ids)
    replies = json.loads(_run([_bpftool(), "-j", "batch", "file", "-"], "reading link-fault counters", lines))
    out: dict[int, bytes] = {}
    for reply in replies:
        value = (reply.get("output") or {}).get("value")
        if value is not None:
            out[int(reply["command"][3])] = bytes(int(b, 16) for b in value)
    return out


def read_fault_stats(netns_of: Mapping[str, str]) -> dict[str, FaultStats]:
    """``node:interface`` -> the link-fault counters, for every end with the program on the nodes given
    (node -> namespace path). One ``bpftool net show`` per node and three calls in all besides, where
    :func:`read_link_fault` takes seven per end: cheap enough to read a whole lab before and after a run."""
    import json

    tool = _bpftool()
    prog_of: dict[str, int] = {}
    for node, netns in sorted(netns_of.items()):
        out = _run([*_in_netns(netns), tool, "-j", "net", "show"], f"{node} ({netns}): listing tc programs")
        for interface, prog_id in egress_programs(json.loads(out or "[]")).items():
            prog_of[f"{node}:{interface}"] = prog_id
    if not prog_of:
        return {}
    progs = json.loads(_run([tool, "-j", "prog", "show"], "listing eBPF programs") or "[]")
    maps = json.loads(_run([tool, "-j", "map", "show"], "listing eBPF maps") or "[]")
    stats_map = fault_stats_maps(progs, maps)
    ends = {end: stats_map[prog] for end, prog in prog_of.items() if prog in stats_map}
    values = _map_read_many(sorted(set(ends.values())))
    return {end: FaultStats.decode(values[m]) for end, m in sorted(ends.items()) if m in values}


# -- the whole lab ---------------------------------------------------------------------------------------


def load_fabric(lab_dir: Path) -> Fabric:
    path = lab_dir / FABRIC_FILE
    if not path.exists():
        raise FabricIOError(f"{path} does not exist: the lab's links are not shaped yet (aidclab configure)")
    return Fabric.from_json(path.read_text(), str(path))


def fault_stats_of(ends: Iterable[str], container_name: Callable[[str], str]) -> dict[str, FaultStats]:
    """The link-fault counters of ``ends`` (``node:interface``), read with :func:`read_fault_stats` for their
    nodes; an end without the program is an error naming it. ``container_name`` maps a node to its
    container (``Topology.container_name``)."""
    ends = sorted(set(ends))
    nodes = {end.split(":", 1)[0] for end in ends}
    stats = read_fault_stats({node: node_netns(container_name(node)) for node in nodes})
    missing = [end for end in ends if end not in stats]
    if missing:
        raise FabricIOError(
            f"no link-fault program at the egress of {', '.join(missing)}; "
            "aidclab configure attaches one at every link end"
        )
    return {end: stats[end] for end in ends}


def fabric_lost_bytes(fabric: Fabric, container_name: Callable[[str], str]) -> int:
    """Bytes the link-fault programs of every end of ``fabric`` have dropped so far (a counter: take the
    difference over a run). ``container_name`` maps a node to its container (``Topology.container_name``)."""
    return sum(stats.lost_bytes for stats in fault_stats_of(fabric.ends, container_name).values())


def write_fabric(lab_dir: Path, fabric: Fabric) -> Path:
    path = lab_dir / FABRIC_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(fabric.to_json())
    tmp.replace(path)
    return path


def link_fault_object(cache: Path | None = None) -> Path:
    """The compiled link-fault program on the host (:func:`aidcnet.ebpf.build`, reused while current)."""
    from aidcnet.ebpf import build

    return build(cache, programs=("link_fault",))["link_fault"]


def apply_fabric(
    fabric: Fabric, lab_dir: Path, container_of: Callable[[str], str], fault_object: Path | None = None
) -> Fabric:
    """Shape every link end and attach the link-fault program there (kept when already attached, with
    its loss and counters), then write ``fabric.json``. Faults recorded by an earlier ``fabric.json``
    carry over: they are still set in the running programs. Returns the fabric as written."""
    from concurrent.futures import ThreadPoolExecutor

    obj = fault_object or link_fault_object()
    by_node: dict[str, list[EndShaper]] = {}
    for end in fabric.ends.values():
        by_node.setdefault(end.node, []).append(end)

    def one_node(node: str) -> None:
        netns = node_netns(container_of(node))
        apply_shapers(netns, by_node[node])
        attach_link_faults(netns, [end.interface for end in by_node[node]], obj)

    # Two workers: most of the time goes to tc subprocesses, and the machine has two cores.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(one_node, sorted(by_node)))
    previous = lab_dir / FABRIC_FILE
    if previous.exists():
        try:
            old = Fabric.from_json(previous.read_text(), str(previous))
            fabric = replace(fabric, faults={k: v for k, v in old.faults.items() if k in fabric.ends})
        except FabricError:
            pass  # an unreadable old file holds nothing worth keeping
    write_fabric(lab_dir, fabric)
    return fabric


def link_counters(fabric: Fabric, container_of: Callable[[str], str]) -> dict[str, dict[str, int]]:
    """Per link end: shaper bytes/packets/drops/backlog and injected losses, read once (for a run's
    record and its fidelity check; a sampler during the run uses :func:`read_qdisc_stats`)."""
    out: dict[str, dict[str, int]] = {}
    by_node: dict[str, list[EndShaper]] = {}
    for end in fabric.ends.values():
        by_node.setdefault(end.node, []).append(end)
    for node, ends in sorted(by_node.items()):
        netns = node_netns(container_of(node))
        stats = qdisc_stats(netns, [e.interface for e in ends])
        for end in ends:
            q = stats.get(end.interface)
            _fault, lost = read_link_fault(netns, end.interface)
            out[end.name] = {
                "tx_bytes": q.bytes if q else 0,
                "tx_packets": q.packets if q else 0,
                "queue_drops": q.drops if q else 0,
                "backlog": q.backlog if q else 0,
                "injected_drops": lost.lost_packets,
                "injected_bad_drops": lost.lost_bad_packets,
            }
    return out
