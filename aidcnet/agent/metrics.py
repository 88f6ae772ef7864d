"""Prometheus exporter of a node agent's counters (``aidcnet ctl counters``) over HTTP.

The agent serves ``http://<eth0 IPv4>:9464/metrics`` on the lab's management network only: binding
to the eth0 address (never 0.0.0.0) keeps the endpoint out of reach of data-plane traffic, which
arrives on the fabric interfaces. Values are read at scrape time, so nothing is kept twice and a
scrape costs nothing when nobody scrapes.

Naming: ``aidcnet_`` + the counter name with every character outside ``[a-zA-Z0-9_]`` turned into
``_`` + ``_total`` (every agent counter only grows). Segments that name a neighbour, an interface, a
source address or a reason become a label, so one family covers all of them, e.g.
``bier.tx.nbr.spine1.bytes`` → ``aidcnet_bier_tx_nbr_bytes_total{neighbor="spine1"}``. Every sample
carries ``node`` and ``role``.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import re
import socket
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("aidcnet.agent.metrics")

METRICS_PORT = 9464
MGMT_INTERFACE = "eth0"
PREFIX = "aidcnet"

# (pattern over the full counter name, label name). The label value is group "v"; the family name is
# the name with that segment cut out. Order matters: the first match wins.
LABEL_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(?P<head>bier\.[rt]x\.nbr)\.(?P<v>.+)\.(?P<tail>packets|bytes|errors)$"), "neighbor"),
    (re.compile(r"^(?P<head>bier\.rx\.src)\.(?P<v>.+)\.(?P<tail>packets|bytes)$"), "source"),
    (re.compile(r"^(?P<head>bier\.if)\.(?P<v>[^.]+)\.(?P<tail>[a-z_]+)$"), "interface"),
    (re.compile(r"^(?P<head>net-bier\.port)\.(?P<v>[^.]+)\.(?P<tail>[^.]+)$"), "interface"),
    # A reason-less total with the same stem exists (bier.dropped-malformed): a distinct family name
    # keeps sum() over the reasons from counting the total twice.
    (re.compile(r"^(?P<head>bier\.dropped-bits)\.(?P<v>[^.]+)(?P<tail>)$"), "reason"),
    (re.compile(r"^(?P<head>bier\.dropped-malformed)\.(?P<v>[^.]+)(?P<tail>)$"), "reason"),
    # INA drops by reason (aidcnet/agent/ina/switch.py).
    (re.compile(r"^(?P<head>ina\.dropped)\.(?P<v>[^.]+)(?P<tail>)$"), "reason"),
)
REASON_SUFFIX = "_by_reason"

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitise(name: str) -> str:
    """A Prometheus metric name for an agent counter name (without the ``_total`` suffix)."""
    out = _INVALID.sub("_", f"{PREFIX}_{name}")
    return re.sub(r"__+", "_", out).strip("_")


def split_counter(name: str) -> tuple[str, dict[str, str]]:
    """(family name without ``_total``, per-counter labels) for one agent counter name."""
    for pattern, label in LABEL_RULES:
        m = pattern.match(name)
        if m:
            family = sanitise(f"{m['head']}.{m['tail']}" if m["tail"] else m["head"])
            if label == "reason":
                family += REASON_SUFFIX
            return family, {label: m["v"]}
    return sanitise(name), {}


@dataclass(eq=False)  # the registry keys collectors by identity
class AgentCollector(Collector):
    """Turns ``source()`` (counter name → int) into counter families at each scrape."""

    source: Callable[[], Mapping[str, object]]
    node: str
    role: str
    errors: int = field(default=0, init=False)

    def collect(self) -> Iterator[Metric]:
        try:
            counters = dict(self.source())
        except Exception as exc:  # a scrape must answer even if the agent is busy or reloading
            self.errors += 1
            log.warning("reading counters for a scrape failed: %s", exc)
            counters = {}
        base = {"node": self.node, "role": self.role}
        families: dict[str, CounterMetricFamily] = {}
        label_names: dict[str, tuple[str, ...]] = {}
        numeric = [
            (*split_counter(name), name, value)
            for name, value in counters.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        ]
        # Labelled counters claim their family name first, so a collision renames the flat one.
        numeric.sort(key=lambda item: (not item[1], item[2]))
        for family, extra, name, value in numeric:
            labels = {**base, **extra}
            keys = tuple(labels)
            if family in label_names and label_names[family] != keys:
                # Two names sanitised onto one family with different labels would make an invalid
                # exposition; keep the counter under its flat name instead of losing it.
                family, labels = sanitise(name) + "_flat", base
                keys = tuple(labels)
            if family not in families:
                families[family] = CounterMetricFamily(
                    family, f"aidcnet agent counter {name}", labels=list(keys)
                )
                label_names[family] = keys
            families[family].add_metric([labels[k] for k in keys], value)
        yield from families.values()
        up = CounterMetricFamily(
            f"{PREFIX}_metrics_scrape_errors", "scrapes whose counter read failed", labels=list(base)
        )
        up.add_metric(list(base.values()), self.errors)
        yield up


def interface_ipv4(ifname: str) -> str | None:
    """The IPv4 address of ``ifname``, or None when it has none (SIOCGIFADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


@dataclass
class Exporter:
    address: str
    port: int
    registry: CollectorRegistry
    server: object
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()  # type: ignore[attr-defined]
        self.server.server_close()  # type: ignore[attr-defined]


def start_exporter(
    collector: AgentCollector,
    address: str | None = None,
    port: int = METRICS_PORT,
    interface: str = MGMT_INTERFACE,
) -> Exporter | None:
    """Serve ``collector`` on ``address`` (default: the IPv4 of ``interface``). Returns None, with a
    log line, when there is no management address or the port is taken: metrics never stop an agent."""
    from prometheus_client import start_http_server

    address = address or interface_ipv4(interface)
    if address is None:
        log.warning("no IPv4 on %s: Prometheus metrics not exported", interface)
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        log.warning("Prometheus metrics on %s:%d not exported: %s", address, port, exc)
        return None
    log.info("Prometheus metrics on http://%s:%d/metrics", address, port)
    return Exporter(address, port, registry, server, thread)


class CountingAgent(Protocol):
    role: str

    def show_counters(self, request: dict[str, Any]) -> Awaitable[dict[str, Any]]: ...


# A lab's own management hub gives a node its eth0 after the agent started (orchestrator.lab.mgmtbridge):
# the exporter waits for the address, looking this often, and gives up after EXPORTER_WAIT_S.
EXPORTER_RETRY_S = 0.5
EXPORTER_WAIT_S = 600.0


def serve_agent(agent: CountingAgent, port: int = METRICS_PORT) -> None:
    """Export ``agent``'s counters as soon as ``eth0`` has an address; call from the agent's event loop.

    Scrapes run in the HTTP server's thread while the loop mutates the counters, so the read is
    handed to the loop (the same path as ``aidcnet ctl counters``) instead of iterating live dicts."""
    loop = asyncio.get_running_loop()

    def source() -> Mapping[str, object]:
        future = asyncio.run_coroutine_threadsafe(agent.show_counters({}), loop)
        return future.result(timeout=5.0)["counters"]

    collector = AgentCollector(source, node=socket.gethostname(), role=agent.role)
    deadline = loop.time() + EXPORTER_WAIT_S

    def attempt() -> None:
        address = interface_ipv4(MGMT_INTERFACE)
        if address is not None:
            start_exporter(collector, address=address, port=port)
        elif loop.time() < deadline:
            loop.call_later(EXPORTER_RETRY_S, attempt)
        else:
            log.warning("no IPv4 on %s after %.0f s: metrics not exported", MGMT_INTERFACE, EXPORTER_WAIT_S)

    attempt()
