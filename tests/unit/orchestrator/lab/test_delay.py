"""Propagation delay as people write it, and when the relay releases a held packet (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.lab.delay import (
    DelayError,
    HoldLine,
    LinkDelay,
    bdp_bytes,
    format_duration,
    parse_delay_words,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2ms", 0.002), ("100us", 1e-4), ("100µs", 1e-4), ("250ns", 2.5e-7), ("1.5s", 1.5), (".5ms", 5e-4),
     ("0", 0.0), (0, 0.0), ("0ms", 0.0), (" 3 ms ", 0.003)],
)  # fmt: skip
def test_durations_take_netem_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "needle"),
    [("2", "give a unit"), (5, "give a unit"), ("2 min", "not a duration"), ("-1ms", "not a duration"),
     ("fast", "not a duration")],
)  # fmt: skip
def test_a_duration_without_a_unit_or_a_sign_is_refused(text, needle):
    with pytest.raises(DelayError, match=needle):
        parse_duration(text)


def test_format_duration_picks_the_largest_unit():
    shown = [format_duration(s) for s in (0, 2e-3, 1e-6, 1.5, 2.5e-7)]
    assert shown == ["0", "2 ms", "1 µs", "1.5 s", "250 ns"]


def test_delay_words_as_link_set_takes_them():
    assert parse_delay_words(["2ms"]) == LinkDelay(0.002)
    assert parse_delay_words(["2ms", "jitter", "100us"]) == LinkDelay(0.002, 1e-4)
    assert parse_delay_words(["0"]).is_none
    for words in ([], ["2ms", "100us"], ["2ms", "jitter"], ["2ms", "wobble", "1us"]):
        with pytest.raises(DelayError, match="jitter J"):
            parse_delay_words(words)
    with pytest.raises(DelayError, match="jitter 3 ms is above the delay 2 ms"):
        parse_delay_words(["2ms", "jitter", "3ms"])
    assert LinkDelay(0.002, 1e-4).describe() == "delay 2 ms ± 100 µs (never reordered)"


def test_a_bandwidth_delay_product():
    # 400G over 2 ms: 100 MB in flight; 100G over 10 ms: 125 MB.
    assert bdp_bytes(400e9, 0.002) == 100_000_000 and bdp_bytes(100e9, 0.01) == 125_000_000


arrivals = st.lists(st.floats(min_value=0, max_value=1e3), min_size=1, max_size=60).map(sorted)


@given(arrivals, st.floats(0, 5), st.floats(0, 1), st.lists(st.floats(0, 1, exclude_max=True), min_size=60))
def test_a_hold_line_never_reorders_and_never_releases_early(times, delay, share, draws):
    jitter = delay * share
    line = HoldLine(delay, jitter)
    dues = [line.due(t, u) for t, u in zip(times, draws, strict=False)]
    assert dues == sorted(dues)
    for t, due in zip(times, dues, strict=False):
        assert due >= t + delay - jitter - 1e-9
    # Each packet leaves no later than the latest its own draw or an earlier packet's could ask.
    for i, due in enumerate(dues):
        assert due <= max(t + delay + jitter for t in times[: i + 1]) + 1e-9


@given(arrivals, st.floats(0, 5))
def test_without_jitter_every_packet_is_held_exactly_the_delay(times, delay):
    line = HoldLine(delay)
    assert all(math.isclose(line.due(t), t + delay, abs_tol=1e-9) for t in times)


def test_a_new_delay_applies_to_later_packets_and_keeps_the_order():
    line = HoldLine(1.0)
    assert line.due(0.0) == 1.0
    line.set(0.1)
    # Shorter now, but never ahead of the packet already held.
    assert line.due(0.5) == 1.0 and line.due(2.0) == 2.1
    with pytest.raises(DelayError):
        line.set(-1)


def test_arp_waits_twice_the_round_trip_and_never_less_than_the_kernel():
    from orchestrator.lab.delay import KERNEL_NEIGH_RETRANS_MS, neighbour_retrans_ms

    assert neighbour_retrans_ms(0.04) == KERNEL_NEIGH_RETRANS_MS  # 1 µs hops at 1:20000
    assert neighbour_retrans_ms(4.0) == 8000  # a 2 ms DCI link at 1:1000


def test_the_relays_programs_are_found_at_ingress_beside_the_bfr():
    from orchestrator.lab.shaping import tc_programs

    # bpftool -j net show in a receiver: the BFR's program and the relay's divert on eth1's ingress, the
    # link-fault program on its egress, the relay's return on the tap.
    net = [{"xdp": [], "tc": [
        {"devname": "eth1", "ifindex": 1048704, "kind": "clsact/ingress", "name": "delay_relay.o:[tc/divert]",
         "id": 901},
        {"devname": "eth1", "ifindex": 7, "kind": "clsact/ingress", "name": "bier_rx:[*fsobj]", "id": 681},
        {"devname": "eth1", "ifindex": 7, "kind": "clsact/egress", "name": "link_fault.o:[tc]", "id": 556},
        {"devname": "dl1048704", "ifindex": 3, "kind": "clsact/ingress", "name": "delay_relay.o:[tc/return]",
         "id": 902},
    ]}]  # fmt: skip
    assert tc_programs(net, "ingress", "delay_relay") == {"eth1": 901, "dl1048704": 902}
    assert tc_programs(net, "egress") == {"eth1": 556}
