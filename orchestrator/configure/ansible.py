"""Configure a deployed lab: compute the plan, write it where Ansible finds it, run playbooks/site.yml
through ansible-runner with progress by host and task, and name whatever fails.

The plan lands in the lab directory beside the inventory (``host_vars/<container>.yml`` with
``aidclab_node``, ``group_vars/all.yml``, and the whole ``plan.yml``), so a plain
``ansible-playbook -i clab-<lab>/ansible-inventory.yml playbooks/site.yml`` sees the same data.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.lab.labdir import lab_bgp_md5, lab_dir, write_plan_groups
from orchestrator.lab.roles import role_named
from orchestrator.lab.roles.base import FABRIC_SYSCTLS
from orchestrator.lab.topology import Topology
from orchestrator.paths import ANSIBLE_CFG, PLAYBOOKS
from orchestrator.progress import Phases, console

# JSON has no comments: host_vars files say where they come from in a variable of their own.
GENERATED_NOTE = "by aidclab from plan.yml; the next configure overwrites edits"


class ConfigureError(RuntimeError):
    pass


def compute_plan(topo: Topology, extra_groups: list[dict[str, Any]] | None = None):
    """The lab plan from the topology and ``labs/<lab>.vars.yml`` (plus ``extra_groups``, network-BIER
    groups the vars file does not list); raises PlanError naming both sources. Sessions the vars give no
    TCP-MD5 secret get the lab's own (clab-<lab>/bgp.md5, made here on first use)."""
    from orchestrator.configure.plan import PlanError, build_plan, load_vars, vars_path_for

    def lab_md5():
        try:
            return lab_bgp_md5(lab_dir(topo))
        except (OSError, ValueError) as exc:
            raise PlanError(f"the lab's TCP-MD5 secret: {exc}") from None

    return build_plan(topo, load_vars(vars_path_for(topo)), extra_groups or (), lab_md5=lab_md5)


@dataclass
class PlanFiles:
    path: Path  # the lab dir
    changed: list[str]  # containers whose node file (host_vars) is new or different


def write_lab_plan(topo: Topology, plan=None, path: Path | None = None) -> PlanFiles:
    """Write plan.yml, host_vars/ and group_vars/ into the lab dir, where Ansible finds them."""
    from orchestrator.configure.plan import node_configs, write_plan

    path = path or lab_dir(topo)
    plan = plan or compute_plan(topo)
    write_plan(plan, path / "plan.yml")
    host_vars = path / "host_vars"
    host_vars.mkdir(exist_ok=True)
    wanted = set()
    changed = []
    configs = node_configs(plan)
    for node, config in configs.items():
        name = f"{topo.container_name(node)}.yml"
        wanted.add(name)
        # JSON, which is YAML too: PyYAML's representer is Python even with libyaml's emitter, and took 2 s
        # of the plan's 6 s on bsl256, where json takes 0.2 s; Ansible tries JSON first when it reads one.
        node_file = config.model_dump(mode="json", exclude_none=True)
        body = {"aidclab_generated": GENERATED_NOTE, "aidclab_node": node_file}
        text = json.dumps(body, indent=1) + "\n"
        target = host_vars / name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            changed.append(topo.container_name(node))
        if config.bgp is not None and any(n.md5_password for n in config.bgp.neighbors):
            target.chmod(0o600)  # it carries TCP-MD5 secrets (plan.yml never does)
    for stale in host_vars.glob("*.yml"):
        if stale.name not in wanted:
            stale.unlink()
    if (path / "ansible-inventory.yml").exists():  # `aidclab plan` before any deploy has none yet
        write_plan_groups(path, plan_groups(topo, configs))
    group_vars = path / "group_vars"
    group_vars.mkdir(exist_ok=True)
    (group_vars / "all.yml").write_text(
        yaml.safe_dump(
            {
                "aidclab_lab": topo.name,
                "aidclab_plan_file": str((path / "plan.yml").resolve()),
                # What `aidclab deploy` set on every node; configure checks it before installing a file.
                "aidclab_forwarding_sysctls": {
                    key.removeprefix("net.").replace(".", "/"): value for key, value in FABRIC_SYSCTLS.items()
                },
            },
            sort_keys=False,
        )
    )
    return PlanFiles(path, changed)


