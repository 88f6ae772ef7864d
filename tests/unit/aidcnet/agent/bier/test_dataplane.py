"""BierDataplane and BierHost on loopback: several BFRs on 127.0.0.x:6635, BIFTs from compute_birts.

Topology (BSL 64)::

    A(1) -- B(transit) -- C(3) -- E(5)
                 \\------- D(4) --/          Z(9): isolated, so unreachable (null BFR-NBR)

B reaches E over C and D (ECMP), so every packet for E tests "exactly one copy".
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Iterator, Mapping

import pytest

from aidcnet.agent.bier.dataplane import DROP_COUNTERS, BierDataplane
from aidcnet.agent.bier.host import BierHost
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.edge_policy import FABRIC, HOST, HostBfir, PortPolicy
from aidcnet.bier.fast_reroute import NnhTunnel, adjacency_labels, bypass_path, next_next_hops, push, tunnel
from aidcnet.bier.header import BierHeader, BierProto
from aidcnet.bier.routing import compute_birts, undirected

BSL = 64
EDGES = [("A", "B"), ("B", "C"), ("B", "D"), ("C", "E"), ("D", "E")]
IDS = {"A": 1, "C": 3, "D": 4, "E": 5, "Z": 9}
WHOLE_DROPS = ("dropped-malformed", "dropped-policy", *DROP_COUNTERS.values())

Delivered = list[tuple[bytes, int, int, bytes]]


class Lab:
    def __init__(self, dps: dict[str, BierDataplane], addrs: dict[str, str], labels: dict, adj: dict) -> None:
        self.dps = dps
        self.addrs = addrs
        self.labels = labels
        self.adj = adj
        self.got: dict[str, Delivered] = {n: [] for n in dps}
        for name, dp in dps.items():
            dp.deliver = lambda p, b, pr, h, name=name: self.got[name].append((p, b, pr, h))

    def settle(self, timeout: float = 3.0) -> None:
        """Poll every dataplane until three rounds in a row receive nothing."""
        quiet = 0
        deadline = time.monotonic() + timeout
        while quiet < 3:
            assert time.monotonic() < deadline, "the lab did not go quiet"
            if sum(dp.poll_once() for dp in self.dps.values()):
                quiet = 0
            else:
                quiet += 1
                time.sleep(0.002)

    def delivered_to(self) -> dict[str, int]:
        return {n: len(v) for n, v in self.got.items() if v}

    def close(self) -> None:
        for dp in self.dps.values():
            dp.close()


def _labels(names: list[str], sis: int) -> dict[str, dict[tuple[int, int, int], int]]:
    return {n: {(0, BSL, si): 1000 + 100 * i + si for si in range(sis)} for i, n in enumerate(names)}


def build_lab(edges: list[tuple[str, str]], ids: Mapping[str, int], block: int, nodes: tuple = ()) -> Lab:
    adj = undirected(edges, [*ids, *nodes])
    birts = compute_birts(adj, ids)
    names = sorted(adj)
    addrs = {n: f"127.0.{block}.{i + 2}" for i, n in enumerate(names)}
    labels = _labels(names, max((i - 1) // BSL for i in ids.values()) + 1)
    dps: dict[str, BierDataplane] = {}
    try:
        for n in names:
            if not adj[n]:
                continue  # isolated node: exists only as an unreachable BFER
            bifts = build_bifts(birts[n], BSL, {nb: labels[nb] for nb in adj[n]})
            nbrs = {nb: (addrs[nb], f"eth{j + 1}") for j, nb in enumerate(adj[n])}
            dps[n] = BierDataplane(ids.get(n), BSL, 0, bifts, nbrs, labels[n], bind_addr=addrs[n])
    except BaseException:
        for dp in dps.values():
            dp.close()
        raise
    return Lab(dps, addrs, labels, adj)


def make_lab(edges: list[tuple[str, str]], ids: Mapping[str, int], nodes: tuple = ()) -> Lab:
    """Bind on 127.0.0.2, .3, ...; if someone else holds port 6635 there, use the next /24."""
    for block in range(0, 64):
        try:
            return build_lab(edges, ids, block, nodes)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    raise RuntimeError("no free 127.0.x.0/24 block with port 6635 free")


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = make_lab(EDGES, IDS)
    yield lab
    lab.close()


def check_accounting(lab: Lab) -> None:
    """Every received or imposed packet has exactly one outcome; links lose nothing."""
    cs = {n: dp.counters() for n, dp in lab.dps.items()}
    for n, c in cs.items():
        assert c["rx.packets"] + c["imposed"] == c["accepted"] + sum(c[k] for k in WHOLE_DROPS), (n, c)
        assert c["tx.packets"] == c["forwarded"] + c["replicated"], (n, c)
        assert c["tx.errors"] == 0 and c["rx.errors"] == 0
        for nb in lab.adj[n]:
            if nb in cs:
                assert c[f"tx.nbr.{nb}.packets"] == cs[nb][f"rx.nbr.{n}.packets"], (n, nb)
                assert c[f"tx.nbr.{nb}.bytes"] == cs[nb][f"rx.nbr.{n}.bytes"], (n, nb)


def test_impose_delivers_exactly_once_to_each_bfer(lab: Lab) -> None:
    a = lab.dps["A"]
    for entropy in range(16):  # B picks C or D for E by entropy: both choices must work
        assert a.impose(b"payload-%d" % entropy, [3, 4, 5], BierProto.IPV6, entropy) == 1
    lab.settle()
    assert lab.delivered_to() == {"C": 16, "D": 16, "E": 16}
    for node in "CDE":
        assert sorted(p for p, *_ in lab.got[node]) == sorted(b"payload-%d" % e for e in range(16))
        for _payload, bfir, proto, header in lab.got[node]:
            assert (bfir, proto) == (1, BierProto.IPV6)
            hdr, end = BierHeader.decode(header)
            assert end == len(header) and hdr.bfir_id == 1
            # The copy a BFER gets has its own bit set (RFC 8279 §6.5 F-BM AND).
            assert hdr.bitstring >> (IDS[node] - 1) & 1
    c = {n: dp.counters() for n, dp in lab.dps.items()}
    assert c["A"]["imposed"] == 16 and c["A"]["tx.nbr.B.packets"] == 16 and c["A"]["replicated"] == 0
    # B: one packet in, copies to C and D each time (D also for E or C also for E).
    assert c["B"]["rx.nbr.A.packets"] == 16 and c["B"]["forwarded"] == 16 and c["B"]["replicated"] == 16
    # The lowest bit (C's) goes first and C's F-BM holds E too, so E always rides with C.
    assert c["E"]["rx.nbr.C.packets"] == 16 and c["E"]["rx.nbr.D.packets"] == 0
    assert c["E"]["delivered"] == 16 and c["E"]["tx.packets"] == 0
    assert c["B"]["if.eth1.rx_packets"] == 16  # eth1 is B's interface to A
    check_accounting(lab)


def test_a_copy_the_kernel_refuses_is_counted_for_its_neighbour_and_port(lab: Lab) -> None:
    """B cannot send to C (its port is down, say): those copies count in tx.errors and in C's own
    tx.nbr.C.errors and if.<port>.tx_errors, so a run can tell a dead port's loss from any other."""
    b = lab.dps["B"]
    c_addr = lab.addrs["C"]
    send = b.io.send

    def refuse_c(msgs, failed=None):
        ok = [(i, m) for i, m in enumerate(msgs) if m[1][0] != c_addr]
        sent = send([m for _i, m in ok], None)
        if failed is not None:
            failed.extend(i for i, m in enumerate(msgs) if m[1][0] == c_addr)
        return sent

    b.io.send = refuse_c  # type: ignore[method-assign]
    for entropy in range(4):
        assert lab.dps["A"].impose(b"p%d" % entropy, [3, 4], BierProto.IPV6, entropy) == 1
    lab.settle()
    c = b.counters()
    assert c["tx.errors"] == 4 and c["tx.nbr.C.errors"] == 4 and c["tx.nbr.D.errors"] == 0
    port_to_c = dict(b.neighbors)["C"][1]
    assert c[f"if.{port_to_c}.tx_errors"] == 4 and c["tx.nbr.D.packets"] == 4
    assert lab.delivered_to() == {"D": 4}


