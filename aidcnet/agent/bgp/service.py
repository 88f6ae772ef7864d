"""The node agent's BGP service: supervises ExaBGP, keeps the RIB, programs the kernel, re-advertises.

Thin shell around :mod:`aidcnet.bgp.rib` (decisions) and :mod:`aidcnet.bgp.exabgp` (texts):

* ExaBGP runs as a child process with a generated config; its API process (:mod:`aidcnet.bgp.relay`)
  connects back to our unix socket, so every JSON update reaches :meth:`BgpService._on_line` and every
  announce/withdraw we write reaches ExaBGP. If ExaBGP dies it is restarted (and everything re-sent).
* Link state comes from netlink (RTM_NEWLINK): a link losing carrier or going admin-down removes its paths
  in the same event-loop turn, so traffic leaves it long before the BGP hold timer would notice.
* Routes go into the kernel with protocol 186 (``ip route show proto bgp``) and nexthop weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aidcnet.agent.control import Handler, Op
from aidcnet.agent.kernel import LinkWatch, RouteTable, dump_links
from aidcnet.agent.service import Service
from aidcnet.bgp import exabgp, security
from aidcnet.bgp.rib import Link, Rib, Selected, advertisements, community_asn, kernel_routes, select
from aidcnet.fare.bandwidth import bits_to_bytes, format_bandwidth

if TYPE_CHECKING:
    from aidcnet.config import NodeConfig
    from aidcnet.rtnl import LinkState

log = logging.getLogger("aidcnet.bgp")

RTPROT_BGP = 186  # Linux's RTPROT_BGP; rt_protos names it "bgp"
RUN_DIR = Path(os.environ.get("AIDCNET_BGP_DIR", "/run/aidcnet"))
DEFAULT_LINK_BPS = 100e9  # an interface the plan gave no bandwidth counts as 100G (equal weights)
RESTART_DELAY_S = 1.0

OnChange = Callable[[Mapping[str, Selected]], None]


class BgpService:
    def __init__(
        self,
        config: NodeConfig,
        originate_extra: Mapping[str, str] | None = None,
        on_change: OnChange | None = None,
        run_dir: Path = RUN_DIR,
    ) -> None:
        assert config.bgp is not None
        self.config = config
        self.bgp = config.bgp
        self.asn = self.bgp.asn
        self.on_change = on_change
        self.run_dir = run_dir
        loopback = str(config.loopback.network)
        self.originate = {loopback: (originate_extra or {}).get(loopback, "")}
        bw_of = {i.name: i.bandwidth_bps for i in config.interfaces}
        self.links: dict[str, Link] = {}
        for n in self.bgp.neighbors:
            bps = bw_of.get(n.interface) or DEFAULT_LINK_BPS
            self.links[str(n.address)] = Link(
                peer=str(n.address), neighbor=n.name, dev=n.interface, asn=n.asn, bandwidth=bits_to_bytes(bps)
            )
        self.rib = Rib()
        self.selected: dict[str, Selected] = {}
        self.sessions: dict[str, str] = {peer: "idle" for peer in self.links}
        self._md5 = {str(n.address) for n in self.bgp.neighbors if n.md5_password is not None}
        self._gtsm = {str(n.address): n.gtsm_hops(self.bgp) for n in self.bgp.neighbors}
        # The namespace's MD5 counters when we started: growth since then is about our sessions.
        self._md5_base = self._read_md5_counters()
        self.sent: dict[str, dict[str, str]] = {}  # peer -> prefix -> announce text ExaBGP has
        self.counters: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []  # recent link events with their convergence timing
        self._writer: asyncio.StreamWriter | None = None
        self._server: asyncio.AbstractServer | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._link_watch: LinkWatch | None = None
        self._closing = False
        self._dirty = False
        self._pending_event: dict[str, Any] | None = None
        self._kernel_events: list[dict[str, Any]] = []
        self._kernel_wanted: dict[str, tuple[tuple[str, str, int], ...]] = {}
        self._kernel_kick = asyncio.Event()
        self._routes = RouteTable(RTPROT_BGP)

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def socket_path(self) -> Path:
        return self.run_dir / "bgp-api.sock"

    @property
    def sessions_path(self) -> Path:
        return self.run_dir / "bgp-sessions"

    @property
    def config_path(self) -> Path:
        return self.run_dir / "exabgp.conf"

    async def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._on_relay, path=str(self.socket_path))
        await self._watch_links()
        self._tasks.append(asyncio.create_task(self._kernel_worker()))
        neighbors = [
            exabgp.Neighbor(
                address=str(n.address),
                local_address=str(n.local_address),
                local_asn=self.asn,
                peer_asn=n.asn,
                router_id=str(self.bgp.router_id),
                hold_time=self.bgp.hold_time,
                md5_password=n.md5_password,
                ttl_security_hops=n.gtsm_hops(self.bgp),
                passive=n.passive,
            )
            for n in self.bgp.neighbors
        ]
        relay = f"{sys.executable} -m aidcnet.bgp.relay {self.socket_path}"
        # 0600: the file carries the sessions' TCP-MD5 secrets.
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(exabgp.config_text(neighbors, relay))
        os.chmod(self.config_path, 0o600)
        self._write_session_count()
        self._tasks.append(asyncio.create_task(self._supervise()))
        self.recompute()

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
                await asyncio.wait_for(self._proc.wait(), 5)
            if self._proc.returncode is None:
                self._proc.kill()
        if self._server is not None:
            self._server.close()
        if self._link_watch is not None:
            self._link_watch.close()
            self._link_watch = None
        self.selected = {}
        await asyncio.to_thread(self._program_kernel, {})

    async def _supervise(self) -> None:
        env = {**os.environ, **exabgp.EXABGP_ENV}
        log_path = self.run_dir / "exabgp.log"
        while not self._closing:
            with log_path.open("ab") as log_file:
                self._proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "aidcnet.bgp.exabgp_main",  # ExaBGP, with GTSM's TTL 255 on its listening socket too
                    "server",
                    str(self.config_path),
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                )
                self.counters["exabgp.started"] += 1
                code = await self._proc.wait()
            if self._closing:
                return
            self.counters["exabgp.exited"] += 1
            log.error("exabgp exited with %s (see %s); restarting", code, log_path)
            await asyncio.sleep(RESTART_DELAY_S)

    # -- ExaBGP API (through the relay) ------------------------------------------------------------
    async def _on_relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        # A new relay means a fresh ExaBGP: it holds none of our routes and no session is up yet.
        self.sent = {}
        for peer in list(self.rib.adj_in):
            self.rib.clear_peer(peer)
        self.sessions = dict.fromkeys(self.links, "idle")
        self._write_session_count()
        self.counters["relay.connected"] += 1
        self.recompute()
        try:
            while line := await reader.readline():
                self._on_line(line.decode(errors="replace"))
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()

    def _on_line(self, line: str) -> None:
        if not line.strip():
            return
        try:
            event = exabgp.parse_message(line)
        except (ValueError, KeyError, TypeError) as exc:
            self.counters["exabgp.bad-message"] += 1
            log.warning("dropping a message ExaBGP sent that we cannot read: %s", exc)
            return
        changed = False
        if event.kind == "up":
            self.sessions[event.peer] = "up"
            self.counters["session.up"] += 1
        elif event.kind == "down":
            self.sessions[event.peer] = f"down ({event.reason})" if event.reason else "down"
            self.counters["session.down"] += 1
            changed = self.rib.clear_peer(event.peer)
            # ExaBGP re-sends its adj-RIB-out on the next session; ours stays as it is.
        elif event.kind == "update":
            self.counters["update.received"] += 1
            for path in event.announced:
                changed |= self.rib.update(path)
            for prefix in event.withdrawn:
                changed |= self.rib.withdraw(event.peer, prefix)
        if event.kind in ("up", "down"):
            self._write_session_count()
        if changed:
            self._schedule()

    def _write_session_count(self) -> None:
        """``UP TOTAL`` in a file, so readiness checks (the fare_bgp role) poll with ``cat``, not Python."""
        up = sum(1 for peer in self.links if self.sessions.get(peer) == "up")
        tmp = self.sessions_path.with_suffix(".tmp")
        tmp.write_text(f"{up} {len(self.links)}\n")
        tmp.replace(self.sessions_path)

    def _schedule(self) -> None:
        # One recompute per burst of messages: ExaBGP delivers a peer's table as many lines at once.
        if not self._dirty:
            self._dirty = True
            asyncio.get_running_loop().call_soon(self.recompute)

    def _send(self, command: str) -> None:
        if self._writer is None:
            return
        self._writer.write(command.encode() + b"\n")
        self.counters["command.sent"] += 1

    # -- links (netlink) ---------------------------------------------------------------------------
    async def _watch_links(self) -> None:
        watch = self._link_watch = LinkWatch()
        now = time.time()
        for link in await asyncio.to_thread(dump_links):
            self._link_state(link, now)
        self._tasks.append(asyncio.create_task(self._netlink_events(watch)))

    async def _netlink_events(self, watch: LinkWatch) -> None:
        while True:
            try:
                changed: set[str] = set()
                for link in await watch.changes():
                    if self._link_state(link, time.time()):
                        changed.add(link.name)
                if changed:
                    # The kernel flushes or marks routes of a downed link itself: the routes through these
                    # links are rewritten (or deleted) whatever we installed, with no dump of the table.
                    self._routes.links_changed(changed)
                    self.recompute()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a netlink hiccup must not stop the agent
                self.counters["netlink.error"] += 1
                log.warning("netlink read failed: %s", exc)
                await asyncio.sleep(0.1)

    def _link_state(self, state: LinkState, now: float) -> bool:
        name, up = state.name, state.running
        changed = False
        for peer, link in self.links.items():
            if link.dev == name and link.up != up:
                self.links[peer] = Link(link.peer, link.neighbor, link.dev, link.asn, link.bandwidth, up)
                changed = True
        if changed:
            self.counters[f"link.{'up' if up else 'down'}"] += 1
            self._pending_event = {"event": f"{name} {'up' if up else 'down'}", "t_event": now}
        return changed

    def set_bandwidth(self, interface: str, bps: float) -> dict[str, Any]:
        """``aidclab link set NODE:IF bandwidth X`` lands here: the link's bandwidth for FARE, in bits/s."""
        found = [p for p, link in self.links.items() if link.dev == interface]
        if not found:
            known = ", ".join(sorted({link.dev for link in self.links.values()})) or "none"
            raise ValueError(f"no BGP session runs over {interface} (sessions run over: {known})")
        for peer in found:
            link = self.links[peer]
            self.links[peer] = Link(link.peer, link.neighbor, link.dev, link.asn, bits_to_bytes(bps), link.up)
        self._pending_event = {
            "event": f"{interface} bandwidth {format_bandwidth(bits_to_bytes(bps))}",
            "t_event": time.time(),
        }
        self.recompute()
        return {"interface": interface, "bandwidth": format_bandwidth(bits_to_bytes(bps))}

    # -- the decision ------------------------------------------------------------------------------
    def recompute(self) -> None:
        self._dirty = False
        selected = select(self.rib, self.links, self.asn, weighting=self.bgp.weights)
        routes_changed = kernel_routes(selected) != kernel_routes(self.selected)
        self.selected = selected
        if self._pending_event is not None:
            self._pending_event["routes_changed"] = routes_changed
            self._kernel_events.append(self._pending_event)
            self._pending_event = None
        if routes_changed or self._kernel_events:
            self._kernel_wanted = kernel_routes(selected)
            self._kernel_kick.set()
        self._advertise()
        if routes_changed:
            self.resend_selection()

    def resend_selection(self) -> None:
        """Give ``on_change`` the current best paths (again, when nothing changed)."""
        if self.on_change is None:
            return
        try:
            self.on_change(self.selected)
        except Exception as exc:
            self.counters["on-change.error"] += 1
            log.error("BGP route consumer failed: %s", exc)

    async def _kernel_worker(self) -> None:
        """Applies the latest wanted routes; netlink calls run in a thread (pyroute2's sync API must not run
        inside the event loop), and bursts coalesce into one apply of the newest state."""
        while True:
            await self._kernel_kick.wait()
            self._kernel_kick.clear()
            routes, events = self._kernel_wanted, self._kernel_events
            self._kernel_events = []
            try:
                await asyncio.to_thread(self._program_kernel, routes)
            except Exception as exc:  # KernelError, NetlinkError: keep running, count, retry next change
                self.counters["kernel.error"] += 1
                log.error("programming BGP routes failed: %s", exc)
            done = time.time()
            for event in events:
                event["t_kernel"] = done
                event["ms"] = round((done - event["t_event"]) * 1000, 3)
            self.events = [*self.events, *events][-20:]

    def _program_kernel(self, routes: dict[str, tuple[tuple[str, str, int], ...]]) -> None:
        """Bring the kernel's proto-bgp routes to ``routes``: one netlink batch of what changed since the
        last install (:class:`~aidcnet.agent.kernel.RouteTable`), whatever the number of prefixes."""
        table = self._routes
        dumps, resyncs = table.dumps, table.resyncs
        try:
            diff = table.program(routes)
        finally:
            self.counters["kernel.dumps"] += table.dumps - dumps
            self.counters["kernel.resync"] += table.resyncs - resyncs
        self.counters["kernel.routes-replaced"] += len(diff.replace_routes)
        self.counters["kernel.routes-removed"] += len(diff.remove_routes)

    def _advertise(self) -> None:
        if self._writer is None:
            return
        wanted = advertisements(self.selected, self.links, self.asn, self.originate, self.bgp.transit)
        transitive = self.bgp.link_bandwidth == "transitive"
        gadmin = community_asn(self.asn)
        # A learned route goes to every peer as one Announcement object: its text is made once, not once
        # per peer (a leaf of 256 GPUs holds 256 x 256 of them).
        text_of: dict[int, str] = {}
        for peer in self.links:
            have = self.sent.setdefault(peer, {})
            want = {}
            for prefix, ann in wanted.get(peer, {}).items():
                text = text_of.get(id(ann))
                if text is None:
                    text = text_of[id(ann)] = ann.text(gadmin, transitive)
                want[prefix] = text
            for prefix in sorted(have.keys() - want.keys()):
                self._send(exabgp.withdraw_command(peer, prefix))
                del have[prefix]
            for prefix, text in sorted(want.items()):
                if have.get(prefix) != text:
                    self._send(exabgp.announce_command(peer, text))
                    have[prefix] = text

    # -- inspection --------------------------------------------------------------------------------
    @staticmethod
    def _read_md5_counters() -> dict[str, int]:
        try:
            with open(security.NETSTAT) as f:
                return security.parse_netstat(f.read())
        except (OSError, ValueError):
            return {}

    def status(self) -> dict[str, Any]:
        md5_deltas = security.md5_deltas(self._read_md5_counters(), self._md5_base)
        return {
            "tcp_md5_counters": md5_deltas,
            "asn": self.asn,
            "mode": self.bgp.mode,
            "neighbors": [
                {
                    "peer": peer,
                    "name": link.neighbor,
                    "interface": link.dev,
                    "asn": link.asn,
                    "link": "up" if link.up else "down",
                    "bandwidth": format_bandwidth(link.bandwidth),
                    "session": self.sessions.get(peer, "idle"),
                    # Whether a secret is set, never the secret.
                    "md5": peer in self._md5,
                    "gtsm_hops": self._gtsm.get(peer),
                    "problem": security.session_problem(
                        self.sessions.get(peer, "idle"), peer in self._md5, md5_deltas
                    ),
                    "received": len(self.rib.adj_in.get(peer, {})),
                    "advertised": len(self.sent.get(peer, {})),
                }
                for peer, link in self.links.items()
            ],
            "routes": {
                prefix: {
                    "nexthops": [{"via": v, "dev": d, "weight": w} for v, d, w in sel.nexthops],
                    "as_path": list(sel.best.as_path),
                    "advertised_bw": None
                    if sel.advertised_bw is None
                    else format_bandwidth(sel.advertised_bw),
                }
                for prefix, sel in self.selected.items()
            },
            "events": self.events,
            "counters": dict(self.counters),
        }

    def weights_for(self, dst: str) -> dict[str, int]:
        """Kernel weights per outgoing interface for the route covering host ``dst`` (the sender's view)."""
        sel = self.selected.get(f"{dst}/32")
        if sel is None:
            raise ValueError(f"no BGP route to {dst} (is the destination's loopback advertised?)")
        out: dict[str, int] = {}
        for _via, dev, weight in sel.nexthops:
            out[dev] = out.get(dev, 0) + weight
        return out


