"""Configure time for leaf-spine and superpod (or any lab in labs/), against the floor of a trivial one-task
Ansible play.

The floor runs one `ansible.builtin.command: /bin/true` on the same hosts, with the same connection (the
inventory's: aidclab_nsenter as root, pipelining) and ansible.cfg, in the same run: it is the cost of reaching
every host once. The same floor through `docker exec` (community.docker.docker) is printed beside it, to show
what the connection saves. Targets: full superpod configure within 2x the floor and under 60 s (issue 3);
bsl256 first configure within 2x the floor and under 90 s (issue 17).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.configure.ansible import configure, run_playbook  # noqa: E402
from orchestrator.lab.deploy import deploy, destroy  # noqa: E402
from orchestrator.lab.labdir import DOCKER_CONNECTION, lab_dir  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.lab.topology import load_topology  # noqa: E402

FLOOR_PLAY = """\
- name: floor - one trivial task on every configured host
  hosts: bfr:ina_switch:gpu_host:frr
  gather_facts: false
  tasks:
    - name: run /bin/true
      ansible.builtin.command: /bin/true
      changed_when: false
"""


def bench_lab(runtime: DockerRuntime, lab: str, workdir: Path) -> list[str]:
    topo = load_topology(ROOT / "labs" / f"{lab}.clab.yml")
    destroy(topo.name, runtime, quiet=True)
    try:
        deploy(topo, runtime)
        floor_play = workdir / "floor.yml"
        floor_play.write_text(FLOOR_PLAY)
        inventory = lab_dir(topo) / "ansible-inventory.yml"
        connection = yaml.safe_load(inventory.read_text())["all"]["vars"]["ansible_connection"]
        floor_before = run_playbook(inventory, playbook=floor_play)
        floor_docker = run_playbook(
            inventory, playbook=floor_play, extra_vars={"ansible_connection": DOCKER_CONNECTION}
        )
        first = configure(topo)
        second = configure(topo)
        assert second.changed == 0, "second configure was not idempotent"
        floor_after = run_playbook(inventory, playbook=floor_play)
        assert floor_before.ok and floor_after.ok and floor_docker.ok, (
            floor_before.failures + floor_after.failures + floor_docker.failures
        )
        # The floor is measured before and after and the faster kept: the machine is shared and noisy.
        floor = min(floor_before, floor_after, key=lambda r: r.elapsed)
    finally:
        destroy(topo.name, runtime, cleanup=True, quiet=True)
    n = len(topo.nodes)
    return [
        f"bench configure {lab}: {n} nodes",
        f"  floor (one-task play): {floor.elapsed:.2f} s ({floor.elapsed / n:.3f} s/node) through "
        f"{connection}; through docker exec {floor_docker.elapsed:.2f} s "
        f"({floor_docker.elapsed / n:.3f} s/node)",
        f"  configure, first run:  {first.elapsed:.2f} s ({first.elapsed / n:.3f} s/node), "
        f"ratio {first.elapsed / floor.elapsed:.2f}x floor",
        f"  configure, second run: {second.elapsed:.2f} s ({second.elapsed / n:.3f} s/node), "
        f"ratio {second.elapsed / floor.elapsed:.2f}x floor, changed={second.changed}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("labs", nargs="*", default=["leaf-spine", "superpod"])
    args = parser.parse_args()
    runtime = DockerRuntime()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for lab in args.labs:
            lines += bench_lab(runtime, lab, Path(tmp))
    print("\n".join(lines))
    print("  targets: first run <= 2x floor; superpod < 60 s, bsl256 < 90 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
