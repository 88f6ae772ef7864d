"""The container runtime behind aidclab: Docker Engine API through the docker SDK.

Everything a lab creates carries containerlab's labels, so destroy can find it by label even after a
crashed deploy (docs/design.md §2).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from aidcnet.agent.client import AgentClient

LAB_LABEL = "containerlab"
MANAGED_NETWORK_LABEL = "aidclab.managed"
# On a Docker management network aidclab made: the lab whose deploy made it (a topology's mgmt.network,
# or a lab's own network from before the hubs, mgmtbridge), so destroy finds it with no container left.
NETWORK_LAB_LABEL = "aidclab.lab"
# Tries, 0.2 s apart, at removing a network Docker says still has endpoints.
NETWORK_REMOVE_ATTEMPTS = 30
NETNS_DIR = Path("/run/netns")


class DockerError(RuntimeError):
    """A runtime failure with what went wrong and what to do about it."""


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerError(
            f"no Docker engine answers on {host} ({exc.__class__.__name__}); run `make setup`, "
            "which installs docker.io and starts dockerd"
        ) from exc
    return client


@dataclass
class ContainerSpec:
    name: str
    image: str
    hostname: str
    network: str
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    binds: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    cap_add: list[str] = field(default_factory=list)
    mgmt_ipv4: str | None = None
    cmd: str | list[str] | None = None


class DockerRuntime:
    def __init__(self, client: docker.DockerClient | None = None):
        self.client = client or docker_client()
        self.api = self.client.api

    # -- networks ---------------------------------------------------------------------------------
    def _network(self, name: str) -> Any | None:
        return next((n for n in self.client.networks.list(names=[name]) if n.name == name), None)

    def ensure_mgmt_network(self, name: str, subnet: str, bridge: str | None = None, lab: str = "") -> str:
        """The Docker network a topology names (``mgmt.network``, shared as containerlab's ``clab`` is):
        an ``--internal`` bridge, no NAT and no route out of the machine (docs/design.md §5), created when
        missing (labelled with ``lab``, whose destroy removes it once no lab uses it); returns its subnet.
        A lab that names no network gets a hub of its own instead (orchestrator.lab.mgmtbridge)."""
        net = self._network(name)
        if net is not None:
            configs = (net.attrs.get("IPAM") or {}).get("Config") or []
            subnets = sorted(c.get("Subnet") for c in configs if c.get("Subnet"))
            if subnet not in subnets:
                raise DockerError(
                    f"management network {name!r} exists with subnet {subnets}, not {subnet}; "
                    f"set mgmt.ipv4-subnet to match, pick another mgmt.network, or remove it "
                    f"(docker network rm {name})"
                )
            if not net.attrs.get("Internal"):
                raise DockerError(
                    f"management network {name!r} exists but is not --internal, so lab containers could "
                    f"reach outside the machine; remove it (docker network rm {name}) and deploy again"
                )
            return subnet
        options = {"com.docker.network.bridge.name": bridge or f"br-{name}"[:15]}
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        try:
            self.client.networks.create(
                name, driver="bridge", internal=True, ipam=ipam, options=options,
                labels={MANAGED_NETWORK_LABEL: "true", **({NETWORK_LAB_LABEL: lab} if lab else {})},
            )  # fmt: skip
        except docker.errors.APIError as exc:
            raise DockerError(f"creating management network {name!r} ({subnet}): {exc}") from exc
        return subnet

    def lab_networks(self, lab: str | None = None) -> list[str]:
        """The names of the Docker management networks a deploy of ``lab`` made (of every lab if None):
        the network its topology names, when no other lab had made it, or its own network from before
        the hubs (orchestrator.lab.mgmtbridge)."""
        label = f"{NETWORK_LAB_LABEL}={lab}" if lab else NETWORK_LAB_LABEL
        return sorted(n.name for n in self.client.networks.list(filters={"label": label}))

    def _container_exists(self, name_or_id: str) -> bool:
        try:
            self.api.inspect_container(name_or_id)
            return True
        except docker.errors.NotFound:
            return False

    def drop_stale_endpoints(self, name: str, gone: Iterable[str] = (), force: bool = True) -> list[str]:
        """Force-disconnect, by container name (Docker does not find a stale endpoint by id), every
        endpoint of network ``name`` whose container no longer exists or is one of ``gone`` (containers
        just removed); returns their names (only lists them when not ``force``). Docker 20.10 can keep
        such endpoints after a failed start, and a network holding one refuses removal until dockerd
        restarts."""
        net = self._network(name)
        if net is None:
            return []
        net.reload()
        stale = stale_endpoints(net.attrs.get("Containers") or {}, set(gone), self._container_exists)
        for endpoint in stale if force else ():
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.api.disconnect_container_from_network(endpoint, net.id, force=True)
        return stale

    def remove_network_if_unused(self, name: str, gone: Iterable[str] = ()) -> bool:
        """Remove a network aidclab created once no live container is attached; endpoints of containers
        that are gone (``gone``, or unknown to Docker) are force-disconnected first."""
        net = self._network(name)
        if net is None or (net.attrs.get("Labels") or {}).get(MANAGED_NETWORK_LABEL) != "true":
            return False
        # Docker releases a removed container's endpoint shortly after the removal returns, so a network
        # that looks empty can still refuse: retry briefly, clearing stale endpoints on the way. Halfway,
        # disconnect every removed container by name, with force: an endpoint that ``inspect`` no longer
        # lists but the network store still counts goes only that way (or with a dockerd restart).
        gone = list(gone)
        for attempt in range(NETWORK_REMOVE_ATTEMPTS):
            self.drop_stale_endpoints(name, gone)
            net.reload()
            if net.attrs.get("Containers"):
                return False
            try:
                net.remove()
                return True
            except docker.errors.NotFound:
                return True
            except docker.errors.APIError as exc:
                if "active endpoints" not in str(exc):
                    raise
            if attempt == NETWORK_REMOVE_ATTEMPTS // 2:
                for container in gone:
                    with contextlib.suppress(docker.errors.APIError):
                        self.api.disconnect_container_from_network(container, net.id, force=True)
            time.sleep(0.2)
        return False

    def network_endpoints(self, name: str) -> int:
        """Containers attached to network ``name`` (0 when it does not exist)."""
        net = self._network(name)
        if net is None:
            return 0
        net.reload()
        return len(net.attrs.get("Containers") or {})

    def network_subnets(self) -> list[ipaddress.IPv4Network]:
        """Every IPv4 subnet a Docker network on this engine holds: what a new one must not overlap."""
        out = []
        for net in self.client.networks.list():
            for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
                with contextlib.suppress(ValueError, TypeError):
                    sub = ipaddress.ip_network(cfg.get("Subnet"), strict=False)
                    if isinstance(sub, ipaddress.IPv4Network):
                        out.append(sub)
        return out

    def network_in_use(self, name: str) -> bool:
        """True when containers are attached (another lab), False when empty or not ours."""
        net = self._network(name)
        if net is not None and (net.attrs.get("Labels") or {}).get(MANAGED_NETWORK_LABEL) == "true":
            net.reload()
            return bool(net.attrs.get("Containers"))
        return True

    # -- containers -------------------------------------------------------------------------------
    def run(self, spec: ContainerSpec) -> tuple[str, int]:
        """Create and start one container; returns (id, pid of its init)."""
        host_config = self.api.create_host_config(
            binds=spec.binds or None,
            sysctls=spec.sysctls or None,
            cap_add=spec.cap_add or None,
            init=True,
            network_mode=spec.network,
        )
        endpoint = self.api.create_endpoint_config(ipv4_address=spec.mgmt_ipv4) if spec.mgmt_ipv4 else None
        networking = self.api.create_networking_config({spec.network: endpoint}) if endpoint else None
        try:
            created = self.api.create_container(
                spec.image,
                command=spec.cmd,
                name=spec.name,
                hostname=spec.hostname,
                labels=spec.labels,
                environment=spec.env or None,
                host_config=host_config,
                networking_config=networking,
                # Network "none" with networking disabled: runc makes the node's namespace and Docker's
                # network controller never sees the container. With a sandbox on "none", 68 nodes exiting
                # at once (destroy) deadlocked Docker 20.10's controller (endpoint delete against its
                # watch loop, moby/libnetwork#2679), after which no container of the lab could be removed.
                network_disabled=spec.network == "none",
                detach=True,
            )
        except docker.errors.ImageNotFound as exc:
            raise DockerError(
                f"image {spec.image!r} for container {spec.name} is not built; run `make images`"
            ) from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise DockerError(
                    f"container {spec.name} already exists; run `aidclab destroy` for its lab first"
                ) from exc
            raise DockerError(f"creating {spec.name}: {exc.explanation or exc}") from exc
        cid = created["Id"]
        try:
            self.api.start(cid)
        except docker.errors.APIError as exc:
            self._discard_failed(cid, spec)
            raise DockerError(f"starting {spec.name}: {exc.explanation or exc}") from exc
        except requests.exceptions.RequestException as exc:
            # Under load a start can outlast the client's timeout while dockerd goes on with it: undo it
            # here rather than leave a half-started container for destroy to race.
            self._discard_failed(cid, spec)
            raise DockerError(
                f"starting {spec.name}: no answer from dockerd ({exc.__class__.__name__}); the machine is "
                "overloaded, deploy again when it is quieter"
            ) from exc
        pid = self.api.inspect_container(cid)["State"]["Pid"]
        return cid, pid

    def _discard_failed(self, cid: str, spec: ContainerSpec) -> None:
        """Undo a container whose start failed, endpoint first. Docker 20.10 can leave the management
        endpoint of a start that failed half way (out of addresses, under load) in the network's store
        after the container is gone, and the network then refuses removal (issues 17, 18): disconnect
        with force while the container exists, remove it, then drop any endpoint still under its name."""
        if spec.network not in ("none", "host", "bridge"):
            with contextlib.suppress(docker.errors.APIError):
                self.api.disconnect_container_from_network(cid, spec.network, force=True)
        with contextlib.suppress(docker.errors.APIError):
            self.api.remove_container(cid, force=True, v=True)
        if spec.network not in ("none", "host", "bridge"):
            with contextlib.suppress(docker.errors.APIError):
                self.drop_stale_endpoints(spec.network, [spec.name])

    def lab_containers(self, lab: str | None = None) -> list[dict[str, Any]]:
        """Containers of one lab (or of every lab), found by containerlab's label, running or not."""
        label = f"{LAB_LABEL}={lab}" if lab else LAB_LABEL
        return self.api.containers(all=True, filters={"label": label})

    def inspect(self, name_or_id: str) -> dict[str, Any]:
        return self.api.inspect_container(name_or_id)

    def remove(self, name_or_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.api.remove_container(name_or_id, force=True, v=True)

    def kill(self, name_or_id: str) -> bool:
        """SIGKILL a running container's init straight from the host, without waiting for dockerd; True
        when sent. A ``remove`` after it finds the container exiting or gone: dockerd then handles the
        exits of many containers side by side, where ``docker rm -f`` one by one waits for each (280 nodes:
        10 s to see all exited, 1 s to remove them, against 15.8 s of ``rm -f`` with 8 at a time).
        The signal goes through a pidfd of a process checked to be in the container's cgroup, so a PID
        the kernel gave to another process meanwhile is never signalled."""
        try:
            info = self.api.inspect_container(name_or_id)
        except docker.errors.NotFound:
            return False
        pid = int(info["State"].get("Pid") or 0)
        if not info["State"].get("Running") or pid <= 0:
            return False
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        try:
            if info["Id"] not in Path(f"/proc/{pid}/cgroup").read_text():
                return False
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            return True
        except (ProcessLookupError, FileNotFoundError):
            return False
        finally:
            os.close(pidfd)

    def pid(self, container: str) -> int:
        """The host PID of a running container's init; DockerError naming the container if it is not up."""
        try:
            state = self.inspect(container)["State"]
        except docker.errors.NotFound:
            raise DockerError(f"container {container} does not exist: is the lab deployed?") from None
        if not state.get("Running"):
            raise DockerError(f"container {container} is not running (docker logs {container})")
        return int(state["Pid"])

    def agent(self, container: str, node: str | None = None, timeout: float = 10.0) -> AgentClient:
        """The aidcnet agent of ``container``, reached through its control socket from the host."""
        return AgentClient.for_pid(self.pid(container), node or container, timeout)

    def last_log(self, container: str, lines: int = 5) -> str:
        """The last ``lines`` lines a container wrote (stdout and stderr), on one line, for an error."""
        try:
            out = self.api.logs(container, stdout=True, stderr=True, tail=lines).decode(errors="replace")
        except docker.errors.APIError as exc:
            return f"(no log: {exc.explanation or exc})"
        return " | ".join(line.strip() for line in out.splitlines() if line.strip()) or "(an empty log)"

    def exec(self, container: str, cmd: list[str] | str, timeout: float | None = None) -> tuple[int, str]:
        """Run a command in a container; returns (exit code, combined output)."""
        if isinstance(cmd, str):
            cmd = ["sh", "-c", cmd]
        exec_id = self.api.exec_create(container, cmd, stdout=True, stderr=True)
        output = self.api.exec_start(exec_id).decode(errors="replace")
        code = self.api.exec_inspect(exec_id)["ExitCode"]
        return int(code if code is not None else -1), output


def stale_endpoints(
    endpoints: dict[str, dict[str, Any]], gone: set[str], exists: Callable[[str], bool]
) -> list[str]:
    """The container names of a network's endpoints (``docker network inspect``'s ``Containers``: id or
    ``ep-<endpoint id>`` -> {"Name": ...}) whose container is in ``gone`` or, asked by id and by name,
    does not exist."""
    out = []
    for key, endpoint in sorted(endpoints.items()):
        name = (endpoint or {}).get("Name") or ""
        if not name:
            continue
        # A key that is a container id is asked by id: a new container may already carry the name.
        alive = exists(name) if key.startswith("ep-") else exists(key)
        if name in gone or not alive:
            out.append(name)
    return out


# -- named network namespaces (so `ip netns exec clab-lab-node ...` works) -----------------------------
def link_netns(container_name: str, pid: int) -> None:
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    path = NETNS_DIR / container_name
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(f"/proc/{pid}/ns/net")


def unlink_netns(container_name: str) -> bool:
    path = NETNS_DIR / container_name
    if path.is_symlink() or path.exists():
        try:
            path.unlink()
        except IsADirectoryError:
            return False
        return True
    return False


def netns_links(prefix: str) -> list[str]:
    if not NETNS_DIR.exists():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))
