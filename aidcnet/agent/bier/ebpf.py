"""The eBPF BFR dataplane: the agent loads ``aidcnet/ebpf/bier.c``, attaches it to the BIER interfaces
and programs its maps; the kernel forwards (RFC 8279 §6.5 over RFC 8296 MPLS-in-UDP).

The Python :class:`~aidcnet.agent.bier.dataplane.BierDataplane` keeps running next to it, for three
things: packets the program passes up untouched (counted ``ebpf.punted``: IP options, fragments, more
copies than the maps hold, a neighbour whose MAC is not known yet), host imposition (BFIR), and local
delivery: the program sends the own bit's packet, as received, to :data:`DELIVER_PORT`, where
:class:`EbpfBier` hands it to the dataplane's ``deliver`` callback, so applications, the replay service
and network-BIER egress see the same calls as with the Python dataplane.

Loading: ``bpftool prog loadall`` pins the program and its maps under one bpffs directory
(:data:`PIN_DIR`), and iproute2's ``tc`` attaches the pinned program (clsact ingress, direct-action) on
every interface, so all interfaces share one set of maps.  Map reads and writes go through libbpf's
documented low-level API (``bpf_obj_get``, ``bpf_map_update_elem``, ``bpf_map_lookup_elem``), via
ctypes.  The structures below mirror ``aidcnet/ebpf/bier.h``; tests compare the two.

BIFT updates are atomic: :meth:`BierMaps.write_tables` fills the inactive generation, then flips
``bier_cfg.gen``.

Counters: per-CPU arrays summed here under the Python dataplane's names (see
:mod:`aidcnet.agent.bier.dataplane`); :meth:`EbpfBier.counters` adds the Python dataplane's own, since
every packet is handled by exactly one of the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import ipaddress
import json
import logging
import mmap
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

from aidcnet.agent.bier.dataplane import SOCKET_BUFFER
from aidcnet.bier.bift import Bift
from aidcnet.bier.edge_policy import FABRIC, HOST, REASON_CODE, PortPolicy
from aidcnet.bier.header import BierDecodeError, parse_fields, peek_bift_id
from aidcnet.udpio import STAMP_SPACE, enable_rx_stamps, rx_stamp_ns, set_socket_buffer

log = logging.getLogger("aidcnet.bier.ebpf")

MAX_BSL = 256
WORDS = MAX_BSL // 64
MAX_BIFT = 8
MAX_ECMP = 8
MAX_FBM = 64
MAX_NBR = 64
NULL_NBR = 0xFFFF
GENS = 2
DELIVER_PORT = 16635
"""Local UDP port the program hands own-bit packets to (not 6635, or the Python dataplane would
forward them again)."""
SUPPORTED_BSLS = (64, 128, 256)
POL_MAX_SI = 8  # bier.h BIER_POL_MAX_SI
PIN_DIR = Path("/sys/fs/bpf/aidcnet")
PROGRAM = "bier_rx"
MISSING_HINT = "the image build compiles it (orchestrator/lab/images.py build_ebpf); rebuild the images"

# enum bier_counter in bier.h, in order.
COUNTERS: tuple[str, ...] = (
    "rx.packets",
    "rx.bytes",
    "rx.src.other.packets",
    "rx.src.other.bytes",
    "tx.packets",
    "tx.bytes",
    "tx.errors",
    "accepted",
    "forwarded",
    "replicated",
    "delivered",
    "dropped-malformed",
    "dropped-ttl",
    "dropped-zero-bitstring",
    "dropped-unknown-bift-id",
    "dropped-no-entry",
    "dropped-null-neighbor",
    "dropped-malformed.bad-bsl",
    "dropped-malformed.bad-nibble",
    "dropped-malformed.bad-s-bit",
    "dropped-malformed.bad-version",
    "dropped-malformed.bsl-mismatch",
    "dropped-malformed.truncated",
    "dropped-bits.no-entry",
    "dropped-bits.null-nbr",
    "dropped-bits.ttl-expired",
    "dropped-bits.unknown-bift-id",
    "dropped-bits.zero-bitstring",
    "ebpf.punted",
    "imposed",
    "dropped-policy",
    "ebpf.delivered-direct",
    "ebpf.reported",
    "ebpf.report-lost",
)
NBR_COUNTERS = (
    "rx.nbr.{}.packets",
    "rx.nbr.{}.bytes",
    "tx.nbr.{}.packets",
    "tx.nbr.{}.bytes",
    "tx.nbr.{}.errors",
)
# The same per neighbour, summed per interface (``if.<ifname>.<name>``), as the Python dataplane does.
IF_COUNTERS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "tx_errors")


class EbpfUnavailable(RuntimeError):
    """The eBPF dataplane cannot run here or cannot hold these tables; the message says why."""


# -- ctypes mirrors of bier.h -------------------------------------------------------------------
class Cfg(ctypes.Structure):
    _fields_ = [
        ("gen", ctypes.c_uint32),
        ("deliver_port", ctypes.c_uint16),
        ("ip_ttl", ctypes.c_uint16),
        ("direct_port", ctypes.c_uint16),
        ("report_port", ctypes.c_uint16),
        ("direct_group", ctypes.c_uint8 * 4),
        ("direct_addr", ctypes.c_uint8 * 4),
    ]


REPORT_HEAD = 48  # bier.h BIER_REPORT_HEAD
REPORT_RING = 1 << 18  # bier.h BIER_REPORT_RING
REPORT_FORWARDED, REPORT_IMPOSED = 0, 1  # bier.h BIER_REPORT_*


class Report(ctypes.Structure):
    """bier.h struct bier_report: a packet the program forwarded or imposed, for the agent."""

    _fields_ = [
        ("saddr", ctypes.c_uint8 * 4),
        ("si", ctypes.c_uint16),
        ("kind", ctypes.c_uint16),
        ("bits", ctypes.c_uint64 * 4),
        ("head", ctypes.c_uint8 * REPORT_HEAD),
    ]


class Reported(NamedTuple):
    """One report, as the agent's listeners take it: ``src`` the address the packet came from (a BFR-NBR,
    or the host that sent it when ``imposed``), ``head`` its payload's first octets (IPv4, UDP, the
    reliable common header), ``downstream`` the id-mask of the BFERs it went to from here."""

    src: str
    head: bytes
    downstream: int
    imposed: bool


class ReportRing:
    """The consumer side of a BPF ring buffer map (``bier_report``), mapped into our memory as the kernel
    lays it out (linux/bpf.h, kernel/bpf/ringbuf.c): a page holding the consumer position (ours to write),
    a page holding the producer position, then the data pages twice over, so a record that wraps is one
    contiguous run. Each record: a 32-bit length (bit 31 busy, bit 30 discarded), 32 bits the kernel uses,
    the data, padded to 8 octets."""

    BUSY, DISCARD, HDR = 1 << 31, 1 << 30, 8

    def __init__(self, fd: int, size: int = REPORT_RING) -> None:
        page = mmap.PAGESIZE
        self.fd = fd
        self.size = size
        self._consumer = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._data = page  # where the records start in the producer's mapping

    def read(self, limit: int = 4096) -> list[bytes]:
        """The records written since the last read (at most ``limit``), and they are consumed."""
        cons = int.from_bytes(self._consumer[0:8], "little")
        prod = int.from_bytes(self._producer[0:8], "little")
        out: list[bytes] = []
        mask = self.size - 1
        while cons < prod and len(out) < limit:
            at = self._data + (cons & mask)
            length = int.from_bytes(self._producer[at : at + 4], "little")
            if length & self.BUSY:
                break  # still being written
            n = length & ~(self.BUSY | self.DISCARD)
            if not length & self.DISCARD:
                out.append(self._producer[at + self.HDR : at + self.HDR + n])
            cons += (self.HDR + n + 7) & ~7
        self._consumer[0:8] = cons.to_bytes(8, "little")
        return out

    def close(self) -> None:
        self._consumer.close()
        self._producer.close()


def parse_report(record: bytes, bsl: int) -> Reported:
    """A ``bier_report`` record, its BitString words made an id-mask of BSL ``bsl``'s SI."""
    r = Report.from_buffer_copy(record[: ctypes.sizeof(Report)])
    bits = 0
    for j, word in enumerate(r.bits):
        bits |= word << (64 * j)
    return Reported(
        socket.inet_ntoa(bytes(r.saddr)), bytes(r.head), bits << (r.si * bsl), r.kind == REPORT_IMPOSED
    )


