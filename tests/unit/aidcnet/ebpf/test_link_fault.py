"""The link-fault tc program: its parameters (pure), its build, and its drops on a real veth in namespaces."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.ebpf import SRC, build, build_key
from aidcnet.ebpf.link_fault import ONE, FaultError, FaultStats, LinkFault, parse_loss_words
from orchestrator.lab.shaping import (
    FabricIOError,
    apply_shapers,
    attach_link_fault,
    attach_link_faults,
    egress_programs,
    fault_stats_maps,
    fault_stats_of,
    link_fault_object,
    link_fault_prog_id,
    link_fault_programs,
    qdisc_stats,
    read_fault_stats,
    read_link_fault,
    set_link_fault,
)
from tests.unit.fabric_netns import VethPair, make_uplinks, require_tool

prob = st.floats(0, 1, allow_nan=False)

# --- parameters -----------------------------------------------------------------------------------------


@given(p=st.floats(0.0001, 1), r=st.floats(0.0001, 1), lb=prob, lg=prob)
def test_config_bytes_round_trip_to_within_one_part_in_2_32(p, r, lb, lg):
    fault = LinkFault(p=p, r=r, loss_bad=lb, loss_good=lg)
    back = LinkFault.decode(fault.encode())
    for name in ("p", "r", "loss_bad", "loss_good"):
        assert abs(getattr(back, name) - getattr(fault, name)) <= 1 / ONE


def test_certain_and_impossible_are_exact():
    assert LinkFault.independent(1.0).encode()[16:24] == ONE.to_bytes(8, "little")
    assert LinkFault.independent(0.0).encode() == LinkFault().encode()
    assert LinkFault().is_none and LinkFault.independent(1.0).mean_loss == 1.0


@given(loss=st.floats(0.0001, 0.9), burst=st.floats(1, 100))
def test_bursty_form_has_the_asked_mean_loss_and_burst(loss, burst):
    if burst < loss / (1 - loss):
        with pytest.raises(FaultError, match="needs bursts of at least"):
            LinkFault.bursty(loss, burst)
        return
    fault = LinkFault.bursty(loss, burst)
    assert fault.mean_loss == pytest.approx(loss, rel=1e-9)
    assert fault.mean_burst == pytest.approx(burst, rel=1e-9)


def test_cli_words():
    assert parse_loss_words(["0.05"]) == LinkFault.independent(0.05)
    assert parse_loss_words(["5%"]) == LinkFault.independent(0.05)
    assert parse_loss_words(["0.1", "burst", "4"]) == LinkFault.bursty(0.1, 4)
    assert parse_loss_words(["gilbert", "0.01", "0.3"]) == LinkFault(p=0.01, r=0.3)
    assert parse_loss_words(["gilbert", "0.01", "0.3", "0.5", "0.001"]) == LinkFault(0.01, 0.3, 0.5, 0.001)
    for bad, match in [
        ([], "needs a value"),
        (["1.5"], "between 0 and 1"),
        (["x"], "not a number"),
        (["0.1", "burst", "0.5"], "at least 1 packet"),
        (["1", "burst", "3"], "below 1"),
        (["gilbert", "0.1"], "two to four"),
        (["gilbert", "0.1", "0"], "down"),
        (["0.1", "bursts", "3"], "expected loss P"),
    ]:
        with pytest.raises(FaultError, match=match):
            parse_loss_words(bad)


def test_descriptions_say_what_a_user_asked():
    assert LinkFault().describe() == "no loss"
    assert LinkFault.independent(0.05).describe() == "5.00% independent loss"
    assert "5.00% loss in bursts of 4 packets" in LinkFault.bursty(0.05, 4).describe()


def test_stats_decode_in_struct_order():
    raw = b"".join(i.to_bytes(8, "little") for i in range(1, 8))
    st_ = FaultStats.decode(raw)
    assert (st_.passed_packets, st_.lost_good_packets, st_.lost_bad_packets, st_.bad_entries) == (1, 3, 5, 7)
    assert st_.lost_packets == 8


def test_stats_of_a_program_older_than_the_feedback_counters_read_them_as_zero():
    old = b"".join(i.to_bytes(8, "little") for i in range(1, 8))  # 7 counters, 56 bytes
    stats = FaultStats.decode(old)
    assert stats.bad_entries == 7 and stats.feedback_packets == 0 and stats.feedback_bytes == 0
    new = b"".join(i.to_bytes(8, "little") for i in range(1, 12))
    stats = FaultStats.decode(new)
    assert (stats.ack_packets, stats.nack_packets, stats.agg_ack_packets, stats.feedback_bytes) == (
        8,
        9,
        10,
        11,
    )
    assert stats.feedback_packets == 27 and stats.lost_bytes == 4 + 6  # good and bad bytes


@given(
    st.lists(st.integers(0, 2**40), min_size=11, max_size=11),
    st.lists(st.integers(0, 2**40), min_size=11, max_size=11),
)
def test_minus_is_the_counts_in_between(before, extra):
    b = FaultStats(*before)
    a = FaultStats(*(x + y for x, y in zip(before, extra, strict=True)))
    assert a.minus(b) == FaultStats(*extra) and a.minus(a) == FaultStats()


def test_program_and_map_listings_pick_each_egress_link_fault_stats_map():
    # Shapes of bpftool -j net show / prog show / map show (Debian 12's bpftool 7.1).
    net = [{"xdp": [], "tc": [
        {"devname": "eth1", "ifindex": 2, "kind": "clsact/ingress", "name": "bier_rx:[*fsobj]", "id": 681},
        {"devname": "eth1", "ifindex": 2, "kind": "clsact/egress", "name": "link_fault.o:[tc]", "id": 556},
        {"devname": "eth2", "ifindex": 3, "kind": "clsact/egress", "name": "link_fault.o:[tc]", "id": 564},
    ], "flow_dissector": []}]  # fmt: skip
    assert egress_programs(net) == {"eth1": 556, "eth2": 564}
    other = {"devname": "eth3", "ifindex": 4, "kind": "clsact/egress", "name": "other.o:[tc]", "id": 9}
    net[0]["tc"].append(other)
    assert egress_programs(net, "link_fault") == {"eth1": 556, "eth2": 564}
    assert egress_programs(net)["eth3"] == 9
    progs = [
        {"id": 556, "name": "link_fault", "map_ids": [745, 746, 747]},
        {"id": 564, "name": "link_fault", "map_ids": [748, 749, 750]},
        {"id": 681, "name": "bier_rx", "map_ids": [746]},
    ]
    maps = [{"id": i, "name": n} for i, n in (
        (745, "lf_config"), (746, "lf_stats"), (747, "lf_state"), (748, "lf_config"), (749, "lf_stats"),
        (750, "lf_state"),
    )]  # fmt: skip
    assert fault_stats_maps(progs, maps) == {556: 746, 564: 749}


# --- build -----------------------------------------------------------------------------------------------


def test_build_is_keyed_by_content(tmp_path):
    require_tool("clang", "clang llvm libbpf-dev")
    cache = tmp_path / "cache"
    first = link_fault_object(cache)
    stamp = first.stat().st_mtime_ns
    assert link_fault_object(cache) == first and first.stat().st_mtime_ns == stamp
    # The key is the sources' content (and compiler, flags), not where they live.
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    assert build_key(copy) == build_key(SRC)
    (copy / "link_fault.c").write_text((SRC / "link_fault.c").read_text() + "\n/* changed */\n")
    other = build(cache, src=copy, programs=("link_fault",))["link_fault"]
    assert other.parent != first.parent and other.name == "link_fault.o"
    assert other.read_bytes()[:4] == b"\x7fELF"
    # Both programs compile through the one build, into one directory the node image gets whole.
    both = build(cache)
    assert set(both) == {"bier", "link_fault"} and both["link_fault"] == first
    assert both["bier"].parent == first.parent


# --- on a veth -------------------------------------------------------------------------------------------

RECEIVER = """
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("0.0.0.0", 9000))
s.settimeout(float(sys.argv[1]))
print("ready", flush=True)
seqs = []
try:
    while True:
        seqs.append(int.from_bytes(s.recv(64)[:4], "big"))