def test_impose_many_is_impose_per_payload_in_one_batch(lab: Lab) -> None:
    """A message's fragments imposed together: the same copies, headers and counters as one impose per
    fragment, and from A a single sendmmsg for all of them."""
    payloads = [(b"fragment-%d" % i, i) for i in range(8)]
    a = lab.dps["A"]
    calls = []
    send = a.io.send
    a.io.send = lambda out, failed: (calls.append(len(out)), send(out, failed))[1]  # type: ignore[method-assign]
    assert a.impose_many(payloads, [3, 5, 9], BierProto.IPV4) == 8
    lab.settle()
    assert calls == [8]
    batched = {n: sorted(got) for n, got in lab.got.items()}
    counters = {n: dp.counters() for n, dp in lab.dps.items()}
    check_accounting(lab)

    single = make_lab(EDGES, IDS)
    try:
        for payload, entropy in payloads:
            assert single.dps["A"].impose(payload, [3, 5, 9], BierProto.IPV4, entropy) == 1
        single.settle()
        assert {n: sorted(got) for n, got in single.got.items()} == batched
        assert {n: dp.counters() for n, dp in single.dps.items()} == counters
    finally:
        single.close()
    assert lab.delivered_to() == {"C": 8, "E": 8}
    assert counters["A"]["dropped-bits.null-nbr"] == 8  # Z (9) has no path: one bit dropped per fragment


