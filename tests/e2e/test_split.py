"""leaf-spine split in two parts side by side on this machine, the cut links over VXLAN (issue 19).

The unsplit lab replays a small trace first; then ``aidclab split --local`` cuts it in two and makes an
underlay namespace per part (two stand-in hosts), ``aidclab deploy MANIFEST`` deploys each part in its
own, the whole lab is configured and replayed through the manifest, and delivery and every link's counters
must equal the unsplit run's (apart from whole ARP frames the kernel sends on its own schedule). The
underlay's own counters show the VXLAN overhead: 50 bytes per inner
frame on the cut links. ``aidclab destroy MANIFEST --cleanup`` leaves no VXLAN device, veth, netns,
container or lab folder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from orchestrator.experiment.results import list_runs, load_run
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.topology import VXLAN_OVERHEAD_V4
from tests.e2e.conftest import ROOT, aidclab, host_veths, lab_copy

TRACE = ROOT / "workloads" / "moe-sample.jsonl"
MODE = "host-bier"  # BIER picks its path from the Entropy: every link direction is deterministic


def replay(lab: str, results: Path, cwd: Path):
    before = set(list_runs(results)) if results.exists() else set()
    # check=True: non-zero unless every (message, receiver) arrived intact exactly once.
    aidclab("replay", lab, str(TRACE), "--mode", MODE, "--results-dir", str(results), cwd=cwd)
    (new,) = set(list_runs(results)) - before
    return load_run(new)


def link_counts(run) -> dict[str, tuple[int, int, int, int]]:
    return {
        lc.link: (lc.a_to_b_packets, lc.a_to_b_bytes, lc.b_to_a_packets, lc.b_to_a_bytes) for lc in run.links
    }


# An ARP frame on a veth (no padding, no FCS). The kernel re-validates a stale neighbour entry with one,
# on its own timer, whichever run happens to be going: a run may carry one more or one fewer than another.
ARP_FRAME = 42
INNER_ETHERNET = 14


def arp_only_differences(got: dict, want: dict) -> dict:
    """The links whose counters differ by anything other than whole ARP frames (at most 2 per direction),
    with both sides: the replay's own frames must match exactly."""
    bad = {}
    for link in got.keys() | want.keys():
        a, b = got.get(link), want.get(link)
        if a is None or b is None:
            bad[link] = (a, b)
            continue
        for i in (0, 2):
            frames, octets = a[i] - b[i], a[i + 1] - b[i + 1]
            if octets != ARP_FRAME * frames or abs(frames) > 2:
                bad[link] = (a, b)
    return bad


def ul0_bytes(netns: str) -> int:
    out = subprocess.run(
        ["ip", "-j", "-s", "-n", netns, "link", "show", "ul0"], capture_output=True, text=True, check=True
    )
    stats = json.loads(out.stdout)[0]["stats64"]
    return stats["tx"]["bytes"] + stats["rx"]["bytes"]