except socket.timeout:
    pass
print(json.dumps(seqs))
"""

SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = int(sys.argv[2])
for i in range(n):
    s.sendto(i.to_bytes(4, "big") + bytes(28), (sys.argv[1], 9000))
    if i % 200 == 199:
        time.sleep(0.002)  # let the receiver keep up: only the program may drop here
"""


def exchange(pair: VethPair, count: int) -> list[int]:
    rx = pair.popen_in(pair.b, RECEIVER, "1.0")
    assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
    sent = pair.run_in(pair.a, SENDER, pair.b_ip, str(count))
    assert sent.returncode == 0, sent.stderr
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 0, err
    return json.loads(out)


def binomial_band(n: int, p: float, sigmas: float = 5.0) -> tuple[float, float]:
    sd = math.sqrt(n * p * (1 - p))
    return n * p - sigmas * sd, n * p + sigmas * sd


@pytest.fixture
def faulty(veth_pair):
    require_tool("clang", "clang llvm libbpf-dev")
    if shutil.which("bpftool") is None and not Path("/usr/sbin/bpftool").exists():
        pytest.fail("bpftool is missing: apt-get install -y bpftool (or run scripts/setup.sh)")
    obj = link_fault_object()
    prog = attach_link_fault(veth_pair.a_path, veth_pair.a_if, obj)
    return veth_pair, obj, prog


