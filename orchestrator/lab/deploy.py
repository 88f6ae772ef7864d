"""Deploy, inspect and destroy a lab: the orchestration of topology, runtime, wiring and lab directory."""

from __future__ import annotations

import ipaddress
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from aidcnet.agent.client import AgentClient
from aidcnet.agent.control import ControlError
from orchestrator.lab import labdir
from orchestrator.lab.mgmtbridge import MgmtBridge, MgmtError, ensure_bridge, remove_bridges
from orchestrator.lab.roles import role_of
from orchestrator.lab.runtime.docker import (
    ContainerSpec,
    DockerError,
    DockerRuntime,
    link_netns,
    netns_links,
    unlink_netns,
)
from orchestrator.lab.topology import Topology, free_mgmt_subnet, lab_dir_name, mgmt_capacity
from orchestrator.lab.vxlan import remove_lab_devices
from orchestrator.lab.wiring import IncrementalWiring
from orchestrator.progress import Counter, Phases, console

# Docker's API server serialises much of container creation; beyond ~8 parallel requests it only queues.
PARALLEL = 8
HEALTH_TIMEOUT_S = 60.0
# Namespaces prepared at once (a few netlink requests each).
PREPARE_PARALLEL = 2
# A node's management address with its prefix, on a lab's own hub (Docker's view has none: network none).
MGMT_LABEL = "aidclab-mgmt-ipv4"
# Rounds of 0.2 s that destroy waits for Docker to release removed containers' endpoints by itself.
STALE_WAIT_ROUNDS = 10
# Listings of a lab's containers destroy removes before it trusts that none is left.
DESTROY_ROUNDS = 5


class DeployError(RuntimeError):
    pass


@dataclass
class NodeStatus:
    name: str
    container: str
    role: str
    image: str
    state: str
    mgmt_ipv4: str
    healthy: bool | None = None
    detail: str = ""


def _spec(topo: Topology, node_name: str, mgmt: MgmtBridge | None = None) -> ContainerSpec:
    """``mgmt``: the lab's own hub, which gives the node its ``eth0`` after the start (Docker's network
    ``none`` until then); None: Docker's network ``topo.mgmt.network`` does."""
    node = topo.nodes[node_name]
    role = role_of(node)
    base = topo.path.resolve().parent
    binds = []
    for bind in node.binds:
        src, sep, rest = bind.partition(":")
        # containerlab resolves relative bind sources against the topology file's folder.
        if not src.startswith("/"):
            src = str((base / src).resolve())
        binds.append(f"{src}{sep}{rest}")
    labels = labdir.container_labels(topo, node_name)
    if mgmt is not None:
        labels[MGMT_LABEL] = mgmt.interface(node_name)
    return ContainerSpec(
        name=topo.container_name(node_name),
        image=node.image,
        hostname=node_name,
        network="none" if mgmt is not None else topo.mgmt.network,
        labels=labels,
        env={"CLAB_LABEL": topo.name, "CLAB_NODE_NAME": node_name, **node.env},
        binds=binds,
        sysctls=role.container_sysctls(node),
        cap_add=list(role.cap_add),
        mgmt_ipv4=None if mgmt is not None else node.mgmt_ipv4,
        cmd=node.cmd,
    )


def _check_images(runtime: DockerRuntime, topo: Topology) -> None:
    import docker.errors

    missing: dict[str, list[str]] = {}
    for name, node in topo.nodes.items():
        try:
            runtime.client.images.get(node.image)
        except docker.errors.ImageNotFound:
            missing.setdefault(node.image, []).append(name)
    if missing:
        lines = "; ".join(
            f"{img} (nodes {', '.join(nodes[:4])}{'...' if len(nodes) > 4 else ''})"
            for img, nodes in missing.items()
        )
        raise DeployError(f"{topo.path}: images not built: {lines}; run `make images`")


