"""Fabric time, the bottleneck bound and the fidelity verdict (pure)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from orchestrator.experiment.fidelity import (
    MAX_READ_UNCERTAINTY_S,
    CpuMeter,
    DrainMeter,
    LinkCounters,
    NodeCounters,
    agent_losses,
    agent_waits,
    bottleneck_bound,
    fabric_time,
    verdict,
)


def test_fabric_time_is_wall_times_scale():
    # 0.365 s on links shaped 10000 times slower is 36.5 µs on the real ones.
    assert fabric_time(0.365, 10000) == pytest.approx(36.5e-6)
    assert fabric_time(2.0, 1) == 2.0
    with pytest.raises(ValueError, match="at least 1"):
        fabric_time(1.0, 0)


def test_bound_names_the_busiest_link_in_issue_12s_model_distribution():
    # h1 sends 4.25 MB up its 20 Mbit/s uplink; each receiver's downlink gets 1/7 of it.
    rates = {"h1:eth1": 20_000_000, **{f"leaf{i}:eth3": 20_000_000 for i in range(1, 8)}}
    sent = {"h1:eth1": 4_250_000, **{f"leaf{i}:eth3": 607_143 for i in range(1, 8)}}
    bound = bottleneck_bound(sent, rates, scale=20_000)
    assert bound.link == "h1:eth1"
    assert bound.wall_s == pytest.approx(1.7)
    # The same bytes over the real 400G link: 4.25 MB / 400 Gbit/s = 85 µs.
    assert bound.fabric_s == pytest.approx(1.7 / 20_000)
    assert "h1:eth1: 4250000 B at 20 Mbit/s = 1.700 s wall" in bound.describe()


def test_bound_errors_name_the_link():
    with pytest.raises(ValueError, match="x:eth1 carried bytes but has no rate"):
        bottleneck_bound({"x:eth1": 5}, {}, 1)
    with pytest.raises(ValueError, match="nothing to bound"):
        bottleneck_bound({}, {}, 1)


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
    bound = bottleneck_bound(sent, rates, scale)
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
    assert "host: the lab used 1.90 of 2 cores" in text
    assert len(v.reasons) == 5
    assert any("leaf3:eth3: 40 packets dropped by the injected fault" in n for n in v.notes)
    assert any("leaf4:eth3: backlogged only 0.05 s" in n for n in v.notes)


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


def test_a_bfr_that_waited_is_a_note_naming_it():
    notes = agent_waits({"spine1": {"bier.tx.waits": 13}, "leaf1": {"bier.tx.waits": 0}})
    assert notes == ["node spine1: its BFR waited 13 times for room to send (bier.tx.waits)"]


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
