"""The record of one replay run: typed models and the ``results/<run-id>/`` directory.

A run is one trace replayed in one transport mode over one lab. The replay driver fills a
:class:`RunResult` (meta, per-link counter deltas, per-node agent counter deltas, per-message
deliveries); :func:`save_run` adds the derived metrics (``orchestrator.experiment.metrics``) and writes::

    results/<run-id>/run.json       the whole record (canonical; load_run reads only this)
    results/<run-id>/summary.json   meta essentials + derived metrics (small, for scripts)
    results/<run-id>/links.csv      one row per fabric link
    results/<run-id>/messages.csv   one row per (message, receiver)
    results/<run-id>/agents.csv     one row per (node, counter)

The layout, every field and column, and the versioning rules are in ``docs/results-format.md``.
This module does models and file I/O only; the arithmetic lives in ``orchestrator.experiment.metrics``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import re
import shutil
import socket
import threading
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.experiment.conditions import Conditions, step_allreduce
from orchestrator.experiment.records import (
    SUPPORTED_FORMAT_VERSIONS,
    MachineInfo,
    ResultsError,
    RunMeta,
    RunResult,
    TimingRecord,
    TraceInfo,
    _unsupported,
)

_NAME_PART = re.compile(r"[^A-Za-z0-9_.-]+")
_RUN_ID_RE = re.compile(r"^\d{8}T\d{6}\.\d{6}Z-[A-Za-z0-9_.-]+$")

RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
LINKS_FILE = "links.csv"
MESSAGES_FILE = "messages.csv"
AGENTS_FILE = "agents.csv"

DEFAULT_RESULTS_DIR = "results"


LINK_COLUMNS = (
    "link",
    "a",
    "b",
    "a_to_b_bytes",
    "a_to_b_packets",
    "b_to_a_bytes",
    "b_to_a_packets",
    "total_bytes",
)
MESSAGE_COLUMNS = (
    "id",
    "op",
    "src",
    "bytes",
    "sent_at",
    "receiver",
    "expected",
    "delivered",
    "latency_s",
    "duplicates",
)
AGENT_COLUMNS = ("node", "counter", "delta")


_id_lock = threading.Lock()
_last_stamp: datetime | None = None


def _safe(part: str) -> str:
    cleaned = _NAME_PART.sub("-", part).strip("-.")
    return cleaned or "x"


def new_run_id(lab: str, mode: str, now: datetime | None = None) -> str:
    """``20250314T101502.123456Z-leaf-spine-unicast``: sorts by time as a plain string.

    The fixed-width UTC timestamp comes first so ``sorted()`` of directory names is chronological; within
    one process a clash moves the stamp on by a microsecond, and save_run refuses to overwrite a directory
    if two processes ever collide.
    """
    global _last_stamp
    stamp = (now or datetime.now(UTC)).astimezone(UTC)
    with _id_lock:
        # Bump only near the last stamp: an explicitly older time (a caller's own clock) is taken as is.
        if _last_stamp is not None and _last_stamp - timedelta(seconds=1) < stamp <= _last_stamp:
            stamp = _last_stamp + timedelta(microseconds=1)
        _last_stamp = stamp
    return f"{stamp:%Y%m%dT%H%M%S}.{stamp.microsecond:06d}Z-{_safe(lab)}-{_safe(mode)}"


# ---------------------------------------------------------------------------------------------- environment


def aidclab_version() -> str:
    try:
        return metadata.version("aidclab")
    except metadata.PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def _meminfo_total(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine_info() -> MachineInfo:
    return MachineInfo(
        hostname=socket.gethostname(),
        python=platform.python_version(),
        implementation=platform.python_implementation(),
        platform=platform.platform(),
        machine=platform.machine(),
        kernel=platform.release(),
        cpu_count=os.cpu_count(),
        memory_bytes=_meminfo_total(),
    )


def git_commit(repo: str | Path = ".") -> str | None:
    """The checked-out commit, read from .git without running git (best effort: None if unknown)."""
    git = Path(repo) / ".git"
    try:
        if git.is_file():  # a worktree: ".git" holds "gitdir: <path>"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        for base in (git, Path(str(git).split("/worktrees/")[0])):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
    except (OSError, IndexError):
        return None
    return None


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def trace_info(path: str | Path) -> TraceInfo:
    """Stream a trace once (validating it) and return what a run records about it."""
    from orchestrator.workloads.trace import MULTICAST_OP, SummaryAccumulator, TraceReader

    mc_bytes = mc_receiver_bytes = 0
    with TraceReader(path) as reader:
        acc = SummaryAccumulator(reader.header)
        for op in reader:
            acc.add(op)
            if op.op == MULTICAST_OP:
                mc_bytes += op.bytes
                mc_receiver_bytes += op.bytes * len(op.dst)
    s = acc.result()
    # Running sums instead of metrics.theoretical_fanout over a list: O(1) memory for any trace length;
    # the value is the same (tests check it).
    fanout = mc_receiver_bytes / mc_bytes if mc_bytes else None
    return TraceInfo(
        file=str(path),
        sha256=file_sha256(path),
        generator=s.header.generator,
        version=s.header.version,
        params=dict(s.header.params),
        hosts=list(s.header.hosts),
        ops=s.ops,
        ops_by_kind=dict(sorted(s.ops_by_kind.items())),
        bytes=s.bytes,
        delivered_bytes=s.delivered_bytes,
        fanout_mean=s.fanout_mean,
        fanout_weighted=fanout,
        duration=s.duration,
    )


def new_meta(
    *,
    run_id: str,
    lab: str,
    mode: str,
    trace: TraceInfo | str | Path,
    started: datetime,
    finished: datetime,
    topology_file: str | Path | None = None,
    settings: dict[str, Any] | None = None,
    repo: str | Path = ".",
) -> RunMeta:
    """A RunMeta with the versions and machine of this process filled in."""
    return RunMeta(
        run_id=run_id,
        lab=lab,
        topology_file=None if topology_file is None else str(topology_file),
        trace=trace if isinstance(trace, TraceInfo) else trace_info(trace),
        mode=mode,
        started=started,
        finished=finished,
        aidclab_version=aidclab_version(),
        git_commit=git_commit(repo),
        machine=machine_info(),
        settings=dict(settings or {}),
    )


# ---------------------------------------------------------------------------------------------- writing


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _csv(header: tuple[str, ...], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _num(v: float | None) -> str:
    return "" if v is None else repr(float(v))


def links_csv(result: RunResult) -> str:
    rows = [
        [
            lc.link,
            lc.a,
            lc.b,
            lc.a_to_b_bytes,
            lc.a_to_b_packets,
            lc.b_to_a_bytes,
            lc.b_to_a_packets,
            lc.total_bytes,
        ]
        for lc in result.links
    ]
    return _csv(LINK_COLUMNS, rows)


def messages_csv(result: RunResult) -> str:
    rows: list[list[Any]] = []
    for m in result.messages:
        delivered = set(m.delivered)
        expected = set(m.expected)
        for r in [*m.expected, *m.wrong]:
            got = r in delivered
            rows.append(
                [
                    m.id,
                    m.op,
                    m.src,
                    m.bytes,
                    _num(m.sent_at),
                    r,
                    int(r in expected),
                    int(got),
                    _num(m.latency.get(r)) if got else "",
                    m.duplicates.get(r, 0),
                ]
            )
    return _csv(MESSAGE_COLUMNS, rows)


def agents_csv(result: RunResult) -> str:
    rows = [
        [node, name, value]
        for node, counters in sorted(result.agents.items())
        for name, value in sorted(counters.items())
    ]
    return _csv(AGENT_COLUMNS, rows)


def summary_dict(result: RunResult) -> dict[str, Any]:
    meta = result.meta
    return {
        "format_version": result.format_version,
        "run_id": meta.run_id,
        "lab": meta.lab,
        "mode": meta.mode,
        "trace": meta.trace.name,
        "trace_sha256": meta.trace.sha256,
        "started": meta.started.isoformat(),
        "finished": meta.finished.isoformat(),
        # What 'report latest' tells runs of one mode apart by (orchestrator.experiment.conditions).
        "conditions": Conditions.of(result).to_dict(),
        "metrics": result.metrics.model_dump(mode="json") if result.metrics else None,
    }


def save_run(result: RunResult, results_dir: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """Write ``results_dir/<run-id>/`` and return that directory.

    Derived metrics are computed here when the result has none. The files are written into a hidden
    sibling directory and renamed into place, so a crash never leaves a half-written run that
    ``aidclab report`` would then trip over. An existing run directory is never overwritten.
    """
    from orchestrator.experiment.metrics import compute_metrics

    if result.metrics is None:
        result = result.model_copy(update={"metrics": compute_metrics(result)})
    root = Path(results_dir)
    final = root / result.meta.run_id
    if final.exists():
        raise ResultsError(
            f"{final}: a run with this id already exists; make a fresh id with new_run_id() "
            "(run directories are never overwritten)"
        )
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{result.meta.run_id}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        files = {
            RUN_FILE: _json(result.model_dump(mode="json")),
            SUMMARY_FILE: _json(summary_dict(result)),
            LINKS_FILE: links_csv(result),
            MESSAGES_FILE: messages_csv(result),
            AGENTS_FILE: agents_csv(result),
        }
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8", newline="")
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def amend_timing(run_dir: Path, timing: TimingRecord) -> RunResult:
    """A saved run's verdict after the fact, the one amendment a run takes: its confirmation at a second
    scale (``replay --confirm``). run.json and summary.json are replaced atomically, nothing else."""
    result = load_run(run_dir).model_copy(update={"timing": timing})
    files = {RUN_FILE: _json(result.model_dump(mode="json")), SUMMARY_FILE: _json(summary_dict(result))}
    for name, text in files.items():
        tmp = run_dir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8", newline="")
        tmp.replace(run_dir / name)
    return result


# ---------------------------------------------------------------------------------------------- reading


def list_runs(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> list[Path]:
    """Run directories under ``results_dir``, oldest first (run ids sort by time)."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / RUN_FILE).is_file())


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_run(text: str, name: str = "<run.json>") -> RunResult:
    """A RunResult from the text of a run.json; errors name the file, the field and the remedy."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError(
            f"{name}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); the file is damaged, "
            "rerun the replay to record this run again"
        ) from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{name}: must be a JSON object (a run record written by aidclab)")
    version = obj.get("format_version")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        got = "no format_version field" if version is None else _unsupported(version)
        raise ResultsError(f"{name}: {got}; see docs/results-format.md")
    try:
        return RunResult.model_validate(obj)
    except ValidationError as e:
        problems = [f"field '{_field_path(err['loc'])}': {err['msg']}" for err in e.errors(include_url=False)]
        shown = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ResultsError(
            f"{name}: not a valid run record ({len(problems)} problem(s)); it was edited by hand or "
            f"written by another aidclab version:\n  {shown}{more}"
        ) from None


def resolve_run(spec: str | Path, results_dir: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """The run.json of a run given as a run id, a run directory, a run.json path or ``latest``."""
    root = Path(results_dir)
    if str(spec) == "latest":
        runs = list_runs(root)
        if not runs:
            raise ResultsError(
                f"{root}: no runs yet, so 'latest' means nothing; replay a workload first "
                "(aidclab replay LAB TRACE) or pass --results-dir"
            )
        return runs[-1] / RUN_FILE
    path = Path(spec)
    candidates = [path, root / path] if not path.is_absolute() else [path]
    for c in candidates:
        if c.is_file():
            return c
        if c.is_dir():
            if (c / RUN_FILE).is_file():
                return c / RUN_FILE
            raise ResultsError(
                f"{c}: not a run directory (no {RUN_FILE}); a run is results/<run-id>/ as written by "
                "aidclab replay"
            )
    known = [p.name for p in list_runs(root)]
    hint = f"runs in {root}/: {', '.join(known[-5:])}" if known else f"{root}/ holds no runs"
    raise ResultsError(
        f"{spec}: no such run (looked for {' and '.join(str(c) for c in candidates)}); {hint}; "
        "pass a run id, a run directory or 'latest'"
    )


def load_run(path_or_id: str | Path, results_dir: str | Path = DEFAULT_RESULTS_DIR) -> RunResult:
    path = resolve_run(path_or_id, results_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ResultsError(f"{path}: cannot read ({e.strerror}); check the permissions") from None
    return parse_run(text, str(path))


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID_RE.match(text))


ExperimentKey = tuple[str, str, str, Conditions]


def _experiment_key(run_dir: Path) -> ExperimentKey:
    """(lab, trace identity, mode, conditions) of a run, from its small summary.json when it has them."""
    for name in (SUMMARY_FILE, RUN_FILE):
        path = run_dir / name
        if not path.is_file():
            continue
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ResultsError(f"{path}: cannot read ({e}); rerun the replay or delete {run_dir}") from None
        if name == RUN_FILE:
            return _run_key(obj)
        if "conditions" not in obj:
            continue  # written before summaries kept the conditions: run.json has them
        conditions = Conditions.from_dict(obj["conditions"])
        trace = str(obj.get("trace_sha256") or obj.get("trace"))
        return (str(obj.get("lab")), trace, str(obj.get("mode")), conditions)
    raise ResultsError(f"{run_dir}: not a run directory (no {RUN_FILE})")


def _run_key(obj: dict[str, Any]) -> ExperimentKey:
    meta = obj.get("meta") or {}
    trace = meta.get("trace") or {}
    settings = meta.get("settings") or {}
    conditions = Conditions.from_parts(
        settings.get("conditions"), settings.get("faults"), (obj.get("timing") or {}).get("scale"),
        step_allreduce(settings),
    )  # fmt: skip
    name = str(trace.get("sha256") or Path(str(trace.get("file"))).name)
    return (str(meta.get("lab")), name, str(meta.get("mode")), conditions)


def latest_experiment(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> list[Path]:
    """The newest run and, for its lab and trace, the newest run of every mode under every conditions
    (oldest first).

    This is what ``aidclab report latest`` compares: a replay of one trace in several modes writes one
    run per mode, and the report wants them side by side; a run under other conditions (a lossy link, a
    link down, another time scale, a fault) does not replace the clean run of its mode, it is reported
    in a group of its own (orchestrator.experiment.conditions).
    """
    runs = list_runs(results_dir)
    if not runs:
        raise ResultsError(
            f"{results_dir}: no runs yet, so 'latest' means nothing; replay a workload first "
            "(aidclab replay LAB TRACE) or pass --results-dir"
        )
    lab, trace, _mode, _conditions = _experiment_key(runs[-1])
    chosen: dict[tuple[str, Conditions], Path] = {}
    for run in reversed(runs):
        r_lab, r_trace, r_mode, r_conditions = _experiment_key(run)
        if (r_lab, r_trace) == (lab, trace) and (r_mode, r_conditions) not in chosen:
            chosen[(r_mode, r_conditions)] = run
    return sorted(p / RUN_FILE for p in chosen.values())