def plan_groups(topo: Topology, configs: dict[str, Any]) -> dict[str, list[str]]:
    """The inventory groups of the plan, by container name (playbooks/site.yml uses them): its features'
    (intersected there with our node groups: an FRR, GoBGP or BIRD peer has BGP in its plan but no agent)
    and its interop peers (every role that says it is one), so no play lists the peers by name."""
    return {
        "aidclab_igmp": [topo.container_name(n) for n, c in configs.items() if c.igmp is not None],
        "aidclab_bgp": [topo.container_name(n) for n, c in configs.items() if c.bgp and c.bgp.neighbors],
        "aidclab_peers": [
            topo.container_name(n) for n, c in configs.items() if role_named(c.role).interop_peer
        ],
    }


def shape_fabric(topo: Topology, plan, path: Path) -> None:
    """Every link end shaped to its plan rate / time scale, the link-fault program at each end's egress,
    ``fabric.json`` in the lab dir (orchestrator/lab/fabric.py, docs/time-and-fidelity.md), and the delay
    relay holding the delayed links' packets (docs/delay.md)."""
    from orchestrator.lab import relayctl
    from orchestrator.lab.fabric import fabric_from_plan
    from orchestrator.lab.shaping import FabricIOError, apply_fabric

    try:
        fabric = apply_fabric(fabric_from_plan(plan), path, topo.container_name)
        said = relayctl.sync(path, fabric)
    except (FabricIOError, RuntimeError) as exc:
        raise ConfigureError(f"shaping the links of {topo.name}: {exc}") from exc
    if said:
        console.print(f"  {said}")


@dataclass
class RunReport:
    ok: bool
    stats: dict[str, dict[str, int]]
    failures: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def changed(self) -> int:
        return sum(self.stats.get("changed", {}).values())


def _failure_text(data: dict[str, Any]) -> str:
    res = data.get("res") or {}
    parts = [res.get("msg", "")]
    for key in ("stderr", "stdout"):
        text = (res.get(key) or "").strip()
        if text and text not in parts[0]:
            parts.append(text)
    for item in res.get("results") or []:
        if item.get("failed"):
            parts.append(item.get("msg", ""))
    return " | ".join(p.replace("\n", " ") for p in parts if p)[:600]


# A task still running after this long says so, and again every as long: a lab-wide task (the BGP
# sessions waiting to be Established on a 68-node superpod) otherwise prints nothing for minutes.
TICK_S = 10.0


class _Progress:
    """Turns ansible-runner events into one line per task plus every failure as it happens, and a line
    every TICK_S while a task runs (tick(), called by a timer thread)."""

    def __init__(self, hosts: int):
        self.hosts = hosts
        self.task: str | None = None
        self.task_started = 0.0
        self.last_said = 0.0
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []
        self.per_host: dict[str, Counter[str]] = defaultdict(Counter)

    def _close_task(self) -> None:
        if self.task is None:
            return
        c = self.counts
        parts = [f"ok {c['ok']}", f"changed {c['changed']}"]
        parts += [f"{k} {c[k]}" for k in ("failed", "unreachable", "skipped") if c[k]]
        console.print(f"  {self.task}: {', '.join(parts)} ({time.monotonic() - self.task_started:.1f} s)")
        self.task = None

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            self._close_task()
            self.task = ("handler: " if "handler" in kind else "") + str(data.get("task", "?"))
            self.task_started = self.last_said = time.monotonic()
            self.counts = Counter()
        elif kind == "playbook_on_play_start":
            self._close_task()
            console.print(f"[bold]play[/] {data.get('play', '')}")
        elif kind == "runner_on_ok":
            changed = bool((data.get("res") or {}).get("changed"))
            self.counts["changed" if changed else "ok"] += 1
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                return True
            key = "failed" if kind == "runner_on_failed" else "unreachable"
            self.counts[key] += 1
            line = f"{data.get('host')}: task '{data.get('task')}' {key}: {_failure_text(data)}"
            self.failures.append(line)
            console.print(f"  [red]{key.upper()}[/] {line}")
        elif kind == "runner_on_skipped":
            self.counts["skipped"] += 1
        elif kind == "playbook_on_stats":
            self._close_task()
        return True

    def tick(self, now: float) -> str | None:
        """The line to print when the open task has run TICK_S since it started or was last reported:
        how long, and how many hosts finished it so far."""
        if self.task is None or now - self.last_said < TICK_S:
            return None
        self.last_said = now
        done, took = sum(self.counts.values()), now - self.task_started
        return f"  {self.task}: still running, {done}/{self.hosts} hosts done ({took:.0f} s)"


