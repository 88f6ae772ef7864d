"""The host's side of a lab's delay relay (:mod:`orchestrator.lab.relay`): start it, tell it, read it, stop
it (docs/delay.md).

``sync`` is what ``aidclab configure``, ``link set ... delay`` and a rescale call after writing
``fabric.json``: a lab with a delayed end gets a relay (started, or told to reload), a lab without one has
none. ``status`` is what a run reads before and after (``relay_drops`` for the fidelity verdict,
``cpu_per_packet_s`` for the calibration of a lab's scale).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.lab.fabric import Fabric
from orchestrator.lab.relay import DROP_COUNTER, LOG_NAME, PID_NAME, SOCKET_NAME, RelayError, relay_object

START_WAIT_S = 30.0
STOP_WAIT_S = 10.0


def running_pid(lab_dir: Path) -> int | None:
    """The relay's process id when one runs for this lab (its pid file names a live relay)."""
    try:
        pid = int((lab_dir / PID_NAME).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"orchestrator.lab.relay" in cmdline else None


def call(lab_dir: Path, op: str, timeout: float = 10.0) -> dict[str, Any]:
    """One request to the running relay; RelayError when none answers."""
    path = lab_dir / SOCKET_NAME
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            conn.sendall(json.dumps({"op": op}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise RelayError(f"{_who(lab_dir)} does not answer at {path} ({exc}){_log_tail(lab_dir)}") from None
    try:
        reply = json.loads(data)
    except ValueError:
        raise RelayError(f"{_who(lab_dir)} answered {data[:200]!r}{_log_tail(lab_dir)}") from None
    if not reply.get("ok"):
        raise RelayError(f"{_who(lab_dir)}: {reply.get('error')}")
    return reply


def _who(lab_dir: Path) -> str:
    return f"the delay relay of {lab_dir}"


def _log_tail(lab_dir: Path, lines: int = 6) -> str:
    log = lab_dir / LOG_NAME
    if not log.exists():
        return ""
    tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
    return f"; its log ({log}) ends:\n  " + "\n  ".join(tail) if tail else ""


def start(lab_dir: Path) -> dict[str, Any]:
    """Start the lab's relay in the background (it outlives this command) and wait until it holds what
    fabric.json delays; returns its status."""
    relay_object()  # compile errors surface here, with their install hint, not in a log
    with (lab_dir / LOG_NAME).open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.lab.relay", str(lab_dir.resolve())],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RelayError(f"{_who(lab_dir)} exited with {proc.returncode}{_log_tail(lab_dir)}")
        if (lab_dir / SOCKET_NAME).exists():
            try:
                return call(lab_dir, "status", timeout=START_WAIT_S)
            except RelayError:
                pass
        time.sleep(0.1)
    raise RelayError(f"{_who(lab_dir)} did not answer within {START_WAIT_S:g} s{_log_tail(lab_dir)}")


def stop(lab_dir: Path) -> bool:
    """Stop the lab's relay (what it holds is released first); True when one was running."""
    pid = running_pid(lab_dir)
    if pid is None:
        return False
    try:
        call(lab_dir, "stop", timeout=STOP_WAIT_S)
    except RelayError:
        os.kill(pid, 15)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and running_pid(lab_dir) == pid:
        time.sleep(0.05)
    if running_pid(lab_dir) == pid:
        os.kill(pid, 9)
    return True


def sync(lab_dir: Path, fabric: Fabric) -> str | None:
    """Make the relay follow ``fabric`` (already written to the lab dir): started, reloaded or stopped.
    Returns a line saying what it holds now, or None when there is nothing to say."""
    delayed = fabric.delayed_ends()
    running = running_pid(lab_dir) is not None
    if not delayed:
        return "delay relay stopped: no delayed link left" if running and stop(lab_dir) else None
    reply = call(lab_dir, "reload") if running else start(lab_dir)
    ends = reply.get("ends") or []
    return f"delay relay holds {len(ends)} link end(s) (pid {running_pid(lab_dir)})"


def status(lab_dir: Path) -> dict[str, Any] | None:
    """The relay's counters (docs/delay.md, "What the relay counts"), or None when the lab has no relay."""
    if running_pid(lab_dir) is None:
        return None
    return call(lab_dir, "status")


def reset_peaks(lab_dir: Path) -> None:
    """Start the relay's peaks (most in flight, latest release) again, for one run's own; no-op without a
    relay."""
    if running_pid(lab_dir) is not None:
        call(lab_dir, "reset-peaks")


def relay_drops(lab_dir: Path) -> int:
    """Frames the relay lost so far (a counter: take the difference over a run); 0 without a relay."""
    found = status(lab_dir)
    return int(found[DROP_COUNTER]) if found else 0


def cpu_per_packet_s(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """The relay's CPU seconds per packet held between two statuses (None when it held none): what one
    delayed hop adds to the machine's work, for the calibration of a lab's scale."""
    packets = after["packets"] - before["packets"]
    if packets <= 0 or after.get("pid") != before.get("pid"):
        return None
    return (after["cpu_s"] - before["cpu_s"]) / packets
