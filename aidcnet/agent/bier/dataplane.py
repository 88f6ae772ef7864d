"""The BFR dataplane: BIER packets in MPLS-in-UDP (port 6635) through one UDP socket.

The decision and the packet rewriting are :mod:`aidcnet.bier` (RFC 8279 §6.5, RFC 8296 §3);
this module only moves datagrams, calls it, and counts.  Per batch: one ``recvmmsg``, the
forwarding decision per packet, the copies for every BFR-NBR (BitString AND F-BM, TTL - 1,
label swapped to the neighbor's), one ``sendmmsg`` for all of them, then local deliveries.

Counters (:meth:`BierDataplane.counters`, a flat JSON-ready dict), in packets unless named:

* ``rx.packets``/``rx.bytes``; per neighbor ``rx.nbr.<nbr>.packets``/``.bytes`` (the source
  address is a configured neighbor) or ``rx.src.<addr>.packets``/``.bytes`` otherwise;
  ``rx.errors`` for failed receive calls;
* ``imposed``: packets built by :meth:`BierDataplane.impose` (one per SI);
* every received or imposed packet ends in exactly one of ``accepted`` (at least one copy sent
  or a local delivery) or ``dropped-<reason>``, so ``rx.packets + imposed == accepted + sum of
  dropped-*``.  Reasons: ``dropped-ttl``, ``dropped-zero-bitstring``,
  ``dropped-unknown-bift-id``, ``dropped-malformed`` (and ``dropped-malformed.<decode reason>``
  from :data:`aidcnet.bier.header.DECODE_REASONS`), ``dropped-null-neighbor``,
  ``dropped-no-entry``, ``dropped-policy`` (RFC 8296 §6 edge policy, :mod:`aidcnet.bier.edge_policy`;
  per port and reason ``dropped-policy.<ifname>.<reason>``, ``<ifname>`` ``unknown`` for a source on
  no policed port's subnet);
* ``forwarded`` (packets with at least one copy), ``replicated`` (copies beyond the first),
  ``delivered`` (local deliveries), ``deliver-errors`` (the callback raised);
* ``dropped-bits.<reason>``: BFERs (BitString bits) discarded for a reason, including bits
  dropped from packets that were otherwise forwarded (e.g. one unreachable BFER);
* ``bypass.sent``: copies sent through a fast-reroute bypass (:mod:`aidcnet.bier.fast_reroute`; counted
  in ``tx.nbr.*`` of the tunnel's first hop), ``bypass.nnh.sent`` the ones of them that went to a next-next
  hop (node protection: one copy for a dead neighbour becomes one per next-next hop, the extra ones counted
  in ``replicated``); ``bypass.passed``: bypass packets this BFR popped and passed on (each also
  ``accepted``);
* ``tx.packets``/``tx.bytes``/``tx.errors`` and ``tx.nbr.<nbr>.packets``/``.bytes``/``.errors``;
* ``if.<ifname>.rx_packets``/``rx_bytes``/``tx_packets``/``tx_bytes``/``tx_errors``: the neighbor counters
  summed per local interface.

Known limit: the single socket is bound to the BIER port, so every copy leaves with UDP
source port 6635 rather than the entropy-derived port of RFC 7510 §3
(:func:`aidcnet.bier.mpls.entropy_to_src_port`); ECMP inside BIER uses the Entropy field and
is unaffected, IP-underlay ECMP on the UDP source port is.
"""

from __future__ import annotations

import asyncio
import logging
import select
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from aidcnet.bier.bift import Bift, LabelKey, bifts_by_label
from aidcnet.bier.bitstring import bfr_id_to_si_bit, bitstrings_from_ids
from aidcnet.bier.edge_policy import POLICY_REASONS, PortPolicy, check_bypass
from aidcnet.bier.edge_policy import check as policy_check
from aidcnet.bier.fast_reroute import NnhTunnel, push
from aidcnet.bier.forwarding import DROP_REASONS, ForwardResult, build_copies, forward
from aidcnet.bier.forwarding import impose as impose_decision
from aidcnet.bier.header import (
    DECODE_REASONS,
    BierDecodeError,
    BierHeader,
    BierProto,
    make_copy,
    peek_bift_id,
)
from aidcnet.bier.mpls import MPLS_IN_UDP_PORT, encode_bier_udp_payload, parse_bier_udp_payload, unpack_lse
from aidcnet.udpio import (
    DEFAULT_BATCH,
    BatchIO,
    Datagram,
    interface_index,
    set_socket_buffer,
    size_send_buffer,
)

# An interface that is no data port of this BFR (management, loopback): nothing BIER may enter there.
_UNKNOWN_PORT: tuple[str, PortPolicy | None] = ("unknown", None)
log = logging.getLogger("aidcnet.bier.dataplane")