def test_ecmp_by_entropy_still_delivers_once(lab: Lab) -> None:
    for entropy in range(32):
        lab.dps["A"].impose(b"e", [5], entropy=entropy)
    lab.settle()
    assert lab.delivered_to() == {"E": 32}
    c = lab.dps["E"].counters()
    # Alone in the BitString, E's bit takes C or D by entropy: both must carry some.
    assert c["rx.nbr.C.packets"] + c["rx.nbr.D.packets"] == 32
    assert c["rx.nbr.C.packets"] and c["rx.nbr.D.packets"]
    assert lab.dps["B"].counters()["replicated"] == 0
    check_accounting(lab)


def test_ttl_rules(lab: Lab) -> None:
    a = lab.dps["A"]
    a.impose(b"ttl1", [3], ttl=1)  # B receives TTL 1 with no own bit: expired there
    a.impose(b"ttl2", [3, 5], ttl=2)  # C receives TTL 1: delivers its own bit, E's bit expires
    lab.settle()
    assert lab.delivered_to() == {"C": 1}
    assert lab.got["C"][0][0] == b"ttl2"
    b, cc = lab.dps["B"].counters(), lab.dps["C"].counters()
    assert b["dropped-ttl"] == 1 and b["dropped-bits.ttl-expired"] == 1
    # At C the packet was accepted (delivered) yet E's bit, which rides with C's, expired.
    assert cc["dropped-ttl"] == 0 and cc["accepted"] == 1 and cc["dropped-bits.ttl-expired"] == 1
    assert cc["tx.packets"] == 0 and lab.dps["D"].counters()["rx.packets"] == 0
    check_accounting(lab)


def test_bfir_delivers_own_bit_and_forwards_rest(lab: Lab) -> None:
    assert lab.dps["C"].impose(b"from-c", [3, 5, 1]) == 1
    lab.settle()
    assert lab.delivered_to() == {"C": 1, "E": 1, "A": 1}
    assert {g[0][1] for g in lab.got.values() if g} == {3}
    c = lab.dps["C"].counters()
    assert c["delivered"] == 1 and c["forwarded"] == 1 and c["replicated"] == 1
    check_accounting(lab)


def test_unreachable_and_unassigned_bfers_are_counted(lab: Lab) -> None:
    a = lab.dps["A"]
    a.impose(b"z", [9])  # Z is isolated: null BFR-NBR
    a.impose(b"z+c", [9, 3])  # C still gets it; Z's bit is dropped
    a.impose(b"nobody", [20])  # SI 0 but no BIRT row
    a.impose(b"no-si", [200])  # SI 3: no BIFT at all
    lab.settle()
    assert lab.delivered_to() == {"C": 1}
    c = a.counters()
    assert c["imposed"] == 4
    assert c["dropped-null-neighbor"] == 1 and c["dropped-bits.null-nbr"] == 2
    assert c["dropped-no-entry"] == 2 and c["dropped-bits.no-entry"] == 2
    assert c["accepted"] == 1 and c["tx.packets"] == 1
    check_accounting(lab)


def raw(label: int, **kw: int) -> bytes:
    return BierHeader(bift_id=label, bsl=kw.pop("bsl", BSL), **kw).encode()


