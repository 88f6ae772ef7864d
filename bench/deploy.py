"""Deploy superpod (68 nodes, 256 links) against the floor of a bare parallel `docker run`.

The floor starts the same 68 containers from the same images with the same parallelism, as a plain
`docker run -d IMAGE` would (default bridge network), and nothing else: no links, no health checks.
Both are measured in this run, since the machine is shared and
noisy; the ratio is what to read. Targets (issue 2): deploy within 1.3x the floor, destroy under 10 s.

A second floor starts them as a lab on its own management hub does, with Docker's networking disabled
(`docker run --network none` without Docker's sandbox), so neither side pays for Docker's bridge: the
ratio against it is what our own work (links, the hub, health checks) costs on top of starting the
containers.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import bench_lab, bench_parser, shipped  # noqa: E402
from orchestrator.lab.deploy import PARALLEL, deploy, destroy  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.lab.topology import load_topology  # noqa: E402

FLOOR_LABEL = "aidclab.bench"


def floor(runtime: DockerRuntime, images: list[str], network_disabled: bool = False) -> float:
    api = runtime.api
    host_config = (
        api.create_host_config(init=True, network_mode="none")
        if network_disabled
        else api.create_host_config(init=True)
    )

    def start(i_image: tuple[int, str]) -> str:
        i, image = i_image
        c = api.create_container(
            image,
            name=f"aidclab-bench-floor-{i}",
            labels={FLOOR_LABEL: "floor"},
            host_config=host_config,
            network_disabled=network_disabled,
        )
        api.start(c["Id"])
        return c["Id"]

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        ids = list(pool.map(start, enumerate(images)))
    elapsed = time.monotonic() - t0
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        list(pool.map(lambda c: api.remove_container(c, force=True), ids))
    return elapsed


def measure(runtime: DockerRuntime, args: argparse.Namespace, images: list[str]) -> dict[str, list[float]]:
    """Per round, the two floors and the seconds to deploy a copy of the lab (ready: every agent healthy,
    links up) and to destroy it. The copy lives in the benches' one lifecycle (its first deploy and last
    destroy are not timed: they include copying and loading the topology, which ``deploy`` does not), and
    each round destroys and deploys it again under the clock, with no lab up while the floors run."""
    times: dict[str, list[float]] = {"floor": [], "quiet": [], "deploy": [], "destroy": []}
    with bench_lab(args.lab, f"{args.name_prefix}deploy-{args.lab}", configure=False) as lab:
        for _ in range(args.rounds):
            t0 = time.monotonic()
            destroy(lab.name, runtime, cleanup=True, quiet=True)
            times["destroy"].append(time.monotonic() - t0)
            times["floor"].append(floor(runtime, images))
            times["quiet"].append(floor(runtime, images, network_disabled=True))
            # Loaded afresh: a deploy settles the topology's management subnet, which another lab may
            # have taken since; the file's own (none) lets this deploy choose a free one.
            topo = load_topology(lab.topo.path)
            t0 = time.monotonic()
            deploy(topo, runtime)
            times["deploy"].append(time.monotonic() - t0)
    return times


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--lab", default="superpod")
    p.add_argument("--rounds", type=int, default=2, help="repeat and keep the best of each (noise)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    runtime = DockerRuntime()
    for c in runtime.api.containers(all=True, filters={"label": FLOOR_LABEL}):
        runtime.api.remove_container(c["Id"], force=True)
    topo = load_topology(shipped(args.lab))
    images = [n.image for n in topo.nodes.values()]
    times = measure(runtime, args, images)
    f, q, d, x = (min(times[k]) for k in ("floor", "quiet", "deploy", "destroy"))
    print(f"bench deploy {args.lab}: {len(topo.nodes)} nodes, {len(topo.links)} links, best of {args.rounds}")
    print(f"  floor (bare parallel docker run x{len(images)}): {f:.2f} s")
    print(f"  aidclab deploy (ready = every agent healthy, links up): {d:.2f} s")
    print(f"  ratio deploy/floor: {d / f:.2f}x (target <= 1.3x)")
    print(f"  floor, Docker's networking disabled (as our nodes start): {q:.2f} s; deploy/it {d / q:.2f}x")
    print(f"  aidclab destroy: {x:.2f} s (target < 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
