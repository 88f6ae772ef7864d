"""The node agent process: loads its node file, programs the kernel, serves the control socket.

A reload is atomic from the outside: the new file is validated first, then the kernel and every service
are brought to it; if the kernel or any service refuses, the previous configuration is re-applied and
stays the running one. A bad file never stops the agent.

Features are services behind one interface (``aidcnet/agent/service.py``), built here once in the order
they depend on each other: BIER, INA, reliable transport, replay, BGP, BFD. The links without carrier and
the links BFD takes down are told to every service as one set (``Service.links_down``). (Loss is the
link's, not the agent's: ``aidclab link set NODE:IF loss ...`` sets the link-fault tc program,
docs/time-and-fidelity.md.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aidcnet.agent import control, metrics
from aidcnet.agent.bfd.service import BfdPart
from aidcnet.agent.bgp.service import BgpPart
from aidcnet.agent.bier.service import BierPart
from aidcnet.agent.control import Handler, Op
from aidcnet.agent.igmp.service import IgmpPart
from aidcnet.agent.ina.service import InaPart
from aidcnet.agent.reliable.service import ReliablePart
from aidcnet.agent.replay.service import ReplayPart
from aidcnet.agent.service import Service

# The node-file models (pydantic, about 90 ms of CPU in a node) load at start, though a fresh agent only has
# to answer its health check: every node needs them for its first configure, and loaded then, they made
# the Ansible run of bsl256's first configure 72.5 s against 51.3 s (280 reloads on two cores), while
# loaded here they cost the superpod's deploy about 2.5 s (12.0 s against 9.4 s). Netlink needs no library
# (aidcnet.rtnl), and what only some nodes use (numpy for INA, the BGP speaker) loads when first needed.
from aidcnet.config import NodeConfig
from aidcnet.paths import DEFAULT_CONFIG_PATH
from aidcnet.roles import AGENT_ROLES, Role

log = logging.getLogger("aidcnet.agent")

APPLIED_SUFFIX = ".applied"


def build_services(role: Role, on_liveness: Callable[[frozenset[str]], None]) -> list[Service]:
    """The agent's services in reload order; each is handed the ones it depends on. ``on_liveness`` hears
    which links BFD takes down."""
    bier = BierPart(role)
    # INA before replay: an INA worker claims its BIER deliveries before the replay service looks.
    ina = InaPart(role, bier)
    # Reliable before replay: the replay service opens its reliable flows through it.
    reliable = ReliablePart(bier)
    replay = ReplayPart(role, bier, reliable, ina)
    bgp = BgpPart(on_change=bier.apply_bgp)
    # IGMP after BIER: it feeds the running net-BIER edge its flows and member ports.
    igmp = IgmpPart(bier)
    return [bier, igmp, ina, reliable, replay, bgp, BfdPart(on_change=on_liveness)]


class Agent:
    def __init__(self, role: str, config_path: Path = DEFAULT_CONFIG_PATH):
        if role not in AGENT_ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(AGENT_ROLES)}")
        self.role = Role(role)
        self.config_path = config_path
        self.config: NodeConfig | None = None
        self.config_loaded_at: float | None = None
        self.started = time.time()
        self.counters: Counter[str] = Counter()
        # What every service is told is down: links without carrier, and links BFD took down.
        self._carrier_down: frozenset[str] = frozenset()
        self._detected_down: frozenset[str] = frozenset()
        self._announced: frozenset[str] | None = None
        self.services = build_services(self.role, self._liveness_changed)
        self._reload_lock = asyncio.Lock()
        self._stop: asyncio.Event | None = None
        self._restart = False

    # -- configuration ------------------------------------------------------------------------------
    def _converge(self, target: NodeConfig | None) -> dict[str, int]:
        from aidcnet.agent.kernel import apply_diff, read_state, resolve_neighbors
        from aidcnet.netstate import KernelState, desired_state, diff_state, link_peers, managed_interfaces

        managed = managed_interfaces(target) | managed_interfaces(self.config)
        desired = desired_state(target) if target else KernelState()
        diff = diff_state(desired, read_state(managed), managed)
        apply_diff(diff)
        if target is not None:
            resolve_neighbors(link_peers(target))
        return diff.summary()

    async def _apply(self, target: NodeConfig | None) -> dict[str, int]:
        summary = await asyncio.to_thread(self._converge, target)
        for service in self.services:
            await service.reload(target)
        return summary

    async def _watch_links(self) -> None:
        """Tell every service which interfaces are down whenever that changes (a static BIFT forwards
        around them). When a data interface gets its carrier back (``aidclab link set NODE:IF up``), put
        back what the kernel flushed while it was down (static routes via it): the running config again, as
        a diff."""
        from aidcnet.agent.kernel import LinkWatch, dump_links

        watch = LinkWatch()
        try:
            up = {link.name: link.running for link in await asyncio.to_thread(dump_links)}
        except OSError as exc:  # then only what changes from now on is known, as before the dump
            log.warning("link watch: no dump of the links: %s", exc)
            up = {}
        down = frozenset(name for name, running in up.items() if not running)
        self._carrier_changed(down)
        try:
            while True:
                try:
                    came_up = False
                    for link in await watch.changes():
                        came_up |= link.running and up.get(link.name) is False
                        up[link.name] = link.running
                    now_down = frozenset(name for name, running in up.items() if not running)
                    if now_down != down:
                        down = now_down
                        self._carrier_changed(down)
                    if came_up and self.config is not None:
                        async with self._reload_lock:
                            summary = await asyncio.to_thread(self._converge, self.config)
                        self.counters["config.relinked"] += 1
                        log.info("link up: running config re-applied: %s", summary)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a netlink hiccup or a refused route must not stop the agent
                    self.counters["netlink.error"] += 1
                    log.warning("link watch: %s", exc)
                    await asyncio.sleep(0.1)
        finally:
            watch.close()

    def _carrier_changed(self, down: frozenset[str]) -> None:
        self._carrier_down = down
        self._announce_links_down()

    def _liveness_changed(self, down: frozenset[str]) -> None:
        self._detected_down = down
        self._announce_links_down()

    def _announce_links_down(self) -> None:
        down = self._carrier_down | self._detected_down
        if down != self._announced:
            self._announced = down
            for service in self.services:
                service.links_down(down)

    def _load_for_this_node(self, path: Path) -> NodeConfig:
        from aidcnet.config import ConfigError, load_config

        config = load_config(path)
        if config.role != self.role:
            raise ConfigError(
                str(path), [f"role: the file is for a {config.role} node, this agent runs {self.role}"]
            )
        return config

    async def validate(self, request: dict[str, Any]) -> dict[str, Any]:
        """Check a node file without applying it (Ansible's check mode uses this)."""
        from aidcnet.config import ConfigError

        path = Path(request.get("file") or self.config_path)
        try:
            config = self._load_for_this_node(path)
        except ConfigError as exc:
            return {"ok": False, "error": str(exc), "problems": exc.problems, "kept": self._running_id()}
        return {"ok": True, "valid": str(path), "changed": config != self.config}

    async def reload(self, request: dict[str, Any]) -> dict[str, Any]:
        from aidcnet.agent.kernel import KernelError
        from aidcnet.config import ConfigError, dump_config

        path = Path(request.get("file") or self.config_path)
        async with self._reload_lock:
            try:
                new = self._load_for_this_node(path)
            except ConfigError as exc:
                self.counters["config.rejected"] += 1
                log.warning("config rejected, keeping the running one: %s", exc)
                return {"ok": False, "error": str(exc), "problems": exc.problems, "kept": self._running_id()}
            if self.config is not None and new == self.config:
                self.counters["config.unchanged"] += 1
                return {"ok": True, "changed": False, "running": self._running_id()}
            try:
                summary = await self._apply(new)
            except (KernelError, ValueError, OSError) as exc:
                self.counters["config.apply_failed"] += 1
                log.error("applying %s failed, restoring the previous config: %s", path, exc)
                try:
                    await self._apply(self.config)
                except (KernelError, ValueError, OSError) as again:
                    log.error("restoring the previous config failed too: %s", again)
                return {"ok": False, "error": f"{path}: {exc}", "kept": self._running_id()}
            self.config = new
            self.config_loaded_at = time.time()
            self.counters["config.applied"] += 1
            self.config_path.with_name(self.config_path.name + APPLIED_SUFFIX).write_text(dump_config(new))
            log.info("config applied from %s: %s", path, summary)
            changed = any(summary.values())
            return {"ok": True, "changed": changed, "applied": summary, "running": self._running_id()}

    async def time_scale(self, request: dict[str, Any]) -> dict[str, Any]:
        """The running config at another time scale, applied as a node file would be (every service sees
        it through its reload); the node file on disk keeps the configured one."""
        from aidcnet.timescale import TimeScale, TimeScaleError

        if self.config is None:
            return {"ok": False, "error": "no node file applied yet: configure the lab first"}
        try:
            time_scale = TimeScale.of(request.get("time_scale"))
        except TimeScaleError as exc:
            return {"ok": False, "error": f"time_scale: {exc}"}
        new = self.config.at_time_scale(time_scale)
        async with self._reload_lock:
            if new != self.config:
                await self._apply(new)
                self.config = new
                self.counters["config.rescaled"] += 1
        return {"ok": True, "time_scale": time_scale.value}

    def _running_id(self) -> str | None:
        if self.config is None:
            return None
        return (
            f"{self.config.node} (version {self.config.version}, applied {time.ctime(self.config_loaded_at)})"
        )

    # -- control handlers ---------------------------------------------------------------------------
    async def health(self, _request: dict[str, Any]) -> dict[str, Any]:
        self.counters["control.health"] += 1
        return {
            "ok": True,
            "role": self.role,
            "node": socket.gethostname(),
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
            "configured": self.config is not None,
        }

    async def show_counters(self, _request: dict[str, Any]) -> dict[str, Any]:
        counters = dict(self.counters)
        for service in self.services:
            counters.update(service.counters())
        return {"ok": True, "counters": dict(sorted(counters.items()))}

    async def show_config(self, _request: dict[str, Any]) -> dict[str, Any]:
        if self.config is None:
            return {"ok": True, "config": None, "note": f"no config applied yet (expects {self.config_path})"}
        from aidcnet.config import shown_config

        return {"ok": True, "config": shown_config(self.config)}

    async def restart(self, _request: dict[str, Any]) -> dict[str, Any]:
        """Restart in place, as a router's control process that crashed and came back: the services stop,
        then the same process execs a fresh agent, which starts from its node file with nothing of the
        old state (BIFT, aggregation windows, BGP sessions). The reply goes out first, with the counters
        as the old agent leaves them: a driver adds them to the new agent's, and nothing counted between
        a separate read and the restart is lost."""
        if self._stop is None:
            raise ValueError("the agent is not serving yet")
        self._restart = True
        counters = (await self.show_counters(_request))["counters"]
        # The stop runs on the loop's next turn: the control server writes the reply to the socket as the
        # handler returns (a write goes to the kernel at once), so the caller has it and the restart takes
        # effect as it is answered, not a safety margin later (a fault's moment in a run).
        asyncio.get_running_loop().call_soon(self._stop.set)
        return {
            "ok": True,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
            "counters": counters,
        }

    def handlers(self) -> dict[Op, Handler]:
        table: dict[Op, Handler] = {
            Op.HEALTH: self.health,
            Op.COUNTERS: self.show_counters,
            Op.CONFIG: self.show_config,
            Op.RELOAD: self.reload,
            Op.VALIDATE: self.validate,
            Op.RESTART: self.restart,
            Op.TIME_SCALE: self.time_scale,
        }
        for service in self.services:
            for op, handler in service.handlers().items():
                if op in table:
                    raise RuntimeError(f"two services serve {op}")
                table[op] = handler
        return table

    async def run(self) -> None:
        for service in self.services:
            await service.start()
        server = await control.serve(self.handlers())
        log.info("aidcnet %s agent ready on %s", self.role, control.CONTROL_SOCKET)
        metrics.serve_agent(self)
        if self.config_path.exists():
            reply = await self.reload({})
            if not reply["ok"]:
                log.error("starting unconfigured: %s", reply["error"])
        watch = asyncio.create_task(self._watch_links())
        stop = self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()
        log.info("aidcnet agent %s", "restarting" if self._restart else "stopping")
        watch.cancel()
        for service in reversed(self.services):
            await service.stop()
        if self._restart:
            logging.shutdown()
            # The same command line, so the new agent is what the container started.
            os.execv(sys.executable, [sys.executable, "-m", "aidcnet.cli", *sys.argv[1:]])


def run_agent(role: str, config_path: Path = DEFAULT_CONFIG_PATH) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(Agent(role, config_path).run())