class _LabProgress:
    """When a node's health check gives up: ``HEALTH_TIMEOUT_S`` after the later of its own start and the
    last time any node of the lab started or became healthy. On two cores shared with other work, 68
    agents importing Python at once can take longer than a minute each while the lab as a whole keeps
    coming up; a node that never answers still fails a minute after the lab stopped making progress."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = False

    def mark(self) -> None:
        with self.lock:
            self.last = time.monotonic()

    def stop(self) -> None:
        """The deploy is over (done or failed): no check waits any longer."""
        self.stopped = True

    def deadline(self, started: float) -> Callable[[], float | None]:
        """When a node's check gives up; None once the deploy stopped waiting."""
        return lambda: None if self.stopped else max(started, self.last) + HEALTH_TIMEOUT_S

    def started(self) -> Callable[[], float | None]:
        """A node started now (progress too): its deadline."""
        self.mark()
        return self.deadline(time.monotonic())


def _health(
    runtime: DockerRuntime, topo: Topology, node: str, pid: int, deadline: Callable[[], float | None],
    progress: _LabProgress | None = None,
) -> tuple[bool, str]:
    """Poll until the node's agent answers (marking the lab's progress when it does). Our agents are asked
    straight through their control socket (seen from the host under /proc/PID/root), which costs
    microseconds instead of a ``docker exec``."""
    ok, detail = _poll_health(runtime, topo, node, pid, deadline)
    if ok and progress is not None:
        progress.mark()
    return ok, detail


def _poll_health(
    runtime: DockerRuntime, topo: Topology, node: str, pid: int, deadline: Callable[[], float | None]
) -> tuple[bool, str]:
    role = role_of(topo.nodes[node])
    container = topo.container_name(node)
    agent = AgentClient.for_pid(pid, node, timeout=2.0)
    detail = ""
    while True:
        if role.runs_agent:
            try:
                agent.health()
                return True, "agent answers"
            except ControlError as exc:
                detail = str(exc)
        elif role.health_cmd is None:
            return True, "running"
        else:
            code, out = runtime.exec(container, list(role.health_cmd))
            if code == 0:
                return True, "healthy"
            detail = out.strip().splitlines()[-1] if out.strip() else f"exit {code}"
        limit = deadline()
        if limit is None:
            return False, "the deploy stopped waiting"
        if time.monotonic() > limit:
            state = runtime.inspect(container)["State"]
            if not state.get("Running"):
                # Its last words now: a roll-back removes the container, and its log with it.
                code = state.get("ExitCode")
                return False, f"container exited with code {code}: {runtime.last_log(container)}"
            return False, f"health check `{role.health_check}` still failing: {detail}"
        time.sleep(0.1)


def _check_mgmt_room(runtime: DockerRuntime, topo: Topology) -> None:
    """Refuse, before any container starts, a lab whose nodes do not fit the management subnet next to
    the containers other labs already attached to it. A lab's own network whose subnet deploy chooses
    is sized to the lab, so there is nothing to check."""
    if topo.mgmt.ipv4_subnet is None:
        return
    subnet = ipaddress.ip_network(topo.mgmt.ipv4_subnet, strict=False)
    others = runtime.network_endpoints(topo.mgmt.network)
    room = mgmt_capacity(subnet) - others
    if len(topo.nodes) > room:
        free = free_mgmt_subnet(len(topo.nodes), runtime.network_subnets())
        hint = (
            "leave out mgmt.network and mgmt.ipv4-subnet, and the lab gets a network of its own sized to "
            f"it, or set mgmt: {{ipv4-subnet: {free or 'a free subnet'}}}"
        )
        raise DeployError(
            f"{topo.path}: {len(topo.nodes)} nodes do not fit management network {topo.mgmt.network!r} "
            f"({subnet}: {mgmt_capacity(subnet)} containers, {others} attached by other labs); {hint}"
        )


