"""FARE over BGP on the SuperPoD (scaled to --gpus GPUs, all four planes): how fast the sending GPU's kernel
route follows a link event, and how closely measured per-plane traffic shares follow the weights.

Convergence is timed on the host clock (containers share the kernel's clock): t0 just before the bench
changes a link through netlink in a node's namespace, t1 when ``ip monitor route`` in the sending GPU G1's
namespace prints the new route to G2's loopback. The baseline, measured in the same run, is the floor no
agent can beat: t0 until the node that owns the link sees its carrier change (``ip monitor link`` there).
The ratio says how much the agent (and, for remote events, one BGP hop through a leaf) adds to that.

Events, each repeated --rounds times:
  local-down   G1's plane-3 port fails at the leaf end (L3:eth1 down): G1 itself re-routes
  remote-down  G2's plane-3 port fails (G2:eth3 down): L3 withdraws G2's loopback, G1 re-routes
  remote-half  one sub-link of G2's plane-2 Y-cable fails (L2's link to G2 becomes 400G): L2 re-advertises
               400G, G1 re-weights to 2:1:2:2 (t0 = L2's agent event, from its event log)

Share error: G1 sends to G2 with weights 2:1:2:2 per flow (--flows QPs, the kernel hashes the source port)
and per packet (the sender sprays by smooth weighted round-robin); shares are the interfaces' tx counters.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidclab.pytest import Lab  # noqa: E402
from bench.harness import bench_lab, bench_parser  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402

PLANES = ("eth1", "eth2", "eth3", "eth4")
EQUAL = dict.fromkeys(PLANES, 1)
# G1's weights to G2 once one sub-link of G2's plane-2 Y-cable is down (remote-half)
HALF = {"eth1": 2, "eth2": 1, "eth3": 2, "eth4": 2}
# (event, node and port that fail, node whose carrier change is the baseline, its port)
DOWN_EVENTS = (("local-down", "L3", "eth1", "G1", "eth3"), ("remote-down", "G2", "eth3", "L3", "eth2"))
LINKWATCH_SETTLE_S = 1.5
LAB_VARS = {"bandwidth": {"host": "800G", "host_sublinks": 2}, "planes": 4, "bgp": {"enabled": True}}


class Monitor:
    """``ip -n NS monitor KIND``, each line time-stamped on arrival."""

    def __init__(self, netns: str, kind: str) -> None:
        self.proc = subprocess.Popen(
            ["ip", "-n", netns, "monitor", kind], stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        time.sleep(0.2)  # subscribed before anything is triggered

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put((time.time(), line))

    def drain(self) -> None:
        while not self.lines.empty():
            self.lines.get_nowait()

    def wait_for(self, needle: str, after: float, timeout: float = 30.0) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                t, line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if t >= after and needle in line:
                return t
        return None

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def weights(runtime: DockerRuntime, container: str, dst: str) -> dict[str, int]:
    route = runtime.agent(container).bgp()["routes"].get(f"{dst}/32", {})
    out: dict[str, int] = {}
    for hop in route.get("nexthops", []):
        out[hop["dev"]] = out.get(hop["dev"], 0) + hop["weight"]
    return out


def wait_weights(
    runtime: DockerRuntime, container: str, dst: str, want: dict[str, int], timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if weights(runtime, container, dst) == want:
            return
        time.sleep(0.2)
    raise RuntimeError(
        f"{container}: route to {dst} never reached weights {want} (has {weights(runtime, container, dst)})"
    )


def ip_link(netns: str, dev: str, state: str) -> float:
    """Set a link state in a namespace; returns t0 taken just before the netlink request goes out."""
    from orchestrator.lab.netns import netlink

    with netlink(netns) as ns:
        index = ns.link_lookup(ifname=dev)[0]
        t0 = time.time()
        ns.link("set", index=index, state=state)
    return t0


def stats(values: list[float]) -> str:
    med = statistics.median(values)
    return f"median {med:.1f} ms (min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"


def share_line(label: str, tx: dict[str, int], want: dict[str, int]) -> str:
    total_tx = sum(tx[d] for d in want)
    total_w = sum(want.values())
    parts, abs_err, rel_err = [], 0.0, 0.0
    for dev in PLANES:
        if dev not in want:
            continue
        got, exp = tx[dev] / total_tx, want[dev] / total_w
        abs_err, rel_err = max(abs_err, abs(got - exp)), max(rel_err, abs(got - exp) / exp)
        parts.append(f"{dev} {100 * got:.2f}% (weight {100 * exp:.2f}%)")
    return (
        f"fare share {label}: {', '.join(parts)}; max error {100 * abs_err:.2f} points, "
        f"{100 * rel_err:.1f}% relative"
    )


def event_since(agent, since: float, timeout: float = 10.0) -> float:
    """The time of the agent's first link event at or after ``since`` (host clock, shared with the
    containers): it enters the event log once the kernel is programmed, which may be after the control
    call returns."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in agent.bgp()["events"]:
            if event["t_event"] >= since:
                return event["t_event"]
        time.sleep(0.01)
    raise RuntimeError("remote-half: L2's agent logged no bandwidth event")


def parser() -> argparse.ArgumentParser:
    p = bench_parser(__doc__)
    p.add_argument("--gpus", type=int, default=4, help="GPUs kept of the 64 (all four planes stay)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--flows", type=int, default=8000, help="per-flow QPs for the share measurement")
    p.add_argument("--packets", type=int, default=7000, help="per-packet packets for the share")
    return p


