"""BierMaps.write_policy against an in-memory map store: what the eBPF program will read (bier.h
bier_pol_*) for a policy in the Python dataplane's form, and the counters read back under its names.
The program itself runs in tests/dataplane/test_bier_edge_policy.py."""

from __future__ import annotations

import ctypes
import ipaddress

import pytest

from aidcnet.agent.bier import ebpf as m
from aidcnet.bier.edge_policy import FABRIC, HOST, REASON_CODE, HostBfir, PortPolicy


class FakeBpf:
    """Maps as dicts of key bytes -> value bytes; per-CPU arrays read from ``percpu``."""

    ncpus = 2

    def __init__(self) -> None:
        self.maps: dict[int, dict[bytes, bytes]] = {}
        self.percpu: dict[int, dict[int, list[int]]] = {}

    def update(self, fd: int, key, value) -> None:
        self.maps.setdefault(fd, {})[bytes(key)] = bytes(value)

    def delete(self, fd: int, key) -> None:
        del self.maps[fd][bytes(key)]

    def lookup(self, fd: int, key, buf) -> None:
        for cpu, v in enumerate(self.percpu.get(fd, {}).get(key.value, [0] * self.ncpus)):
            buf[cpu] = v


def maps_with(bpf: FakeBpf, names=m.POL_MAP_NAMES) -> m.BierMaps:
    maps = m.BierMaps.__new__(m.BierMaps)
    maps.bpf = bpf
    maps.fd = {name: i for i, name in enumerate(("bier_cnt", "bier_nbr_cnt", *names))}
    maps.pol_slot, maps._pol_keys, maps._pol_ifindexes = {}, [], []
    return maps


def key(port: int, addr: str) -> bytes:
    return bytes(m.PolKey(port, (ctypes.c_uint8 * 4)(*ipaddress.IPv4Address(addr).packed)))


POLICIES = {
    "eth2": PortPolicy(FABRIC, neighbors=frozenset({"10.1.0.1"})),
    "eth1": PortPolicy(HOST, hosts={"10.0.1.2": HostBfir.reaching(3, [1, 70], 64), "10.0.1.3": HostBfir(4)}),
}


def test_entries_the_program_reads() -> None:
    bpf = FakeBpf()
    maps = maps_with(bpf)
    assert maps.write_policy(POLICIES, {"eth1": 11, "eth2": 12}) == ["eth1", "eth2"]
    fd = maps.fd
    assert m.PolCfg.from_buffer_copy(bpf.maps[fd["bier_pol_cfg"]][bytes(ctypes.c_uint32(0))]).on == 1
    ports = {
        ctypes.c_uint32.from_buffer_copy(k).value: m.PolPort.from_buffer_copy(v)
        for k, v in bpf.maps[fd["bier_pol_port"]].items()
    }
    assert {i: (p.index, p.kind) for i, p in ports.items()} == {11: (0, 1), 12: (1, 2)}
    src = bpf.maps[fd["bier_pol_src"]]
    assert set(src) == {key(0, "10.0.1.2"), key(0, "10.0.1.3"), key(1, "10.1.0.1")}
    bfir = m.PolSrc.from_buffer_copy(src[key(0, "10.0.1.2")])
    # BFR-id 1 is SI 0 bit 1, BFR-id 70 SI 1 bit 6 (BSL 64, RFC 8279 §3)
    assert (bfir.bfr_id, bfir.any, bfir.allowed[0][0], bfir.allowed[1][0], bfir.allowed[2][0]) == (
        3,
        0,
        1,
        32,
        0,
    )
    whole = m.PolSrc.from_buffer_copy(src[key(0, "10.0.1.3")])
    assert (whole.bfr_id, whole.any) == (4, 1)
    assert bytes(m.PolSrc.from_buffer_copy(src[key(1, "10.1.0.1")])) == bytes(ctypes.sizeof(m.PolSrc))