DeliverFn = Callable[[bytes, int, int, bytes], None]
"""``deliver(inner_payload, bfir_id, proto, header)``; ``header`` is the RFC 8296 header as
received (``BierHeader.decode(header)`` gives the fields)."""
ForwardFn = Callable[[str, bytes, int], None]
"""``on_forward(source address, inner IPv4 payload, downstream id-mask)``: a received packet this BFR
forwarded or delivered; the id-mask has bit BFR-id − 1 set for every BFER a copy (or the local
delivery) was for, i.e. the OR of the copies' BitStrings over the SI.  The reliable transport's ACK
aggregator learns from it which BFERs below will acknowledge (docs/reliability.md)."""

# aidcnet.bier.forwarding reason -> counter name.  Also the order in which a packet with no
# copy and no delivery is attributed to one reason when several bits were dropped differently.
DROP_COUNTERS: dict[str, str] = {
    "ttl-expired": "dropped-ttl",
    "zero-bitstring": "dropped-zero-bitstring",
    "unknown-bift-id": "dropped-unknown-bift-id",
    "no-entry": "dropped-no-entry",
    "null-nbr": "dropped-null-neighbor",
}
if set(DROP_COUNTERS) != DROP_REASONS:  # a new reason in forwarding must get a counter here
    raise ImportError(f"DROP_COUNTERS does not cover DROP_REASONS {sorted(DROP_REASONS)}")

OUTCOME_COUNTERS: tuple[str, ...] = (
    "accepted",
    "forwarded",
    "replicated",
    "delivered",
    "deliver-errors",
    "imposed",
    "dropped-malformed",
    *DROP_COUNTERS.values(),
)

DEFAULT_TTL = 64


def _tx_keys_of(nbr: str) -> tuple[str, str, str]:
    """A neighbour's transmit counters: copies sent, their bytes, and copies the kernel refused."""
    return (f"tx.nbr.{nbr}.packets", f"tx.nbr.{nbr}.bytes", f"tx.nbr.{nbr}.errors")


def _fixed_counter_names() -> list[str]:
    return [
        *("rx.packets", "rx.bytes", "rx.errors", "rx.src.other.packets", "rx.src.other.bytes"),
        *("tx.packets", "tx.bytes", "tx.errors", "tx.waits"),
        *OUTCOME_COUNTERS,
        *("bypass.sent", "bypass.nnh.sent", "bypass.passed"),
        *(f"dropped-malformed.{r}" for r in sorted(DECODE_REASONS)),
        *(f"dropped-bits.{r}" for r in sorted(DROP_REASONS)),
    ]


SOCKET_BUFFER = 32 << 20
# A lossless BFR waits this long for room on a full link before it gives the copies up (tx.errors).
LOSSLESS_WAIT_S = 5.0


