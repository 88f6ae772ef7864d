"""Fabric time, the bottleneck bound and the fidelity verdict (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aidcnet.timescale import TimeScale
from orchestrator.experiment.fidelity import (
    MAX_READ_UNCERTAINTY_S,
    Confirmation,
    CpuMeter,
    DrainMeter,
    HeldMeter,
    LinkCounters,
    NodeCounters,
    agent_late,
    agent_losses,
    agent_waits,
    bottleneck_bound,
    held_reason,
    machine_reason,
    overlap,
    pace_reason,
    under_bound_reason,
    verdict,
    without,
)
from orchestrator.experiment.records import BoundRecord, ConfirmationRecord, TimingRecord


def test_bound_names_the_busiest_link_in_issue_12s_model_distribution():
    # h1 sends 4.25 MB up its 20 Mbit/s uplink; each receiver's downlink gets 1/7 of it.
    rates = {"h1:eth1": 20_000_000, **{f"leaf{i}:eth3": 20_000_000 for i in range(1, 8)}}
    sent = {"h1:eth1": 4_250_000, **{f"leaf{i}:eth3": 607_143 for i in range(1, 8)}}
    bound = bottleneck_bound(sent, rates, TimeScale(20_000))
    assert bound.link == "h1:eth1"
    assert bound.wall_s == pytest.approx(1.7)
    # The same bytes over the real 400G link: 4.25 MB / 400 Gbit/s = 85 µs.
    assert bound.fabric_s == pytest.approx(1.7 / 20_000)
    assert "h1:eth1: 4250000 B at 20 Mbit/s = 1.700 s wall" in bound.describe()


def test_bound_errors_name_the_link():
    with pytest.raises(ValueError, match="x:eth1 carried bytes but has no rate"):
        bottleneck_bound({"x:eth1": 5}, {}, TimeScale(1))
    with pytest.raises(ValueError, match="nothing to bound"):
        bottleneck_bound({}, {}, TimeScale(1))


@given(
    st.dictionaries(
        st.text("abc:123", min_size=1, max_size=5),
        st.tuples(st.integers(0, 10**9), st.integers(1, 10**10)),
        min_size=1,
    ),
    st.integers(1, 10**5),
)
def test_bound_is_the_max_and_no_link_exceeds_it(links, scale):
    sent = {k: v[0] for k, v in links.items()}
    rates = {k: v[1] for k, v in links.items()}
    bound = bottleneck_bound(sent, rates, TimeScale(scale))
    assert all(sent[k] * 8 / rates[k] <= bound.wall_s for k in links)
    assert bound.wall_s == sent[bound.link] * 8 / rates[bound.link]
    assert bound.fabric_s == pytest.approx(bound.wall_s / scale)


def test_drain_meter_counts_only_intervals_backlogged_at_both_ends():
    m = DrainMeter()
    m.sample(0.0, 0, 0)
    m.sample(1.0, 1000, 500)  # queue was empty at the start: not busy throughout
    m.sample(2.0, 3500, 800)  # busy: 2500 B in 1 s
    m.sample(3.0, 6000, 100)  # busy: 2500 B in 1 s
    m.sample(4.0, 6100, 0)  # drained: not busy throughout
    assert (m.busy_s, m.busy_bytes) == (2.0, 5000)
    assert m.drain_bps == 20_000
    with pytest.raises(ValueError, match="backwards"):
        m.sample(3.5, 7000, 10)


def test_with_a_rate_only_intervals_the_start_backlog_could_fill_count():
    m = DrainMeter(rate_bps=8000)  # 1000 B/s
    m.sample(0.0, 0, 2000)
    m.sample(1.0, 1000, 1500)  # 2000 B queued could keep it busy 2 s: counts
    m.sample(2.0, 1600, 10)  # 1500 B queued: counts (it sent only 600 B: a slow shaper shows)
    m.sample(3.0, 1700, 900)  # 10 B queued at the start: could have run dry, does not count
    m.sample(4.0, 2500, 100)  # 900 B < 1000 B: does not count
    assert (m.busy_s, m.busy_bytes) == (2.0, 1600)
    assert m.drain_bps == 6400


def test_a_read_that_stalled_is_skipped_rather_than_making_the_shaper_look_fast():
    """What the fabric sampler saw on a loaded machine: the clock read, then a 120 ms stall, then the
    counters. Timed at the clock read, the interval ending there carried 170 ms of bytes in 50 ms; the next
    one, long, was dropped by the backlog rule; the shaper read 76% fast."""
    rate = 8_000_000  # 1 MB/s
    m = DrainMeter(rate_bps=rate)
    backlog = 100_000  # 0.1 s of the rate: keeps it busy through a 50 ms interval, not a 170 ms one
    for t, read_at, within in [(0.0, 0.0, 0.0), (0.05, 0.05, 0.0), (0.10, 0.10, 0.0), (0.15, 0.27, 0.06)]:
        m.sample((t + read_at) / 2 if within else t, int(read_at * 1e6), backlog, within)
    m.sample(0.32, 320_000, backlog)  # spans the skipped read: 0.22 s, more than the backlog could cover
    m.sample(0.37, 370_000, backlog)
    assert m.skipped == 1
    assert (m.busy_s, m.busy_bytes) == (pytest.approx(0.15), 150_000)
    assert m.drain_bps == pytest.approx(rate)


@given(
    rate=st.integers(100_000, 10**9),
    reads=st.lists(
        st.tuples(st.floats(0.01, 0.2), st.floats(0, 0.01), st.floats(0, 1)), min_size=2, max_size=40
    ),
    backlog_s=st.floats(0.01, 0.3),
)
def test_however_reads_stall_the_drain_is_off_by_no_more_than_their_brackets(rate, reads, backlog_s):
    """A shaper sending at exactly ``rate`` with ``backlog_s`` of it queued, read after gaps; each read
    brackets the kernel's answer by ``within`` either way (a stall widens it) and the answer lies anywhere
    in it. Each interval the meter keeps is off by at most the two brackets at its ends."""
    m = DrainMeter(rate_bps=rate)
    backlog = int(rate / 8 * backlog_s) + 1
    asked, kept = 0.0, 0
    for gap, within, where in reads:
        asked += gap
        answered = asked + (2 * within) * where  # the kernel read the counters somewhere in the bracket
        before = m.busy_s
        m.sample(asked + within, int(answered * rate / 8), backlog, within)
        kept += m.busy_s > before
        asked += 2 * within
    assert m.skipped == sum(within > MAX_READ_UNCERTAINTY_S for _gap, within, _where in reads)
    error_s = abs(m.busy_bytes * 8 / rate - m.busy_s)
    assert error_s <= kept * 2 * MAX_READ_UNCERTAINTY_S + 1e-6 + kept * 8 / rate


@given(rate=st.integers(10_000, 10**9), steps=st.lists(st.floats(0.001, 0.5), min_size=2, max_size=40))
def test_a_queue_always_backlogged_drains_at_the_rate_it_was_fed(rate, steps):
    m = DrainMeter()
    t, sent = 0.0, 0.0
    m.sample(t, 0, 1)
    for dt in steps:
        t += dt
        sent += rate / 8 * dt
        m.sample(t, int(sent), 1)
    assert m.drain_bps == pytest.approx(rate, rel=1e-3, abs=8 * len(steps) / t)


def test_cpu_meter_peak_and_mean():
    m = CpuMeter(window_s=1.0)
    for t, cpu in [(0, 0), (0.5, 0.1), (1.0, 0.2), (1.5, 0.7), (2.0, 1.15)]:
        m.sample(t, cpu)
    assert m.peak == pytest.approx(0.95)
    assert m.mean == pytest.approx(1.15 / 2)


def busy(name: str, rate: int, drain: float, seconds: float = 1.0, **kw) -> LinkCounters:
    return LinkCounters(name, rate, int(drain * seconds / 8), seconds, int(drain * seconds / 8), **kw)


def test_a_clean_run_is_faithful():
    v = verdict(
        [busy("h1:eth1", 20_000_000, 19_900_000), busy("leaf1:eth3", 20_000_000, 20_100_000)],
        [NodeCounters("leaf1", 0.3), NodeCounters("h1", 0.5, {"udp.rcvbuf": 0})],
        host_cpu_peak=1.2,
        cores=2,
    )
    assert v.faithful and v.reasons == [] and v.to_dict()["faithful"] is True


def test_every_reason_names_its_link_queue_or_node():
    v = verdict(
        [
            busy("h1:eth1", 20_000_000, 15_000_000),  # could not keep its link busy
            busy("leaf2:eth3", 20_000_000, 20_000_000, queue_drops=2638),
            busy("leaf3:eth3", 20_000_000, 20_000_000, injected_drops=40),
            busy("leaf4:eth3", 20_000_000, 10_000_000, seconds=0.05),  # too short to judge
        ],
        [NodeCounters("leaf1", 0.97), NodeCounters("h2", 0.2, {"udp.rcvbuf": 12})],
        host_cpu_peak=1.9,
        cores=2,
    )
    assert not v.faithful
    text = "\n".join(v.reasons)
    assert "link h1:eth1: drained at 15 Mbit/s" in text and "25% below" in text
    assert "queue leaf2:eth3: the shaper dropped 2638 packets in a lossless run" in text
    assert "node leaf1: CPU saturated (97%" in text
    assert "node h2: 12 packets dropped at udp.rcvbuf" in text
    assert "host: the machine was busy 1.90 of 2 cores" in text
    assert len(v.reasons) == 5
    assert any("leaf3:eth3: 40 packets dropped by the injected fault" in n for n in v.notes)
    assert any("leaf4:eth3: backlogged only 0.05 s" in n for n in v.notes)
    # The slow link and the busy machine are the machine's; the drops and the saturated node are not.
    assert [machine_reason(r) for r in v.reasons] == [True, False, False, False, True]
    fast = verdict([busy("a:eth1", 20_000_000, 25_000_000)], []).reasons
    assert len(fast) == 1 and not machine_reason(fast[0])


def test_congestion_loss_is_a_note_when_the_run_studies_it():
    v = verdict([busy("s5:eth1", 20_000_000, 20_000_000, queue_drops=9)], [], lossless=False)
    assert v.faithful and "congestion loss" in v.notes[0]


@given(rate=st.integers(1_000_000, 10**9), ratio=st.floats(0.5, 1.5))
def test_drain_rate_judged_against_the_tolerance(rate, ratio):
    assume(abs(abs(ratio - 1) - 0.05) > 1e-4)  # away from the edge, past byte rounding
    v = verdict([busy("a:eth1", rate, rate * ratio)], [])
    assert v.faithful == (abs(ratio - 1) <= 0.05)


def test_agent_losses_pick_our_softwares_drops_not_protocol_drops():
    deltas = {
        "leaf1": {"net-bier.emit-errors": 119, "net-bier.port.eth3.emit-errors": 119, "bier.dropped-ttl": 4},
        "h1": {"bier.tx.errors": 0, "bier.rx.packets": 10},
    }
    got = agent_losses(deltas)
    assert got == {"leaf1": {"agent net-bier.emit-errors": 119}}  # totals only, never the per-port copies
    v = verdict([], [NodeCounters("leaf1", 0.1, got["leaf1"])])
    assert not v.faithful and v.reasons == ["node leaf1: 119 packets dropped at agent net-bier.emit-errors"]


def test_reports_the_fast_path_lost_for_a_slow_agent_spoil_the_run():
    # The ring between the eBPF program and the agent was full: a window's aggregation state was never
    # made, its ACKs went end to end, a behaviour no switch that keeps up would show.
    got = agent_losses({"leaf2": {"bier.ebpf.report-lost": 3, "bier.ebpf.reported": 900}})
    assert got == {"leaf2": {"agent bier.ebpf.report-lost": 3}}
    assert not verdict([], [NodeCounters("leaf2", 0.1, got["leaf2"])]).faithful


def test_a_bfr_that_waited_is_a_note_naming_it():
    notes = agent_waits({"spine1": {"bier.tx.waits": 13}, "leaf1": {"bier.tx.waits": 0}})
    assert notes == ["node spine1: its BFR waited 13 times for room to send (bier.tx.waits)"]


def test_late_bfd_sends_are_a_note_naming_the_node():
    """A late control packet changes nothing by itself (a session that went down for it is a reason of
    its own, FaultRunner.late_reasons), so it is a note."""
    notes = agent_waits({"leaf1": {"bfd.tx.late": 4}, "spine1": {"bfd.tx.late": 0}})
    assert notes == ["node leaf1: its BFD sent 4 control packets more than half an interval late"]


def test_a_reliable_transport_that_woke_late_is_a_reason_naming_its_node():
    deltas = {
        "h1": {"reliable.late-wakeups": 2, "reliable.late-us": 812_000},
        "leaf1": {"reliable.late-wakeups": 0, "reliable.late-us": 0},
    }
    assert agent_late(deltas) == [
        "node h1: its reliable transport woke 2 times later than a quarter of its least retransmission "
        "timeout (812 ms late in all): paced by our software, not by its links"
    ]
    assert agent_late({"h1": {"reliable.sender.sent": 9}}) == []


def test_a_reliable_transport_that_took_datagrams_in_late_is_a_reason_naming_its_node():
    # An aggregating leaf whose loop was busy while ACKs waited in its socket: its own timers were never
    # late, and the source's fired for the ACKs it held.
    deltas = {
        "leaf1": {"reliable.late-arrivals": 3, "reliable.late-arrival-us": 1_500_000},
        "h1": {"reliable.late-wakeups": 1, "reliable.late-us": 200_000, "reliable.late-arrivals": 2,
               "reliable.late-arrival-us": 300_000},
    }  # fmt: skip
    assert agent_late(deltas) == [
        "node h1: its reliable transport woke 1 times later than a quarter of its least retransmission "
        "timeout (200 ms late in all) and took in 2 datagrams later than a quarter of its least "
        "retransmission timeout after they arrived (300 ms late in all): paced by our software, not by its "
        "links",
        "node leaf1: its reliable transport took in 3 datagrams later than a quarter of its least "
        "retransmission timeout after they arrived (1500 ms late in all): paced by our software, not by its "
        "links",
    ]


def test_a_short_busy_spell_above_the_rate_by_its_bucket_is_no_reason():
    # The demo's MoE unicast run: 0.22 s busy at 21.1 Mbit/s on a 20 Mbit/s shaper with a 19 KB bucket.
    rate, busy = 20_000_000, 0.22
    sent = int(21.1e6 / 8 * busy)
    link = LinkCounters("h3:eth1", rate, sent, busy, sent, burst_bytes=19_028)
    assert verdict([link], []).faithful
    # Without the bucket it would have been 6% above; far below the rate stays a reason whatever the bucket.
    assert not verdict([LinkCounters("h3:eth1", rate, sent, busy, sent)], []).faithful
    slow = int(18e6 / 8 * busy)
    assert not verdict([LinkCounters("h3:eth1", rate, slow, busy, slow, burst_bytes=19_028)], []).faithful


# -- the CPU check: any window, sliding, and runs shorter than one --------------------------------------
def _cpu_trace(period: float, until: float, busy: tuple[float, float], share: float = 1.0):
    """Samples every ``period`` of a node at ``share`` of a core during ``busy`` and idle otherwise."""
    t, cpu, out = 0.0, 0.0, [(0.0, 0.0)]
    while t < until - 1e-9:
        nxt = round(t + period, 9)
        cpu += share * overlap([busy], t, nxt)
        out.append((nxt, cpu))
        t = nxt
    return out


def test_a_run_shorter_than_the_window_is_judged_on_its_mean():
    # Issue 35: a 0.4 s run at 100% of a core read a peak of 0.0.
    m = CpuMeter(window_s=0.5)
    for t, cpu in _cpu_trace(0.1, 0.4, (0.0, 0.4)):
        m.sample(t, cpu)
    assert m.peak == pytest.approx(1.0)
    v = verdict([], [NodeCounters("h1", m.peak)])
    assert not v.faithful and "node h1: CPU saturated" in v.reasons[0]


def test_a_spell_straddling_back_to_back_windows_is_seen():
    # Issue 35: 100% from 0.3 s to 0.9 s read 0.8 with windows [0, 0.5] and [0.5, 1.0].
    m = CpuMeter(window_s=0.5)
    for t, cpu in _cpu_trace(0.1, 1.5, (0.3, 0.9)):
        m.sample(t, cpu)
    assert m.peak == pytest.approx(1.0)


def _reference_peak(samples, window):
    """For every sample, the shortest window of at least ``window`` ending there (brute force)."""
    best = 0.0
    for j, (tj, cj) in enumerate(samples):
        starts = [i for i in range(j) if tj - samples[i][0] >= window]
        if starts:
            ti, ci = samples[starts[-1]]
            best = max(best, (cj - ci) / (tj - ti))
    return best


@given(
    st.lists(st.tuples(st.floats(0.01, 0.3), st.floats(0, 1)), min_size=1, max_size=40),
    st.floats(0.1, 1.0),
)
def test_the_sliding_peak_is_the_busiest_shortest_window(steps, window):
    samples, t, cpu = [(0.0, 0.0)], 0.0, 0.0
    for dt, share in steps:
        t, cpu = t + dt, cpu + dt * share
        samples.append((t, cpu))
    m = CpuMeter(window_s=window)
    for s in samples:
        m.sample(*s)
    if t < window:
        assert m.peak == pytest.approx(cpu / t)
    else:
        assert m.peak == pytest.approx(_reference_peak(samples, window))
        assert m.peak <= 1.0 + 1e-9


# -- a node held back while its links could have carried its work ----------------------------------------
RATE = 20_000_000
PER_100MS = RATE // 8 // 10  # bytes a 20 Mbit/s end sends in 0.1 s


def _held_meter(uses, rx=None):
    m = HeldMeter("h1", {"h1:eth1": RATE})
    sent = 0
    m.sample(0.0, {"h1:eth1": 0}, (rx or [0])[0])
    for i, use in enumerate(uses, start=1):
        sent += int(PER_100MS * use)
        m.sample(i / 10, {"h1:eth1": sent}, (rx or [0] * (len(uses) + 1))[i])
    return m


def test_a_frozen_source_is_held_for_its_pause():
    # 1 s at its rate, frozen 0.7 s with data due, 1 s at its rate again: the op was due throughout.
    uses = [1.0] * 10 + [0.0] * 7 + [1.0] * 10
    m = _held_meter(uses)
    held = m.held([(0.0, 2.7)])
    assert held == pytest.approx((0.7, 0.7, 0.0), abs=1e-6)
    why = held_reason("h1", held, run_s=2.7)
    assert why is not None and "node h1: its links sat idle for 0.70 s" in why
    assert "data due but not yet sent 0.70 s" in why and "paced by our software" in why
    node = NodeCounters("h1", 0.1, held=held)
    assert not verdict([], [node], run_s=2.7).faithful


def test_a_throttled_source_is_held_for_the_rate_it_left_unused():
    m = _held_meter([0.6] * 20)
    total, due, rx = m.held([(0.0, 2.0)])
    assert total == pytest.approx(0.8, rel=0.02) and due == total and rx == 0.0


def test_idle_with_nothing_due_is_not_held():
    # The host sends its op, then waits for the next one 1 s later: its link idles, nothing is due.
    m = _held_meter([1.0] * 5 + [0.0] * 10 + [1.0] * 5)
    assert m.held([(0.0, 0.5), (1.5, 2.0)])[0] == pytest.approx(0.0, abs=1e-9)


def test_a_full_link_holds_nothing_however_much_waits():
    m = _held_meter([1.0] * 20, rx=[10**6] * 21)
    assert m.held([(0.0, 2.0)])[0] == pytest.approx(0.0, abs=1e-9)


def test_bytes_left_unread_while_idle_are_held():
    # A BFR's agent stopped for 0.3 s: what it received waits in its socket, its ports idle.
    rx = [0] * 5 + [200_000] * 4 + [0] * 6
    m = _held_meter([1.0] * 5 + [0.0] * 3 + [1.0] * 6, rx=rx)
    total, due, from_rx = m.held()
    assert total == pytest.approx(0.3, abs=1e-6) and from_rx == total and due == 0.0
    assert held_reason("spine1", (total, due, from_rx), run_s=1.4) is not None


def test_a_hiccup_of_one_sample_is_not_a_pace():
    m = _held_meter([1.0] * 10 + [0.0] + [1.0] * 10)
    held = m.held([(0.0, 2.1)])
    assert held[0] == pytest.approx(0.1) and held_reason("h1", held, run_s=2.1) is None


@given(
    st.lists(st.floats(0, 1.5), min_size=1, max_size=30),
    st.lists(st.tuples(st.floats(0, 3), st.floats(0, 3)), max_size=5),
)
def test_held_never_exceeds_the_time_anything_was_waiting(uses, spans):
    spans = [(min(a, b), max(a, b)) for a, b in spans]
    m = _held_meter(uses)
    total, due, rx = m.held(spans)
    run = len(uses) / 10
    assert 0 <= total <= overlap(spans, 0.0, run) + 1e-9 and rx == 0.0 and due == pytest.approx(total)


@given(st.lists(st.tuples(st.floats(-1, 5), st.floats(0, 3)), max_size=8), st.floats(0, 2), st.floats(0, 3))
def test_overlap_counts_each_instant_once(spans, t0, length):
    spans = [(a, a + d) for a, d in spans]
    got = overlap(spans, t0, t0 + length)
    assert 0 <= got <= length + 1e-9
    assert got >= max((min(b, t0 + length) - max(a, t0) for a, b in spans), default=0.0) - 1e-9


def test_a_reliable_source_waiting_on_its_window_is_not_held_and_the_rest_still_is():
    # Over a long round trip a window-limited source sends a window (0.2 s at its rate), then waits 0.5 s
    # for the answer, four times over: its op is due from 0 to 2.3 s, its link idle 1.5 s of that.
    uses = ([1.0] * 2 + [0.0] * 5) * 3 + [1.0] * 2
    waits = [(0.2, 0.7), (0.9, 1.4), (1.6, 2.1)]
    m = _held_meter(uses)
    assert held_reason("h1", m.held([(0.0, 2.3)]), run_s=2.3) is not None  # without the waits: held 1.5 s
    assert m.held(without([(0.0, 2.3)], waits))[0] == pytest.approx(0.0, abs=1e-9)
    # The same source slow to read its answers: each wait ends when the answer arrived, the 0.2 s after is
    # ours and counts.
    late = [(0.2, 0.5), (0.9, 1.2), (1.6, 1.9)]
    total = m.held(without([(0.0, 2.3)], late))[0]
    assert total == pytest.approx(0.6, abs=1e-6) and held_reason("h1", (total, total, 0.0), run_s=2.3)


def test_without_cuts_each_span_by_the_holes():
    assert without([(0.0, 10.0)], [(2.0, 3.0), (5.0, 6.0)]) == [(0.0, 2.0), (3.0, 5.0), (6.0, 10.0)]
    assert without([(0.0, 1.0), (4.0, 5.0)], [(0.5, 4.5)]) == [(0.0, 0.5), (4.5, 5.0)]
    assert without([(1.0, 2.0)], [(0.0, 3.0)]) == []
    assert without([(1.0, 2.0)], [(1.5, 1.5), (3.0, 4.0)]) == [(1.0, 2.0)]


@given(
    st.lists(st.tuples(st.floats(0, 5), st.floats(0, 3)), max_size=6),
    st.lists(st.tuples(st.floats(0, 5), st.floats(0, 3)), max_size=6),
)
def test_without_leaves_what_the_holes_do_not_cover(spans, holes):
    spans = [(a, a + d) for a, d in spans]
    holes = [(a, a + d) for a, d in holes]
    left = without(spans, holes)
    assert left == [piece for span in spans for piece in without([span], holes)]
    for a, b in left:
        assert a < b and overlap(holes, a, b) == pytest.approx(0.0, abs=1e-9)
    for a, b in spans:
        kept = sum(y - x for x, y in without([(a, b)], holes))
        assert kept == pytest.approx((b - a) - overlap(holes, a, b), abs=1e-9)


# -- pace against the prediction, and confirmation at a second scale --------------------------------------
def test_a_run_far_from_its_prediction_needs_confirming():
    assert pace_reason(21.3e-6, 18.2e-6, "the time model") is None  # 1.17x
    why = pace_reason(144.2e-6, 10.7e-6, "the time model")
    assert why is not None and why.startswith("completion 13.48x the time its links need")
    assert "aidclab replay --confirm" in why


def test_confirmation_holds_completion_and_bytes():
    ok = Confirmation((20000, 40000), (88.1e-6, 89.0e-6), (4254496, 4254496), (30_000_000, 30_000_042))
    assert ok.confirmed and ok.describe().startswith("confirmed at 1:40000")
    slow = Confirmation((20000, 40000), (53.7e-6, 25.1e-6), (1, 1), (10, 10))
    assert not slow.confirmed and "53.3% apart" in slow.describe()
    lost = Confirmation((20000, 40000), (1e-6, 1e-6), (100, 99), (10, 10))
    assert not lost.confirmed and "payload 100 B against 99 B" in lost.describe()


def _timing(completion_wall: float, bound_wall: float) -> TimingRecord:
    bound = BoundRecord(link="h1:eth1", bytes=1, rate_bps=1, wall_s=bound_wall, fabric_s=bound_wall / 20000)
    return TimingRecord(scale=20000, faithful=True, bound=bound)


def test_the_verdict_follows_the_prediction_then_the_confirmation():
    t = _timing(1.0, 0.1).paced(1.0, 10e-6, "the time model")  # 50 µs against 10 µs: 5x
    assert not t.faithful and t.pace is not None and t.pace.ratio == pytest.approx(5.0)
    assert t.reasons == [t.pace.reason]
    record = ConfirmationRecord(
        scale=40000, completion_fabric_s=50.5e-6, off=0.01, same_bytes=True, confirmed=True, text="confirmed"
    )
    confirmed = t.confirmed_by(record)
    assert confirmed.faithful and confirmed.reasons == [] and "confirmed" in confirmed.notes
    assert confirmed.verdict_text == "faithful at time scale 20000, confirmed at 1:40000"
    refuted = confirmed.confirmed_by(record.model_copy(update={"confirmed": False, "text": "apart"}))
    assert not refuted.faithful and len(refuted.reasons) == 2 and "confirmed" not in refuted.notes
    # Without a model's prediction the busiest link's bound stands in for it.
    fallback = _timing(1.0, 0.9).paced(1.0, None, "")
    assert fallback.faithful and fallback.pace is not None and fallback.pace.by == "the bound of h1:eth1"
    # ... and where the links really carried more than the model gave them (an ECMP hash's unevenness),
    # the measured bound is the longer, and the reference.
    hashed = _timing(1.0, 0.9).paced(1.0, 30e-6, "the time model")
    assert hashed.pace is not None and hashed.pace.by == "the bound of h1:eth1" and hashed.faithful


def test_a_run_that_beats_its_busiest_link_was_flattered_and_no_second_scale_clears_it():
    # The superpod's 64-GPU MoE dispatch, 2026-12-05: 0.564 µs against the 0.746 µs its busiest downlink
    # needs for its bytes, at 1:2000000 and again at 1:4000000 (the bucket is as long at every scale).
    scale = 2_000_000
    bound = BoundRecord(link="L1:eth35", bytes=1, rate_bps=1, wall_s=0.746e-6 * scale, fabric_s=0.746e-6)
    untimed = TimingRecord(scale=scale, faithful=True, bound=bound)
    t = untimed.paced(0.564e-6 * scale, 0.5e-6, "the time model")
    assert not t.faithful
    (why,) = t.reasons
    assert why.startswith("completion 0.76x the bound of L1:eth35 (0.56 µs against the 0.75 µs")
    assert "the shapers let bytes through unpaced" in why
    record = ConfirmationRecord(
        scale=2 * scale, completion_fabric_s=0.557e-6, off=0.013, same_bytes=True, confirmed=True, text="ok"
    )
    assert not t.confirmed_by(record).faithful
    # Within the measuring's noise of the bound it stands.
    assert untimed.paced(0.72e-6 * scale, None, "").faithful
    assert under_bound_reason(0.72e-6, 0.746e-6, "L1:eth35") is None


def test_a_busy_machine_is_cleared_by_a_confirmation_and_back_when_refuted():
    busy = "host: the machine was busy 1.85 of 2 cores at peak (limit 90%; ...): raise time.scale"
    t = _timing(1.0, 0.9).model_copy(update={"faithful": False, "reasons": [busy]}).paced(1.0, 20e-6, "m")
    assert t.pace is not None and t.pace.reason is None and t.reasons == [busy] and not t.faithful
    record = ConfirmationRecord(
        scale=40000, completion_fabric_s=50.5e-6, off=0.01, same_bytes=True, confirmed=True, text="confirmed"
    )
    confirmed = t.confirmed_by(record)
    assert confirmed.faithful and confirmed.reasons == [] and any(n.startswith(busy) for n in confirmed.notes)
    refuted = confirmed.confirmed_by(record.model_copy(update={"confirmed": False, "text": "apart"}))
    assert not refuted.faithful and busy in refuted.reasons
    assert not any(n.startswith(busy) for n in refuted.notes)
    # Any other reason stands whatever a second scale says.
    held = "node h1: its links sat idle for 1.61 s of 4.25 s (wall) while it had work waiting"
    other = t.model_copy(update={"reasons": [busy, held]}).confirmed_by(record)
    assert not other.faithful and other.reasons == [held]


def test_a_membership_modes_links_may_differ_by_its_wall_clock_signalling():
    from orchestrator.experiment.fidelity import CONFIRM_LINK_BYTES_MEMBERSHIP, Confirmation

    runs = {"scales": (60000, 120000), "fabric_s": (18.4e-6, 18.3e-6), "payload_bytes": (6615344, 6615344)}
    apart = Confirmation(**runs, link_bytes=(15319690, 15279854))  # 0.26%: more IGMP in the longer run
    assert not apart.confirmed and "bytes differ" in apart.describe()
    membership = Confirmation(
        **runs, link_bytes=(15319690, 15279854), link_tolerance=CONFIRM_LINK_BYTES_MEMBERSHIP
    )
    assert membership.confirmed
    lost = Confirmation(
        **{**runs, "payload_bytes": (6615344, 6614000)}, link_bytes=(1, 1), link_tolerance=0.01
    )
    assert not lost.confirmed  # the payload is exact whatever the mode


def test_a_hosts_unread_deliveries_are_not_held():
    # Deliveries are timed by the kernel's receive stamp: a host slow to read them paces nothing.
    m = HeldMeter("h2", {"h2:eth1": RATE}, forwards=False)
    for i in range(6):
        m.sample(i / 10, {"h2:eth1": 0}, 10**6)
    assert m.held() == (0.0, 0.0, 0.0)


def test_every_node_that_stopped_answering_is_a_reason_naming_it() -> None:
    from orchestrator.experiment.fidelity import unresponsive_reasons

    assert unresponsive_reasons({}) == []
    reasons = unresponsive_reasons({"h7": "timed out", "h1": "connection refused"})
    assert [r.split(":")[0] for r in reasons] == ["node h1", "node h7"]
    assert "timed out" in reasons[1] and "stopped answering" in reasons[0]


def test_every_sender_the_run_gave_up_on_is_a_reason_naming_it() -> None:
    from orchestrator.experiment.fidelity import unfinished_reasons

    assert unfinished_reasons({}) == []
    (reason,) = unfinished_reasons({"h1": "3/16 ops sent"})
    assert reason.startswith("node h1: still sending") and "3/16 ops sent" in reason


def test_drops_at_a_port_a_fault_took_down_are_the_faults_and_only_its_share():
    """spine1:eth1 was cut: its tx drops and its share of the agent's node-wide tx.errors are the fault's (a
    note); the rest of tx.errors, drops at another port and another node's drops still spoil the run."""
    from orchestrator.experiment.fidelity import fault_port_losses

    drops = {
        "spine1": {"eth1 tx drop": 5, "eth2 tx drop": 1, "agent bier.tx.errors": 3, "udp RcvbufErrors": 0},
        "leaf1": {"eth1 rx drop": 2, "agent net-bier.rx-errors": 1},
    }
    deltas = {
        "spine1": {"bier.tx.errors": 3, "bier.if.eth1.tx_errors": 2, "bier.if.eth2.tx_errors": 1},
        "leaf1": {"net-bier.rx-errors": 1, "net-bier.port.eth1.rx-errors": 1},
    }
    left, notes = fault_port_losses(drops, deltas, {"spine1": {"eth1"}, "leaf1": {"eth1"}})
    assert left == {"spine1": {"eth2 tx drop": 1, "agent bier.tx.errors": 1}, "leaf1": {}}
    said = (
        "counted at ports a fault took down, the fault's loss and not the emulator's "
        "(one packet may be in two counters)"
    )
    assert notes == [
        f"node spine1: {said}: eth1 tx drop 5, eth1's share of agent bier.tx.errors 2",
        f"node leaf1: {said}: eth1 rx drop 2, eth1's share of agent net-bier.rx-errors 1",
    ]
    v = verdict([], [NodeCounters(n, 0.1, d) for n, d in left.items()])
    assert not v.faithful and len(v.reasons) == 2  # spine1's eth2 and the rest of its tx.errors
    nothing_down, no_notes = fault_port_losses(drops, deltas, {})
    assert no_notes == [] and nothing_down == {n: {k: c for k, c in d.items() if c} for n, d in drops.items()}


