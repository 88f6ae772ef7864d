"""Memory per node, idle and under a replay, so a user can size a machine for a lab.

Deploys a copy of a lab (default leaf-spine), configures it, and reads every container's memory as
`docker stats` does (the cgroup's usage less its page cache, from the memory cgroup's files, checked
against `docker stats` on a few nodes) three times while idle, then ten times a second through a MoE replay
in host-BIER and in unicast, keeping each node's peak. The baseline, measured
in the same run, is a bare container of the GPU-host image that only sleeps: what Docker and the image
cost before our agent runs. Per role it prints the median and the largest node, and the ratio to that
floor; the lab's total is what to budget (plus the page cache, which the kernel gives back).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from aidcnet.modes import MESSAGE_PAIR  # noqa: E402
from aidcnet.roles import Role  # noqa: E402
from bench.harness import bench_lab, bench_parser, moe_trace  # noqa: E402
from orchestrator.lab.roles import role_of  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402

MIB = 1 << 20
FLOOR_NAME = "aidclab-bench-memory-floor"
STATS_CHECKED = 8


def used_bytes(stats: dict) -> int:
    """`docker stats`' MEM USAGE: the cgroup's usage without its page cache (v1 total_inactive_file or
    cache, v2 inactive_file)."""
    mem = stats.get("memory_stats") or {}
    detail = mem.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", detail.get("cache", 0)))
    return int(mem.get("usage", 0)) - int(cache)


def sample(runtime: DockerRuntime, containers: dict[str, str]) -> dict[str, int]:
    api = runtime.api
    return {
        node: used_bytes(api.stats(name, stream=False, one_shot=True)) for node, name in containers.items()
    }


def floor_bytes(runtime: DockerRuntime, image: str) -> int:
    api = runtime.api
    for old in api.containers(all=True, filters={"name": FLOOR_NAME}):
        api.remove_container(old["Id"], force=True)
    cid = api.create_container(image, name=FLOOR_NAME, entrypoint=["sleep", "infinity"])["Id"]
    try:
        api.start(cid)
        time.sleep(2)
        return min(used_bytes(api.stats(cid, stream=False, one_shot=True)) for _ in range(3))
    finally:
        api.remove_container(cid, force=True)


def memory_cgroup(pid: int) -> Path | None:
    """The memory cgroup directory of process ``pid`` (cgroup v1's memory controller, or v2)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            directory = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (directory / "memory.usage_in_bytes").exists():
                return directory
        elif controllers == "":
            directory = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (directory / "memory.current").exists():
                return directory
    return None


def cgroup_used_bytes(directory: Path) -> int:
    """used_bytes from the cgroup's own files: what `docker stats` shows, without a stats call (about
    half a second each, so a whole lab was sampled only every few seconds)."""
    stat = dict(line.split() for line in (directory / "memory.stat").read_text().splitlines())
    if (directory / "memory.usage_in_bytes").exists():
        usage = int((directory / "memory.usage_in_bytes").read_text())
        cache = int(stat.get("total_inactive_file", stat.get("cache", 0)))
    else:
        usage = int((directory / "memory.current").read_text())
        cache = int(stat.get("inactive_file", 0))
    return usage - cache


class PeakSampler(threading.Thread):
    """Each node's peak, read from its memory cgroup ten times a second (through `docker stats` where
    the cgroup cannot be found)."""

    def __init__(self, runtime: DockerRuntime, containers: dict[str, str]):
        super().__init__(daemon=True)
        self.runtime, self.containers = runtime, containers
        self.peak: dict[str, int] = defaultdict(int)
        self.samples = 0
        self.stop = threading.Event()
        self.cgroups: dict[str, Path] = {}
        for node, name in containers.items():
            directory = memory_cgroup(runtime.api.inspect_container(name)["State"]["Pid"])
            if directory is not None:
                self.cgroups[node] = directory
        # docker stats takes a second or so per lab round: sampling it faster only queues the calls
        self.from_cgroups = len(self.cgroups) == len(containers)
        self.period_s = 0.1 if self.from_cgroups else 0.5

    def read(self) -> dict[str, int]:
        if self.from_cgroups:
            return {node: cgroup_used_bytes(d) for node, d in self.cgroups.items()}
        return sample(self.runtime, self.containers)

    def run(self) -> None:
        while not self.stop.is_set():
            for node, used in self.read().items():
                self.peak[node] = max(self.peak[node], used)
            self.samples += 1
            self.stop.wait(self.period_s)


def by_role(topo, values: dict[str, int]) -> dict[str, list[int]]:
    roles: dict[str, list[int]] = defaultdict(list)
    for node, value in values.items():
        roles[role_of(topo.nodes[node]).name].append(value)
    return roles


@dataclass
class Memory:
    """What one run read: the floor, every node idle and at its peak under replay, and how it sampled."""

    floor: int
    idle: dict[str, int]
    sampler: PeakSampler
    gap: int  # the largest difference from docker stats' reading, idle, on the nodes checked
    checked: int


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("lab", nargs="?", default="leaf-spine", help="a lab in labs/ (its GPU hosts are h1..hN)")
    p.add_argument("--steps", type=int, default=4, help="MoE steps of the replayed trace")
    p.add_argument("--tokens-per-host", type=int, default=128)
    p.add_argument(
        "--experts", type=int, help="MoE experts (the workload's default; bsl256 needs 1024 for top-8)"
    )
    return p


def measure(lab: Lab, floor: int, args: argparse.Namespace) -> Memory:
    """Every node idle, then its peak through a MoE replay in host-BIER and in unicast."""
    topo, runtime = lab.topo, lab.runtime
    containers = {n: topo.container_name(n) for n in topo.nodes}
    hosts = [n for n in topo.nodes if role_of(topo.nodes[n]).name == Role.GPU_HOST]
    trace = moe_trace(
        lab.workdir / "moe.jsonl", hosts, args.steps, args.tokens_per_host, 1, experts=args.experts
    )
    sampler = PeakSampler(runtime, containers)
    idle_samples = [sampler.read() for _ in range(3)]
    idle = {n: int(statistics.median(s[n] for s in idle_samples)) for n in containers}
    # The sampler's reading against `docker stats`' (idle, so both see the same memory), on a few
    # nodes: docker stats takes most of a second per container.
    checked = dict(list(containers.items())[:: max(1, len(containers) // STATS_CHECKED)])
    stats = sample(runtime, checked)
    gap = max(abs(stats[n] - idle[n]) for n in checked)
    sampler.start()
    try:
        for mode in reversed(MESSAGE_PAIR):
            lab.replay(trace, mode)
    finally:
        sampler.stop.set()
        sampler.join()
    return Memory(floor, idle, sampler, gap, len(checked))


def report(lab: str, topo, m: Memory) -> None:
    floor, idle, sampler = m.floor, m.idle, m.sampler
    print(
        f"bench memory {lab}: {len(idle)} nodes; floor (a sleeping gpu-host container) "
        f"{floor / MIB:.1f} MiB; peaks over {sampler.samples} samples of a MoE replay "
        f"in host-bier and unicast, every {sampler.period_s:.1f} s "
        f"({'memory cgroup files' if sampler.from_cgroups else 'docker stats'}; idle, they differ "
        f"from docker stats by at most {m.gap / MIB:.1f} MiB a node on {m.checked} nodes)"
    )
    idle_roles, peak_roles = by_role(topo, idle), by_role(topo, dict(sampler.peak))
    for role in sorted(idle_roles):
        i, p = idle_roles[role], peak_roles[role]
        print(
            f"  {role:11s} x{len(i):3d}: idle median {statistics.median(i) / MIB:6.1f} MiB "
            f"(max {max(i) / MIB:6.1f}), under replay median {statistics.median(p) / MIB:6.1f} MiB "
            f"(max {max(p) / MIB:6.1f}); ratio to the floor {statistics.median(i) / floor:.1f}x idle, "
            f"{statistics.median(p) / floor:.1f}x under replay"
        )
    print(
        f"  lab total: idle {sum(idle.values()) / MIB:.0f} MiB, under replay (sum of peaks) "
        f"{sum(sampler.peak.values()) / MIB:.0f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    floor = floor_bytes(DockerRuntime(), "aidclab/gpu-host:latest")
    with bench_lab(args.lab, f"{args.name_prefix}mem-{args.lab}") as lab:
        memory = measure(lab, floor, args)
    report(args.lab, lab.topo, memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
