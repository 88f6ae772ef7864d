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
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from bench.harness import bench_lab, bench_parser  # noqa: E402
from orchestrator.configure.ansible import RunReport, run_playbook  # noqa: E402
from orchestrator.lab.labdir import DOCKER_CONNECTION  # noqa: E402

FLOOR_PLAY = """\
- name: floor - one trivial task on every configured host
  hosts: bfr:ina_switch:gpu_host:frr
  gather_facts: false
  tasks:
    - name: run /bin/true
      ansible.builtin.command: /bin/true
      changed_when: false
"""


@dataclass
class Configured:
    """One lab's runs: the floor through the inventory's connection (the faster of before and after) and
    through docker exec, and the first and second configure."""

    connection: str
    floor: RunReport
    floor_docker: RunReport
    first: RunReport
    second: RunReport


def measure(lab: Lab) -> Configured:
    floor_play = lab.workdir / "floor.yml"
    floor_play.write_text(FLOOR_PLAY)
    inventory = lab.lab_dir / "ansible-inventory.yml"
    connection = yaml.safe_load(inventory.read_text())["all"]["vars"]["ansible_connection"]
    floor_before = run_playbook(inventory, playbook=floor_play)
    floor_docker = run_playbook(
        inventory, playbook=floor_play, extra_vars={"ansible_connection": DOCKER_CONNECTION}
    )
    first = lab.configure()
    second = lab.configure()
    assert second.changed == 0, "second configure was not idempotent"
    floor_after = run_playbook(inventory, playbook=floor_play)
    assert floor_before.ok and floor_after.ok and floor_docker.ok, (
        floor_before.failures + floor_after.failures + floor_docker.failures
    )
    # The floor is measured before and after and the faster kept: the machine is shared and noisy.
    floor = min(floor_before, floor_after, key=lambda r: r.elapsed)
    return Configured(connection, floor, floor_docker, first, second)


def lines(lab: str, n: int, c: Configured) -> list[str]:
    floor, first, second = c.floor, c.first, c.second
    return [
        f"bench configure {lab}: {n} nodes",
        f"  floor (one-task play): {floor.elapsed:.2f} s ({floor.elapsed / n:.3f} s/node) through "
        f"{c.connection}; through docker exec {c.floor_docker.elapsed:.2f} s "
        f"({c.floor_docker.elapsed / n:.3f} s/node)",
        f"  configure, first run:  {first.elapsed:.2f} s ({first.elapsed / n:.3f} s/node), "
        f"ratio {first.elapsed / floor.elapsed:.2f}x floor",
        f"  configure, second run: {second.elapsed:.2f} s ({second.elapsed / n:.3f} s/node), "
        f"ratio {second.elapsed / floor.elapsed:.2f}x floor, changed={second.changed}",
    ]


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("labs", nargs="*", default=["leaf-spine", "superpod"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = []
    for shipped in args.labs:
        with bench_lab(shipped, f"{args.name_prefix}conf-{shipped}", configure=False) as lab:
            out += lines(shipped, len(lab.topo.nodes), measure(lab))
    print("\n".join(out))
    print("  targets: first run <= 2x floor; superpod < 60 s, bsl256 < 90 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