class Direct(NamedTuple):
    """Direct delivery (bier_cfg.direct_*): own-bit packets carrying IPv4/UDP to ``group``:``port`` are
    decapsulated by the program and re-addressed to ``address``, for an application socket on the port."""

    port: int
    group: str
    address: str


class TableInfo(ctypes.Structure):
    _fields_ = [
        ("valid", ctypes.c_uint32),
        ("bsl", ctypes.c_uint16),
        ("nwords", ctypes.c_uint16),
        ("ecmp_seed", ctypes.c_uint32),
        ("si", ctypes.c_uint32),
        ("own", ctypes.c_uint64 * WORDS),
        ("label", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    ]


# An object built before bier_table held its label (and looked labels up in a bier_label hash map):
# its table entries are TableInfo without the two last fields.  Only `bench --compare-ref` loads one.
OLD_TABLE_SIZE = TableInfo.label.offset


class IfEntry(ctypes.Structure):
    """bier_if: the link's neighbour and our address on it, by ingress ifindex (a shortcut, bier.h)."""

    _fields_ = [
        ("ifindex", ctypes.c_uint32),
        ("has_local", ctypes.c_uint32),
        ("local", ctypes.c_uint8 * 4),
        ("nbr_addr", ctypes.c_uint8 * 4),
        ("nbr", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    ]


IF_SLOTS = 256


class Alt(ctypes.Structure):
    _fields_ = [("fbm", ctypes.c_uint16), ("nbr", ctypes.c_uint16), ("label", ctypes.c_uint32)]


class Entry(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("alt", Alt * MAX_ECMP)]


class Fbm(ctypes.Structure):
    _fields_ = [("w", ctypes.c_uint64 * WORDS)]


class Nbr(ctypes.Structure):
    _fields_ = [
        ("ifindex", ctypes.c_uint32),
        ("saddr", ctypes.c_uint8 * 4),
        ("daddr", ctypes.c_uint8 * 4),
        ("smac", ctypes.c_uint8 * 6),
        ("dmac", ctypes.c_uint8 * 6),
    ]


class FlowKey(ctypes.Structure):
    _fields_ = [("src", ctypes.c_uint8 * 4), ("grp", ctypes.c_uint8 * 4)]


class Flow(ctypes.Structure):
    _fields_ = [
        ("label", ctypes.c_uint32),
        ("bfr_id", ctypes.c_uint16),
        ("pad", ctypes.c_uint16),
        ("bits", ctypes.c_uint64 * WORDS),
    ]


class PolCfg(ctypes.Structure):
    _fields_ = [("on", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class PolPort(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("kind", ctypes.c_uint32)]


class PolKey(ctypes.Structure):
    _fields_ = [("port", ctypes.c_uint32), ("saddr", ctypes.c_uint8 * 4)]


class PolSrc(ctypes.Structure):
    _fields_ = [
        ("bfr_id", ctypes.c_uint16),
        ("any", ctypes.c_uint16),
        ("pad", ctypes.c_uint32),
        ("allowed", (ctypes.c_uint64 * WORDS) * POL_MAX_SI),
    ]


POL_KIND = {HOST: 1, FABRIC: 2}  # bier.h enum bier_pol_kind


def _words(bits: int) -> ctypes.Array:
    return (ctypes.c_uint64 * WORDS)(*((bits >> (64 * j)) & 0xFFFFFFFFFFFFFFFF for j in range(WORDS)))


# -- libbpf --------------------------------------------------------------------------------------
class Libbpf:
    """The few documented libbpf calls we need (libbpf1 from Debian)."""

    def __init__(self) -> None:
        # Debian's soname first: find_library runs ldconfig (a process) to find it.
        try:
            lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
        except OSError:
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so", use_errno=True)
            except OSError as exc:
                raise EbpfUnavailable(f"libbpf not loadable ({exc}); install Debian's libbpf1") from exc
        lib.bpf_obj_get.argtypes = [ctypes.c_char_p]
        lib.bpf_map_update_elem.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
        lib.bpf_map_lookup_elem.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.bpf_map_delete_elem.argtypes = [ctypes.c_int, ctypes.c_void_p]
        self.lib = lib
        self.ncpus = lib.libbpf_num_possible_cpus()
        if self.ncpus <= 0:
            raise EbpfUnavailable("libbpf_num_possible_cpus failed")

    @staticmethod
    def _check(ret: int, what: str) -> None:
        if ret < 0:
            err = ctypes.get_errno() or -ret
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def obj_get(self, path: Path) -> int:
        fd = self.lib.bpf_obj_get(str(path).encode())
        self._check(fd, f"bpf_obj_get {path}")
        return fd

    def update(self, fd: int, key: ctypes._CData, value: ctypes._CData) -> None:
        self._check(self.lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), 0), "map update")

    def lookup(self, fd: int, key: ctypes._CData, value: ctypes._CData) -> bool:
        ret = self.lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(value))
        if ret < 0 and (ctypes.get_errno() or -ret) == errno.ENOENT:
            return False
        self._check(ret, "map lookup")
        return True

    def delete(self, fd: int, key: ctypes._CData) -> None:
        ret = self.lib.bpf_map_delete_elem(fd, ctypes.byref(key))
        if ret < 0 and (ctypes.get_errno() or -ret) != errno.ENOENT:
            self._check(ret, "map delete")


# enum bier_edge_counter in bier.h, in order: NetBierEdge's names (flat and per port).
EDGE_COUNTERS = ("captured", "captured-bytes", "imposed", "csum-completed", "ebpf.edge-punted")
MAX_PORTS = 64
# bier.h BIER_POL_*: the RFC 8296 §6 edge policy maps (aidcnet.bier.edge_policy decides the same).
POL_NREASONS = 5
POL_MAP_NAMES = ("bier_pol_cfg", "bier_pol_port", "bier_pol_src", "bier_pol_cnt")
IMPOSE_PROGRAM = "bier_impose"

MAP_NAMES = (
    "bier_cfg",
    "bier_table",
    "bier_bift",
    "bier_fbm",
    "bier_nbr",
    "bier_nbr_addr",
    "bier_local",
    "bier_cnt",
    "bier_nbr_cnt",
)
EDGE_MAP_NAMES = ("bier_flow", "bier_port", "bier_edge_cnt")
"""bier_impose's own maps; an object without that program (an older revision in a bench) lacks them."""


def check_tables(tables: Mapping[int, Bift], nbr_index: Mapping[str, int]) -> None:
    """Raise EbpfUnavailable when the maps cannot hold these BIFTs (``{our label: Bift}``)."""
    if len(nbr_index) > MAX_NBR:
        raise EbpfUnavailable(f"{len(nbr_index)} BFR-NBRs; the eBPF maps hold {MAX_NBR}")
    if len(tables) > MAX_BIFT:
        raise EbpfUnavailable(f"{len(tables)} BIFTs (SIs); the eBPF maps hold {MAX_BIFT}")
    for bift in tables.values():
        si = bift.si
        if bift.bsl not in SUPPORTED_BSLS:
            raise EbpfUnavailable(
                f"BSL {bift.bsl}: the eBPF dataplane handles BSL {', '.join(map(str, SUPPORTED_BSLS))}"
            )
        fbms = set()
        for k, alts in enumerate(bift.entries):
            if alts is None:
                continue
            if len(alts) > MAX_ECMP:
                raise EbpfUnavailable(
                    f"SI {si} bit {k}: {len(alts)} ECMP alternatives, the maps hold {MAX_ECMP}"
                )
            for fbm, nbr, label in alts:
                fbms.add(fbm)
                if nbr is not None and (nbr not in nbr_index or label is None):
                    raise EbpfUnavailable(f"SI {si} bit {k}: BFR-NBR {nbr!r} has no index or no label")
        if len(fbms) > MAX_FBM:
            raise EbpfUnavailable(f"SI {si}: {len(fbms)} distinct F-BMs, the maps hold {MAX_FBM}")


class BierMaps:
    """The pinned maps of one loaded program."""

    def __init__(self, pin_dir: Path, libbpf: Libbpf | None = None) -> None:
        self.bpf = libbpf or Libbpf()
        self.pin_dir = pin_dir
        self.fd = {name: self.bpf.obj_get(pin_dir / "maps" / name) for name in MAP_NAMES}
        for name in (*EDGE_MAP_NAMES, *POL_MAP_NAMES, "bier_if", "bier_label", "bier_report", "bier_adj"):
            if (pin_dir / "maps" / name).exists():
                self.fd[name] = self.bpf.obj_get(pin_dir / "maps" / name)
        # labels written per generation, so the next write of that generation can remove them
        self._labels: dict[int, list[int]] = {0: [], 1: []}
        self._slots: dict[int, int] = {0: 0, 1: 0}
        self.pol_slot: dict[str, int] = {}  # ifname -> its bier_pol_cnt slot, never reused
        self._local: set[str] = set()  # what set_local put in bier_local
        self._if: dict[int, IfEntry] = {}  # bier_if as written, by slot
        self._pol_keys: list[PolKey] = []
        self._pol_ifindexes: list[int] = []
        self.report_port = 0  # bier_cfg.report_port, kept by every table write

    def close(self) -> None:
        for fd in self.fd.values():
            os.close(fd)
        self.fd = {}

    def cfg(self) -> Cfg:
        cfg = Cfg()
        self.bpf.lookup(self.fd["bier_cfg"], ctypes.c_uint32(0), cfg)
        return cfg

    def write_tables(
        self,
        tables: Mapping[int, Bift],
        nbr_index: Mapping[str, int],
        deliver_port: int = DELIVER_PORT,
        ip_ttl: int = 64,
        direct: Direct | None = None,
    ) -> int:
        """Write ``{our label: Bift}`` into the inactive generation, then make it active; returns it."""
        check_tables(tables, nbr_index)
        bpf, fd = self.bpf, self.fd
        gen = 1 - (self.cfg().gen & 1)
        for slot in range(self._slots[gen]):
            bpf.update(fd["bier_table"], ctypes.c_uint32(gen * MAX_BIFT + slot), self._table(TableInfo()))
        old = "bier_label" in fd  # an older object (bench --compare-ref): labels in their own map
        for label in self._labels[gen] if old else ():
            bpf.delete(fd["bier_label"], ctypes.c_uint32((gen << 20) | label))
        self._labels[gen] = []
        for slot, (label, bift) in enumerate(sorted(tables.items())):
            base = gen * MAX_BIFT + slot
            fbm_index: dict[int, int] = {}
            for k in range(1, bift.bsl + 1):
                entry = Entry()
                for i, (fbm, nbr, out_label) in enumerate(bift.entries[k] or ()):
                    idx = fbm_index.setdefault(fbm, len(fbm_index))
                    entry.alt[i] = Alt(idx, NULL_NBR if nbr is None else nbr_index[nbr], out_label or 0)
                    entry.n = i + 1
                bpf.update(fd["bier_bift"], ctypes.c_uint32(base * MAX_BSL + k - 1), entry)
            for fbm, idx in fbm_index.items():
                bpf.update(fd["bier_fbm"], ctypes.c_uint32(base * MAX_FBM + idx), Fbm(_words(fbm)))
            seed, own = bift.ecmp_seed & 0xFFFFFFFF, _words(bift.own_mask)
            info = TableInfo(1, bift.bsl, bift.bsl // 64, seed, bift.si, own, label)
            bpf.update(fd["bier_table"], ctypes.c_uint32(base), self._table(info))
            if old:
                bpf.update(fd["bier_label"], ctypes.c_uint32((gen << 20) | label), ctypes.c_uint32(slot))
                self._labels[gen].append(label)
        self._slots[gen] = len(tables)
        # the flip: one array element, written last
        port, group, addr = direct or (0, "0.0.0.0", "0.0.0.0")
        cfg = Cfg(gen, deliver_port, ip_ttl, port, self.report_port, _addr_key(group), _addr_key(addr))
        bpf.update(fd["bier_cfg"], ctypes.c_uint32(0), cfg)
        return gen

    def set_report_port(self, port: int) -> None:
        """Report the reliable DATA to UDP ``port`` the program forwards (0: none) on bier_report."""
        if "bier_report" not in self.fd:
            raise EbpfUnavailable(
                "the eBPF object has no bier_report ring buffer: rebuild it (aidcnet.ebpf.build)"
            )
        self.report_port = port
        cfg = self.cfg()
        cfg.report_port = port
        self.bpf.update(self.fd["bier_cfg"], ctypes.c_uint32(0), cfg)

    def _table(self, info: TableInfo) -> ctypes.Array:
        size = OLD_TABLE_SIZE if "bier_label" in self.fd else ctypes.sizeof(TableInfo)
        return (ctypes.c_uint8 * size).from_buffer_copy(bytes(info)[:size])

    def set_neighbor(
        self, index: int, ifindex: int, saddr: str, daddr: str, smac: bytes, dmac: bytes | None
    ) -> None:
        """``dmac`` None: not resolved yet; packets that need this neighbour go to the Python path."""
        nbr = Nbr(
            ifindex if dmac else 0,
            _addr_key(saddr),
            _addr_key(daddr),
            (ctypes.c_uint8 * 6)(*smac),
            (ctypes.c_uint8 * 6)(*(dmac or bytes(6))),
        )
        self.bpf.update(self.fd["bier_nbr"], ctypes.c_uint32(index), nbr)
        self.bpf.update(self.fd["bier_nbr_addr"], _addr_key(daddr), ctypes.c_uint32(index))
        if "bier_if" in self.fd:
            self._set_if(ifindex, saddr, daddr, index)

    def _set_if(self, ifindex: int, saddr: str, daddr: str, index: int) -> None:
        """The interface's bier_if entry: this neighbour, and our address on the link when bier_local has it.
        An entry elsewhere that names the same neighbour address with another index is emptied, so no
        entry disagrees with bier_nbr_addr."""
        key = _addr_key(daddr)
        for slot, e in list(self._if.items()):
            if bytes(e.nbr_addr) == bytes(key) and (e.nbr != index or e.ifindex != ifindex):
                self.bpf.update(self.fd["bier_if"], ctypes.c_uint32(slot), IfEntry())
                del self._if[slot]
        local = str(ipaddress.IPv4Address(saddr)) in self._local
        entry = IfEntry(ifindex, int(local), _addr_key(saddr if local else "0.0.0.0"), key, index)
        self.bpf.update(self.fd["bier_if"], ctypes.c_uint32(ifindex % IF_SLOTS), entry)
        self._if[ifindex % IF_SLOTS] = entry

    def write_policy(self, policies: Mapping[str, PortPolicy], ifindex: Mapping[str, int]) -> list[str]:
        """Program the edge policy, ``{ifname: PortPolicy}`` as the Python dataplane takes it (empty: off);
        ``ifindex`` maps those ifnames to interface indexes.  Returns the ports it wrote.

        A host allowed BFERs past SI 7 cannot be written (the map holds 8 SIs): EbpfUnavailable, and the
        Python dataplane forwards and checks instead."""
        bpf, fd = self.bpf, self.fd
        if "bier_pol_cfg" not in fd:
            if not policies:
                return []  # an older bier.o: nothing to enforce, nothing to program
            raise EbpfUnavailable("this bier.o has no edge-policy maps (bier_pol_*); rebuild it")
        # a port keeps its counter slot across rewrites, so its counts stay its own
        slot = dict(self.pol_slot)
        for ifname in sorted(policies):
            slot.setdefault(ifname, len(slot))
        if len(slot) > MAX_PORTS:
            raise EbpfUnavailable(f"edge policy on {len(slot)} ports; the eBPF maps hold {MAX_PORTS}")
        for ifname, pol in policies.items():
            for addr, h in pol.hosts.items():
                far = [si for si in (h.allowed or {}) if si >= POL_MAX_SI]
                if far:
                    raise EbpfUnavailable(
                        f"edge policy {ifname}: host {addr} may address SI {far[0]}; the eBPF map holds "
                        f"SIs 0..{POL_MAX_SI - 1}"
                    )
        # off while rewriting, so no packet meets half a policy
        bpf.update(fd["bier_pol_cfg"], ctypes.c_uint32(0), PolCfg(0, 0))
        for key in self._pol_keys:
            bpf.delete(fd["bier_pol_src"], key)
        for idx in self._pol_ifindexes:
            bpf.delete(fd["bier_pol_port"], ctypes.c_uint32(idx))
        self._pol_keys, self._pol_ifindexes = [], []
        self.pol_slot = slot
        for ifname, pol in policies.items():
            i = slot[ifname]
            bpf.update(fd["bier_pol_port"], ctypes.c_uint32(ifindex[ifname]), PolPort(i, POL_KIND[pol.kind]))
            self._pol_ifindexes.append(ifindex[ifname])
            entries: list[tuple[str, PolSrc]] = [(a, PolSrc(0, 0, 0)) for a in sorted(pol.neighbors)]
            for addr, h in pol.hosts.items():
                src = PolSrc(h.bfr_id, 1 if h.allowed is None else 0, 0)
                for si, bits in (h.allowed or {}).items():
                    src.allowed[si] = _words(bits)
                entries.append((addr, src))
            for addr, src in entries:
                key = PolKey(i, _addr_key(addr))
                bpf.update(fd["bier_pol_src"], key, src)
                self._pol_keys.append(key)
        if policies:
            bpf.update(fd["bier_pol_cfg"], ctypes.c_uint32(0), PolCfg(1, 0))
        return sorted(policies)

    def set_local(self, addrs: Sequence[str]) -> None:
        for addr in addrs:
            self.bpf.update(self.fd["bier_local"], _addr_key(addr), ctypes.c_uint32(1))
            self._local.add(str(ipaddress.IPv4Address(addr)))

    def set_adjacency_labels(self, labels: Iterable[int]) -> None:
        """The fast-reroute adjacency labels the program hands to the Python dataplane, which pops them
        (aidcnet/bier/fast_reroute.py); any other label that is no BIFT-id stays dropped."""
        if "bier_adj" not in self.fd:
            raise EbpfUnavailable("the eBPF object has no bier_adj map: rebuild it (aidcnet.ebpf.build)")
        for label in labels:
            self.bpf.update(self.fd["bier_adj"], ctypes.c_uint32(label), ctypes.c_uint32(1))

    def _percpu(self, name: str, n: int) -> list[int]:
        out = []
        buf = (ctypes.c_uint64 * self.bpf.ncpus)()
        for i in range(n):
            self.bpf.lookup(self.fd[name], ctypes.c_uint32(i), buf)
            out.append(sum(buf))
        return out

    def _percpu_rows(self, name: str, rows: int, width: int) -> list[int]:
        """A per-CPU array of ``rows`` elements of ``width`` u64 each, summed over CPUs, row after row."""
        out = []
        for i in range(rows):
            buf = (ctypes.c_uint64 * (width * self.bpf.ncpus))()
            self.bpf.lookup(self.fd[name], ctypes.c_uint32(i), buf)
            out += [sum(buf[cpu * width + j] for cpu in range(self.bpf.ncpus)) for j in range(width)]
        return out

    def counters(self, neighbors: Mapping[str, tuple[int, str]]) -> dict[str, int]:
        """``neighbors``: ``{name: (index, ifname)}``.  Names as the Python dataplane's counters."""
        if "bier_label" in self.fd:  # an older object (bench --compare-ref): one element per counter
            flat = self._percpu("bier_cnt", len(COUNTERS))
            per_nbr = self._percpu("bier_nbr_cnt", MAX_NBR * len(NBR_COUNTERS))
        else:  # bier.h: struct bier_counters, and a struct bier_nbr_counters per neighbour
            flat = self._percpu_rows("bier_cnt", 1, len(COUNTERS))
            per_nbr = self._percpu_rows("bier_nbr_cnt", MAX_NBR, len(NBR_COUNTERS))
        out = dict(zip(COUNTERS, flat, strict=True))
        if self.pol_slot:
            # the Python dataplane's names; codes as aidcnet.bier.edge_policy.REASON_CODE (0: accepted)
            values = self._percpu("bier_pol_cnt", MAX_PORTS * POL_NREASONS)
            for port, i in self.pol_slot.items():
                for reason, code in REASON_CODE.items():
                    out[f"dropped-policy.{port}.{reason}"] = values[i * POL_NREASONS + code]
        for name, (idx, ifname) in neighbors.items():
            values = per_nbr[idx * len(NBR_COUNTERS) : (idx + 1) * len(NBR_COUNTERS)]
            for fmt, value in zip(NBR_COUNTERS, values, strict=True):
                out[fmt.format(name)] = value
            for fmt, value in zip(IF_COUNTERS, values, strict=True):
                key = f"if.{ifname}.{fmt}"
                out[key] = out.get(key, 0) + value
        return out


def _addr_key(addr: str) -> ctypes.Array:
    return (ctypes.c_uint8 * 4)(*ipaddress.IPv4Address(addr).packed)


def merge_counters(*parts: Mapping[str, int]) -> dict[str, int]:
    """Sum counter dicts key by key: each packet is counted by exactly one dataplane."""
    out: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out


# -- loading and attaching ----------------------------------------------------------------------
Runner = Callable[[list[str]], str]


def run_cmd(prefix: Sequence[str] = ()) -> Runner:
    """A command runner; ``prefix`` (e.g. ``nsenter --net=...``) lets tests act inside a netns."""

    def run(cmd: list[str]) -> str:
        try:
            proc = subprocess.run([*prefix, *cmd], capture_output=True, text=True)
        except FileNotFoundError as exc:
            raise EbpfUnavailable(f"`{cmd[0]}` is not installed ({exc.filename})") from exc
        if proc.returncode != 0:
            raise EbpfUnavailable(f"`{' '.join(cmd)}` failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
        return proc.stdout

    return run


def ensure_bpffs(root: Path = Path("/sys/fs/bpf")) -> None:
    """Mount bpffs where the pins go if nothing is mounted there (a container has none by default)."""
    if os.path.ismount(root):
        return
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "bpf", "bpf", str(root)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EbpfUnavailable(
            f"cannot mount bpffs on {root} ({proc.stderr.strip()}): the node needs SYS_ADMIN"
        )


def load(obj: Path, pin_dir: Path, run: Runner) -> None:
    """Load the object once, pinning its program and maps under ``pin_dir`` (replacing old pins)."""
    if not obj.exists():
        raise EbpfUnavailable(f"{obj} is missing: {MISSING_HINT}")
    if shutil.which("bpftool") is None:
        raise EbpfUnavailable("bpftool is not installed (Debian package bpftool)")
    unpin(pin_dir)
    pin_dir.parent.mkdir(parents=True, exist_ok=True)
    run(
        [
            "bpftool",
            "prog",
            "loadall",
            str(obj),
            str(pin_dir),
            "type",
            "classifier",
            "pinmaps",
            str(pin_dir / "maps"),
        ]
    )


def unpin(pin_dir: Path) -> None:
    if pin_dir.exists():
        shutil.rmtree(pin_dir)


def attach(
    ifnames: Sequence[str], pin_dir: Path, run: Runner, program: str = PROGRAM, pref: int = 49
) -> None:
    """clsact on each of ``ifnames`` and the pinned program on its ingress, direct-action (replaces ours),
    in one ``tc -batch``: three tc processes per interface kept a 64-port SuperPoD leaf's reload past a
    minute on two loaded cores. ``qdisc replace`` keeps a clsact that is there, with its filters (the
    link-fault program on egress)."""
    if not ifnames:
        return
    lines = []
    for ifname in ifnames:
        lines.append(f"qdisc replace dev {ifname} clsact")
        lines.append(
            f"filter replace dev {ifname} ingress pref {pref} handle 1 bpf da "
            f"object-pinned {pin_dir / program}"
        )
    with tempfile.NamedTemporaryFile("w", prefix="aidcnet-tc-", suffix=".batch") as batch:
        batch.write("\n".join(lines) + "\n")
        batch.flush()
        run(["tc", "-batch", batch.name])


def detach(ifname: str, run: Runner, pref: int = 49) -> None:
    try:
        run(["tc", "filter", "del", "dev", ifname, "ingress", "pref", str(pref)])
    except EbpfUnavailable as exc:
        log.debug("%s: %s", ifname, exc)


@dataclass(frozen=True)
class NeighborView:
    """What the kernel says about the BFR's links and neighbours, read in three commands whatever the
    neighbour count (one per neighbour took a 64-port leaf past a minute)."""

    links: dict[str, tuple[int, bytes]]  # ifname -> (ifindex, MAC)
    addresses: dict[str, list[ipaddress.IPv4Interface]]  # ifname -> its IPv4 addresses
    macs: dict[tuple[str, str], bytes]  # (neighbour address, ifname) -> resolved MAC

    @classmethod
    def read(cls, run: Runner) -> NeighborView:
        links, addresses, macs = {}, {}, {}
        for link in json.loads(run(["ip", "-j", "link", "show"]) or "[]"):
            if link.get("address"):
                mac = bytes.fromhex(link["address"].replace(":", ""))
                links[link["ifname"]] = (int(link["ifindex"]), mac)
        for link in json.loads(run(["ip", "-j", "-4", "addr", "show"]) or "[]"):
            addresses[link["ifname"]] = [
                ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}")
                for info in link.get("addr_info", [])
                if info.get("family") == "inet"
            ]
        for entry in json.loads(run(["ip", "-j", "-4", "neigh", "show"]) or "[]"):
            mac, state = entry.get("lladdr"), entry.get("state", [])
            if mac and "FAILED" not in state and "INCOMPLETE" not in state:
                macs[(entry["dst"], entry["dev"])] = bytes.fromhex(mac.replace(":", ""))
        return cls(links, addresses, macs)

    def source_for(self, addr: str, ifname: str, run: Runner) -> str:
        """Our address on ``ifname``'s subnet holding ``addr`` (a BFR-NBR is on a connected link);
        otherwise what the kernel's route says."""
        peer = ipaddress.IPv4Address(addr)
        for local in self.addresses.get(ifname, []):
            if peer in local.network:
                return str(local.ip)
        return route_source(addr, run)[0]


def route_source(addr: str, run: Runner) -> tuple[str, str]:
    """``(our source address, egress interface)`` the kernel would use toward ``addr``."""
    (route,) = json.loads(run(["ip", "-j", "route", "get", addr]))
    return route["prefsrc"], route["dev"]


def solicit(targets: Sequence[tuple[str, str]], run: Runner) -> None:
    """Make the kernel resolve each ``(address, ifname)``: one ping each, all at once, so the wait is
    one second whatever their number (their answers do not matter)."""
    if not targets:
        return
    pings = " ".join(
        f"ping -c 1 -W 1 -I {shlex.quote(ifname)} {shlex.quote(addr)} >/dev/null 2>&1 &"
        for addr, ifname in targets
    )
    with contextlib.suppress(EbpfUnavailable):
        run(["sh", "-c", f"{pings} wait"])


# The first wait before asking again for a neighbour the BFR could not resolve.
RESOLVE_RETRY_S = 1.0
# The longest wait between two asks for a neighbour that stays unresolved.
RESOLVE_RETRY_MAX_S = 60.0


class EbpfBier:
    """Attach the program to a BFR's interfaces and keep its maps in step with a BierDataplane.

    ``dataplane`` is the running Python dataplane (its BIFTs, neighbours, labels and deliver callback);
    ``local_addrs`` are this BFR's addresses (packets to them are ours).  ``run`` runs ip/tc/bpftool/ping
    (tests run them inside a netns)."""

    def __init__(
        self,
        dataplane,  # BierDataplane; not imported: this module must not need the agent's socket layer
        obj: Path,
        local_addrs: Sequence[str],
        pin_dir: Path = PIN_DIR,
        run: Runner | None = None,
        deliver_port: int = DELIVER_PORT,
        bind_socket: bool = True,
        interfaces: Sequence[str] | None = None,
        direct: Direct | None = None,
    ) -> None:
        self.dp = dataplane
        self.direct = direct
        self.obj = obj
        self.pin_dir = pin_dir
        self.run = run or run_cmd()
        self.deliver_port = deliver_port
        self.local_addrs = list(local_addrs)
        names = sorted(dataplane.neighbors)
        self.nbr_index = {name: i for i, name in enumerate(names)}
        # BIER arrives from BFR-NBRs, so their interfaces by default (a bench adds its source's)
        # ... and, under an edge policy, on every port it judges (RFC 8296 §6: strangers are dropped there)
        pol_ports = set(getattr(dataplane, "edge_policies", {}))
        self.interfaces = sorted(
            interfaces or {ifname for _addr, ifname in dataplane.neighbors.values()} | pol_ports
        )
        self.unresolved: list[str] = []
        # BFR-NBRs whose copies the Python dataplane sends (their BIER-FRR bypass is on): see punt()
        self.punted: frozenset[str] = frozenset()
        self._nbr_args: dict[str, tuple[int, int, str, str, bytes, bytes | None]] = {}
        self.maps: BierMaps | None = None
        self.sock: socket.socket | None = None
        self._stamping = False
        self.delivered_errors = 0
        self._bind_socket = bind_socket
        # Reports of the packets the program forwards (bier_cfg.report_port): their listener, and the ring.
        self.on_report: Callable[[Reported], None] | None = None
        self.ring: ReportRing | None = None
        self.report_errors = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Load, program and attach; EbpfUnavailable (nothing left attached) when the kernel refuses."""
        check_tables(self.dp.tables, self.nbr_index)
        try:
            load(self.obj, self.pin_dir, self.run)
            self.maps = BierMaps(self.pin_dir)
            self.maps.set_local(self.local_addrs)
            self.resolve_neighbors(solicit_missing=True)
            self.write_tables()
            self.write_policy()
            if self.dp.adjacency_labels:
                self.maps.set_adjacency_labels(self.dp.adjacency_labels)
            if self._bind_socket:
                self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._stamping = False
                # The program delivers at kernel speed; a default-sized buffer overflows on a burst.
                set_socket_buffer(self.sock, socket.SO_RCVBUF, SOCKET_BUFFER)
                self.sock.bind(("0.0.0.0", self.deliver_port))
                self.sock.setblocking(False)
            attach(self.interfaces, self.pin_dir, self.run)
        except (EbpfUnavailable, OSError) as exc:
            self.stop()
            raise EbpfUnavailable(str(exc)) from exc

    def stop(self) -> None:
        for ifname in self.interfaces:
            detach(ifname, self.run)
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.maps is not None:
            self.maps.close()
            self.maps = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        unpin(self.pin_dir)

    def write_tables(self) -> int:
        assert self.maps is not None
        return self.maps.write_tables(
            self.dp.tables, self.nbr_index, deliver_port=self.deliver_port, direct=self.direct
        )

    def write_policy(self) -> list[str]:
        """Copy the dataplane's edge policy into the maps (after BierDataplane.set_edge_policy too)."""
        assert self.maps is not None
        pols = getattr(self.dp, "edge_policies", {})
        links = NeighborView.read(self.run).links if pols else {}
        missing = sorted(set(pols) - set(links))
        if missing:
            raise EbpfUnavailable(f"edge-policy port(s) {', '.join(missing)} do not exist")
        return self.maps.write_policy(pols, {p: links[p][0] for p in pols})

    def resolve_neighbors(self, solicit_missing: bool = False) -> list[str]:
        """Fill bier_nbr from the kernel's links, addresses and neighbour table; returns the unresolved
        names (their copies take the Python path until a retry finds their MACs)."""
        assert self.maps is not None
        view = NeighborView.read(self.run)
        targets = [self.dp.neighbors[name] for name in self.nbr_index]
        if solicit_missing:
            missing_macs = [(addr, ifname) for addr, ifname in targets if (addr, ifname) not in view.macs]
            if missing_macs:
                solicit(missing_macs, self.run)
                view = NeighborView.read(self.run)
        missing = []
        for name, idx in self.nbr_index.items():
            addr, ifname = self.dp.neighbors[name]
            if ifname not in view.links:
                raise EbpfUnavailable(f"interface {ifname} (toward BFR-NBR {name}) does not exist")
            ifindex, smac = view.links[ifname]
            dmac = view.macs.get((addr, ifname))
            if dmac is None:
                missing.append(name)
            self._nbr_args[name] = (idx, ifindex, view.source_for(addr, ifname, self.run), addr, smac, dmac)
            self._write_neighbor(name)
        if missing and missing != self.unresolved:
            log.warning("eBPF BIER: no MAC yet for %s; their copies take the Python path", ", ".join(missing))
        self.unresolved = missing
        return missing

    def _write_neighbor(self, name: str) -> None:
        assert self.maps is not None
        idx, ifindex, saddr, addr, smac, dmac = self._nbr_args[name]
        self.maps.set_neighbor(idx, ifindex, saddr, addr, smac, None if name in self.punted else dmac)

    def punt(self, names: Iterable[str]) -> None:
        """Hand every packet that needs a copy to one of ``names`` to the Python dataplane, which sends
        those copies through their BIER-FRR bypass (the program does not push MPLS labels); the others
        go back to the fast path. Only the changed bier_nbr entries are written: this is the switch-over."""
        new = frozenset(names)
        changed = new ^ self.punted
        self.punted = new
        for name in sorted(changed):
            if name in self._nbr_args:
                self._write_neighbor(name)

    # delivery ----------------------------------------------------------------------------------
    def poll_deliveries(self, max_batch: int = 256) -> int:
        """Hand own-bit packets from the program to the dataplane's deliver callback."""
        if self.sock is None:
            return 0
        deliveries = []
        stamps: list[int] = []
        if self.dp.io.stamping and not self._stamping:
            enable_rx_stamps(self.sock)
            self._stamping = True
        space = STAMP_SPACE if self._stamping else 0
        for _ in range(max_batch):
            try:
                buf, anc, _flags, _addr = self.sock.recvmsg(65535, space)
            except BlockingIOError:
                break
            try:
                bift = self.dp.tables.get(peek_bift_id(buf))
                if bift is None:
                    continue
                f = parse_fields(buf, 0, bift.bsl)
            except BierDecodeError:
                continue  # the program checked it; only a stray sender reaches here
            deliveries.append((bytes(buf[f[13] :]), f[11], f[10], bytes(buf[: f[13]])))
            if space:
                stamps.append(rx_stamp_ns(anc))
        if deliveries:
            self.dp.deliver_local(deliveries, stamps)
        return len(deliveries)

    # reports ----------------------------------------------------------------------------------
    def report(self, port: int, listener: Callable[[Reported], None]) -> None:
        """Hand ``listener`` a :class:`Reported` for every reliable DATA to UDP ``port`` the program
        forwards or imposes (the ACK aggregation needs each window's BFERs; DATA stays in the kernel).
        EbpfUnavailable when the object has no ring buffer."""
        assert self.maps is not None
        self.maps.set_report_port(port)
        if self.ring is None:
            self.ring = ReportRing(self.maps.fd["bier_report"])
            if self._loop is not None:
                self._loop.add_reader(self.ring.fd, self.poll_reports)
        self.on_report = listener

    def poll_reports(self) -> int:
        """Hand the listener every report waiting in the ring."""
        if self.ring is None:
            return 0
        records = self.ring.read()
        for record in records:
            if self.on_report is None:
                break
            try:
                self.on_report(parse_report(record, self.dp.bsl))
            except Exception:
                self.report_errors += 1
                log.exception("eBPF BIER: a report's listener failed")
        return len(records)

    # in the agent's event loop -----------------------------------------------------------------
    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self.ring is not None:
            loop.add_reader(self.ring.fd, self.poll_reports)
        if self.sock is not None:
            loop.add_reader(self.sock.fileno(), self.poll_deliveries)
        if self.unresolved:
            loop.call_later(RESOLVE_RETRY_S, self._retry_resolve, loop, RESOLVE_RETRY_S)

    def _retry_resolve(self, loop: asyncio.AbstractEventLoop, pause_s: float) -> None:
        """Ask the kernel again for the neighbours still unresolved, then read its table. A neighbour that
        was not up at the start and has sent nothing since never appears in the table by itself: on
        bsl256 two leaves still had hosts unresolved at the first replay, whose copies took the Python
        path and the kernel's queue for unresolved neighbours dropped 47 of them. The pings wait a second,
        so they run in a thread, not in the agent's loop. ``pause_s``: the wait before this ask; each
        ask that finds a neighbour still missing doubles it, up to :data:`RESOLVE_RETRY_MAX_S`, so a
        neighbour that is gone for good is not pinged every second for the agent's life."""
        if self.maps is None:
            return
        targets = [self.dp.neighbors[name] for name in self.unresolved if name in self.dp.neighbors]
        asked = loop.run_in_executor(None, solicit, targets, self.run)
        asked.add_done_callback(lambda _done: self._read_resolved(loop, pause_s))

    def _read_resolved(self, loop: asyncio.AbstractEventLoop, pause_s: float) -> None:
        if self.maps is None:
            return
        try:
            if self.resolve_neighbors():
                longer = min(2 * pause_s, RESOLVE_RETRY_MAX_S)
                loop.call_later(longer, self._retry_resolve, loop, longer)
        except (EbpfUnavailable, OSError) as exc:
            log.warning("eBPF BIER: neighbour resolution failed: %s", exc)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is not None and self.sock is not None:
            loop.remove_reader(self.sock.fileno())
        if loop is not None and self.ring is not None:
            loop.remove_reader(self.ring.fd)
        self.stop()

    # observability -----------------------------------------------------------------------------
    def describe(self) -> dict[str, object]:
        """For `aidcnet ctl show bift`: where the maps are and which generation is live."""
        return {
            "ebpf_pins": str(self.pin_dir),
            "ebpf_generation": self.maps.cfg().gen if self.maps is not None else None,
            "ebpf_interfaces": self.interfaces,
            "ebpf_unresolved_neighbors": self.unresolved,
        }

    def counters(self) -> dict[str, int]:
        """The eBPF counters plus the Python dataplane's (punted packets, imposition, deliver errors)."""
        if self.maps is None:
            return self.dp.counters()
        nbrs = {name: (idx, self.dp.neighbors[name][1]) for name, idx in self.nbr_index.items()}
        return merge_counters(self.maps.counters(nbrs), self.dp.counters())


def local_addresses(run: Runner) -> list[str]:
    """Every IPv4 address of this node but 127/8: BIER packets to any of them are ours."""
    out = []
    for link in json.loads(run(["ip", "-j", "-4", "addr", "show"]) or "[]"):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet" and not info["local"].startswith("127."):
                out.append(info["local"])
    return out


def start_fast_path(
    dataplane, obj: Path | None = None, direct: Direct | None = None
) -> tuple[EbpfBier | None, str | None]:
    """Start the eBPF dataplane in front of ``dataplane``; on refusal log why and return (None, why):
    the Python dataplane, already running, then forwards everything. ``direct``: see :data:`Direct`."""
    from aidcnet.ebpf import OBJECT_DIR

    obj = obj or OBJECT_DIR / "bier.o"
    try:
        if not obj.exists():
            raise EbpfUnavailable(f"{obj} is missing: {MISSING_HINT}")
        ensure_bpffs()
        run = run_cmd()
        fast = EbpfBier(dataplane, obj, local_addresses(run), run=run, direct=direct)
        fast.start()
    except (EbpfUnavailable, OSError) as exc:
        why = f"eBPF dataplane not started, the Python dataplane forwards: {exc}"
        log.error("%s", why)
        return None, why
    log.info("eBPF dataplane attached on %s (maps in %s)", ", ".join(fast.interfaces), fast.pin_dir)
    return fast, None


# -- network-BIER imposition ---------------------------------------------------------------------
IMPOSE_PREF = 48


def flow_entries(
    flows: Sequence[object], bfr_id: int, bsl: int, labels_by_si: Mapping[int, int]
) -> tuple[list[tuple[bytes, bytes, int, int]], list[str]]:
    """``(src or 0.0.0.0, group, our label for the SI, BitString)`` for each flow the program can
    impose, and why each other one stays with the Python edge (BFERs in several SIs, this BFR among
    its BFERs, no label for the SI).  ``flows`` are :class:`aidcnet.config.BierFlow`-shaped; the
    Python :class:`~aidcnet.bier.edge.FlowTable` validates them first."""
    from aidcnet.bier.bitstring import bitstrings_from_ids
    from aidcnet.bier.edge import FlowTable, packed

    FlowTable.from_config(flows)  # the same errors as the Python edge
    out, kept = [], []
    for f in flows:
        name = f"({f.source or '*'},{f.group})"  # type: ignore[attr-defined]
        by_si = bitstrings_from_ids(f.bfers, bsl)  # type: ignore[attr-defined]
        if len(by_si) != 1:
            kept.append(f"{name}: BFERs in SIs {sorted(by_si)}")
            continue
        ((si, bits),) = by_si.items()
        if bfr_id in set(f.bfers):  # type: ignore[attr-defined]
            kept.append(f"{name}: this BFR is a BFER (local delivery)")
            continue
        if si not in labels_by_si:
            kept.append(f"{name}: no BIFT label for SI {si}")
            continue
        src = packed(f.source or "0.0.0.0")  # type: ignore[attr-defined]
        out.append((src, packed(f.group), labels_by_si[si], bits))  # type: ignore[attr-defined]
    return out, kept


class EbpfNetBier:
    """bier_impose on a leaf's host ports, in front of a :class:`~aidcnet.agent.bier.net_bier.NetBierEdge`.

    Shares the maps of a started :class:`EbpfBier` (BIFTs, neighbours, counters).  What the program
    does not impose goes up the stack untouched, where the edge's AF_PACKET sockets take it as before;
    :meth:`counters` merges both under the edge's names."""

    def __init__(
        self,
        fast: EbpfBier,
        edge,
        host_ports: Sequence[str],
        flows: Sequence[object],
        run: Runner | None = None,
    ) -> None:
        self.fast = fast
        self.edge = edge
        self.host_ports = list(host_ports)
        self.flows = list(flows)  # what start() writes, and the last set_flows (update_flows patches the map)
        self.run = run or fast.run
        self.port_index = {name: i for i, name in enumerate(self.host_ports)}
        if len(self.port_index) > MAX_PORTS:
            raise EbpfUnavailable(f"{len(self.port_index)} host ports; the eBPF maps hold {MAX_PORTS}")
        self.attached: list[str] = []
        # What the map holds, as flow_entries gave it, (source, group) -> (label, BitString): what
        # set_flows and update_flows diff against; and why each other flow stays with the Python edge.
        self._entries: dict[tuple[bytes, bytes], tuple[int, int]] = {}
        self._kept: dict[str, str] = {}

    @property
    def kept(self) -> list[str]:
        """Why each flow the program does not impose stays with the Python edge."""
        return list(self._kept.values())

    def _keep(self, lines: list[str]) -> None:
        self._kept = {line.split(":", 1)[0]: line for line in lines}

    def start(self) -> None:
        maps = self.fast.maps
        if maps is None:
            raise EbpfUnavailable("the eBPF BFR is not running: start EbpfBier first")
        if "bier_flow" not in maps.fd:
            raise EbpfUnavailable(
                f"{self.fast.obj} has no {IMPOSE_PROGRAM} program: rebuild it (aidcnet.ebpf.build)"
            )
        dp = self.fast.dp
        entries, kept = flow_entries(self.flows, dp.bfr_id, dp.bsl, dp._label_by_si)
        self._keep(kept)
        self._entries = {(src, grp): (label, bits) for src, grp, label, bits in entries}
        for line in self.kept:
            log.info("eBPF net-BIER: %s; the Python edge imposes it", line)
        try:
            for src, grp, label, bits in entries:
                key = FlowKey((ctypes.c_uint8 * 4)(*src), (ctypes.c_uint8 * 4)(*grp))
                maps.bpf.update(maps.fd["bier_flow"], key, Flow(label, dp.bfr_id, 0, _words(bits)))
            links = NeighborView.read(self.run).links
            for name, idx in self.port_index.items():
                if name not in links:
                    raise EbpfUnavailable(f"host port {name} does not exist")
                ifindex, _mac = links[name]
                maps.bpf.update(maps.fd["bier_port"], ctypes.c_uint32(ifindex), ctypes.c_uint32(idx))
            self.attached.extend(self.host_ports)  # before: stop() detaches whatever the batch reached
            attach(self.host_ports, self.fast.pin_dir, self.run, IMPOSE_PROGRAM, IMPOSE_PREF)
        except (EbpfUnavailable, OSError) as exc:
            self.stop()
            raise EbpfUnavailable(str(exc)) from exc

    def set_flows(self, flows: Sequence[object]) -> None:
        """Bring the bier_flow map to ``flows``: write new and changed entries, delete gone ones; what the
        program cannot impose stays with the Python edge (which has the same flows)."""
        maps = self.fast.maps
        if maps is None:
            return
        dp = self.fast.dp
        entries, kept = flow_entries(flows, dp.bfr_id, dp.bsl, dp._label_by_si)
        self.flows = list(flows)
        self._keep(kept)
        new = {(src, grp): (label, bits) for src, grp, label, bits in entries}
        changes = {key: new.get(key) for key in self._entries.keys() | new.keys()}
        self._write(changes)

    def update_flows(self, changes: Mapping[tuple[object | None, object], tuple[int, ...] | None]) -> None:
        """:meth:`set_flows` for some channels alone (per (source or None, group) its BFR-ids, None: it
        went), at their cost and not the map's: a membership change touches a few of hundreds."""
        from aidcnet.bier.edge import packed

        if self.fast.maps is None or not changes:
            return
        dp = self.fast.dp
        writes: dict[tuple[bytes, bytes], tuple[int, int] | None] = {}
        for (source, group), bfers in changes.items():
            key = (packed(source or "0.0.0.0"), packed(group))  # type: ignore[arg-type]
            self._kept.pop(f"({source or '*'},{group})", None)
            writes[key] = None
            if bfers is not None:
                flow = SimpleNamespace(group=group, source=source, bfers=bfers)
                entries, kept = flow_entries([flow], dp.bfr_id, dp.bsl, dp._label_by_si)
                self._kept.update({line.split(":", 1)[0]: line for line in kept})
                for src, grp, label, bits in entries:
                    writes[(src, grp)] = (label, bits)
        self._write(writes)

    def _write(self, changes: Mapping[tuple[bytes, bytes], tuple[int, int] | None]) -> None:
        """Bring these map entries to ``changes`` (None: deleted); an entry that holds it already is left."""
        maps = self.fast.maps
        assert maps is not None
        dp = self.fast.dp
        for (src, grp), value in changes.items():
            if self._entries.get((src, grp)) == value:
                continue
            key = FlowKey((ctypes.c_uint8 * 4)(*src), (ctypes.c_uint8 * 4)(*grp))
            if value is None:
                del self._entries[(src, grp)]
                with contextlib.suppress(OSError):  # already gone
                    maps.bpf.delete(maps.fd["bier_flow"], key)
            else:
                label, bits = value
                maps.bpf.update(maps.fd["bier_flow"], key, Flow(label, dp.bfr_id, 0, _words(bits)))
                self._entries[(src, grp)] = value

    def stop(self) -> None:
        for name in self.attached:
            detach(name, self.run, IMPOSE_PREF)
        self.attached = []

    def counters(self) -> dict[str, int]:
        """The edge's counters plus the program's (each packet is counted by exactly one)."""
        maps = self.fast.maps
        py = self.edge.counters()
        if maps is None or "bier_edge_cnt" not in maps.fd:
            return py
        values = maps._percpu("bier_edge_cnt", MAX_PORTS * len(EDGE_COUNTERS))
        ours: dict[str, int] = {}
        for name, idx in self.port_index.items():
            for j, counter in enumerate(EDGE_COUNTERS):
                v = values[idx * len(EDGE_COUNTERS) + j]
                ours[counter] = ours.get(counter, 0) + v
                if not counter.startswith("ebpf."):
                    ours[f"port.{name}.{counter}"] = v
        return merge_counters(py, ours)


def start_net_fast_path(
    fast: EbpfBier | None, edge, host_ports: Sequence[str], flows: Sequence[object]
) -> tuple[EbpfNetBier | None, str | None]:
    """Put bier_impose in front of a running NetBierEdge; on refusal log why and return (None, why):
    the edge, already running, then imposes everything.  ``fast``: the started eBPF BFR (None when
    the Python dataplane forwards, and then the Python edge imposes too)."""
    if fast is None:
        return None, "eBPF imposition not started: the Python dataplane forwards, so the Python edge imposes"
    net = EbpfNetBier(fast, edge, host_ports, flows)
    try:
        net.start()
    except (EbpfUnavailable, OSError) as exc:
        why = f"eBPF imposition not started, the Python edge imposes: {exc}"
        log.error("%s", why)
        return None, why
    log.info(
        "eBPF imposition attached on %s (%d flows to the Python edge)", ", ".join(host_ports), len(net.kept)
    )
    return net, None