def cut_end_counts(split, cuts: list[dict], part: str) -> tuple[int, int]:
    """Frames and bytes, both ways, of ``part``'s ends of the cut links, read from the interfaces
    themselves: read at the same moments as the underlay, so traffic of the lab's own (BGP keepalives,
    ARP) before or after the replay's counter snapshots is on both sides."""
    topo = split.part_topology(part)
    frames = octets = 0
    for cut in cuts:
        for end in cut["link"].split(" <-> "):
            node, _, ifname = end.partition(":")
            if node not in topo.nodes:
                continue
            out = subprocess.run(
                ["ip", "-j", "-s", "-n", topo.container_name(node), "link", "show", ifname],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            stats = json.loads(out.stdout)[0]["stats64"]
            frames += stats["tx"]["packets"] + stats["rx"]["packets"]
            octets += stats["tx"]["bytes"] + stats["rx"]["bytes"]
    return frames, octets


def lab_netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def vxlan_devices() -> str:
    return subprocess.run(
        ["ip", "-br", "link", "show", "type", "vxlan"], capture_output=True, text=True
    ).stdout


def test_split_leaf_spine_replays_like_the_whole(runtime: DockerRuntime, tmp_path: Path) -> None:
    from orchestrator.lab.split import load_split

    results = tmp_path / "results"
    lab = lab_copy(tmp_path, "leaf-spine", "sp-whole")
    veths0, netns0 = host_veths(), lab_netns()
    # 1. The unsplit lab: the reference run.
    try:
        aidclab("deploy", str(lab), "-q", cwd=tmp_path)
        aidclab("configure", str(lab), cwd=tmp_path)
        whole = replay(str(lab), results, tmp_path)
    finally:
        aidclab("destroy", str(lab), "--cleanup", cwd=tmp_path, check=False)

    # 2. Two parts, each with its own underlay namespace holding the address split gave its host.
    out = aidclab("split", str(lab), "--hosts", "a,b", "--local", "-o", "parts", cwd=tmp_path).stdout
    print(out)
    manifest = tmp_path / "parts" / "sp-whole.split.yml"
    split = load_split(manifest)
    underlay = {p["host"]: p["underlay-netns"] for p in split.parts}
    cuts = yaml.safe_load(manifest.read_text())["cuts"]
    cut_links = {c["link"].replace(" <-> ", "<->") for c in cuts}  # the replay's link ids
    assert len(cut_links) == 4

    try:
        aidclab("deploy", str(manifest), "-q", cwd=tmp_path)
        aidclab("configure", str(manifest), cwd=tmp_path)
        ul_before, cut_before = ul0_bytes(underlay["a"]), cut_end_counts(split, cuts, "a")
        parted = replay(str(manifest), results, tmp_path)
        ul_delta = ul0_bytes(underlay["a"]) - ul_before
        cut_after = cut_end_counts(split, cuts, "a")
    finally:
        aidclab("destroy", str(manifest), "--cleanup", cwd=tmp_path, check=False)

    # Same delivery, same counters on every link, cut or not.
    assert parted.metrics.delivery.ok and parted.metrics.delivery.duplicates == 0  # type: ignore[union-attr]
    assert parted.metrics.delivery == whole.metrics.delivery  # type: ignore[union-attr]
    assert arp_only_differences(link_counts(parted), link_counts(whole)) == {}
    # The cut links' inner frames crossed the underlay with 50 bytes each of outer headers; the
    # underlay also carries its own ARP/ND, a few small frames. Both read over the same wall-clock span.
    counts = link_counts(parted)
    replay_pkts = sum(counts[lk][0] + counts[lk][2] for lk in cut_links)
    inner_pkts, counted = (after - before for after, before in zip(cut_after, cut_before, strict=True))
    # A VXLAN device counts its frames without their 14-byte Ethernet header: the inner frame is 14 more.
    inner_bytes = counted + INNER_ETHERNET * inner_pkts
    assert inner_pkts >= replay_pkts, "the replay's frames on the cut links are among what they carried"
    expected = inner_bytes + VXLAN_OVERHEAD_V4 * inner_pkts
    print(
        f"cut links: {inner_pkts} frames, {inner_bytes} inner bytes; underlay of part a: {ul_delta} bytes "
        f"= inner + {VXLAN_OVERHEAD_V4} x frames + {ul_delta - expected} (underlay ARP/ND); overhead "
        f"{(ul_delta - inner_bytes) / max(inner_bytes, 1):.2%}"
    )
    assert inner_pkts > 0
    assert 0 <= ul_delta - expected <= 2000

    # Nothing left behind: containers, VXLAN devices, veths, namespaces, lab folders.
    assert runtime.lab_containers("sp-whole-a") == [] and runtime.lab_containers("sp-whole-b") == []
    assert vxlan_devices().strip() == ""
    assert host_veths() <= veths0
    assert lab_netns() <= netns0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("clab-")] == []
