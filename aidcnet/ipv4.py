"""Minimal IPv4 + UDP datagram codec (RFC 791, RFC 768) for payloads carried inside BIER (Proto 4).

Host-BIER wraps application data as IPv4/UDP before imposing BIER, so a packet on any link decodes as
MPLS-in-UDP / MPLS-BIER / IPv4 / UDP, and the BFER host knows the source and ports it came from.
The UDP checksum is left 0 (no checksum, allowed for IPv4 by RFC 768) to keep the hot path cheap; the
IPv4 header checksum is always set.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

IPV4_HEADER = struct.Struct("!BBHHHBBH4s4s")
UDP_HEADER = struct.Struct("!HHHH")
IPPROTO_UDP = 17
# RoCEv2's UDP port: host traffic that models GPU traffic uses it (docs/design.md §3).
ROCEV2_PORT = 4791
# A QP's UDP source port: RoCEv2 NICs take them from 49152..65535, and per-flow ECMP/FARE hashes over
# them. Nodes keep the kernel's ephemeral ports below this (FABRIC_SYSCTLS' ip_local_port_range), so an
# agent socket bound by the kernel can never hold a port a QP is about to bind.
QP_PORT_BASE = 49152
DEFAULT_TTL = 64


class Ipv4DecodeError(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


class UdpDatagram(NamedTuple):
    src: str
    dst: str
    sport: int
    dport: int
    ttl: int
    payload: bytes


def checksum16(data: bytes | memoryview) -> int:
    """RFC 1071 ones'-complement sum of 16-bit words."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _packed(address: str) -> bytes:
    # inet_pton, not ipaddress: the same strict dotted quad, at a fraction of the cost per datagram.
    try:
        return socket.inet_pton(socket.AF_INET, address)
    except OSError:
        raise ValueError(f"{address!r} is not an IPv4 address (a.b.c.d)") from None


def build_udp(
    src: str, dst: str, sport: int, dport: int, payload: bytes, ttl: int = DEFAULT_TTL, ident: int = 0
) -> bytes:
    total = IPV4_HEADER.size + UDP_HEADER.size + len(payload)
    if total > 0xFFFF:
        raise ValueError(f"payload of {len(payload)} bytes does not fit one IPv4 datagram")
    header = IPV4_HEADER.pack(
        0x45,
        0,
        total,
        ident & 0xFFFF,
        0x4000,
        ttl,
        IPPROTO_UDP,
        0,
        _packed(src),
        _packed(dst),
    )
    header = header[:10] + struct.pack("!H", checksum16(header)) + header[12:]
    return header + UDP_HEADER.pack(sport, dport, UDP_HEADER.size + len(payload), 0) + payload


def parse_udp(packet: bytes | memoryview) -> UdpDatagram:
    if len(packet) < IPV4_HEADER.size:
        raise Ipv4DecodeError("truncated", f"{len(packet)} bytes, an IPv4 header needs 20")
    ver_ihl, _tos, total, _id, _frag, ttl, proto, _csum, src, dst = IPV4_HEADER.unpack_from(packet)
    if ver_ihl >> 4 != 4:
        raise Ipv4DecodeError("not-ipv4", f"version {ver_ihl >> 4}")
    ihl = (ver_ihl & 0xF) * 4
    if ihl < 20 or total > len(packet) or total < ihl + UDP_HEADER.size:
        raise Ipv4DecodeError("bad-length", f"IHL {ihl}, total length {total}, have {len(packet)}")
    if proto != IPPROTO_UDP:
        raise Ipv4DecodeError("not-udp", f"protocol {proto}")
    if checksum16(packet[:ihl]) != 0:
        raise Ipv4DecodeError("bad-checksum", "IPv4 header checksum does not verify")
    sport, dport, length, _ucsum = UDP_HEADER.unpack_from(packet, ihl)
    if length < UDP_HEADER.size or ihl + length > total:
        raise Ipv4DecodeError("bad-length", f"UDP length {length}")
    return UdpDatagram(
        socket.inet_ntop(socket.AF_INET, src),
        socket.inet_ntop(socket.AF_INET, dst),
        sport,
        dport,
        ttl,
        bytes(packet[ihl + UDP_HEADER.size : ihl + length]),
    )