def _ensure_mgmt(phases: Phases, runtime: DockerRuntime, topo: Topology) -> MgmtBridge | None:
    """Create (or reuse) the management network and settle ``topo.mgmt.ipv4_subnet``: a lab's own network
    (a hub of ours, orchestrator.lab.mgmtbridge) whose subnet the file leaves open takes a free one, sized
    to the nodes; the lab directory records it (topology-data.json), so configure and redeploy agree with
    this deploy. Returns the lab's own hub, or None for a Docker network the file names."""
    mgmt = topo.mgmt
    if mgmt.own:
        with phases.phase("network", f"{mgmt.network} {mgmt.ipv4_subnet or 'free subnet'} (own, internal)"):
            try:
                return ensure_bridge(topo, runtime.network_subnets())
            except MgmtError as exc:
                raise DeployError(str(exc)) from exc
    subnet = str(mgmt.ipv4_subnet)  # a named network always has one (topology._mgmt)
    with phases.phase("network", f"{mgmt.network} {subnet} (internal, Docker)"):
        mgmt.ipv4_subnet = runtime.ensure_mgmt_network(mgmt.network, subnet, mgmt.bridge, lab=topo.name)
    return None


def _run_exec(phases: Phases, runtime: DockerRuntime, topo: Topology) -> None:
    """Each node's ``exec`` commands, in file order, once its links are up (containerlab's order)."""
    exec_nodes = [n for n, node in topo.nodes.items() if node.exec]
    if not exec_nodes:
        return
    with phases.phase("exec", f"{len(exec_nodes)} nodes"):
        for n in exec_nodes:
            for cmd in topo.nodes[n].exec:
                code, out = runtime.exec(topo.container_name(n), cmd)
                if code != 0:
                    raise DeployError(f"node {n}: exec {cmd!r} failed with exit {code}: {out.strip()[-300:]}")


def _await_health(phases: Phases, health: dict[Future[tuple[bool, str]], str]) -> None:
    with phases.phase("health", "waiting for every node's agent"):
        counter = Counter("healthy", len(health))
        bad = []
        for fut in as_completed(health):
            ok, detail = fut.result()
            if ok:
                counter.step(health[fut])
            else:
                bad.append(f"{health[fut]}: {detail}")
        counter.close()
        if bad:
            raise DeployError("nodes not healthy: " + "; ".join(sorted(bad)))


def deploy(
    topo: Topology,
    runtime: DockerRuntime | None = None,
    reconfigure: bool = False,
    underlay_netns: str | None = None,
    keep_failed: bool = False,
) -> Path:
    """Bring the lab up; return its lab directory. Ready means every node's agent answered. VXLAN ends
    are made in ``underlay_netns`` (default: the host's), see orchestrator.lab.vxlan. A deploy that fails
    once it has started something takes it all down again (``keep_failed``: leaves it for inspection and
    says which command removes it) and raises DeployError saying which."""
    phases = Phases(f"deploy {topo.name}")
    runtime = runtime or DockerRuntime()
    with phases.phase("validate", f"{len(topo.nodes)} nodes, {len(topo.links)} links"):
        for node in topo.nodes.values():
            role_of(node)
        _check_images(runtime, topo)
        existing = runtime.lab_containers(topo.name)
        if existing and not reconfigure:
            raise DeployError(
                f"lab {topo.name!r} already has {len(existing)} container(s); run `aidclab destroy "
                f"{topo.path}` first, or `aidclab deploy --reconfigure` to replace it"
            )
    if existing:
        destroy(topo.name, runtime=runtime, quiet=True, underlay_netns=underlay_netns)
    _check_mgmt_room(runtime, topo)
    try:
        mgmt = _ensure_mgmt(phases, runtime, topo)
        _bring_up(phases, runtime, topo, mgmt, underlay_netns)
        with phases.phase("lab-dir"):
            # The hub planned every address; only a Docker network's have to be asked for, node by node.
            addresses = mgmt.host_addresses() if mgmt is not None else mgmt_addresses(runtime, topo)
            prefix_len = ipaddress.ip_network(str(topo.mgmt.ipv4_subnet), strict=False).prefixlen
            path = labdir.write_lab_dir(topo, addresses, prefix_len)
    except BaseException as exc:
        outcome = _after_failure(runtime, topo, underlay_netns, keep_failed)
        if not isinstance(exc, Exception):  # Ctrl-C: still the interrupt, after the roll-back
            console.print(f"deploy {topo.name} interrupted; {outcome}")
            raise
        raise DeployError(f"{exc}; {outcome}") from exc
    phases.summary(f"{len(topo.nodes)} nodes healthy, {len(topo.links)} links up, lab dir {path.name}/")
    return path