def keep_gpus(gpus: int) -> Callable[[dict], None]:
    """The SuperPoD's topology cut to its four leaves and the first ``gpus`` GPUs."""
    keep = {f"L{p}" for p in range(1, 5)} | {f"G{g}" for g in range(1, gpus + 1)}

    def edit(doc: dict) -> None:
        doc["topology"]["nodes"] = {n: v for n, v in doc["topology"]["nodes"].items() if n in keep}
        doc["topology"]["links"] = [
            link
            for link in doc["topology"]["links"]
            if all(ep.split(":")[0] in keep for ep in link["endpoints"])
        ]

    return edit


@contextlib.contextmanager
def monitors(lab: Lab) -> Iterator[tuple[Monitor, dict[str, Monitor]]]:
    """G1's route monitor, and the link monitors of the nodes whose carrier is the baseline."""
    c = lab.topo.container_name
    opened = [Monitor(c("G1"), "route")]
    try:
        links = {}
        for n in ("G1", "L3"):
            links[n] = Monitor(c(n), "link")
            opened.append(links[n])
        yield opened[0], links
    finally:
        for m in opened:
            m.close()


def down_events(lab: Lab, g2: str, routes_g1: Monitor, links: dict[str, Monitor], rounds: int):
    """Per down event, the convergence and baseline times (ms) of each round."""
    runtime, c = lab.runtime, lab.topo.container_name
    results: dict[str, tuple[list[float], list[float]]] = {}
    for event, netns_node, dev, floor_node, floor_dev in DOWN_EVENTS:
        conv, floor = [], []
        for _ in range(rounds):
            routes_g1.drain()
            links[floor_node].drain()
            t0 = ip_link(c(netns_node), dev, "down")
            t_link = links[floor_node].wait_for(f" {floor_dev}@", t0)
            t_route = routes_g1.wait_for(f"{g2} ", t0)
            if t_link is None or t_route is None:
                raise RuntimeError(f"{event}: no {'link' if t_link is None else 'route'} change seen")
            conv.append(1000 * (t_route - t0))
            floor.append(1000 * (t_link - t0))
            wait_weights(runtime, c("G1"), g2, {"eth1": 1, "eth2": 1, "eth4": 1})
            ip_link(c(netns_node), dev, "up")
            wait_weights(runtime, c("G1"), g2, EQUAL)
            # The kernel's linkwatch delays a carrier change by up to 1 s after a recent one on the same
            # device; settling keeps every round measuring the first-event case.
            time.sleep(LINKWATCH_SETTLE_S)
        results[event] = (conv, floor)
    return results


def half_event(lab: Lab, g2: str, routes_g1: Monitor, rounds: int) -> list[float]:
    """remote-half's times (ms) from L2's agent event to G1's kernel route, per round."""
    runtime, c = lab.runtime, lab.topo.container_name
    half = []
    for _ in range(rounds):
        routes_g1.drain()
        l2 = runtime.agent(c("L2"))
        since = time.time()
        l2.bgp_link("eth2", "400G")
        t_event = event_since(l2, since)
        t_route = routes_g1.wait_for(f"{g2} ", t_event)
        if t_route is None:
            raise RuntimeError("remote-half: no route change seen on G1")
        half.append(1000 * (t_route - t_event))
        wait_weights(runtime, c("G1"), g2, HALF)
        if len(half) < rounds:
            l2.bgp_link("eth2", "800G")
            wait_weights(runtime, c("G1"), g2, EQUAL)
    return half


def convergence_lines(results: dict[str, tuple[list[float], list[float]]], half: list[float]) -> None:
    for event, (conv, floor) in results.items():
        ratio = statistics.median(conv) / statistics.median(floor)
        print(
            f"fare convergence {event}: link event -> G1 kernel route {stats(conv)}; "
            f"baseline (carrier seen by the link's node) {stats(floor)}; ratio {ratio:.1f}x"
        )
    print(
        f"fare convergence remote-half: L2 agent event -> G1 kernel route re-weighted 2:1:2:2 {stats(half)}"
    )


def share_lines(lab: Lab, g2: str, args: argparse.Namespace) -> None:
    """G1 sends to G2 per flow and per packet under HALF's weights; each line the shares against them."""
    g1 = lab.runtime.agent(lab.topo.container_name("G1"), timeout=120.0)
    flow = g1.fare_send(g2, mode="per-flow", flows=args.flows)
    print(
        share_line(
            f"per-flow ({args.flows} QPs, kernel hash on the UDP source port)", flow["tx_packets"], HALF
        )
    )
    packet = g1.fare_send(g2, mode="per-packet", packets=args.packets)
    print(share_line(f"per-packet ({args.packets} packets, sender spraying)", packet["tx_packets"], HALF))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    name = f"{args.name_prefix}fare"
    with bench_lab("superpod", name, vars=LAB_VARS, edit=keep_gpus(args.gpus)) as lab:
        c = lab.topo.container_name
        g2 = lab.runtime.agent(c("G2")).config()["loopback"].split("/")[0]
        wait_weights(lab.runtime, c("G1"), g2, EQUAL)
        with monitors(lab) as (routes_g1, links):
            results = down_events(lab, g2, routes_g1, links, args.rounds)
            half = half_event(lab, g2, routes_g1, args.rounds)
            convergence_lines(results, half)
            share_lines(lab, g2, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
