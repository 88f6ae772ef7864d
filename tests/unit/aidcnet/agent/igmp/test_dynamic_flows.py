"""Dynamic net-BIER state from IGMP: the eBPF imposition map follows the flows (written, rewritten,
deleted; local-delivery flows stay with the Python edge), and the leaf's status is JSON for the
control socket."""

from __future__ import annotations

import json
from ipaddress import IPv4Address
from types import SimpleNamespace

from aidcnet.agent.bier.ebpf import EbpfNetBier
from aidcnet.igmp.leaf import Flow
from aidcnet.igmp.node import IgmpLeaf, PortConfig
from aidcnet.igmp.router import IgmpTimers

G, G2, S = IPv4Address("232.1.1.1"), IPv4Address("239.1.1.1"), IPv4Address("10.0.0.1")


class FakeBpf:
    def __init__(self) -> None:
        self.map: dict[tuple[bytes, bytes], tuple[int, int]] = {}
        self.writes = 0

    def update(self, _fd, key, value) -> None:
        bits = sum(w << (64 * j) for j, w in enumerate(value.bits))
        self.map[(bytes(key.src), bytes(key.grp))] = (value.label, bits)
        self.writes += 1

    def delete(self, _fd, key) -> None:
        del self.map[(bytes(key.src), bytes(key.grp))]


def fake_net(flows) -> tuple[EbpfNetBier, FakeBpf]:
    bpf = FakeBpf()
    maps = SimpleNamespace(bpf=bpf, fd={"bier_flow": 3})
    dp = SimpleNamespace(bfr_id=1, bsl=64, _label_by_si={0: 100})
    net = EbpfNetBier(SimpleNamespace(maps=maps, dp=dp, run=None), edge=None, host_ports=["hp1"], flows=flows)
    return net, bpf


def test_ebpf_map_follows_the_flows() -> None:
    net, bpf = fake_net([])
    net.set_flows([Flow(G, S, (2, 3)), Flow(G2, None, (4,))])
    assert bpf.map == {(S.packed, G.packed): (100, 0b110), (bytes(4), G2.packed): (100, 0b1000)}
    writes = bpf.writes
    net.set_flows([Flow(G, S, (2, 3)), Flow(G2, None, (5,))])  # unchanged entry not rewritten
    assert bpf.writes == writes + 1 and bpf.map[(bytes(4), G2.packed)] == (100, 0b10000)
    net.set_flows([Flow(G, S, (1, 2))])  # own bit: local delivery stays with the Python edge
    assert bpf.map == {} and net.kept == [f"({S},{G}): this BFR is a BFER (local delivery)"]


def test_ebpf_map_takes_the_changed_channels_alone() -> None:
    """update_flows writes what changed (a membership change touches a few of hundreds), and ends where
    set_flows of the whole list would."""
    net, bpf = fake_net([])
    net.set_flows([Flow(G, S, (2, 3)), Flow(G2, None, (4,))])
    writes = bpf.writes
    net.update_flows({(None, G2): (5,), (S, G): (2, 3)})  # the second is unchanged: not rewritten
    assert bpf.writes == writes + 1 and bpf.map[(bytes(4), G2.packed)] == (100, 0b10000)
    net.update_flows({(S, G): (1, 2)})  # own bit: out of the map, to the Python edge
    assert (S.packed, G.packed) not in bpf.map and net.kept == [
        f"({S},{G}): this BFR is a BFER (local delivery)"
    ]
    net.update_flows({(S, G): (2,), (None, G2): None})
    assert bpf.map == {(S.packed, G.packed): (100, 0b10)} and net.kept == []
    whole, whole_bpf = fake_net([])
    whole.set_flows([Flow(G, S, (2,))])
    assert whole_bpf.map == bpf.map


def test_status_is_json() -> None:
    leaf = IgmpLeaf([PortConfig("hp1", IPv4Address("10.1.0.1"), proxy=True)], IgmpTimers(), 1, 64,
                    IPv4Address("10.255.0.1"), [1], {}, ["igmp", "proxy"], [], 0.0)  # fmt: skip
    status = json.loads(json.dumps(leaf.status(1.0)))
    assert status["ports"]["hp1"]["querier"] is True and status["ports"]["hp1"]["proxy_allowed"] is True
    assert status["groups_from"] == ["igmp", "proxy"]