def test_malformed_and_unforwardable_packets_are_counted_not_raised(lab: Lab) -> None:
    b = lab.dps["B"]
    label = lab.labels["B"][(0, BSL, 0)]
    good = raw(label, bitstring=0b100, ttl=9)
    bad_nibble = bytearray(good)
    bad_nibble[4] = 0x40 | (bad_nibble[4] & 0x0F)
    bad_version = bytearray(good)
    bad_version[4] = 0x51
    bad_bsl = bytearray(good)
    bad_bsl[5] &= 0x0F
    junk = {
        b"\x00\x01": "truncated",
        good[:15]: "truncated",
        bytes(bad_nibble): "bad-nibble",
        bytes(bad_version): "bad-version",
        bytes(bad_bsl): "bad-bsl",
        raw(label, bsl=128, bitstring=1): "bsl-mismatch",
        raw(label, s=0, bitstring=0b100): "bad-s-bit",
    }
    other = {
        raw(99999, bitstring=0b100): "dropped-unknown-bift-id",
        raw(label, bitstring=0): "dropped-zero-bitstring",
        raw(label, bitstring=0b100, ttl=0): "dropped-ttl",
    }
    src = lab.addrs["B"].rsplit(".", 1)[0] + ".200"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((src, 0))
        for pkt in [*junk, *other, good + b"inner"]:
            s.sendto(pkt, (lab.addrs["B"], 6635))
        lab.settle()
    c = b.counters()
    total = len(junk) + len(other) + 1
    assert c[f"rx.src.{src}.packets"] == total and c["rx.packets"] == total
    assert c["dropped-malformed"] == len(junk)
    for reason in set(junk.values()):
        assert c[f"dropped-malformed.{reason}"] == list(junk.values()).count(reason), reason
    for name in other.values():
        assert c[name] == 1, name
    assert c["forwarded"] == 1 and c["tx.nbr.C.packets"] == 1  # the one good packet still went on
    assert lab.got["C"][0][0] == b"inner" and lab.got["C"][0][1] == 0
    check_accounting(lab)


def test_two_sis_with_bsl_64() -> None:
    ids = {"A": 1, "C": 70, "D": 130, "E": 64}
    lab = make_lab(EDGES, ids)
    try:
        a = lab.dps["A"]
        assert a.impose(b"multi-si", [64, 70, 130]) == 3
        lab.settle()
        assert lab.delivered_to() == {"C": 1, "D": 1, "E": 1}
        for node, g in lab.got.items():
            for _p, _bfir, _proto, header in g:
                hdr, _ = BierHeader.decode(header)
                si, bit = divmod(ids[node] - 1, BSL)
                assert hdr.bitstring == 1 << bit
                # The label the BFER sees is the one it advertised for the packet's SI.
                assert hdr.bift_id == lab.labels[node][(0, BSL, si)]
        c = a.counters()
        assert c["imposed"] == 3 and c["tx.nbr.B.packets"] == 3 and c["replicated"] == 0
        assert lab.dps["B"].counters()["rx.nbr.A.packets"] == 3
        check_accounting(lab)
    finally:
        lab.close()


def test_deliver_callback_errors_do_not_stop_forwarding(lab: Lab) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("application bug")

    lab.dps["C"].deliver = broken
    lab.dps["A"].impose(b"x", [3, 5])
    lab.settle()
    assert lab.dps["C"].counters()["deliver-errors"] == 1
    assert lab.delivered_to() == {"E": 1}


def test_serve_threads(lab: Lab) -> None:
    for dp in lab.dps.values():
        dp.start()
    try:
        lab.dps["A"].impose(b"threaded", [3, 4, 5])
        deadline = time.monotonic() + 3
        while lab.delivered_to() != {"C": 1, "D": 1, "E": 1} and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        for dp in lab.dps.values():
            dp.stop()
    assert lab.delivered_to() == {"C": 1, "D": 1, "E": 1}
    check_accounting(lab)


def test_asyncio_attach(lab: Lab) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        for dp in lab.dps.values():
            dp.attach(loop)
        try:
            lab.dps["A"].impose(b"async", [5])
            for _ in range(300):
                if lab.got["E"]:
                    break
                await asyncio.sleep(0.01)
        finally:
            for dp in lab.dps.values():
                dp.detach(loop)

    asyncio.run(run())
    assert lab.delivered_to() == {"E": 1}


def test_host_api_queue_and_app_socket(lab: Lab) -> None:
    host_a = BierHost(lab.dps["A"])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as app:
        app.bind(("127.0.0.1", 0))
        app.settimeout(2)
        host_e = BierHost(lab.dps["E"], app_port=app.getsockname()[1])
        host_c = BierHost(lab.dps["C"])
        assert host_a.send(b"allreduce-chunk", [3, 5], entropy=7) == 1
        lab.settle()
        assert app.recv(100) == b"allreduce-chunk"
        assert host_c.recv() == (b"allreduce-chunk", 1, BierProto.IPV4)
        assert host_c.recv() is None and host_e.delivered == 1
        # A host sending to itself as well gets its own copy locally.
        host_c.send(b"self", [1, 3])
        lab.settle()
        assert host_c.recv() == (b"self", 3, BierProto.IPV4)
        assert host_a.recv() == (b"self", 3, BierProto.IPV4)