def test_rewrite_removes_old_sources_keeps_slots_and_empty_turns_off() -> None:
    bpf = FakeBpf()
    maps = maps_with(bpf)
    maps.write_policy(POLICIES, {"eth1": 11, "eth2": 12})
    maps.write_policy({"eth3": PortPolicy(FABRIC)}, {"eth3": 13})
    fd = maps.fd
    assert bpf.maps[fd["bier_pol_src"]] == {}
    assert list(bpf.maps[fd["bier_pol_port"]]) == [bytes(ctypes.c_uint32(13))]
    assert maps.pol_slot == {"eth1": 0, "eth2": 1, "eth3": 2}
    maps.write_policy({}, {})
    assert m.PolCfg.from_buffer_copy(bpf.maps[fd["bier_pol_cfg"]][bytes(ctypes.c_uint32(0))]).on == 0
    assert bpf.maps[fd["bier_pol_port"]] == {}


def test_counters_under_the_python_dataplanes_names() -> None:
    bpf = FakeBpf()
    maps = maps_with(bpf)
    maps.write_policy(POLICIES, {"eth1": 11, "eth2": 12})
    slot = m.POL_NREASONS
    bpf.percpu[maps.fd["bier_pol_cnt"]] = {
        0 * slot + REASON_CODE["forged-bfir-id"]: [2, 3],
        1 * slot + REASON_CODE["not-bfr-neighbor"]: [0, 7],
    }
    c = maps.counters({})
    assert c["dropped-policy.eth1.forged-bfir-id"] == 5 and c["dropped-policy.eth2.not-bfr-neighbor"] == 7
    assert c["dropped-policy.eth1.not-bfir"] == 0
    assert {k for k in c if k.startswith("dropped-policy.")} == {
        f"dropped-policy.{p}.{r}" for p in ("eth1", "eth2") for r in REASON_CODE
    }


def test_refusals_name_the_fault() -> None:
    far = {"eth1": PortPolicy(HOST, hosts={"10.0.1.2": HostBfir.reaching(3, [9 * 64 + 1], 64)})}
    with pytest.raises(m.EbpfUnavailable, match=r"eth1: host 10.0.1.2 may address SI 9"):
        maps_with(FakeBpf()).write_policy(far, {"eth1": 11})
    old = maps_with(FakeBpf(), names=())
    assert old.write_policy({}, {}) == []  # an older bier.o without a policy still starts
    with pytest.raises(m.EbpfUnavailable, match="no edge-policy maps"):
        old.write_policy(POLICIES, {"eth1": 11, "eth2": 12})


def test_interface_shortcut_never_disagrees_with_the_hash_maps() -> None:
    """bier_if: the link's neighbour and our address there when bier_local has it; an entry for an
    address that moved to another interface or index is emptied (bier_nbr_addr decides then)."""
    bpf = FakeBpf()
    maps = maps_with(bpf, names=("bier_if", "bier_nbr", "bier_nbr_addr", "bier_local"))
    maps._local, maps._if = set(), {}
    fd = maps.fd["bier_if"]
    mac = bytes(6)

    def entry(ifindex: int) -> m.IfEntry:
        return m.IfEntry.from_buffer_copy(bpf.maps[fd][bytes(ctypes.c_uint32(ifindex % m.IF_SLOTS))])

    maps.set_local(["10.1.0.1"])
    maps.set_neighbor(0, 7, "10.1.0.1", "10.1.0.2", mac, mac)
    maps.set_neighbor(1, 8, "10.2.0.1", "10.2.0.2", mac, None)  # our address there is not in bier_local
    e7, e8 = entry(7), entry(8)
    got = (e7.ifindex, e7.has_local, bytes(e7.local), bytes(e7.nbr_addr), e7.nbr)
    assert got == (7, 1, bytes([10, 1, 0, 1]), bytes([10, 1, 0, 2]), 0)
    assert (e8.ifindex, e8.has_local, bytes(e8.local), e8.nbr) == (8, 0, bytes(4), 1)
    maps.set_neighbor(2, 9, "10.1.0.1", "10.1.0.2", mac, mac)  # 10.1.0.2 now neighbour 2, via ifindex 9
    assert entry(7).ifindex == 0 and entry(9).nbr == 2 and entry(8).nbr == 1