def destroy_command(topo: Topology, underlay_netns: str | None = None) -> str:
    """The command that removes what a deploy of ``topo`` made (with the part's underlay namespace)."""
    return f"aidclab destroy {topo.path}" + (f" --underlay-netns {underlay_netns}" if underlay_netns else "")


def _after_failure(runtime: DockerRuntime, topo: Topology, underlay_netns: str | None, keep: bool) -> str:
    """Roll back what a failed deploy started (its containers, links, VXLAN devices and management
    network, found by label as destroy finds them), or keep it; the sentence says which happened."""
    undo = destroy_command(topo, underlay_netns)
    if keep:
        return f"left as it failed (--keep-failed); `{undo}` removes it"
    try:
        removed = destroy(topo.name, runtime=runtime, quiet=True, underlay_netns=underlay_netns)
    except Exception as exc:  # the roll-back must not hide the failure it follows
        return f"rolling it back failed too ({exc}); `{undo}` removes what is left"
    return (
        f"rolled back: removed its {removed} container(s), links and management network "
        "(`aidclab deploy --keep-failed` leaves a failed lab up for inspection)"
    )


def _bring_up(
    phases: Phases,
    runtime: DockerRuntime,
    topo: Topology,
    mgmt: MgmtBridge | None,
    underlay_netns: str | None,
) -> None:
    """Start every container, wire its links as both ends come up, run the exec commands, and wait until
    every node is healthy."""
    pids: dict[str, int] = {}
    # Health checks start as each container starts, so they overlap with the rest of the deploy. A health
    # check holds its thread until the agent answers: namespaces are prepared in a pool of their own, or
    # they would wait behind the checks (7 s of a superpod deploy did).
    health_pool = ThreadPoolExecutor(max_workers=PARALLEL)
    prepare_pool = ThreadPoolExecutor(max_workers=PREPARE_PARALLEL)
    health: dict[Future[tuple[bool, str]], str] = {}
    wiring = IncrementalWiring(topo, prepare_pool, underlay_netns, mgmt)
    progress = _LabProgress()
    try:
        with phases.phase(
            "containers", f"{len(topo.nodes)} in parallel ({PARALLEL} at a time), links as both ends come up"
        ):
            counter = Counter("started", len(topo.nodes))
            with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
                futures = {pool.submit(runtime.run, _spec(topo, n, mgmt)): n for n in topo.nodes}
                errors = []
                for fut in as_completed(futures):
                    node = futures[fut]
                    try:
                        _cid, pids[node] = fut.result()
                    except DockerError as exc:
                        errors.append(f"node {node}: {exc}")
                        continue
                    link_netns(topo.container_name(node), pids[node])
                    wiring.node_started(node, pids[node])
                    # Each node's deadline runs from its own start (on a large lab the last containers
                    # start a minute after the first) or the lab's last progress, whichever is later.
                    deadline = progress.started()
                    check = health_pool.submit(_health, runtime, topo, node, pids[node], deadline, progress)
                    health[check] = node
                    counter.step(node)
            counter.close()
            if errors:
                raise DeployError("; ".join(errors))
        with phases.phase("links", f"{len(topo.links)} veth pairs, {len(topo.vxlan_links)} VXLAN ends"):
            wiring.finish()
        _run_exec(phases, runtime, topo)
        _await_health(phases, health)
    finally:
        progress.stop()  # health checks still polling give up now, not a minute later
        health_pool.shutdown(wait=False, cancel_futures=True)
        prepare_pool.shutdown(wait=False, cancel_futures=True)