class BgpPart(Service):
    """The agent's BGP service: a :class:`BgpService` restarted when what it runs on changes, and the
    control ops ``bgp``, ``bgp_link`` and ``fare_send``. Best-path changes go to ``on_change`` (the BIER
    service's :meth:`~aidcnet.agent.bier.service.BierPart.apply_bgp`)."""

    def __init__(self, on_change: OnChange | None = None) -> None:
        self.on_change = on_change
        self.current: BgpService | None = None

    @staticmethod
    def _originated(config: NodeConfig) -> dict[str, str]:
        """Path attributes the node adds to routes it originates, by prefix."""
        if config.bier is None or config.bier.bift != "bgp":
            return {}
        # BIER over BGP (RFC 9793): the loopback carries the BIER path attribute (type 41).
        from aidcnet.bgp.bier_routes import loopback_attribute

        return {str(config.loopback.network): loopback_attribute(config.bier).to_exabgp()}

    @classmethod
    def _inputs(cls, config: NodeConfig | None) -> tuple[Any, ...] | None:
        if config is None or config.bgp is None or not config.bgp.neighbors:
            return None
        # Of the BIER section only what BGP announces: a replay's prepare that changes bier.groups must
        # not reset every session in the lab.
        return (config.bgp, config.interfaces, config.loopback, cls._originated(config))

    async def reload(self, config: NodeConfig | None) -> None:
        """Restart only when sessions, links, loopback or the BIER origin changed, so the bandwidths
        ``aidclab link set`` gave (and established sessions) survive a reload that leaves those alone."""
        if self.current is not None and self._inputs(self.current.config) == self._inputs(config):
            # The services reloaded before this one (BIER over BGP) may have started afresh: hand them the
            # best paths a restart would have re-learned.
            self.current.resend_selection()
            return
        await self.stop()
        if config is None or self._inputs(config) is None:
            return
        service = BgpService(config, originate_extra=self._originated(config), on_change=self.on_change)
        await service.start()
        self.current = service

    async def stop(self) -> None:
        if self.current is not None:
            await self.current.close()
            self.current = None

    def _service(self) -> BgpService:
        if self.current is None:
            raise ValueError(
                "this node runs no BGP (no bgp.neighbors in its node file: set bgp.enabled in the lab vars)"
            )
        return self.current

    async def status(self, _request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, **self._service().status()}

    async def link(self, request: dict[str, Any]) -> dict[str, Any]:
        """FARE input from ``aidclab link set NODE:IF bandwidth X``: the link's bandwidth in bits/s."""
        from aidcnet.fare.bandwidth import bytes_to_bits, parse_bandwidth

        bps = bytes_to_bits(parse_bandwidth(request["bandwidth"]))
        if self.current is None:
            # A link's speed is a fact with or without BGP; without it there is no FARE view to change.
            return {"ok": True, "bgp": False}
        return {"ok": True, "bgp": True, **self.current.set_bandwidth(str(request["interface"]), bps)}

    async def fare_send(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send FARE test traffic to ``dst`` (a loopback) in the node's mode (or ``mode``); the reply has
        the tx packet counters of every BGP interface before and after."""
        from aidcnet.agent.bgp import fare_sender as fare_sender

        service = self._service()
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
        tx = {d: after[d] - before[d] for d in devs}
        return {"ok": True, "mode": mode, "weights": weights, "tx_packets": tx}

    def handlers(self) -> dict[Op, Handler]:
        return {Op.BGP: self.status, Op.BGP_LINK: self.link, Op.FARE_SEND: self.fare_send}
