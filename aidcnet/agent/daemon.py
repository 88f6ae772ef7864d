"""The node agent process: loads its node file, programs the kernel, serves the control socket.

A reload is atomic from the outside: the new file is validated first, then the kernel is brought to
it; if the kernel refuses any step, the previous configuration is re-applied and stays the running one.
A bad file never stops the agent. Later features (BIER, INA, BGP) plug in as services of this process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aidcnet.agent import control, metrics
from aidcnet.agent.ina_agent import InaPart
from aidcnet.paths import DEFAULT_CONFIG_PATH

# Everything behind a node file (pydantic models, BIER, replay) is imported when first needed: a fresh
# agent only has to answer its health check, and 68 of them start at once on two cores during deploy.
if TYPE_CHECKING:
    from aidcnet.agent.bgp_service import BgpService
    from aidcnet.agent.bier_service import BierService
    from aidcnet.agent.replay_service import ReplayService
    from aidcnet.config import NodeConfig

log = logging.getLogger("aidcnet.agent")

ROLES = ("bfr", "ina-switch", "gpu-host")
APPLIED_SUFFIX = ".applied"


class Agent:
    def __init__(self, role: str, config_path: Path = DEFAULT_CONFIG_PATH):
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        self.role = role
        self.config_path = config_path
        self.config: NodeConfig | None = None
        self.config_loaded_at: float | None = None
        self.started = time.time()
        self.counters: Counter[str] = Counter()
        self.bier: BierService | None = None
        self.replay: ReplayService | None = None
        self.ina = InaPart(self)
        self.bgp: BgpService | None = None
        self._reload_lock = asyncio.Lock()

    # -- configuration ------------------------------------------------------------------------------
    def _converge(self, target: NodeConfig | None) -> dict[str, int]:
        from aidcnet.agent.kernel import apply_diff, read_state
        from aidcnet.netstate import KernelState, desired_state, diff_state, managed_interfaces

        managed = managed_interfaces(target) | managed_interfaces(self.config)
        desired = desired_state(target) if target else KernelState()
        diff = diff_state(desired, read_state(managed), managed)
        apply_diff(diff)
        return diff.summary()

    def _restart_bier(self, target: NodeConfig | None) -> None:
        """Replace the BIER service when the bier section changed; raises ValueError/OSError if the new
        tables or socket cannot be built (the caller then rolls back)."""
        loop = asyncio.get_running_loop()
        new = target.bier if target else None
        if self.bier is not None and self.bier.bier == new:
            return
        if self.bier is not None:
            self.bier.close(loop)
            self.bier = None
        if new is not None:
            from aidcnet.agent.bier_service import BierService

            service = BierService(new, host=self.role == "gpu-host", loopback=str(target.loopback.ip))
            service.attach(loop)
            self.bier = service

    @staticmethod
    def _bgp_inputs(config: NodeConfig | None) -> tuple[Any, ...] | None:
        if config is None or config.bgp is None or not config.bgp.neighbors:
            return None
        return (config.bgp, config.interfaces, config.loopback, config.bier)

    async def _restart_bgp(self, target: NodeConfig | None) -> None:
        """Replace the BGP service when what it runs on changed (sessions, links, loopback, BIER origin);
        ``aidclab link set`` bandwidths survive a reload that leaves those alone."""
        if self.bgp is not None and self._bgp_inputs(self.bgp.config) == self._bgp_inputs(target):
            return
        if self.bgp is not None:
            await self.bgp.close()
            self.bgp = None
        if self._bgp_inputs(target) is None:
            return
        from aidcnet.agent.bgp_service import BgpService

        extra: dict[str, str] = {}
        if target.bier is not None and target.bier.bift == "bgp":
            # BIER over BGP (RFC 9793): the loopback carries the BIER path attribute (type 41).
            from aidcnet.bgp.bier_routes import loopback_attribute

            extra[str(target.loopback.network)] = loopback_attribute(target.bier).to_exabgp()
        service = BgpService(target, originate_extra=extra, on_change=self._bgp_changed)
        await service.start()
        self.bgp = service

    def _bgp_changed(self, selected: Any) -> None:
        apply_bgp = getattr(self.bier, "apply_bgp", None)
        if apply_bgp is not None:
            from aidcnet.bgp.rib import bier_view

            apply_bgp(bier_view(selected))

    def _bgp_service(self) -> BgpService:
        if self.bgp is None:
            raise ValueError(
                "this node runs no BGP (no bgp.neighbors in its node file: set bgp.enabled in the lab vars)"
            )
        return self.bgp

    async def bgp_status(self, _request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, **self._bgp_service().status()}

    async def bgp_link(self, request: dict[str, Any]) -> dict[str, Any]:
        """FARE input from ``aidclab link set NODE:IF bandwidth X``: the link's bandwidth in bits/s."""
        from aidcnet.fare.bandwidth import bytes_to_bits, parse_bandwidth

        bps = bytes_to_bits(parse_bandwidth(request["bandwidth"]))
        return {"ok": True, **self._bgp_service().set_bandwidth(str(request["interface"]), bps)}

    async def fare_send(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send FARE test traffic to ``dst`` (a loopback) in the node's mode (or ``mode``); the reply has
        the tx packet counters of every BGP interface before and after."""
        from aidcnet.agent import fare_sender

        service = self._bgp_service()
        dst = str(request["dst"])
        mode = str(request.get("mode") or service.bgp.mode)
        size = int(request.get("size", 64))
        weights = service.weights_for(dst)
        devs = sorted({link.dev for link in service.links.values()})
        src = str(service.config.loopback.ip)
        before = fare_sender.tx_packets(devs)
        if mode == "per-flow":
            flows, packets = int(request.get("flows", 1000)), int(request.get("packets", 1))
            await asyncio.to_thread(fare_sender.send_per_flow, src, dst, flows, packets, size)
        elif mode == "per-packet":
            packets = int(request.get("packets", 1000))
            await asyncio.to_thread(fare_sender.send_per_packet, src, dst, weights, packets, size)
        else:
            raise ValueError(f"mode {mode!r}: per-flow or per-packet")
        after = fare_sender.tx_packets(devs)
        return {
            "ok": True,
            "mode": mode,
            "weights": weights,
            "tx_packets": {d: after[d] - before[d] for d in devs},
        }

    async def validate(self, request: dict[str, Any]) -> dict[str, Any]:
        """Check a node file without applying it (Ansible's check mode uses this)."""
        from aidcnet.config import ConfigError

        path = Path(request.get("file") or self.config_path)
        try:
            config = self._load_for_this_node(path)
        except ConfigError as exc:
            return {"ok": False, "error": str(exc), "problems": exc.problems, "kept": self._running_id()}
        return {"ok": True, "valid": str(path), "changed": config != self.config}

    def _load_for_this_node(self, path: Path) -> NodeConfig:
        from aidcnet.config import ConfigError, load_config

        config = load_config(path)
        if config.role != self.role:
            raise ConfigError(
                str(path), [f"role: the file is for a {config.role} node, this agent runs {self.role}"]
            )
        return config

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
                summary = await asyncio.to_thread(self._converge, new)
                self._restart_bier(new)
                self.ina.restart(new)
                await self._restart_bgp(new)
            except (KernelError, ValueError, OSError) as exc:
                self.counters["config.apply_failed"] += 1
                log.error("applying %s failed, restoring the previous config: %s", path, exc)
                try:
                    await asyncio.to_thread(self._converge, self.config)
                    self._restart_bier(self.config)
                    self.ina.restart(self.config)
                    await self._restart_bgp(self.config)
                except (KernelError, ValueError, OSError) as again:
                    log.error("restoring the previous config failed too: %s", again)
                return {"ok": False, "error": f"{path}: {exc}", "kept": self._running_id()}
            self.config = new
            self.config_loaded_at = time.time()
            self.counters["config.applied"] += 1
            self.config_path.with_name(self.config_path.name + APPLIED_SUFFIX).write_text(dump_config(new))
            log.info("config applied from %s: %s", path, summary)
            return {
                "ok": True,
                "changed": any(summary.values()),
                "applied": summary,
                "running": self._running_id(),
            }

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
        if self.bier is not None:
            counters.update({f"bier.{k}": v for k, v in self.bier.counters().items()})
            counters["bier.app-dropped"] = self.bier.app_dropped
            if self.bier.edge is not None:
                counters.update({f"net-bier.{k}": v for k, v in self.bier.edge.counters().items()})
        counters.update(self.ina.counters())
        return {"ok": True, "counters": dict(sorted(counters.items()))}

    def _bier_service(self) -> BierService:
        if self.bier is None:
            raise ValueError("this node has no BIER configured (no bier section applied)")
        return self.bier

    async def show_bift(self, _request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, **self._bier_service().bift_rows()}

    async def bier_send(self, request: dict[str, Any]) -> dict[str, Any]:
        """Host-BIER: send ``count`` payloads of ``size`` bytes (or the given hex payloads) to BFR-ids.
        Generated payloads start with ``<own BFR-id>:<tag>:<seq>:`` so receivers can check exactly."""
        service = self._bier_service()
        receivers = [int(r) for r in request["receivers"]]
        if "payloads" in request:
            payloads = [bytes.fromhex(p) for p in request["payloads"]]
        else:
            size, tag = int(request.get("size", 64)), str(request.get("tag", "t"))
            payloads = []
            for seq in range(int(request.get("count", 1))):
                head = f"{service.bier.bfr_id}:{tag}:{seq}:".encode()
                payloads.append(head + b"x" * max(0, size - len(head)))
        packets = service.send(payloads, receivers, entropy=int(request.get("entropy", 0)))
        return {"ok": True, "messages": len(payloads), "packets": packets}

    async def bier_received(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "received": self._bier_service().take_received(bool(request.get("clear")))}

    async def _replay_service(self) -> ReplayService:
        if self.role != "gpu-host" or self.config is None or self.config.loopback is None:
            raise ValueError("replay runs on configured gpu-host nodes only (aidclab configure LAB first)")
        if self.replay is None:
            from aidcnet.agent.replay_service import ReplayService

            self.replay = ReplayService(str(self.config.loopback.ip))
            await self.replay.listen()
        # The BIER service is rebuilt on reload: hook whichever one runs now.
        self.replay.bier = self.bier
        if self.bier is not None:
            self.bier.on_udp = self.ina.on_bier_udp  # INA results first, then the replay's datagrams
        return self.replay

    async def replay_load(self, request: dict[str, Any]) -> dict[str, Any]:
        return (await self._replay_service()).load(request)

    async def replay_start(self, request: dict[str, Any]) -> dict[str, Any]:
        return (await self._replay_service()).start(request)

    async def replay_status(self, _request: dict[str, Any]) -> dict[str, Any]:
        return (await self._replay_service()).status()

    async def replay_results(self, _request: dict[str, Any]) -> dict[str, Any]:
        return (await self._replay_service()).results()

    async def show_config(self, _request: dict[str, Any]) -> dict[str, Any]:
        if self.config is None:
            return {"ok": True, "config": None, "note": f"no config applied yet (expects {self.config_path})"}
        return {"ok": True, "config": self.config.model_dump(mode="json", exclude_none=True)}

    async def run(self) -> None:
        server = await control.serve(
            {
                "health": self.health,
                "counters": self.show_counters,
                "config": self.show_config,
                "reload": self.reload,
                "validate": self.validate,
                "bift": self.show_bift,
                "bier_send": self.bier_send,
                "bier_received": self.bier_received,
                "replay_load": self.replay_load,
                "replay_start": self.replay_start,
                "replay_status": self.replay_status,
                "replay_results": self.replay_results,
                **self.ina.handlers(),
                "bgp": self.bgp_status,
                "bgp_link": self.bgp_link,
                "fare_send": self.fare_send,
            }
        )
        log.info("aidcnet %s agent ready on %s", self.role, control.CONTROL_SOCKET)
        metrics.serve_agent(self)
        if self.config_path.exists():
            reply = await self.reload({})
            if not reply["ok"]:
                log.error("starting unconfigured: %s", reply["error"])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()
        log.info("aidcnet agent stopping")


def run_agent(role: str, config_path: Path = DEFAULT_CONFIG_PATH) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(Agent(role, config_path).run())
