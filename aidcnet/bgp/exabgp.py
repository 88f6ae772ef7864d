"""ExaBGP glue as pure functions: the configuration file we generate, the JSON messages its API process
receives, and the commands it sends. The agent (aidcnet/agent/bgp/service.py) only moves these lines.

ExaBGP facts this relies on (checked against ExaBGP 5.0.15):

* ``process NAME { run CMD; encoder json; }`` starts CMD with ExaBGP's messages on its stdin (one JSON
  object per line) and reads commands from its stdout (one per line);
* ``neighbor ADDR announce route P next-hop self as-path [ A B ] extended-community [ 0x.. ]`` announces
  to one peer; when ``as-path`` is given ExaBGP sends it as is, so it must start with our own ASN;
* ``bandwidth:ASN:value`` only builds the non-transitive community and rejects values above 2^32, so the
  link-bandwidth community always goes out in its hex form;
* in JSON, extended communities come as ``{"value": <64-bit int>, "string": ...}`` and attributes ExaBGP
  does not know as ``"attribute-0xCC-0xFF": "0x<hex>"`` (with the PARTIAL flag 0x20 it adds itself).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aidcnet.bgp.rib import Path, RawAttribute
from aidcnet.fare.linkbw import LinkBandwidthDecodeError, effective_bandwidth

__all__ = [
    "EXABGP_ENV",
    "Event",
    "Neighbor",
    "announce_command",
    "config_text",
    "parse_message",
    "withdraw_command",
]

# exabgp reads its settings from the environment: keep root (it must bind port 179 and we run as root in
# the container anyway), no CLI pipes, no per-command "done" acks on the API pipe, logs to stderr.
EXABGP_ENV = {
    "exabgp_daemon_user": "root",
    "exabgp_daemon_drop": "false",
    "exabgp_daemon_daemonize": "false",
    "exabgp_api_cli": "false",
    "exabgp_api_ack": "false",
    "exabgp_api_encoder": "json",
    "exabgp_log_destination": "stderr",
    "exabgp_log_level": "WARNING",
    "exabgp_log_statistics": "false",
    # The reactor polls its sockets with a timeout of speed/100 s: 1.0 wakes it 100 times a second, ~3% of
    # a core per idle process, which 68 SuperPoD nodes cannot afford on two cores. I/O still wakes it at
    # once; only its timers get 50 ms granularity, far below any BGP timer.
    "exabgp_reactor_speed": "5.0",
}

PROCESS_NAME = "aidcnet"
_MD5_SAFE = re.compile(r"[!#-:<-z|~]{1,80}")
_UNKNOWN_ATTR = re.compile(r"^attribute-0x(?P<code>[0-9a-f]{2})-0x(?P<flags>[0-9a-f]{2})$", re.IGNORECASE)


@dataclass(frozen=True)
class Neighbor:
    address: str  # the peer's link address
    local_address: str
    local_asn: int
    peer_asn: int
    router_id: str
    hold_time: int = 9
    # RFC 2385 TCP-MD5 secret; repr=False so a logged Neighbor never shows it.
    md5_password: str | None = field(default=None, repr=False)
    # RFC 5082 GTSM radius in hops (1: directly connected); None: off.
    ttl_security_hops: int | None = None
    # Only listen (RFC 4271 §8.1.1 PassiveTcpEstablishment); the peer connects (docs/fare.md "Who connects").
    passive: bool = False


GTSM_TTL = 255


def _security_lines(n: Neighbor) -> list[str]:
    lines = []
    if n.md5_password is not None:
        if not _MD5_SAFE.fullmatch(n.md5_password):
            # The message must not contain the secret itself.
            raise ValueError(
                f"neighbor {n.address}: the md5 secret must be 1-80 printable ASCII characters without "
                "space, '\"', ';', '{' or '}' (fix md5_password in the node file)"
            )
        lines.append(f'    md5-password "{n.md5_password}";')
    if n.ttl_security_hops is not None:
        # RFC 5082 §3: send with TTL 255, accept only what arrives with TTL >= 256 - hops (IP_MINTTL).
        lines += [f"    outgoing-ttl {GTSM_TTL};", f"    incoming-ttl {GTSM_TTL + 1 - n.ttl_security_hops};"]
    return lines


def config_text(neighbors: Iterable[Neighbor], api_command: str) -> str:
    """The exabgp configuration: one API process shared by every neighbor, IPv4 unicast only."""
    lines = [
        f"process {PROCESS_NAME} {{",
        f"    run {api_command};",
        "    encoder json;",
        "}",
    ]
    for n in neighbors:
        lines += [
            f"neighbor {n.address} {{",
            f"    router-id {n.router_id};",
            f"    local-address {n.local_address};",
            f"    local-as {n.local_asn};",
            f"    peer-as {n.peer_asn};",
            f"    hold-time {n.hold_time};",
            *_security_lines(n),
            # Both ends listen (on the local link address) and, unless passive, connect; BGP's collision
            # rule keeps one connection.
            "    listen 179;",
            "    passive true;" if n.passive else "    connect 179;",
            "    family { ipv4 unicast; }",
            "    api {",
            f"        processes [ {PROCESS_NAME} ];",
            "        receive { parsed; update; }",
            "        neighbor-changes;",
            "    }",
            "}",
        ]
    return "\n".join(lines) + "\n"


def announce_command(peer: str, route_text: str) -> str:
    return f"neighbor {peer} announce {route_text}"


def withdraw_command(peer: str, prefix: str) -> str:
    return f"neighbor {peer} withdraw route {prefix} next-hop self"


@dataclass(frozen=True)
class Event:
    """What one ExaBGP message means for the RIB."""

    kind: str  # "up", "down", "update", "ignore"
    peer: str = ""
    announced: tuple[Path, ...] = ()
    withdrawn: tuple[str, ...] = ()
    reason: str = ""


def _as_path(attribute: Mapping[str, object]) -> tuple[int, ...]:
    raw = attribute.get("as-path")
    if raw is None:
        return ()
    if isinstance(raw, list):  # older encoders: a flat list
        return tuple(int(a) for a in raw)
    if not isinstance(raw, dict):
        raise ValueError(f"as-path {raw!r}: expected an object of segments")
    out: list[int] = []
    for key in sorted(raw, key=lambda k: int(k)):
        segment = raw[key]
        values = segment.get("value", []) if isinstance(segment, dict) else []
        if isinstance(segment, dict) and segment.get("element") == "as-set":
            # RFC 4271 §9.1.2.2: an AS_SET counts as one AS; keep its members for loop detection.
            out.extend(int(a) for a in values)
        else:
            out.extend(int(a) for a in values)
    return tuple(out)


def _communities(attribute: Mapping[str, object]) -> list[object]:
    items = attribute.get("extended-community") or []
    out: list[object] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and "value" in item:
            out.append(int(item["value"]))
        else:
            out.append(item)
    return out


def _raw_attributes(attribute: Mapping[str, object]) -> tuple[RawAttribute, ...]:
    out = []
    for key, value in attribute.items():
        match = _UNKNOWN_ATTR.match(key)
        if match is None or not isinstance(value, str):
            continue
        out.append(RawAttribute(int(match["code"], 16), int(match["flags"], 16), value.removeprefix("0x")))
    return tuple(sorted(out, key=lambda a: a.code))


def parse_message(line: str) -> Event:
    """One line of ExaBGP JSON → :class:`Event`. Raises ValueError on a malformed message (the caller
    counts and drops it: a bad line must not stop the agent)."""
    msg = json.loads(line)
    if not isinstance(msg, dict):
        raise ValueError("not a JSON object")
    kind = msg.get("type")
    neighbor = msg.get("neighbor") or {}
    peer = str((neighbor.get("address") or {}).get("peer", ""))
    if kind == "state":
        state = neighbor.get("state")
        if state == "up":
            return Event("up", peer)
        if state == "down":
            return Event("down", peer, reason=str(neighbor.get("reason", "")))
        return Event("ignore", peer)
    if kind != "update" or neighbor.get("direction", "receive") != "receive":
        return Event("ignore", peer)
    update = (neighbor.get("message") or {}).get("update")
    if not update:
        return Event("ignore", peer)  # end-of-RIB and the like
    attribute = update.get("attribute") or {}
    announced: list[Path] = []
    for family, by_nexthop in (update.get("announce") or {}).items():
        if family != "ipv4 unicast":
            continue
        try:
            link_bw = effective_bandwidth(_communities(attribute))
        except LinkBandwidthDecodeError as exc:
            raise ValueError(f"route from {peer}: {exc}") from None
        as_path = _as_path(attribute)
        raw = _raw_attributes(attribute)
        for nlris in by_nexthop.values():
            for nlri in nlris:
                prefix = nlri["nlri"] if isinstance(nlri, dict) else str(nlri)
                announced.append(
                    Path(prefix=prefix, peer=peer, as_path=as_path, link_bw=link_bw, attributes=raw)
                )
    withdrawn: list[str] = []
    for family, nlris in (update.get("withdraw") or {}).items():
        if family != "ipv4 unicast":
            continue
        for nlri in nlris:
            withdrawn.append(nlri["nlri"] if isinstance(nlri, dict) else str(nlri))
    return Event("update", peer, tuple(announced), tuple(withdrawn))