def test_host_needs_bfr_id(lab: Lab) -> None:
    with pytest.raises(ValueError, match="BFR-id"):
        BierHost(lab.dps["B"])
    with pytest.raises(ValueError, match="BFR-id"):
        lab.dps["B"].impose(b"x", [3])


def test_bad_config_is_rejected() -> None:
    adj = undirected(EDGES, list(IDS))
    birts = compute_birts(adj, IDS)
    labels = _labels(sorted(adj), 1)
    with_labels = build_bifts(birts["B"], BSL, {nb: labels[nb] for nb in adj["B"]})
    nbrs = {nb: (f"127.0.0.{i + 2}", f"eth{i}") for i, nb in enumerate(adj["B"])}
    kw = {"bind_addr": "127.0.0.250", "port": 0}
    with pytest.raises(ValueError, match="no address"):
        BierDataplane(None, BSL, 0, with_labels, {"A": nbrs["A"]}, labels["B"], **kw)
    with pytest.raises(ValueError, match="nbr_labels"):
        BierDataplane(None, BSL, 0, build_bifts(birts["B"], BSL), nbrs, labels["B"], **kw)
    with pytest.raises(ValueError, match="own bit"):
        BierDataplane(7, BSL, 0, with_labels, nbrs, labels["B"], **kw)
    with pytest.raises(ValueError, match="local BIER-MPLS label"):
        BierDataplane(None, BSL, 0, with_labels, nbrs, {}, **kw)
    with pytest.raises(ValueError, match="share an address"):
        same = dict.fromkeys(nbrs, ("127.0.0.9", "eth1"))
        BierDataplane(None, BSL, 0, with_labels, same, labels["B"], **kw)
    ok = BierDataplane(None, BSL, 0, with_labels, nbrs, labels["B"], **kw)
    ok.close()


def test_counters_are_json_ready_and_complete(lab: Lab) -> None:
    import json

    c = lab.dps["B"].counters()
    assert json.loads(json.dumps(c)) == c
    for key in ("rx.packets", "tx.packets", "accepted", "dropped-malformed.truncated", "if.eth1.tx_packets"):
        assert c[key] == 0


def test_fuzz_100k_datagrams_into_the_running_dataplane(lab: Lab) -> None:
    """100k random and mutated datagrams through the real socket path: nothing raises, the dataplane
    keeps forwarding, and every datagram is accounted for in the counters."""
    import random

    rng = random.Random(8296)
    b = lab.dps["B"]
    label = lab.labels["B"][(0, BSL, 0)]
    seeds = [
        raw(label, bitstring=bits, ttl=ttl) + b"inner" for bits, ttl in ((0b100, 9), (0b11100, 2), (1, 64))
    ]

    def mutant() -> bytes:
        kind = rng.random()
        if kind < 0.3:
            return rng.randbytes(rng.randint(0, 64))
        pkt = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.6 and pkt:
                pkt[rng.randrange(len(pkt))] = rng.randrange(256)
            elif op < 0.8:
                del pkt[rng.randrange(len(pkt) + 1) :]
            else:
                pkt += rng.randbytes(rng.randint(1, 8))
        return bytes(pkt)

    total = 100_000
    src = lab.addrs["B"].rsplit(".", 1)[0] + ".201"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((src, 0))
        sent = 0
        while sent < total:
            for _ in range(200):  # small bursts, drained in between, so loopback never drops any
                s.sendto(mutant() or b"\x00", (lab.addrs["B"], 6635))
            sent += 200
            # Drain every node: B forwards the mutants that still decode to its neighbours.
            while sum(dp.poll_once() for dp in lab.dps.values()):
                pass
        lab.settle(timeout=30)
    c = b.counters()
    assert c[f"rx.src.{src}.packets"] == total
    check_accounting(lab)
    assert c["dropped-malformed"] > 0 and c["accepted"] > 0
    # Still healthy afterwards: a clean packet goes through.
    before = c["forwarded"]
    assert lab.dps["A"].impose(b"after-fuzz", [3], 4, 0) == 1
    lab.settle()
    assert b.counters()["forwarded"] == before + 1


def _send_from(lab: Lab, sends: Mapping[str, list[bytes]]) -> None:
    for src, pkts in sends.items():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((src, 0))
            for pkt in pkts:
                s.sendto(pkt, (lab.addrs["B"], 6635))
    lab.settle()