def _mgmt_of(container: dict[str, Any], labels: dict[str, str]) -> tuple[str, str]:
    """(address, prefix length) of a container's management interface: the label a lab's own hub left,
    else the address Docker's network gave it."""
    if labels.get(MGMT_LABEL):
        addr, _, prefix = labels[MGMT_LABEL].partition("/")
        return addr, prefix
    nets = (container.get("NetworkSettings") or {}).get("Networks") or {}
    net = next((n for n in nets.values() if n.get("IPAddress")), {})
    return net.get("IPAddress", ""), str(net.get("IPPrefixLen") or "")


def mgmt_addresses(runtime: DockerRuntime, topo: Topology) -> dict[str, str]:
    out = {}
    for name in topo.nodes:
        info = runtime.inspect(topo.container_name(name))
        out[name] = _mgmt_of(info, info["Config"].get("Labels") or {})[0]
    return out


def destroy(
    lab: str | None,
    runtime: DockerRuntime | None = None,
    cleanup: bool = False,
    lab_dir_root: Path | None = None,
    quiet: bool = False,
    underlay_netns: str | None = None,
    named_networks: Iterable[str] = (),
) -> int:
    """Remove every container labelled with ``lab`` (all labs if None), its netns links, the VXLAN
    devices and veths it left in the underlay namespace and, when unused, its management network.
    Works after a crashed deploy because it trusts only labels and interface aliases.
    ``named_networks``: Docker networks to remove too when aidclab made them and no container uses them
    (the one a topology names: the lab's containers may all be gone, and a network an older aidclab made
    carries no lab label)."""
    runtime = runtime or DockerRuntime()
    phases = Phases(f"destroy {lab or 'all labs'}")
    if lab is not None:
        # The delay relay releases what it holds and detaches while the namespaces are still there (a
        # relay whose namespaces vanish stops by itself, too).
        from orchestrator.lab import relayctl

        relayctl.stop((lab_dir_root or Path.cwd()) / lab_dir_name(lab))
    containers: list[dict[str, Any]] = []
    networks: set[str] = set(named_networks)
    names: list[str] = []
    with phases.phase("containers"), ThreadPoolExecutor(PARALLEL) as pool:
        # A deploy killed a moment ago leaves requests that dockerd still completes, so a container can
        # appear after the first listing: list again until a round finds none.
        for _round in range(DESTROY_ROUNDS):
            found = runtime.lab_containers(lab)
            if not found:
                break
            containers += found
            batch = [c["Names"][0].lstrip("/") for c in found]
            for c in found:
                networks.update((c.get("NetworkSettings") or {}).get("Networks", {}).keys())
            list(pool.map(runtime.kill, batch))  # all exit at once; each removal then waits for one
            list(pool.map(runtime.remove, batch))
            names += batch
    with phases.phase("netns"):
        removed_ns = sum(unlink_netns(n) for n in names)
        labs = {c["Labels"].get("containerlab") for c in containers}
        # A crashed deploy can leave links to namespaces whose containers never got labels or are gone.
        for lab_name in labs | ({lab} if lab else set()):
            for stale in netns_links(f"clab-{lab_name}-"):
                removed_ns += unlink_netns(stale)
    with phases.phase("vxlan"):
        # VXLAN ends inside the containers went with them; stitched ones left devices in the underlay.
        removed_vx = sum(
            remove_lab_devices(lab_name, ns)
            for lab_name in labs | ({lab} if lab else set())
            for ns in {None, underlay_netns}
        )
    with phases.phase("network"):
        # A lab's own network is found by its label too: a deploy killed before its first container
        # started leaves the network with nothing attached.
        networks.update(runtime.lab_networks(lab))
        for net in sorted(networks - {"none", "host", "bridge"}):
            _remove_network(runtime, net, names)
        remove_bridges(lab)
    if cleanup:
        for lab_name in labs | ({lab} if lab else set()):
            path = (lab_dir_root or Path.cwd()) / lab_dir_name(lab_name)
            if path.exists():
                shutil.rmtree(path)
    if not quiet:
        phases.summary(
            f"removed {len(names)} containers, {removed_ns} netns links and {removed_vx} underlay devices"
        )
    return len(names)


