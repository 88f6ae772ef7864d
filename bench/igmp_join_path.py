"""The receiver-driven join path under a burst (issue 14): N IGMPv3 reports at once on two leaves'
host ports -> the time until every (S,G) BitString is installed at both BFIRs.

Two leaves with their Python dataplanes in network namespaces (tests/unit/aidcnet/agent/
test_igmp_service_netns.py's lab), three receiver hosts. Each host sends its share of the burst as
single-record reports (ALLOW({S}) for its own (S,G)), the way N receivers' kernels each report their
own join: the worst case for a per-report path. The same burst, on a fresh lab each, goes through

* the per-report path (``IgmpService(batch=False)``: every report settled on its own, the baseline), and
* the batched path (read the whole burst, settle once, one overlay report, one flow derivation),

and the ratio of the two is printed. The agents' own join-path stamps (aidcnet/igmp/stamps.py) split
the batched figure into leaf processing (heard -> overlay report sent), overlay transit (sent ->
received at the BFIR) and BFIR processing (received -> installed).

Needs root. ``python bench/igmp_join_path.py [--joins 800] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aidcnet.igmp.codec import GroupRecord, RecordType, Report, encode  # noqa: E402
from aidcnet.igmp.node import ALL_V3_ROUTERS  # noqa: E402
from tests.unit.aidcnet.agent.test_igmp_service_netns import TIMERS, IgmpLab  # noqa: E402
from tests.unit.aidcnet.agent.test_net_bier import HOSTS, netns  # noqa: E402

# host -> its leaf's BFR-id (test_igmp_service_netns: hB and hD on l2, hC on l1)
RECEIVER_BFER = {"hB": 2, "hC": 1, "hD": 2}
SOURCE = ipaddress.IPv4Address(HOSTS["hA"])
SO_RCVBUFFORCE = 33


# Nobody answers the General Queries for crafted reports: with the test's 4 s Query Interval the burst's
# memberships would expire (GMI 9 s) before a slow path had installed them all.
TIMERS.update(query_interval=600.0, query_response_interval=10.0, last_member_query_interval=1.0)


def burst(n: int) -> dict[str, list[tuple[ipaddress.IPv4Address, bytes]]]:
    """n single-record joins, dealt round-robin to the receivers; each its own group."""
    out: dict[str, list[tuple[ipaddress.IPv4Address, bytes]]] = {h: [] for h in RECEIVER_BFER}
    hosts = list(RECEIVER_BFER)
    for i in range(n):
        group = ipaddress.IPv4Address(f"239.101.{i // 250}.{i % 250 + 1}")
        record = GroupRecord(RecordType.ALLOW_NEW_SOURCES, group, (SOURCE,))
        out[hosts[i % len(hosts)]].append((group, encode(Report((record,)))))
    return out


def run(batch: bool, n: int, timeout: float) -> dict[str, float]:
    lab = IgmpLab(batch=batch, prefix="jlat")
    try:
        lab.build()
        lab.pump(lambda: True)  # let the startup queries go
        reports = burst(n)
        wanted = {str(g): RECEIVER_BFER[h] for h, rs in reports.items() for g, _ in rs}
        socks = {}
        for host in reports:
            with netns(lab.ns[host]):
                s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(HOSTS[host]))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            socks[host] = s
        for leaf in ("l1", "l2"):
            for port in lab.igmp[leaf]._ports.values():
                # past net.core.rmem_max: a burst lost in the socket would never install (no kernel
                # retransmits crafted reports), and the per-report path reads slowly enough to lose some
                port.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)

        def installed() -> bool:
            for leaf in ("l1", "l2"):
                have = {str(f.group): f.bfers for f in lab.igmp[leaf].leaf.flows() if f.source == SOURCE}
                if any(have.get(g) != (b,) for g, b in wanted.items()):
                    return False
            return True

        t0 = time.time_ns()
        for host, rs in reports.items():  # the whole burst leaves before the agents run again
            for _group, data in rs:
                socks[host].sendto(data, (str(ALL_V3_ROUTERS), 0))
        try:
            lab.pump(installed, timeout=timeout)
        except AssertionError:
            return {"burst_to_installed_s": math.inf, "overlay_reports": math.nan, "flow_updates": math.nan}
        t1 = time.time_ns()
        for s in socks.values():
            s.close()
        out = {"burst_to_installed_s": (t1 - t0) / 1e9}
        leaf_proc, overlay, bfir_proc, heard = [], [], [], {}
        for leaf in ("l1", "l2"):
            st = lab.igmp[leaf].stamps(t0)
            for _src, group, join, heard_ns, sent_ns in st["leaf"]:
                if join and sent_ns is not None:
                    heard[(group, st["bfr_id"])] = sent_ns
                    leaf_proc.append((sent_ns - heard_ns) / 1e9)
            for _bfer, _src, _group, join, received_ns, installed_ns in st["bfir"]:
                if join:
                    bfir_proc.append((installed_ns - received_ns) / 1e9)
        for leaf in ("l1", "l2"):
            for bfer, _src, group, join, received_ns, _installed in lab.igmp[leaf].stamps(t0)["bfir"]:
                sent = heard.get((group, bfer))
                if join and sent is not None:
                    overlay.append((received_ns - sent) / 1e9)
        for name, values in (("leaf", leaf_proc), ("overlay", overlay), ("bfir", bfir_proc)):
            if values:
                out[f"{name}_p50_s"] = statistics.median(values)
                out[f"{name}_max_s"] = max(values)
        c1 = lab.igmp["l1"].all_counters()
        c2 = lab.igmp["l2"].all_counters()
        out["overlay_reports"] = c1.get("bier-reports-out", 0) + c2.get("bier-reports-out", 0)
        out["flow_updates"] = c1.get("shell.flow-updates", 0) + c2.get("shell.flow-updates", 0)
        return out
    finally:
        lab.close()


def main() -> int:
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # the labs close with their timer tasks pending
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--joins", type=int, default=800, help="reports in the burst (default 800)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per path; the median is compared")
    ap.add_argument(
        "--timeout", type=float, default=300.0, help="give a path up after this many s (printed as a bound)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for i in range(args.repeat):
        for batch in (False, True):
            r = run(batch, args.joins, args.timeout)
            results[batch].append(r)
            name = "batched   " if batch else "per-report"
            extra = ""
            if "leaf_p50_s" in r:
                extra = (
                    f"; leaf heard->sent p50 {r['leaf_p50_s'] * 1e3:.1f} ms"
                    f" max {r['leaf_max_s'] * 1e3:.1f} ms"
                    f", overlay p50 {r.get('overlay_p50_s', float('nan')) * 1e3:.1f} ms"
                    f", bfir received->installed p50 {r.get('bfir_p50_s', float('nan')) * 1e3:.1f} ms"
                    f" max {r.get('bfir_max_s', float('nan')) * 1e3:.1f} ms"
                )
            if math.isinf(r["burst_to_installed_s"]):
                print(f"run {i + 1} {name}: not all installed after {args.timeout:g} s", flush=True)
                continue
            print(
                f"run {i + 1} {name}: {args.joins} joins -> all installed at both BFIRs in "
                f"{r['burst_to_installed_s'] * 1e3:.1f} ms ({r['overlay_reports']:.0f} overlay reports, "
                f"{r['flow_updates']:.0f} flow updates){extra}",
                flush=True,
            )
    old = statistics.median(r["burst_to_installed_s"] for r in results[False])
    new = statistics.median(r["burst_to_installed_s"] for r in results[True])
    if math.isinf(old):
        print(
            f"burst of {args.joins} joins, median of {args.repeat}: per-report not done after "
            f"{args.timeout:g} s, batched {new * 1e3:.1f} ms: over {args.timeout / new:.0f}x faster"
        )
    else:
        print(
            f"burst of {args.joins} joins, median of {args.repeat}: per-report {old * 1e3:.1f} ms, batched "
            f"{new * 1e3:.1f} ms: {old / new:.1f}x faster"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
