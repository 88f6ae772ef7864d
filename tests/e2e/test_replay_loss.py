"""A replay whose receiver container is paused midway reports the loss and still records the run,
instead of hanging (replays have timeouts)."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from orchestrator.experiment.results import list_runs, load_run
from orchestrator.lab.runtime.docker import DockerRuntime
from tests.e2e.conftest import ROOT, deployed

LAB = "rl-loss"
HOSTS = ",".join(f"h{i}" for i in range(1, 9))
VICTIM = "h5"
TIMEOUT_S = 20.0
# Trace duration (~3 s) + start lead + --timeout + drain + prepare/collect, with room for a slow machine;
# a driver that waits on the paused agent forever ends up past it.
BOUND_S = 120.0


def make_trace(path: Path) -> Path:
    # Long enough (about 3 s of steps) that the pause lands while ops are still being sent.
    subprocess.run(
        [
            sys.executable, "-m", "orchestrator.cli.workload", "moe", "--hosts", HOSTS,
            "--steps", "30", "--tokens-per-host", "8", "--step-interval", "0.1", "--seed", "7",
            "-o", str(path),
        ],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    return path


def test_replay_with_receiver_paused_reports_loss(runtime: DockerRuntime, tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "moe-long.jsonl")
    results = tmp_path / "results"
    with deployed(runtime, tmp_path, "leaf-spine", LAB, configured=True) as topo:
        victim = topo.container_name(VICTIM)
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "orchestrator.cli", "replay", str(topo.path), str(trace),
                "--mode", "host-bier", "--timeout", str(TIMEOUT_S), "--drain", "2",
                "--results-dir", str(results),
            ],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "250"},
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        output: list[str] = []

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                output.append(line)
                lines.put(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        t0 = time.monotonic()
        paused = False
        try:
            # Pause once the driver has started the hosts (its "run" phase), plus a little, so some
            # messages to the victim were delivered and later ones cannot be.
            while time.monotonic() - t0 < BOUND_S:
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    if proc.poll() is not None:
                        break
                    continue
                if "[run]" in line:
                    time.sleep(1.5)
                    runtime.api.pause(victim)
                    paused = True
                    break
            assert paused, f"the replay never reached its run phase:\n{''.join(output)}"
            try:
                code = proc.wait(timeout=max(1.0, BOUND_S - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                reader.join(timeout=5)
                raise AssertionError(
                    f"replay still running {BOUND_S:.0f} s after start with {VICTIM} paused (hang):\n"
                    + "".join(output)
                ) from None
            elapsed = time.monotonic() - t0
        finally:
            if paused:
                runtime.api.unpause(victim)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=5)
        text = "".join(output)

    assert code != 0, f"replay exited 0 although {VICTIM} was paused:\n{text}"
    assert elapsed < BOUND_S
    assert re.search(r"deliveries\s+missing;\s+first:\s+message\s+\d+\s+to\s+h\d", text), text
    runs = list_runs(results) if results.exists() else []
    assert len(runs) == 1, f"no run recorded under {results}:\n{text}"
    run = load_run(runs[0])
    assert run.metrics is not None
    d = run.metrics.delivery
    assert 0 < d.delivered < d.expected and d.missing == d.expected - d.delivered, d
    # The loss is the paused receiver's: every other receiver got everything.
    # Only what involves the paused host is lost: deliveries to it, and messages it was still to send.
    lost = {(m.src, r) for m in run.messages for r in m.expected if r not in m.delivered}
    assert any(r == VICTIM for _src, r in lost), lost
    assert all(VICTIM in (src, r) for src, r in lost), sorted(lost)
    # Paused past the polls' patience, the victim was given up; nothing vouches for the run's times then.
    assert VICTIM in run.meta.settings.get("unresponsive", {}), run.meta.settings
    assert run.timing is not None and run.timing.faithful is False, run.timing
    assert any(r.startswith(f"node {VICTIM}: its agent stopped answering") for r in run.timing.reasons), (
        run.timing.reasons
    )