def _remove_network(runtime: DockerRuntime, net: str, removed: list[str]) -> None:
    """Clear the endpoints our removed containers left on ``net`` (shared networks too), then remove it if
    aidclab made it and nothing live is attached; say what was forced and what could not be removed."""
    # Docker lets go of a removed container's endpoint a moment after the removal returns: give it that
    # moment before calling what is left stale.
    for _attempt in range(STALE_WAIT_ROUNDS):
        if not runtime.drop_stale_endpoints(net, removed, force=False):
            break
        time.sleep(0.2)
    stale = runtime.drop_stale_endpoints(net, removed)
    if stale:
        console.print(
            f"  network {net}: Docker still listed {len(stale)} endpoint(s) of removed containers "
            f"({', '.join(stale[:4])}{'...' if len(stale) > 4 else ''}); disconnected them with force"
        )
    if not runtime.remove_network_if_unused(net, removed) and not runtime.network_in_use(net):
        # Docker 20.10 checks a count it keeps apart from the endpoints (libnetwork's endpoint_count), and
        # that count can stay above zero with no endpoint left; only dockerd's start recounts it.
        console.print(
            f"  network {net}: has no endpoint left, but Docker's count of its endpoints is off and Docker "
            f"refuses to remove it (\"has active endpoints\"). It holds nothing and a redeploy of the lab "
            f"reuses it; dockerd recounts when it restarts, then `docker network rm {net}` removes it "
            "(docs/running-a-lab.md, \"Destroy\")"
        )


def status(runtime: DockerRuntime, lab: str | None) -> list[NodeStatus]:
    out = []
    for c in sorted(runtime.lab_containers(lab), key=lambda c: c["Names"][0]):
        labels = c.get("Labels") or {}
        ipv4 = _mgmt_of(c, labels)[0]
        out.append(
            NodeStatus(
                name=labels.get("clab-node-name", ""),
                container=c["Names"][0].lstrip("/"),
                role=labels.get("aidclab-role", ""),
                image=c.get("Image", ""),
                state=c.get("State", ""),
                mgmt_ipv4=ipv4,
            )
        )
    return out


def inspect_json(runtime: DockerRuntime, lab: str | None) -> dict[str, Any]:
    """containerlab's ``inspect --format json`` shape."""
    rows = []
    for c in sorted(runtime.lab_containers(lab), key=lambda c: c["Names"][0]):
        labels = c.get("Labels") or {}
        addr, prefix = _mgmt_of(c, labels)
        rows.append(
            {
                "lab_name": labels.get("containerlab", ""),
                "labPath": labels.get("clab-topo-file", ""),
                "name": c["Names"][0].lstrip("/"),
                "container_id": c["Id"][:12],
                "image": c.get("Image", ""),
                "kind": labels.get("clab-node-kind", ""),
                "group": labels.get("clab-node-group", ""),
                "state": c.get("State", ""),
                "ipv4_address": f"{addr}/{prefix}" if addr else "",
                "ipv6_address": "",
                "owner": labels.get("clab-owner", ""),
            }
        )
    return {"containers": rows}


def print_table(rows: list[NodeStatus]) -> None:
    from rich.table import Table

    table = Table(title=None)
    for col in ("#", "node", "container", "role", "image", "state", "mgmt IPv4"):
        table.add_column(col)
    for i, r in enumerate(rows, 1):
        table.add_row(str(i), r.name, r.container, r.role, r.image, r.state, r.mgmt_ipv4)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