def test_attach_is_idempotent_and_starts_lossless(faulty):
    pair, obj, prog = faulty
    assert attach_link_fault(pair.a_path, pair.a_if, obj) == prog
    fault, stats = read_link_fault(pair.a_path, pair.a_if)
    assert fault.is_none and stats == FaultStats()
    got = exchange(pair, 2000)
    assert sorted(got) == list(range(2000))
    _fault, stats = read_link_fault(pair.a_path, pair.a_if)
    assert stats.passed_packets >= 2000 and stats.lost_packets == 0
    # A forced re-attach is a fresh program: new id, counters from zero.
    fresh = attach_link_fault(pair.a_path, pair.a_if, obj, replace=True)
    assert fresh != prog and read_link_fault(pair.a_path, pair.a_if)[1] == FaultStats()


def test_independent_loss_drops_within_binomial_bounds_and_counts_every_drop(faulty):
    pair, _obj, _prog = faulty
    n, p = 20000, 0.05
    set_link_fault(pair.a_path, pair.a_if, LinkFault.independent(p))
    got = exchange(pair, n)
    lost = n - len(set(got))
    fault, stats = read_link_fault(pair.a_path, pair.a_if)
    lo, hi = binomial_band(n, p)
    print(f"independent 5%: lost {lost} of {n} ({lost / n:.2%}), band {lo:.0f}..{hi:.0f}")
    assert fault == LinkFault.decode(LinkFault.independent(p).encode())
    assert lo <= lost <= hi
    # Nothing but the program lost anything, and it counted each one in Good (independent loss).
    assert stats.lost_good_packets == lost and stats.lost_bad_packets == 0


def test_bursty_loss_has_its_mean_and_its_bursts(faulty):
    pair, _obj, _prog = faulty
    n, p, burst = 30000, 0.05, 5.0
    set_link_fault(pair.a_path, pair.a_if, LinkFault.bursty(p, burst))
    got = set(exchange(pair, n))
    missing = [i for i in range(n) if i not in got]
    runs = []
    for i in missing:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    mean_run = sum(b - a + 1 for a, b in runs) / len(runs)
    _fault, stats = read_link_fault(pair.a_path, pair.a_if)
    print(
        f"bursty 5% x 5: lost {len(missing)} of {n} ({len(missing) / n:.2%}) in {len(runs)} bursts, "
        f"mean {mean_run:.2f} packets; program counted {stats.bad_entries} bursts"
    )
    # Bursts make the count far more variable than a binomial: judge the mean on a wide band.
    assert 0.03 <= len(missing) / n <= 0.07
    assert 4.0 <= mean_run <= 6.0
    assert stats.lost_bad_packets == len(missing) and stats.lost_good_packets == 0
    assert abs(stats.bad_entries - len(runs)) <= 2


def test_loss_one_drops_all_and_zero_restores(faulty):
    pair, _obj, _prog = faulty
    set_link_fault(pair.a_path, pair.a_if, LinkFault.independent(1.0))
    assert exchange(pair, 500) == []
    set_link_fault(pair.a_path, pair.a_if, LinkFault())
    assert sorted(exchange(pair, 500)) == list(range(500))


def test_fault_and_shaper_count_apart(faulty):
    from orchestrator.lab.fabric import EndShaper, tbf_burst

    pair, _obj, _prog = faulty
    rate = 50_000_000
    end = EndShaper(pair.a, pair.a_if, "x:y", rate, rate, 1 << 20, tbf_burst(rate, 1500), 1500)
    apply_shapers(pair.a_path, [end])
    set_link_fault(pair.a_path, pair.a_if, LinkFault.independent(0.2))
    got = exchange(pair, 5000)
    q = qdisc_stats(pair.a_path)[pair.a_if]
    _f, stats = read_link_fault(pair.a_path, pair.a_if)
    # Dropped before the shaper: the queue saw only what passed, and dropped none of it.
    assert q.drops == 0 and stats.lost_packets == 5000 - len(set(got)) > 0
    assert q.packets >= len(got)