def test_edge_policy_judges_the_ingress_port_not_the_source(lab: Lab) -> None:
    """RFC 8296 §6 at B, every sender on loopback: whatever address a packet claims, it came in on ``lo``,
    so ``lo``'s policy judges it and its drops count on ``lo``. As a host port with one BFIR (BFR-id 7, may
    reach C only), a neighbour BFR's own address does not open it; as a fabric port open to A, the host
    does not."""
    b = lab.dps["B"]
    label = lab.labels["B"][(0, BSL, 0)]
    net = lab.addrs["B"].rsplit(".", 1)[0]
    host, stranger = f"{net}.200", f"{net}.201"
    b.set_edge_policy({"lo": PortPolicy(HOST, hosts={host: HostBfir.reaching(7, [3], BSL)})})
    _send_from(
        lab,
        {
            host: [
                raw(label, bitstring=0b100, bfir_id=7) + b"legit",
                raw(label, bitstring=0b100, bfir_id=1) + b"forged",
                raw(label, bitstring=0b10100, bfir_id=7) + b"outside",
            ],
            stranger: [raw(label, bitstring=0b100, bfir_id=7) + b"stranger"],
            lab.addrs["A"]: [raw(label, bitstring=0b100, bfir_id=1) + b"neighbour-address"],
        },
    )
    c = b.counters()
    host_port = {"forged-bfir-id": 1, "bitstring-outside-set": 1, "not-bfir": 2}
    for reason, n in host_port.items():
        assert c[f"dropped-policy.lo.{reason}"] == n, reason
    assert c["dropped-policy"] == sum(host_port.values())
    assert sorted(p for p, *_ in lab.got["C"]) == [b"legit"]

    b.set_edge_policy({"lo": PortPolicy(FABRIC, neighbors=frozenset({lab.addrs["A"]}))})
    _send_from(lab, {host: [raw(label, bitstring=0b100, bfir_id=7) + b"host-on-fabric"]})
    assert lab.dps["A"].impose(b"from-a", [3], BierProto.IPV4, 0) == 1
    lab.settle()
    c = b.counters()
    assert c["dropped-policy.lo.not-bfr-neighbor"] == 1
    assert sorted(p for p, *_ in lab.got["C"]) == [b"from-a", b"legit"]
    # (no check_accounting: the packet that claims A's address counts as received from A, never sent by it)
    assert c["rx.packets"] + c["imposed"] == c["accepted"] + sum(c[k] for k in WHOLE_DROPS)


def test_an_edge_policy_port_with_no_interface_fails_closed(lab: Lab, caplog) -> None:
    """A port the policy names that is not there is left out with a warning; what arrives where no data
    port was found (here: everything, on lo) is dropped on port ``unknown``."""
    b = lab.dps["B"]
    b.set_edge_policy({"nosuch9": PortPolicy(FABRIC, neighbors=frozenset({lab.addrs["A"]}))})
    assert "nosuch9" in b.missing_ports and "no interface" in caplog.text
    assert lab.dps["A"].impose(b"from-a", [3], BierProto.IPV4, 0) == 1
    lab.settle()
    assert b.counters()["dropped-policy.unknown.not-bfr-neighbor"] == 1 and lab.got["C"] == []
    b.set_edge_policy({})
    assert b.missing_ports == []


def test_a_delivery_carries_its_packets_kernel_receive_stamp(lab: Lab) -> None:
    """With stamps on, ``rx_stamp_ns`` during a delivery is when the kernel received that packet at this
    BFER (a modelled control plane counts from there), even when the BFER reads it much later."""
    e = lab.dps["E"]
    e.enable_rx_stamps()
    seen: list[int] = []
    e.deliver = lambda *_args: seen.append(e.rx_stamp_ns)
    a = lab.dps["A"]
    a.impose(b"warm", [5], BierProto.IPV4)  # the kernel may turn stamping on a moment later
    lab.settle()
    seen.clear()
    before = time.time_ns()
    a.impose(b"stamped", [5], BierProto.IPV4)
    for name in ("B", "C", "D"):  # forward it to E's socket, but leave E to read it later
        for _ in range(20):
            lab.dps[name].poll_once()
    time.sleep(0.1)
    read_at = time.time_ns()
    lab.settle()
    assert len(seen) == 1
    assert before <= seen[0] < read_at - 50_000_000
    # Its own imposition is delivered "now": a stamp from the moment it was imposed.
    own = lab.dps["C"]
    own.enable_rx_stamps()
    mine: list[int] = []
    own.deliver = lambda *_args: mine.append(own.rx_stamp_ns)
    t0 = time.time_ns()
    own.impose(b"self", [3], BierProto.IPV4)
    assert len(mine) == 1 and t0 <= mine[0] <= time.time_ns()


