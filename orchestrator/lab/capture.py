"""``aidclab capture LAB NODE:IF``: a packet capture from any link end, taken on the host inside the node's
network namespace (every node has one, linked at /run/netns/<container> by deploy), so no node image needs
tcpdump and FRR or plain-linux nodes are captured the same way. The command is built here (pure), and run
by ``run_capture`` with its time limit."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from orchestrator.lab.linkset import LinkSetError, link_ends, parse_endpoint


def capture_target(lab_dir: Path, endpoint: str) -> tuple[str, str]:
    """(container, interface) of NODE:IF, checked against the lab dir's topology-data.json, so a typo names
    the node's real links instead of tcpdump's "no such device"."""
    node, interface = parse_endpoint(endpoint)
    data_path = lab_dir / "topology-data.json"
    if not data_path.exists():
        raise LinkSetError(f"{data_path} does not exist: is the lab deployed from this directory?")
    here, _peer = link_ends(json.loads(data_path.read_text()), node, interface, str(data_path))
    return here.container, interface


def tcpdump_command(
    netns: str, interface: str, count: int | None = None, write: str | None = None, snaplen: int = 0
) -> list[str]:
    """tcpdump in ``netns`` on ``interface``: to a pcap file (``-w``, flushed per packet so a capture cut
    short with Ctrl-C is still readable) or decoded to stdout, line-buffered; ``-c`` stops after N packets.
    Immediate mode: without it libpcap hands packets over in blocks up to a second late, and a stop in that
    second loses them (the closing count says "0 packets captured", "6 received by filter")."""
    if count is not None and count < 1:
        raise ValueError(f"-c {count}: capture at least one packet (or leave -c out to run until Ctrl-C)")
    cmd = ["nsenter", f"--net={netns}", "tcpdump", "-i", interface, "-n", "--immediate-mode"]
    cmd += ["-s", str(snaplen)]
    if count is not None:
        cmd += ["-c", str(count)]
    cmd += ["-U", "-w", write] if write else ["-l"]
    return cmd


# After the time limit tcpdump gets SIGINT, which it answers by flushing and printing its counts; one
# that does not end within this many seconds of it is killed.
STOP_GRACE_S = 5.0


def run_capture(cmd: list[str], timeout_s: float | None = None) -> tuple[int, bool]:
    """Run the capture until it ends by itself (``-c`` packets) or ``timeout_s`` passes, whichever is
    first; returns (exit code, whether the time limit stopped it). The limit stops tcpdump as Ctrl-C
    does, so a pcap file and the closing counts are complete."""
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"--timeout {timeout_s}: give a time in seconds > 0 (or leave it out)")
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait(timeout=timeout_s), False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0, True
    except KeyboardInterrupt:
        proc.wait()  # the terminal's Ctrl-C reached tcpdump too: it ends as it does on its own
        return 0, False
