"""The scale experiments of issue 16, as pure functions returning table rows (the CLI plots and writes):

* :func:`savings`: bytes host-BIER and network-BIER save against unicast at 1k/8k/64k GPUs, for MoE
  dispatch (uniform and Zipf-skewed experts) and for a model broadcast to every GPU (seed 000's case);
* :func:`bsl_overhead`: BIER packets per datagram and header share against BSL and BFR-id assignment
  (topology-aware dense ids, where a leaf's and a pod's hosts share an SI, against a random permutation);
* :func:`bift_state`: what one BFR of each tier holds (SIs, BIFT rows, distinct F-BMs), built by
  ``aidcnet.bier.bift.build_bifts`` itself from the BIRT the fabric's shortest paths give.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aidcnet.bier.bift import SELF, build_bifts
from aidcnet.modes import BASELINES, MODELLED, Mode, in_order
from orchestrator.model.clos import ClosModel, sub_domain_size
from orchestrator.model.counts import MODES
from orchestrator.model.fabrics import Clos
from orchestrator.model.workload import EP_GROUP, broadcast, group_hosts, moe_steps

SWITCH_TIERS = ("1>2", "2>1", "2>3", "3>2")


def above_leaves(run: Any) -> float:
    """Bytes on the links between switches (leaf-spine and spine-super-spine, both ways)."""
    return float(sum(run.tier_sums.get(k, [0, 0])[0] for k in SWITCH_TIERS))


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def _ratios(runs: dict[str, Any]) -> dict[str, float]:
    base = runs[Mode.UNICAST]
    out: dict[str, float] = {}
    for mode in in_order(MODELLED - BASELINES):  # the multicast modes against their baseline
        r = runs[mode]
        out[f"{mode} egress x"] = _ratio(base.source_egress_bytes, r.source_egress_bytes)
        out[f"{mode} above-leaf x"] = _ratio(above_leaves(base), above_leaves(r))
        out[f"{mode} fabric x"] = _ratio(base.stats["fabric_bytes"], r.stats["fabric_bytes"])
    hb = runs[Mode.HOST_BIER].stats
    # BIER packets the source imposes per datagram: one per SI its receivers touch.
    out["host-bier SIs/datagram"] = hb["bier_packets"] / max(1, hb["fragments"])
    return out


def savings(sizes: tuple[int, ...] = (1024, 8192, 65536), steps: int = 1) -> list[dict[str, Any]]:
    """Per fabric size and workload: the bytes-weighted fan-out, and what host-BIER and network-BIER save
    against unicast on the sources' egress, on the links between switches, and on the whole fabric."""
    rows = []
    for gpus in sizes:
        fabric = Clos.for_gpus(gpus)
        model = ClosModel(fabric)
        cases: dict[str, Any] = {
            "MoE uniform": lambda f=fabric: moe_steps(f.hosts, steps=steps, placement="strided"),
            "MoE zipf 1.2": lambda f=fabric: moe_steps(
                f.hosts, steps=steps, placement="strided", skew="zipf", zipf_s=1.2
            ),
            "broadcast 1 GiB": lambda f=fabric: [broadcast(f.hosts, 1 << 30)],
        }
        for name, make in cases.items():
            runs = model.runs(MODES, make())
            uni = runs[Mode.UNICAST]
            fan = uni.stats["payload_bytes"] / max(1, _payload_sent(make()))
            rows.append({"gpus": fabric.hosts, "workload": name, "fan-out": fan, **_ratios(runs)})
    return rows


def _payload_sent(batches: Any) -> int:
    """Payload bytes the sources send once per op (a multicast op counted once)."""
    from orchestrator.model.clos import fragments

    return int(sum(fragments(b.nbytes)[1].sum() for b in batches))


def ep_group_ids(n_hosts: int, group_size: int = EP_GROUP) -> np.ndarray:
    """BFR-ids numbered EP group by EP group (strided placement): the hosts that exchange tokens share
    an SI whenever the group fits in one BitString."""
    members = group_hosts(n_hosts, group_size, "strided")
    ids = np.empty(n_hosts, dtype=np.int64)
    ids[members.reshape(-1)] = np.arange(1, n_hosts + 1)
    return ids