class BierDataplane:
    """One BFR's BIER forwarding over UDP/6635.

    ``bifts`` is ``{SI: Bift}`` from :func:`aidcnet.bier.bift.build_bifts` built *with*
    ``nbr_labels`` (copies need the neighbor's label); ``local_labels`` maps
    ``(sub-domain, BSL, SI)`` to the label this BFR advertised, which incoming packets carry.
    ``neighbors`` maps each BFR-NBR name used in the BIFTs to ``(IPv4 address, local ifname)``.
    ``bfr_id`` is None for a transit BFR without a BFR-id (it cannot impose).
    """

    def __init__(
        self,
        bfr_id: int | None,
        bsl: int,
        sd: int,
        bifts: Mapping[int, Bift],
        neighbors: Mapping[str, tuple[str, str]],
        local_labels: Mapping[LabelKey, int],
        deliver: DeliverFn | None = None,
        bind_addr: str = "0.0.0.0",
        port: int = MPLS_IN_UDP_PORT,
        nbr_port: int | None = None,
        max_batch: int = DEFAULT_BATCH,
        mmsg: bool | None = None,
        sndbuf: int | None = None,
    ) -> None:
        """``sndbuf``: on a shaped lab, the send buffer that keeps this BFR from overrunning its links'
        queues (:func:`aidcnet.udpio.shaped_sndbuf`); a full buffer then makes it wait, as a lossless
        port pauses its sender, instead of dropping."""
        self.bfr_id = bfr_id
        self.bsl = bsl
        self.sd = sd
        self.bifts = dict(bifts)
        self._check_tables(neighbors, local_labels)
        addrs = [addr for addr, _ifname in neighbors.values()]
        if len(set(addrs)) != len(addrs):
            raise ValueError(f"neighbors: two BFR-NBRs share an address ({sorted(addrs)})")
        self.tables = bifts_by_label(self.bifts, local_labels)
        self._label_by_si = {si: local_labels[(sd, bsl, si)] for si in self.bifts}
        self.neighbors = dict(neighbors)
        self.deliver = deliver
        self.rx_stamp_ns = 0
        """The kernel receive stamp (wall-clock ns) of the packet a ``deliver`` call is for; 0 when
        unknown (stamps not enabled, or a delivery of this node's own imposition)."""
        self.on_forward: ForwardFn | None = None
        self.max_batch = max_batch
        port_out = port if nbr_port is None else nbr_port
        self._dest = {nbr: (addr, port_out) for nbr, (addr, _ifname) in neighbors.items()}
        self._nbr_by_addr = {addr: nbr for nbr, (addr, _ifname) in neighbors.items()}
        self._rx_keys: dict[str, tuple[str, str]] = {
            addr: (f"rx.nbr.{nbr}.packets", f"rx.nbr.{nbr}.bytes") for addr, nbr in self._nbr_by_addr.items()
        }
        self._tx_keys = {nbr: _tx_keys_of(nbr) for nbr in neighbors}
        # A plain dict with the fixed keys present: ``c[k] += 1`` then stays on the exact-dict
        # fast path, which a Counter (a dict subclass) does not get.
        self._c: dict[str, int] = dict.fromkeys(_fixed_counter_names(), 0)
        for keys in (*self._rx_keys.values(), *self._tx_keys.values()):
            self._c.update(dict.fromkeys(keys, 0))
        # Why a lock: impose() may run in an application thread while serve() runs in another,
        # and both use the same send buffers and counters.
        self._lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # A BFR replicates bursts: room for thousands of jumbo datagrams each way.
            set_socket_buffer(self.sock, socket.SO_RCVBUF, SOCKET_BUFFER)
            size_send_buffer(self.sock, sndbuf, SOCKET_BUFFER)
            self.lossless = sndbuf is not None
            self.sock.bind((bind_addr, port))
            self.sock.setblocking(False)
            self.io = BatchIO(self.sock, max_batch, mmsg=mmsg)
        except BaseException:
            self.sock.close()
            raise
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._policy: dict[str, PortPolicy] = {}
        # ingress ifindex -> the port's name and policy (None: a data port the policy leaves open)
        self._ports: dict[int, tuple[str, PortPolicy | None]] = {}
        self._init_fast_reroute()
        self.missing_ports: list[str] = []
        """Data ports the edge policy names that had no interface when it was set (see set_edge_policy)."""
        self._c["dropped-policy"] = 0

    def _init_fast_reroute(self) -> None:
        """No bypass on, no adjacency label: fast reroute off until set_adjacency_labels and set_bypass."""
        # our adjacency labels (the label a bypass through us pops -> the BFR-NBR it goes to), and the link
        # bypass per neighbour whose copies take one: (first hop, the label stack pushed)
        self._adjacency: dict[int, str] = {}
        self._bypass: dict[str, tuple[str, bytes]] = {}
        # node protection: per neighbour, (BitString per (BSL, SI), next-next hop's label base, first hop,
        # pushed labels) for each of its next-next hops
        self._nnh: dict[str, list[tuple[dict[tuple[int, int], int], int, str, bytes]]] = {}
        # every neighbour with either on: the one test a copy meets on the fast path
        self._rerouted: frozenset[str] = frozenset()
        self.first_bypassed: deque[tuple[str, int]] = deque(maxlen=256)
        """``(neighbour, wall ns)`` of the first copy into each bypass after it was switched on: when the
        first packet took the new path."""
        self._awaiting_first: set[str] = set()

    def set_edge_policy(self, policies: Mapping[str, PortPolicy]) -> None:
        """Enforce RFC 8296 §6 on received packets: ``policies`` per local ifname.  The port is the
        interface the packet came in on (IP_PKTINFO), never its source address, which a sender picks.
        A data port (one toward a BFR-NBR) without a policy accepts everything, as in the pure module;
        any other interface (management, loopback) is port ``unknown``, where everything is dropped as
        ``not-bfr-neighbor``.  An empty ``policies`` turns the check off.  An interface that does not
        exist yet is left out (:attr:`missing_ports`, and a warning): nothing enters through it, and if it
        appears later its packets meet port ``unknown``, so the policy fails closed."""
        data_ports = {*policies, *(ifname for _addr, ifname in self.neighbors.values())}
        ports: dict[int, tuple[str, PortPolicy | None]] = {}
        missing: list[str] = []
        for ifname in sorted(data_ports):
            try:
                ports[interface_index(self.sock, ifname)] = (ifname, policies.get(ifname))
            except OSError:
                missing.append(ifname)
        if policies and missing:
            log.warning("edge policy: no interface %s here; BIER arriving on it later is dropped", missing)
        with self._lock:
            self.missing_ports = missing if policies else []
            if policies and not self.io.ingress:
                self.io.enable_ingress()
            self._policy = dict(policies)
            self._ports = ports
            for ifname in (*policies, "unknown"):
                for reason in POLICY_REASONS:
                    self._c.setdefault(f"dropped-policy.{ifname}.{reason}", 0)

    @property
    def edge_policies(self) -> dict[str, PortPolicy]:
        """The installed policy per ifname (empty: off); the eBPF fast path programs the same."""
        return self._policy

    def _check_tables(
        self, neighbors: Mapping[str, tuple[str, str]], local_labels: Mapping[LabelKey, int]
    ) -> None:
        for si, bift in self.bifts.items():
            where = f"BIFT SI {si}"
            if (bift.sd, bift.bsl, bift.si) != (self.sd, self.bsl, si):
                raise ValueError(
                    f"{where}: is for (sub-domain {bift.sd}, BSL {bift.bsl}, SI {bift.si}), "
                    f"dataplane is sub-domain {self.sd}, BSL {self.bsl}"
                )
            expected = 0
            if self.bfr_id is not None:
                own_si, own_bit = bfr_id_to_si_bit(self.bfr_id, self.bsl)
                expected = 1 << (own_bit - 1) if own_si == si else 0
            if bift.own_mask != expected:
                raise ValueError(f"{where}: own bit 0x{bift.own_mask:x} does not match BFR-id {self.bfr_id}")
            for k, alts in enumerate(bift.entries):
                for _fbm, nbr, label in alts or ():
                    if nbr is None:
                        continue
                    if nbr not in neighbors:
                        raise ValueError(f"{where} bit {k}: BFR-NBR {nbr!r} has no address in neighbors")
                    if label is None:
                        raise ValueError(
                            f"{where} bit {k}: no label for BFR-NBR {nbr!r}; build the BIFTs with nbr_labels"
                        )
        if self.bfr_id is not None and (self.bfr_id - 1) // self.bsl not in self.bifts:
            raise ValueError(f"no BIFT for the SI of own BFR-id {self.bfr_id}")
        missing = [si for si in self.bifts if (self.sd, self.bsl, si) not in local_labels]
        if missing:
            raise ValueError(
                f"no local BIER-MPLS label for SI {missing} (sub-domain {self.sd}, BSL {self.bsl})"
            )

    def set_bifts(self, bifts: Mapping[int, Bift], local_labels: Mapping[LabelKey, int]) -> None:
        """Swap in new BIFTs (BIER over BGP after a best-path change); neighbors stay as built.

        Checked like the constructor's tables; the swap is a few reference assignments under the lock,
        so a batch in flight finishes on the old tables and the next one uses the new."""
        old = self.bifts
        self.bifts = dict(bifts)
        try:
            self._check_tables(self.neighbors, local_labels)
            tables = bifts_by_label(self.bifts, local_labels)
        except ValueError:
            self.bifts = old
            raise
        with self._lock:
            self.tables = tables
            self._label_by_si = {si: local_labels[(self.sd, self.bsl, si)] for si in self.bifts}

    # -- the packet path --------------------------------------------------------------------------
    def poll_once(self, max_batch: int | None = None) -> int:
        """Receive one batch, forward and deliver it; return how many datagrams were received."""
        try:
            pkts = self.io.recv(max_batch or self.max_batch)
        except OSError as exc:
            self._c["rx.errors"] += 1
            log.warning("receive failed: %s", exc)
            return 0
        if not pkts:
            return 0
        out: list[Datagram] = []
        out_nbrs: list[str] = []
        deliveries: list[tuple[bytes, int, int, bytes]] = []
        forwarded: list[tuple[str, bytes, int]] = []
        on_forward = self.on_forward
        c = self._c
        tables = self.tables
        stamps = self.io.stamps if self.io.stamping else None
        ingress = self.io.ifindexes if self.io.ingress else None
        delivery_stamps: list[int] = []
        with self._lock:
            rx_bytes = 0
            for i, (buf, (src, _port)) in enumerate(pkts):
                size = len(buf)
                rx_bytes += size
                keys = self._rx_keys.get(src) or self._rx_key_for(src)
                c[keys[0]] += 1
                c[keys[1]] += size
                try:
                    label = peek_bift_id(buf)
                    bift = tables.get(label)
                    if bift is None:
                        if label in self._adjacency:
                            self._pass_bypass(buf, src, label, ingress[i] if ingress else 0, out, out_nbrs)
                        else:
                            c["dropped-unknown-bift-id"] += 1
                        continue
                    f = parse_bier_udp_payload(buf, 0, bift.bsl)
                except BierDecodeError as exc:
                    c["dropped-malformed"] += 1
                    c["dropped-malformed." + exc.reason] += 1  # preset: DECODE_REASONS is closed
                    continue
                if self._policy:
                    port, policy = self._ports.get(ingress[i] if ingress else 0, _UNKNOWN_PORT)
                    reason = (
                        policy_check(policy, src, bift.si, f[12], f[11])
                        if port != "unknown"
                        else "not-bfr-neighbor"
                    )
                    if reason is not None:
                        c["dropped-policy"] += 1
                        c[f"dropped-policy.{port}.{reason}"] += 1
                        continue
                res = forward(bift, f[12], f[3], f[6])
                self._dispatch(buf, res, bift, f[11], f[10], f[13], out, out_nbrs, deliveries)
                if stamps is not None and res.local:
                    delivery_stamps.append(stamps[i])
                if on_forward is not None and f[10] == BierProto.IPV4 and (res.copies or res.local):
                    down = res.local
                    for _nbr, bits, _label in res.copies:
                        down |= bits
                    forwarded.append((src, bytes(buf[f[13] :]), down << (bift.si * bift.bsl)))
            c["rx.packets"] += len(pkts)
            c["rx.bytes"] += rx_bytes
            if out:
                self._send(out, out_nbrs)
            # Copies of the payload: the receive buffer is reused by the next batch.
        # The hook first: what a delivery makes the node say (an ACK) may depend on what it learned.
        for src, inner, down in forwarded:
            try:
                on_forward(src, inner, down)  # type: ignore[misc]
            except Exception:
                self._c["forward-hook-errors"] = self._c.get("forward-hook-errors", 0) + 1
                log.exception("forward hook failed")
        self._deliver_all(deliveries, delivery_stamps)
        return len(pkts)

    def _pass_bypass(
        self,
        buf: bytes | bytearray | memoryview,
        src: str,
        label: int,
        ifindex: int,
        out: list[Datagram],
        out_nbrs: list[str],
    ) -> None:
        """A fast-reroute bypass passing through: pop our adjacency label and send the rest to its
        neighbour (aidcnet/bier/fast_reroute.py). Only a BFR neighbour on a fabric port may send one: a
        bypass delivers a BIER packet to the next BFR as if from a fabric port, so from a host it would get
        round the edge policy."""
        c = self._c
        if self._policy:
            port, policy = self._ports.get(ifindex, _UNKNOWN_PORT)
            reason = check_bypass(policy, src) if port != "unknown" else "not-bfr-neighbor"
            if reason is not None:
                c["dropped-policy"] += 1
                c[f"dropped-policy.{port}.{reason}"] += 1
                return
        entry = unpack_lse(int.from_bytes(buf[:4], "big"))
        if entry.s or len(buf) < 8:
            # an adjacency label at the bottom of the stack has no packet below it to pass on
            c["dropped-malformed"] += 1
            c["dropped-malformed.truncated"] += 1
            return
        if entry.ttl <= 1:
            c["dropped-ttl"] += 1
            return
        nbr = self._adjacency[label]
        out.append((bytes(buf[4:]), self._dest[nbr]))
        out_nbrs.append(nbr)
        c["bypass.passed"] += 1
        c["accepted"] += 1

    def set_adjacency_labels(self, adjacency: Mapping[int, str]) -> None:
        """Fast reroute: ``{our adjacency label: BFR-NBR}``, the labels a bypass through this BFR pops."""
        unknown = sorted(nbr for nbr in adjacency.values() if nbr not in self._dest)
        if unknown:
            raise ValueError(f"adjacency labels name {unknown}, which are not BFR-NBRs here")
        clash = sorted(set(adjacency) & set(self.tables))
        if clash:
            raise ValueError(f"adjacency labels {clash} are BIFT-ids of this BFR too")
        with self._lock:
            self._adjacency = dict(adjacency)

    def set_bypass(
        self,
        bypass: Mapping[str, tuple[str, Sequence[int]]],
        nnh: Mapping[str, Sequence[NnhTunnel]] | None = None,
    ) -> None:
        """Send every copy for a BFR-NBR in ``bypass`` (``{nbr: (first hop, labels)}``) through its tunnel
        instead of its link, from the next packet on; with node protection (``nnh``), a copy for a BFR-NBR
        there first gives each next-next hop its bits, straight to it, and only the bits left take the link
        bypass (or the link, when it has none). Empty mappings switch them all off."""
        nnh = nnh or {}
        named = {n for n, (via, _labels) in bypass.items() for n in (n, via)}
        named |= {n for nbr, tunnels in nnh.items() for n in (nbr, *(t.via for t in tunnels))}
        unknown = sorted(named - set(self._dest))
        if unknown:
            raise ValueError(f"bypass names {unknown}, which are not BFR-NBRs here")
        active = {nbr: (via, push(labels)) for nbr, (via, labels) in bypass.items()}
        bsls = {bift.bsl for bift in self.tables.values()}
        split = {
            nbr: [
                (
                    {(bsl, si): m for bsl in bsls for si, m in t.masks(bsl).items()},
                    t.label_base,
                    t.via,
                    push(t.labels),
                )
                for t in tunnels
            ]
            for nbr, tunnels in nnh.items()
            if tunnels
        }
        rerouted = frozenset(active) | frozenset(split)
        with self._lock:
            awaiting = self._awaiting_first
            self._awaiting_first = {n for n in rerouted if n in awaiting or n not in self._rerouted}
            self._bypass = active
            self._nnh = split
            self._rerouted = rerouted

    @property
    def adjacency_labels(self) -> dict[int, str]:
        """Our fast-reroute adjacency labels and the BFR-NBR each one sends to (set_adjacency_labels)."""
        return self._adjacency

    @property
    def bypassed(self) -> list[str]:
        """The BFR-NBRs whose copies take their bypass (link or node protection) now."""
        return sorted(self._rerouted)

    def _reroute(
        self,
        buf: bytes | bytearray | memoryview,
        res: ForwardResult,
        bift: Bift,
        i: int,
        pkt: bytearray,
        out: list[Datagram],
        out_nbrs: list[str],
    ) -> None:
        """BIER fast reroute of copy ``i`` (``pkt``) of ``res``, for a BFR-NBR whose link is down and that has
        node protection: each next-next hop gets its share of the copy's bits with its own BIER label, and
        the rest goes to the neighbour itself around the dead link (its link bypass), or into its link when
        it has no bypass."""
        c = self._c
        dest = self._dest
        nbr, bits, label = res.copies[i]
        whole = bits
        to_nnh = 0
        for masks, label_base, via, stack in self._nnh.get(nbr, ()):
            mine = bits & masks.get((bift.bsl, bift.si), 0)
            if mine:
                copy = make_copy(buf, 0, label_base + bift.si, res.ttl, mine, bift.bsl)
                out.append((stack + copy, dest[via]))
                out_nbrs.append(via)
                bits &= ~mine
                to_nnh += 1
        link = self._bypass.get(nbr)
        if bits:
            if bits != whole:
                assert label is not None  # build_copies made pkt with it
                pkt = make_copy(buf, 0, label, res.ttl, bits, bift.bsl)
            via = link[0] if link is not None else nbr
            out.append((link[1] + pkt if link is not None else pkt, dest[via]))
            out_nbrs.append(via)
        tunnelled = to_nnh + (1 if bits and link is not None else 0)
        c["bypass.nnh.sent"] += to_nnh
        c["bypass.sent"] += tunnelled
        c["replicated"] += to_nnh + (1 if bits else 0) - 1  # this one copy became that many datagrams
        if tunnelled and nbr in self._awaiting_first:
            self._note_first(nbr)

    def _note_first(self, nbr: str) -> None:
        """The first copy for ``nbr`` took its bypass since it went on: when the new path began."""
        self._awaiting_first.discard(nbr)
        self.first_bypassed.append((nbr, time.time_ns()))

    def _rx_key_for(self, src: str) -> tuple[str, str]:
        # An unbounded set of spoofed sources must not grow the counters without limit.
        if len(self._rx_keys) >= len(self._nbr_by_addr) + 256:
            return ("rx.src.other.packets", "rx.src.other.bytes")
        keys = self._rx_keys[src] = (f"rx.src.{src}.packets", f"rx.src.{src}.bytes")
        for key in keys:
            self._c.setdefault(key, 0)
        return keys

    def _dispatch(
        self,
        buf: bytes | bytearray | memoryview,
        res: ForwardResult,
        bift: Bift,
        bfir_id: int,
        proto: int,
        end: int,
        out: list[Datagram],
        out_nbrs: list[str],
        deliveries: list[tuple[bytes, int, int, bytes]],
    ) -> None:
        c = self._c
        copies = res.copies
        if copies:
            res.bsl = bift.bsl
            dest = self._dest
            rerouted = self._rerouted
            for i, (nbr, pkt) in enumerate(build_copies(buf, res)):
                if rerouted and nbr in rerouted:
                    if nbr in self._nnh:
                        self._reroute(buf, res, bift, i, pkt, out, out_nbrs)
                        continue
                    # link protection alone: the copy N would have had, carried to N around the dead link
                    via, stack = self._bypass[nbr]
                    out.append((stack + pkt, dest[via]))
                    out_nbrs.append(via)
                    c["bypass.sent"] += 1
                    if nbr in self._awaiting_first:
                        self._note_first(nbr)
                    continue
                out.append((pkt, dest[nbr]))
                out_nbrs.append(nbr)
            c["forwarded"] += 1
            c["replicated"] += len(copies) - 1
        if res.local:
            c["delivered"] += 1
            deliveries.append((bytes(buf[end:]), bfir_id, proto, bytes(buf[:end])))
        drops = res.drops
        if drops:
            for reason, bits in drops.items():
                if bits:
                    c["dropped-bits." + reason] += bits.bit_count()  # preset: DROP_REASONS is closed
            if not copies and not res.local:
                c[next(DROP_COUNTERS[r] for r in DROP_COUNTERS if r in drops)] += 1
                return
        c["accepted"] += 1

    def _send(self, out: list[Datagram], out_nbrs: list[str]) -> None:
        c = self._c
        failed: list[int] = []
        self.io.send(out, failed)
        if self.lossless and self.io.stopped_at is not None:
            failed = self._send_rest(out, failed)
        bad = set(failed)
        tx_keys = self._tx_keys
        if bad:
            c["tx.errors"] += len(bad)
            for i in bad:  # per neighbour too: a copy into a port a fault took down is the fault's loss
                c[tx_keys[out_nbrs[i]][2]] += 1
        sent = 0
        sent_bytes = 0
        for i, nbr in enumerate(out_nbrs):
            if bad and i in bad:
                continue
            size = len(out[i][0])
            keys = tx_keys[nbr]
            c[keys[0]] += 1
            c[keys[1]] += size
            sent += 1
            sent_bytes += size
        c["tx.packets"] += sent
        c["tx.bytes"] += sent_bytes

    def _send_rest(self, out: list[Datagram], failed: list[int]) -> list[int]:
        """A full send buffer (or queue) on a lossless fabric: wait for room and send the rest, as a
        paused port would; give up only after :data:`LOSSLESS_WAIT_S` without progress. Returns the
        indexes still not sent (refused for good, or timed out)."""
        refused = [i for i in failed if self.io.stopped_at is None or i < self.io.stopped_at]
        start = self.io.stopped_at
        waited = 0.0
        pause = 0.0002
        while start is not None and start < len(out):
            self._c["tx.waits"] += 1
            _r, writable, _x = select.select([], [self.sock], [], pause)
            waited = 0.0 if writable else waited + pause
            if waited > LOSSLESS_WAIT_S:
                return refused + list(range(start, len(out)))
            if not writable:
                pause = min(pause * 2, 0.01)
                continue
            rest: list[int] = []
            before = self.io.nobufs
            self.io.send(out[start:], rest)
            if self.io.nobufs > before:
                time.sleep(pause)  # the queue below was full: writable does not say when it drains
                pause = min(pause * 2, 0.01)
            else:
                pause = 0.0002
            stop = self.io.stopped_at
            refused += [start + i for i in rest if stop is None or i < stop]
            start = None if stop is None else start + stop
        return refused

    def deliver_local(self, deliveries: list[tuple[bytes, int, int, bytes]], stamps: list[int]) -> None:
        """Deliveries the eBPF fast path decided (aidcnet.agent.bier.ebpf): the callback only, no counting.
        ``stamps``: their kernel receive stamps when :meth:`enable_rx_stamps` asked for them, else []."""
        self._deliver_all(deliveries, stamps)

    def enable_rx_stamps(self) -> None:
        """Stamp every received packet with the kernel's receive time; during a ``deliver`` callback,
        :attr:`rx_stamp_ns` is the one of the packet being delivered (a modelled control plane serves
        messages from the moment they arrived, not from when our Python read them)."""
        self.io.enable_stamps()

    def _deliver_all(self, deliveries: list[tuple[bytes, int, int, bytes]], stamps: list[int]) -> None:
        deliver = self.deliver
        if deliver is None:
            return
        for i, (payload, bfir_id, proto, header) in enumerate(deliveries):
            self.rx_stamp_ns = stamps[i] if i < len(stamps) else 0
            try:
                deliver(payload, bfir_id, proto, header)
            except Exception:
                # The application's bug must not stop forwarding for everyone else.
                self._c["deliver-errors"] += 1
                log.exception("deliver callback failed")

    # -- BFIR -------------------------------------------------------------------------------------
    def impose(
        self,
        payload: bytes | bytearray | memoryview,
        receivers_bfr_ids: Iterable[int],
        proto: int = BierProto.IPV4,
        entropy: int = 0,
        ttl: int = DEFAULT_TTL,
    ) -> int:
        """Encapsulate ``payload`` for ``receivers_bfr_ids`` as BFIR and forward it (RFC 8296 §3).

        One BIER packet per SI touched, BFIR-id = own BFR-id, copies carry ``ttl``.  Own BFR-id
        among the receivers means local delivery, as at any BFER.  Returns the number of
        packets built; bad arguments (BFR-id 0, entropy out of range) raise ValueError.
        """
        return self.impose_many([(payload, entropy)], receivers_bfr_ids, proto, ttl)

    def impose_many(
        self,
        payloads: Sequence[tuple[bytes | bytearray | memoryview, int]],
        receivers_bfr_ids: Iterable[int],
        proto: int = BierProto.IPV4,
        ttl: int = DEFAULT_TTL,
    ) -> int:
        """:meth:`impose` for several ``(payload, entropy)`` to the same receivers: the BitStrings are
        worked out once and every copy leaves in one batch (one sendmmsg), as a NIC posts a message's
        packets in one doorbell."""
        if self.bfr_id is None:
            raise ValueError("a BFR without a BFR-id cannot be a BFIR (RFC 8279 §2)")
        if not 1 <= ttl <= 255:
            raise ValueError(f"ttl {ttl!r} must be 1..255")
        by_si = sorted(bitstrings_from_ids(receivers_bfr_ids, self.bsl).items())
        out: list[Datagram] = []
        out_nbrs: list[str] = []
        deliveries: list[tuple[bytes, int, int, bytes]] = []
        packets = []
        for payload, entropy in payloads:
            for si, bits in by_si:
                hdr = BierHeader(
                    bift_id=self._label_by_si.get(si, 0),
                    bitstring=bits,
                    bsl=self.bsl,
                    ttl=ttl,
                    entropy=entropy,
                    proto=proto,
                    bfir_id=self.bfr_id,
                ).encode()
                packets.append((si, bits, entropy, len(hdr), encode_bier_udp_payload(hdr, bytes(payload))))
        c = self._c
        with self._lock:
            for si, bits, entropy, end, pkt in packets:
                c["imposed"] += 1
                bift = self.bifts.get(si)
                if bift is None:
                    # No BIRT row in this SI at all: every bit is "no entry" (RFC 8279 §6.5 null).
                    c["dropped-no-entry"] += 1
                    c["dropped-bits.no-entry"] += bits.bit_count()
                    continue
                res = impose_decision(bift, bits, ttl, entropy)
                self._dispatch(pkt, res, bift, self.bfr_id, proto, end, out, out_nbrs, deliveries)
            if out:
                self._send(out, out_nbrs)
        # This node's own imposition arrives now (a stamp only where stamps are asked for: impose is hot).
        stamps = [time.time_ns()] * len(deliveries) if deliveries and self.io.stamping else []
        self._deliver_all(deliveries, stamps)
        return len(packets)

    # -- loops ------------------------------------------------------------------------------------
    def drain(self, max_batches: int = 16) -> int:
        """Poll up to ``max_batches`` batches, stopping early when one comes back short."""
        total = 0
        for _ in range(max_batches):
            n = self.poll_once()
            total += n
            if n < self.max_batch:
                break
        return total

    def attach(self, loop: asyncio.AbstractEventLoop, max_batches: int = 16) -> None:
        """Serve from ``loop``: drain up to ``max_batches`` batches whenever the socket is readable."""
        loop.add_reader(self.sock.fileno(), self.drain, max_batches)

    def detach(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self.sock.fileno())

    def serve(self, stop_event: threading.Event, poll_interval: float = 0.05) -> None:
        """Blocking loop (benchmarks, threads) until ``stop_event`` is set."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            while not stop_event.is_set():
                if sel.select(poll_interval):
                    self.drain()

    def start(self) -> threading.Thread:
        """Run :meth:`serve` in a daemon thread; :meth:`stop` ends it."""
        if self._thread is not None:
            raise RuntimeError("dataplane thread already running")
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.serve, args=(self._stop,), name="bier-dataplane", daemon=True
        )
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        if self._thread is not None and self._stop is not None:
            self._stop.set()
            self._thread.join()
        self._thread = None
        self._stop = None

    def close(self) -> None:
        self.stop()
        self.sock.close()

    def __enter__(self) -> BierDataplane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- observability ----------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """Flat ``{name: int}``, every fixed counter present even when zero (see module doc)."""
        with self._lock:
            out = dict(self._c)
        for nbr, (addr, ifname) in self.neighbors.items():
            rx = self._rx_keys[addr]
            tx = self._tx_keys[nbr]
            pairs = (
                ("rx_packets", rx[0]),
                ("rx_bytes", rx[1]),
                ("tx_packets", tx[0]),
                ("tx_bytes", tx[1]),
                ("tx_errors", tx[2]),
            )
            for name, key in pairs:
                ikey = f"if.{ifname}.{name}"
                out[ikey] = out.get(ikey, 0) + out[key]
        return out