def test_without_the_program_set_says_how_to_get_it(veth_pair):
    require_tool("clang", "clang llvm libbpf-dev")
    assert link_fault_prog_id(veth_pair.b_path, veth_pair.b_if) is None
    with pytest.raises(FabricIOError, match="aidclab configure attaches"):
        set_link_fault(veth_pair.b_path, veth_pair.b_if, LinkFault.independent(0.1))


RECVERR_SENDER = """
import errno, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 11, 1)  # IP_RECVERR: a drop the sender can see becomes ENOBUFS
nobufs = 0
for i in range(int(sys.argv[2])):
    try:
        s.sendto(i.to_bytes(4, "big") + bytes(28), (sys.argv[1], 9000))
    except OSError as exc:
        # No one listens on b: its port unreachables come back too (ECONNREFUSED); only ENOBUFS counts.
        nobufs += exc.errno == errno.ENOBUFS
print(nobufs)
"""


def test_a_lossy_link_is_silent_to_the_sender_as_a_wire_is(faulty):
    # Our lossless senders resend what comes back as ENOBUFS; were the injected loss reported that way
    # they would repair it, and a lossy link would cost nothing.
    pair, _obj, _prog = faulty
    set_link_fault(pair.a_path, pair.a_if, LinkFault.independent(0.5))
    sent = pair.run_in(pair.a, RECVERR_SENDER, pair.b_ip, "2000")
    assert sent.returncode == 0, sent.stderr
    _fault, stats = read_link_fault(pair.a_path, pair.a_if)
    assert stats.lost_packets > 800 and int(sent.stdout) == 0


FEEDBACK_SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dst = sys.argv[1]
# (destination port, first message octet, count): version 1 ACK / NACK / AGG-ACK to 4795 are feedback;
# DATA, version 2, or another port are not.
for port, first, n in ((4795, 0x12, 7), (4795, 0x13, 3), (4795, 0x14, 5), (4795, 0x11, 11),
                       (4795, 0x22, 2), (4796, 0x12, 4)):
    for _ in range(n):
        s.sendto(bytes([first]) + bytes(39), (dst, port))
"""


def test_feedback_is_counted_by_type_and_the_whole_lab_reader_agrees(faulty):
    pair, _obj, _prog = faulty
    sent = pair.run_in(pair.a, FEEDBACK_SENDER, pair.b_ip)
    assert sent.returncode == 0, sent.stderr
    _fault, stats = read_link_fault(pair.a_path, pair.a_if)
    assert (stats.ack_packets, stats.nack_packets, stats.agg_ack_packets) == (7, 3, 5)
    # Ethernet 14 + IPv4 20 + UDP 8 + 40 octets of message, as skb->len counts at egress.
    assert stats.feedback_bytes == 15 * (14 + 20 + 8 + 40)
    assert stats.passed_packets >= 7 + 3 + 5 + 11 + 2 + 4
    assert read_fault_stats({"a": pair.a_path}) == {f"a:{pair.a_if}": stats}
    # An end without the program is absent, not zero.
    assert read_fault_stats({"b": pair.b_path}) == {}


def test_the_counters_of_named_ends_and_an_end_without_the_program_named(faulty):
    pair, _obj, _prog = faulty
    container = {"a": pair.a, "b": pair.b}.__getitem__  # nodes whose namespaces are /run/netns/<name>
    a_end, b_end = f"a:{pair.a_if}", f"b:{pair.b_if}"
    assert fault_stats_of([a_end], container) == {a_end: read_link_fault(pair.a_path, pair.a_if)[1]}
    with pytest.raises(FabricIOError, match=f"no link-fault program at the egress of {b_end}"):
        fault_stats_of([a_end, b_end], container)


def test_a_node_s_ends_attach_in_one_batch_keep_their_programs_and_replace_together():
    require_tool("clang", "clang llvm libbpf-dev")
    obj = link_fault_object()
    with make_uplinks("lfb", 3) as (node, _far):
        netns = f"/run/netns/{node}"
        assert link_fault_programs(netns) == {}
        first = attach_link_faults(netns, ["up0", "up2"], obj)
        assert sorted(first) == ["up0", "up2"] and len(set(first.values())) == 2
        assert link_fault_programs(netns) == first  # up1 was not asked for
        # Again with one more end: the two running programs stay, only up1 gets one.
        again = attach_link_faults(netns, ["up0", "up1", "up2"], obj)
        assert {i: again[i] for i in first} == first and again["up1"] not in first.values()
        fresh = attach_link_faults(netns, ["up0", "up1", "up2"], obj, replace=True)
        assert not set(fresh.values()) & set(again.values())
        with pytest.raises(FabricIOError, match="up7"):
            attach_link_faults(netns, ["up7"], obj)
