"""BFR forwarding speed against the kernel's own IPv4 forwarding, on the same container path.

Lab: src -- dut -- s1..s8. The DUT is one BFR (the real aidcnet agent), configured in turn with each
dataplane (`bier.dataplane`: python, the agent's one thread, then ebpf, its tc program). In the same run
and over the same veths:
  - kernel 1->1: src sends plain UDP to s1's loopback; the DUT's kernel forwards it (ip_forward);
  - BFR 1->1:    src sends MPLS-in-UDP/BIER with s1's bit; the DUT's dataplane forwards it;
  - BFR 1->8:    the same with all eight sinks' bits; the dataplane replicates each packet eight times;
for 64 B and 1000 B payloads. The sender here is one Python process, so the kernel and eBPF lines may be
capped by it (compare "offered"): bench/bier_forwarding_netns.py offers more than the DUT forwards and
adds the kernel's multicast forwarding as the 1->8 anchor. Rates are the DUT's egress packet counters
(kernel veth counters) over a window in the middle of each run. The sinks are paused (docker pause) so
they cost no CPU; their kernels still take the packets. Targets: issue 4, Python BFR 1->1 >= 0.5x kernel
and 1->8 copies/s >= 4x its 1->1; issue 13 (eBPF), see bench/bier_forwarding_netns.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.configure.ansible import configure  # noqa: E402
from orchestrator.lab.deploy import deploy, destroy  # noqa: E402
from orchestrator.lab.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.lab.topology import load_topology  # noqa: E402
from orchestrator.lab.wiring import link_state  # noqa: E402

LAB = "bench-bier"
SINKS = 8


def lab_file(tmp: Path) -> Path:
    nodes = {"src": {"image": "aidclab/gpu-host:latest"}, "dut": {"image": "aidclab/bfr:latest"}}
    nodes.update({f"s{i}": {"image": "aidclab/gpu-host:latest"} for i in range(1, SINKS + 1)})
    links = [{"endpoints": ["src:eth1", "dut:eth1"]}]
    links += [{"endpoints": [f"s{i}:eth1", f"dut:eth{i + 1}"]} for i in range(1, SINKS + 1)]
    doc = {"name": LAB, "topology": {"defaults": {"kind": "linux"}, "nodes": nodes, "links": links}}
    path = tmp / f"{LAB}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def egress_packets(pid: int) -> int:
    state = link_state(pid)
    return sum(int(state[f"eth{i + 1}"]["tx_packets"]) for i in range(1, SINKS + 1))


def quiesce(pid: int, timeout: float = 60.0) -> None:
    """Wait until the DUT sends nothing more: with large socket buffers a BFR can still be draining the
    previous run's backlog, which would count toward the next run's window."""
    deadline = time.monotonic() + timeout
    last, still = egress_packets(pid), 0
    while still < 2 and time.monotonic() < deadline:
        time.sleep(0.25)
        now = egress_packets(pid)
        still = still + 1 if now == last else 0
        last = now


def run(topo, pid: int, args: list[str], seconds: float) -> tuple[float, float]:
    """Start the sender; return (DUT egress packets/s in the middle window, sender packets/s)."""
    quiesce(pid)
    cmd = [
        "ip",
        "netns",
        "exec",
        topo.container_name("src"),
        sys.executable,
        str(ROOT / "bench" / "bier_sender.py"),
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(seconds * 0.25)
    c0, t0 = egress_packets(pid), time.monotonic()
    time.sleep(seconds * 0.5)
    c1, t1 = egress_packets(pid), time.monotonic()
    out, err = proc.communicate(timeout=seconds * 4)
    if proc.returncode != 0:
        raise RuntimeError(f"sender failed: {err.strip()[-500:]}")
    return (c1 - c0) / (t1 - t0), int(out.strip()) / seconds


def measure(
    topo, pid: int, s1_lo: str, bier: list[str], bits: tuple[int, int], size: int, dataplane: str,
    seconds: float,
) -> list[str]:
    """The kernel anchor and the BFR's 1->1 and 1->8 lines (``bits``: s1's, all eight sinks') for one
    payload size, on one dataplane."""
    one, eight = bits
    with_size = [str(size) if a == "SIZE" else a for a in bier]
    kernel, kernel_offered = run(topo, pid, ["udp", s1_lo, "9", str(size), str(seconds)], seconds)
    bfr1, bfr1_offered = run(topo, pid, [*with_size, f"{one:x}"], seconds)
    bfr8, bfr8_offered = run(topo, pid, [*with_size, f"{eight:x}"], seconds)
    name = f"BFR ({dataplane})"
    return [
        f"  {size} B: kernel IPv4 forward 1->1: {kernel / 1e3:.1f} kpps "
        f"(sender offered {kernel_offered / 1e3:.1f} kpps)",
        f"  {size} B: {name} 1->1: {bfr1 / 1e3:.1f} kpps (offered {bfr1_offered / 1e3:.1f}); "
        f"ratio BFR/kernel {bfr1 / kernel:.2f}",
        f"  {size} B: {name} 1->8: {bfr8 / 1e3:.1f} k copies/s ({bfr8 / 8e3:.1f} kpps in, offered "
        f"{bfr8_offered / 1e3:.1f}); ratio copies 1->8 / 1->1 {bfr8 / bfr1:.2f}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each run")
    parser.add_argument("--sizes", default="64,1000", help="payload sizes in bytes")
    args = parser.parse_args()
    runtime = DockerRuntime()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        topo = load_topology(lab_file(Path(tmp)))
        destroy(LAB, runtime, quiet=True)
        deploy(topo, runtime)
        try:
            configure(topo)
            plan = yaml.safe_load((Path(tmp) / topo.lab_dir_name / "plan.yml").read_text())
            nodes = plan["nodes"]
            dut_link = next(
                link for link in plan["links"] if {link["a"]["node"], link["b"]["node"]} == {"src", "dut"}
            )
            dut_addr = (dut_link["a"] if dut_link["a"]["node"] == "dut" else dut_link["b"])["address"].split(
                "/"
            )[0]
            src_lo = nodes["src"]["loopback"].split("/")[0]
            s1_lo = nodes["s1"]["loopback"].split("/")[0]
            bsl = plan["bier"]["bsl"]
            label = nodes["dut"]["bier_label_base"]
            one = 1 << (nodes["s1"]["bfr_id"] - 1)
            eight = sum(1 << (nodes[f"s{i}"]["bfr_id"] - 1) for i in range(1, SINKS + 1))
            pid = runtime.inspect(topo.container_name("dut"))["State"]["Pid"]
            bier = [
                "bier",
                dut_addr,
                "SIZE",
                str(args.seconds),
                str(label),
                str(bsl),
                str(nodes["src"]["bfr_id"]),
                src_lo,
            ]
            lines.append(
                f"bench bier_forwarding: src -> dut (one BFR) -> {SINKS} sinks, "
                f"{args.seconds:.0f} s runs, BSL {bsl}"
            )
            for dataplane in ("python", "ebpf"):
                (Path(tmp) / f"{LAB}.vars.yml").write_text(yaml.safe_dump({"bier": {"dataplane": dataplane}}))
                configure(topo)
                for i in range(1, SINKS + 1):
                    runtime.api.pause(topo.container_name(f"s{i}"))
                try:
                    for size in (int(s) for s in args.sizes.split(",")):
                        lines += measure(topo, pid, s1_lo, bier, (one, eight), size, dataplane, args.seconds)
                finally:
                    for i in range(1, SINKS + 1):
                        runtime.api.unpause(topo.container_name(f"s{i}"))
        finally:
            destroy(LAB, runtime, cleanup=True, quiet=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
