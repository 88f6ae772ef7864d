"""pcap files for the independent decoders (tshark) in tests."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

LINKTYPE_RAW = 101
# Wireshark's reading of a RoCEv2 Base Transport Header, and whether it found anything wrong.
BTH_FIELDS = (
    "infiniband.bth.opcode",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "_ws.expert.message",
    "_ws.malformed",
)


def write_pcap(path: Path, packets: list[bytes]) -> None:
    """libpcap format, LINKTYPE_RAW: each record is an IPv4 packet."""
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_RAW)
    for i, pkt in enumerate(packets):
        out += struct.pack("<IIII", i, 0, len(pkt), len(pkt)) + pkt
    path.write_bytes(out)


def tshark_fields(pcap: Path, fields: list[str] | tuple[str, ...]) -> list[str]:
    """Wireshark's reading of every packet of ``pcap``: one line per packet, the fields ``;``-separated
    (several values of a field ``,``-joined). Skips the test when the host has no tshark."""
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed on this host (Debian package: tshark)")
    cmd = [tshark, "-r", str(pcap), "-T", "fields", "-E", "separator=;", "-E", "aggregator=,"]
    for field in fields:
        cmd += ["-e", field]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout.splitlines()