# BIER fast reroute on a small Clos: leaves 1..3 are BFERs, spines transit. spine1's link to leaf1 is
# taken as down at spine1 (loopback cannot cut it, so nothing goes over it once the bypass is on).
CLOS_EDGES = [(leaf, spine) for leaf in ("L1", "L2", "L3") for spine in ("S1", "S2")]
CLOS_IDS = {"L1": 1, "L2": 2, "L3": 3}


def _with_fast_reroute(lab: Lab) -> dict[str, tuple[str, list[int]]]:
    """Every BFR's adjacency labels (their own block) and S1's bypasses, as the plan writes them."""
    labels = adjacency_labels(lab.adj, 5000)
    for name, dp in lab.dps.items():
        dp.set_adjacency_labels({label: nbr for nbr, label in labels[name].items()})
    bypasses = {}
    for nbr in lab.adj["S1"]:
        path = bypass_path(lab.adj, "S1", nbr, lambda n: True)
        assert path is not None
        bypasses[nbr] = tunnel(path, labels)
    return bypasses


def test_a_bypass_carries_a_dead_links_copies_to_its_neighbour_exactly_once() -> None:
    lab = make_lab(CLOS_EDGES, CLOS_IDS, nodes=("S1", "S2"))
    try:
        bypasses = _with_fast_reroute(lab)
        assert bypasses["L1"] == ("L2", [lab_label(lab, "L2", "S2"), lab_label(lab, "S2", "L1")])
        lab.dps["S1"].set_bypass({"L1": bypasses["L1"]})
        assert lab.dps["S1"].bypassed == ["L1"]
        for entropy in range(32):  # L2 and L3 pick S1 or S2 for L1 by entropy: S1's share takes the bypass
            lab.dps["L2"].impose(b"from-l2-%d" % entropy, [1, 3], BierProto.IPV4, entropy)
            lab.dps["L3"].impose(b"from-l3-%d" % entropy, [1], BierProto.IPV4, entropy)
        lab.settle()
        s1 = lab.dps["S1"].counters()
        assert s1["tx.nbr.L1.packets"] == 0 and s1["bypass.sent"] > 0
        assert [n for n, _at in lab.dps["S1"].first_bypassed] == ["L1"]  # the first copy only
        expected = sorted([b"from-l2-%d" % e for e in range(32)] + [b"from-l3-%d" % e for e in range(32)])
        assert sorted(p for p, *_ in lab.got["L1"]) == expected  # every one, once
        passed = sum(dp.counters()["bypass.passed"] for dp in lab.dps.values())
        assert passed == 2 * s1["bypass.sent"]  # a leaf, then a spine, popped one label each
        for name, dp in lab.dps.items():
            c = dp.counters()
            assert c["rx.packets"] + c["imposed"] == c["accepted"] + sum(c[k] for k in WHOLE_DROPS), name
        # switched off: straight to L1 again
        lab.dps["S1"].set_bypass({})
        lab.dps["L2"].impose(b"after", [1], BierProto.IPV4, 0)
        lab.dps["L3"].impose(b"after", [1], BierProto.IPV4, 1)
        lab.settle()
        assert lab.dps["S1"].counters()["bypass.sent"] == s1["bypass.sent"]
        assert [p for p, *_ in lab.got["L1"]].count(b"after") == 2
        # on again: its first copy is noted again
        lab.dps["S1"].set_bypass({"L1": bypasses["L1"]})
        for entropy in range(8):
            lab.dps["L2"].impose(b"again", [1], BierProto.IPV4, entropy)
        lab.settle()
        assert [n for n, _at in lab.dps["S1"].first_bypassed] == ["L1", "L1"]
    finally:
        lab.close()


# Node protection on a ring of five BFERs: C1 reaches C3 over C2 alone (three hops the other way).
RING_EDGES = [("C1", "C2"), ("C2", "C3"), ("C3", "C4"), ("C4", "C5"), ("C5", "C1")]
RING_IDS = {f"C{i}": i for i in range(1, 6)}


