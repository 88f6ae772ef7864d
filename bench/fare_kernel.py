"""FARE's reaction cost per prefix count, in network namespaces (no Docker, no lab): the agent's own code path
after a link event (RIB recompute + kernel apply) for 4, 16, 64 and 256 prefixes.

Topology: ``f64-<pid>-<n>`` is a GPU with four uplinks up0..up3 (100G each) to ``f64-<pid>-<n>-p``, which
holds the four leaves' ends dn0..dn3; every prefix (a peer GPU's loopback) is learned from all four leaves.
Per prefix count and round:
  install    the route set from an empty table (select + one apply);
  link-down  dn3 goes down in the leaves' namespace, so up3 loses carrier (the bench/fare.py local-down
             event); once the kernel shows it, the agent's path is timed: the link marked down, select,
             then the kernel brought to the new route set (4-way -> 3-way weighted multipath);
  link-up    dn3 comes back, timed the same way.
The baseline, measured in the same run on the same namespaces, is the agent's previous kernel path: a full
route dump after the link event, then one pyroute2 request per changed route (the same select both times).
Printed: per prefix count the medians, the ratio baseline/new, and the new path's 256:4 ratio (flat = 1).
Run as root: python bench/fare_kernel.py [--rounds 7] [--counts 4,16,64,256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.agent.kernel import RouteTable, apply_routes_per_request, read_state  # noqa: E402
from aidcnet.bgp.rib import Link, Rib, kernel_routes, select  # noqa: E402
from aidcnet.bgp.rib import Path as BgpPath  # noqa: E402
from aidcnet.netstate import KernelState, NextHops, diff_state  # noqa: E402
from tests.dataplane.netlab import in_netns, sh  # noqa: E402
from tests.unit.fabric_netns import make_uplinks, wait_carrier  # noqa: E402

PROTO = 186
UPLINKS = 4
LOCAL_ASN = 65100
LEAF_BW = 100e9 / 8  # bytes/s
IFF_LOWER_UP = 0x10000


def build_rib(count: int) -> Rib:
    rib = Rib()
    for k in range(count):
        prefix = f"10.200.{k // 250}.{k % 250 + 1}/32"
        for i in range(UPLINKS):
            rib.update(BgpPath(prefix, f"10.64.{i}.1", (65001 + i, 65200 + k), LEAF_BW))
    return rib


def leaf_links(down: set[str] = frozenset()) -> dict[str, Link]:
    return {
        f"10.64.{i}.1": Link(
            f"10.64.{i}.1", f"L{i + 1}", f"up{i}", 65001 + i, LEAF_BW, up=f"up{i}" not in down
        )
        for i in range(UPLINKS)
    }


class Baseline:
    """The agent's kernel path before this change: dump after a link event, one request per route."""

    def __init__(self) -> None:
        self.installed: dict[str, NextHops] | None = None

    def links_changed(self, devs: set[str]) -> None:
        if devs:
            self.installed = None

    def program(self, routes: dict[str, NextHops]) -> None:
        if self.installed is None:
            self.installed = read_state(set(), proto=PROTO).routes
        diff = diff_state(KernelState(routes=routes), KernelState(routes=self.installed), set())
        apply_routes_per_request(diff.replace_routes, diff.remove_routes, PROTO)
        self.installed = dict(routes)


def react(table: RouteTable | Baseline, rib: Rib, down: set[str], changed: set[str]) -> float:
    """The agent's reaction to a link event, in ms: mark, select, program the kernel."""
    t0 = time.perf_counter()
    table.links_changed(changed)
    routes = kernel_routes(select(rib, leaf_links(down), LOCAL_ASN))
    table.program(routes)
    return 1000 * (time.perf_counter() - t0)


def one_round(
    gpu: str, leaves: str, count: int, make: Callable[[], RouteTable | Baseline]
) -> tuple[float, float, float]:
    rib = build_rib(count)
    with in_netns(gpu):
        RouteTable(PROTO).program({})
        table = make()
        table.program({})  # the empty table read, as an agent that just started
        t_install = react(table, rib, set(), set())
        want = kernel_routes(select(rib, leaf_links(), LOCAL_ASN))
        assert read_state(set(), proto=PROTO).routes == want, "install: kernel routes differ from the RIB"
    sh("ip", "-n", leaves, "link", "set", "dn3", "down")
    wait_carrier(gpu, "up3", False)
    with in_netns(gpu):
        t_down = react(table, rib, {"up3"}, {"up3"})
        want = kernel_routes(select(rib, leaf_links({"up3"}), LOCAL_ASN))
        got = read_state(set(), proto=PROTO).routes
        assert got == want and all(len(h) == 3 for h in got.values()), "link-down: routes not re-routed"
    sh("ip", "-n", leaves, "link", "set", "dn3", "up")
    wait_carrier(gpu, "up3", True)
    with in_netns(gpu):
        t_up = react(table, rib, set(), {"up3"})
        assert read_state(set(), proto=PROTO).routes == kernel_routes(select(rib, leaf_links(), LOCAL_ASN))
    return t_install, t_down, t_up


def med(values: list[float]) -> float:
    return statistics.median(values)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--counts", default="4,16,64,256", help="prefix counts, comma-separated")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if os.geteuid() != 0:
        print("bench/fare_kernel.py creates network namespaces: run it as root", file=sys.stderr)
        return 2
    counts = [int(c) for c in args.counts.split(",")]
    with make_uplinks("f64", UPLINKS) as (gpu, leaves):
        new_down: dict[int, float] = {}
        for count in counts:
            rows: dict[str, list[tuple[float, float, float]]] = {"new": [], "baseline": []}
            for _ in range(args.rounds):
                # Interleaved, so both see the same machine load.
                rows["new"].append(one_round(gpu, leaves, count, lambda: RouteTable(PROTO)))
                rows["baseline"].append(one_round(gpu, leaves, count, Baseline))
            new = [med([r[i] for r in rows["new"]]) for i in range(3)]
            old = [med([r[i] for r in rows["baseline"]]) for i in range(3)]
            new_down[count] = new[1]
            print(
                f"fare kernel {count:4d} prefixes: install {new[0]:7.2f} ms (baseline {old[0]:7.2f}, "
                f"{old[0] / new[0]:5.1f}x), link-down {new[1]:6.2f} ms (baseline {old[1]:7.2f}, "
                f"{old[1] / new[1]:5.1f}x), link-up {new[2]:6.2f} ms (baseline {old[2]:7.2f}, "
                f"{old[2] / new[2]:5.1f}x); medians of {args.rounds}",
                flush=True,
            )
        lo, hi = min(counts), max(counts)
        print(
            f"fare kernel link-down {hi}:{lo} prefixes: {new_down[hi] / new_down[lo]:.1f}x "
            f"({new_down[hi]:.2f} ms / {new_down[lo]:.2f} ms; per extra prefix "
            f"{1000 * (new_down[hi] - new_down[lo]) / (hi - lo):.1f} us)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