def bsl_overhead(
    gpus: int = 8192, bsls: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096), seed: int = 0
) -> list[dict[str, Any]]:
    """Host-BIER against BSL and BFR-id assignment: BIER packets per datagram (one per SI touched), the
    share of header bytes on the fabric, and the savings against unicast (which no BSL changes)."""
    fabric = Clos.for_gpus(gpus)
    rng = np.random.default_rng(seed)
    assignments: dict[str, np.ndarray | None] = {
        "topology (host order)": None,
        "random": rng.permutation(fabric.hosts) + 1,
        "EP group": ep_group_ids(fabric.hosts),
    }
    workloads = {
        "MoE uniform": list(moe_steps(fabric.hosts, steps=1, placement="strided")),
        "broadcast 64 KiB": [broadcast(fabric.hosts, 1 << 16)],
    }
    base = {name: ClosModel(fabric).run(Mode.UNICAST, b) for name, b in workloads.items()}
    rows = []
    for assignment, host_bfr in assignments.items():
        for bsl in bsls:
            model = ClosModel(fabric, bsl=bsl, host_bfr=host_bfr)
            for name, batches in workloads.items():
                if name.startswith("broadcast") and assignment == "EP group":
                    continue  # a broadcast has no group: the assignment is one more permutation
                r = model.run(Mode.HOST_BIER, batches)
                rows.append(
                    {
                        "assignment": assignment,
                        "bsl": bsl,
                        "workload": name,
                        "SIs/datagram": r.stats["bier_packets"] / r.stats["fragments"],
                        "header share": r.stats["header_bytes"] / r.stats["fabric_bytes"],
                        "egress x": _ratio(base[name].source_egress_bytes, r.source_egress_bytes),
                        "fabric x": _ratio(base[name].stats["fabric_bytes"], r.stats["fabric_bytes"]),
                    }
                )
    return rows


def clos_birt(fabric: Clos, node: str) -> dict[int, Any]:
    """The static BIRT of one node of a generated Clos over the host and leaf BFR-ids (the BFERs of
    host- and network-BIER): next hops are the neighbours on the shortest paths, in natural order."""
    n, H, L, S, K = (
        fabric.hosts,
        fabric.hosts_per_leaf,
        fabric.leaves_per_pod,
        fabric.spines_per_pod,
        fabric.supers_per_plane,
    )
    host_leaf = np.arange(n) // H
    ids = list(range(1, n + 1)) + list(range(n + 1, n + fabric.leaves + 1))
    dest_leaf = np.concatenate([host_leaf, np.arange(fabric.leaves)])
    is_host = np.arange(len(ids)) < n
    birt: dict[int, Any] = {}
    kind = node.rstrip("0123456789")
    idx = int(node[len(kind) :]) - 1
    if kind == "h":
        for i, bfr in enumerate(ids):
            birt[bfr] = SELF if i == idx else [f"leaf{host_leaf[idx] + 1}"]
    elif kind == "leaf":
        pod = idx // L
        up = [f"spine{pod * S + j + 1}" for j in range(S)]
        for i, bfr in enumerate(ids):
            if not is_host[i]:
                birt[bfr] = SELF if dest_leaf[i] == idx else up
            else:
                birt[bfr] = [f"h{i + 1}"] if dest_leaf[i] == idx else up
    elif kind == "spine":
        pod, j = divmod(idx, S)
        up = [f"super{j * K + k + 1}" for k in range(K)]
        for i, bfr in enumerate(ids):
            birt[bfr] = [f"leaf{dest_leaf[i] + 1}"] if dest_leaf[i] // L == pod else up
    else:  # super
        j = idx // K
        for i, bfr in enumerate(ids):
            birt[bfr] = [f"spine{(dest_leaf[i] // L) * S + j + 1}"]
    return birt


def bift_state(
    sizes: tuple[int, ...] = (1024, 8192, 65536), bsl: int = 256, sd_size: int | None = None
) -> list[dict[str, Any]]:
    """What one BFR of each tier holds over the host and leaf BFR-ids, summed over the sub-domains the
    fabric needs (``sd_size`` ids each; default :func:`orchestrator.model.clos.sub_domain_size`)."""
    size = sd_size or sub_domain_size(bsl)
    rows = []
    for gpus in sizes:
        fabric = Clos.for_gpus(gpus)
        reps = ["h1", "leaf1", "spine1"] + (["super1"] if fabric.supers else [])
        for node in reps:
            birt = clos_birt(fabric, node)
            sis = rows_n = fbms = 0
            n_sd = -(-max(birt) // size)
            for sd in range(n_sd):
                part = {(i - 1) % size + 1: v for i, v in birt.items() if (i - 1) // size == sd}
                bifts = build_bifts(part, bsl)
                sis += len(bifts)
                rows_n += sum(sum(1 for e in b.entries if e is not None) for b in bifts.values())
                fbms += len({(si, a[0], a[1]) for si, b in bifts.items() for e in b.entries if e for a in e})
            rows.append(
                {
                    "gpus": fabric.hosts,
                    "tier": node.rstrip("0123456789"),
                    "sub-domains": n_sd,
                    "SIs": sis,
                    "BIFT rows": rows_n,
                    "distinct F-BMs": fbms,
                    "state KiB": fbms * (bsl // 8 + 4) / 1024,
                }
            )
    return rows