@given(
    node_drops=st.dictionaries(
        st.sampled_from(["eth1 tx drop", "eth1 rx drop", "eth2 tx drop"]), st.integers(0, 9)
    ),
    agent_total=st.integers(0, 9),
    port_share=st.integers(0, 12),
    down=st.sets(st.sampled_from(["eth1", "eth2"])),
)
def test_a_faults_share_never_takes_more_than_was_counted(node_drops, agent_total, port_share, down):
    from orchestrator.experiment.fidelity import fault_port_losses

    drops = {"n": {**node_drops, "agent bier.tx.errors": agent_total}}
    deltas = {"n": {"bier.tx.errors": agent_total, "bier.if.eth1.tx_errors": port_share}}
    left, _notes = fault_port_losses(drops, deltas, {"n": down})
    kept = left["n"]
    assert all(0 < n <= drops["n"][k] for k, n in kept.items())
    for where, n in drops["n"].items():
        port = where.split()[0]
        if where.startswith("agent"):
            taken = min(agent_total, port_share) if "eth1" in down else 0
            assert kept.get(where, 0) == agent_total - taken
        elif port in down:
            assert where not in kept
        else:
            assert kept.get(where, 0) == n


def _exact_shaper(rate_bps: int, frame: int, busy_s: float, phase: float, slow: float = 0.0) -> LinkCounters:
    """A queue of ``busy_s`` worth of whole frames drained at ``rate_bps`` (``slow`` below it) by a shaper
    that sends a frame the moment its tokens allow, its counters read every 0.1 s from ``phase``."""
    frames = math.ceil(busy_s * rate_bps / 8 / frame) + 1
    gap = frame * 8 / (rate_bps * (1 - slow))
    meter, t = DrainMeter(rate_bps), phase
    while t < frames * gap + 1.0:
        sent = min(frames, int(t / gap) + 1) * frame
        meter.sample(t, sent, frames * frame - sent)
        t += 0.1
    return LinkCounters("h1:eth1", rate_bps, sent, meter.busy_s, meter.busy_bytes, frame_bytes=9014,
                        burst_bytes=2 * 9014)  # fmt: skip


RATES = [100_000, 200_000, 500_000, 1_000_000, 20_000_000]


@given(st.sampled_from(RATES), st.floats(0, 0.1), st.floats(1, 5))
def test_an_exact_shaper_is_faithful_at_any_rate_whatever_the_grain_of_its_frames(rate, phase, busy_s):
    # At 1:4000000 a 400G link sends a 7.5 kB frame every 0.6 s: a sampled spell reads up to a frame short.
    link = _exact_shaper(rate, 7500, busy_s, phase)
    assert verdict([link], []).faithful, verdict([link], []).reasons


def test_a_slow_shaper_is_still_caught_at_the_usual_rates():
    assert not verdict([_exact_shaper(20_000_000, 7500, 2.0, 0.05, slow=0.1)], []).faithful
    assert verdict([_exact_shaper(20_000_000, 7500, 2.0, 0.05, slow=0.02)], []).faithful