@contextlib.contextmanager
def _ticking(progress: _Progress) -> Iterator[None]:
    """Print progress.tick() lines from a timer thread while the playbook runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(1.0):
            line = progress.tick(time.monotonic())
            if line:
                console.print(line)

    thread = threading.Thread(target=loop, name="ansible-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_playbook(
    inventory: Path,
    playbook: Path | None = None,
    check: bool = False,
    extra_vars: dict[str, Any] | None = None,
    limit: str | None = None,
) -> RunReport:
    import ansible_runner

    playbook = playbook or PLAYBOOKS / "site.yml"
    # A host sits in its role's group and in feature groups (aidclab_bgp, ...): count it once.
    hosts = len(
        {
            host
            for g in (yaml.safe_load(inventory.read_text())["all"].get("children") or {}).values()
            for host in (g or {}).get("hosts") or {}
        }
    )
    progress = _Progress(hosts)
    cmdline = ["--check", "--diff"] if check else []
    if limit:
        cmdline += ["--limit", limit]
    env = {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_CONNECTION_PLUGINS": str(PLAYBOOKS / "connection_plugins"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aidclab-ansible-") as private, _ticking(progress):
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=str(playbook),
            inventory=str(inventory.resolve()),
            envvars=env,
            extravars=extra_vars or {},
            cmdline=" ".join(cmdline) or None,
            event_handler=progress,
            quiet=True,
        )
        stats = runner.stats or {}
        status, rc = runner.status, runner.rc
        if status != "successful" and not progress.failures:
            # Ansible died before any task (bad inventory, syntax error): show what it printed.
            tail = runner.stdout.read()[-2000:] if runner.stdout else ""
            progress.failures.append(f"ansible-playbook {status} (rc {rc}): {tail.strip()}")
    return RunReport(status == "successful", stats, progress.failures, time.monotonic() - started)


def print_recap(report: RunReport) -> None:
    from rich.table import Table

    hosts = sorted({h for per in report.stats.values() if isinstance(per, dict) for h in per})
    table = Table(title="recap")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for host in hosts:
        row = [report.stats.get(k, {}).get(host, 0) for k in ("ok", "changed", "failures", "dark", "skipped")]
        table.add_row(host, *(str(v) for v in row))
    console.print(table)


def configure(
    topo: Topology,
    check: bool = False,
    extra_vars: dict[str, Any] | None = None,
    extra_groups: list[dict[str, Any]] | None = None,
) -> RunReport:
    """Plan and apply. ``extra_groups`` (``bier.groups``-shaped) join the vars file's groups in this plan
    only; a later configure without them removes them again."""
    phases = Phases(f"configure {topo.name}{' --check' if check else ''}")
    path = lab_dir(topo)
    inventory = path / "ansible-inventory.yml"
    if not inventory.exists():
        raise ConfigureError(f"{inventory} does not exist: deploy the lab first (aidclab deploy {topo.path})")
    with phases.phase("plan", f"{topo.path} + vars"):
        plan = compute_plan(topo, extra_groups)
        write_lab_plan(topo, plan, path=path)
    if not check:
        # Links are shaped here, not at deploy: rates, queue limits and the time scale are plan values.
        scale = "unshaped (no time.scale)" if plan.time.scale is None else f"at 1/{plan.time.scale}"
        with phases.phase("fabric", f"{2 * len(plan.links)} link ends {scale}, link-fault programs"):
            shape_fabric(topo, plan, path)
    with phases.phase("ansible", f"{PLAYBOOKS.name}/site.yml on {len(topo.nodes)} nodes"):
        report = run_playbook(inventory, check=check, extra_vars=extra_vars)
    if len(report.stats.get("ok", {})) <= 40:
        print_recap(report)
    if not report.ok:
        raise ConfigureError(
            f"configure failed on {len(report.failures)} host/task(s):\n  " + "\n  ".join(report.failures)
        )
    ok = sum(report.stats.get("ok", {}).values())
    phases.summary(f"ok={ok} changed={report.changed} failed=0 on {len(report.stats.get('ok', {}))} hosts")
    return report