def test_node_protection_delivers_past_a_dead_neighbour_once_and_a_link_bypass_alone_does_not() -> None:
    lab = make_lab(RING_EDGES, RING_IDS)
    try:
        labels = adjacency_labels(lab.adj, 5000)
        for name, dp in lab.dps.items():
            dp.set_adjacency_labels({label: nbr for nbr, label in labels[name].items()})
        path = bypass_path(lab.adj, "C1", "C2", lambda n: True)
        assert path == ["C1", "C5", "C4", "C3", "C2"]
        link = tunnel(path, labels)
        nnh = next_next_hops(lab.adj, compute_birts(lab.adj, RING_IDS), "C1", "C2", lambda n: True)
        (to_c3, bfr_ids), *_ = nnh.values()
        assert list(nnh) == ["C3"] and bfr_ids == [3]
        via, stack = tunnel(to_c3, labels)
        tunnels = {"C2": [NnhTunnel("C3", lab.labels["C3"][(0, BSL, 0)], via, tuple(stack), (3,))]}
        c1 = lab.dps["C1"]

        def send(tag: bytes) -> None:
            for entropy in range(8):
                c1.impose(b"%s-%d" % (tag, entropy), [2, 3, 4], BierProto.IPV4, entropy)
            lab.settle()

        def got(name: str, tag: bytes) -> list[bytes]:
            return sorted(p for p, *_ in lab.got[name] if p.startswith(tag))

        want = [b"x-%d" % e for e in range(8)]
        # only the link C1-C2 is down: C2 gets its own bit over the link bypass, C3 its bit straight
        c1.set_bypass({"C2": link}, tunnels)
        assert c1.bypassed == ["C2"]
        send(b"x")
        assert [got(n, b"x") for n in ("C2", "C3", "C4")] == [want] * 3  # each once
        c = c1.counters()
        assert (c["tx.nbr.C2.packets"], c["bypass.nnh.sent"], c["bypass.sent"]) == (0, 8, 16)
        assert c["tx.packets"] == c["forwarded"] + c["replicated"] == 24
        assert [n for n, _at in c1.first_bypassed] == ["C2"]
        # C2 itself is dead: C3 still gets every packet, once; a link bypass alone (to C2) reaches no one
        lab.dps.pop("C2").close()
        send(b"y")
        assert got("C3", b"y") == [b"y-%d" % e for e in range(8)] == got("C4", b"y")
        c1.set_bypass({"C2": link})
        send(b"z")
        assert got("C3", b"z") == [] and len(got("C4", b"z")) == 8
        for name, dp in lab.dps.items():
            c = dp.counters()
            assert c["rx.packets"] + c["imposed"] == c["accepted"] + sum(c[k] for k in WHOLE_DROPS), name
            assert c["tx.packets"] == c["forwarded"] + c["replicated"] + c["bypass.passed"], name
    finally:
        lab.close()


def lab_label(lab: Lab, node: str, nbr: str) -> int:
    return adjacency_labels(lab.adj, 5000)[node][nbr]


def test_a_bypass_from_a_host_port_or_a_stranger_is_dropped_by_the_edge_policy() -> None:
    """A bypass hands its packet to the next BFR as if from a fabric port: only a fabric port's BFR
    neighbour may send one, or a host could get round its own port's checks."""
    lab = make_lab(CLOS_EDGES, CLOS_IDS, nodes=("S1", "S2"))
    try:
        _with_fast_reroute(lab)
        l2 = lab.dps["L2"]
        inner = raw(lab.labels["S2"][(0, BSL, 0)], bitstring=0b1, bfir_id=1) + b"sneaked"
        pkt = push([lab_label(lab, "L2", "S2")]) + inner
        net = lab.addrs["L2"].rsplit(".", 1)[0]
        host = f"{net}.200"
        for policy in (
            PortPolicy(HOST, hosts={host: HostBfir.reaching(1, [1], BSL)}),  # a host port
            PortPolicy(FABRIC, neighbors=frozenset({lab.addrs["S1"]})),  # a fabric port, not its neighbour
        ):
            l2.set_edge_policy({"lo": policy})
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((host, 0))
                s.sendto(pkt, (lab.addrs["L2"], 6635))
            lab.settle()
        c = l2.counters()
        assert c["dropped-policy.lo.not-bfr-neighbor"] == 2 and c["bypass.passed"] == 0
        assert lab.got["L1"] == []
        # from the fabric neighbour it names, the same packet passes
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((lab.addrs["S1"], 0))
            s.sendto(pkt, (lab.addrs["L2"], 6635))
        lab.settle()
        assert l2.counters()["bypass.passed"] == 1
        assert [p for p, *_ in lab.got["L1"]] == [b"sneaked"]
    finally:
        lab.close()


def test_bad_fast_reroute_tables_are_refused(lab: Lab) -> None:
    b = lab.dps["B"]
    with pytest.raises(ValueError, match="not BFR-NBRs"):
        b.set_adjacency_labels({5000: "Z"})
    with pytest.raises(ValueError, match="BIFT-ids of this BFR"):
        b.set_adjacency_labels({lab.labels["B"][(0, BSL, 0)]: "A"})
    with pytest.raises(ValueError, match="not BFR-NBRs"):
        b.set_bypass({"C": ("Q", [5000])})
