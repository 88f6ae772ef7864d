"""The record of one run as typed models: what a run is, independent of where it is stored.

``orchestrator.experiment.results`` reads and writes them (``results/<run-id>/``), and
``orchestrator.experiment.metrics`` derives :class:`RunMetrics` from them. Every field is documented in
``docs/results-format.md``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aidcnet.timescale import TimeScale

# 2: runs carry `timing` (time scale, fidelity verdict, bottleneck bound); version 1 runs have none.
FORMAT_VERSION = 2
SUPPORTED_FORMAT_VERSIONS: tuple[int, ...] = (1, 2)

_ENDPOINT = r"[A-Za-z0-9][A-Za-z0-9_.-]*:[^\s:<>]+"
_LINK_RE = re.compile(rf"^({_ENDPOINT})<->({_ENDPOINT})$")


class ResultsError(ValueError):
    """A run directory that cannot be read or written; the message names the path and what to do."""


# ---------------------------------------------------------------------------------------------- models


class _Model(BaseModel):
    # Unknown fields are errors: a misspelt field must not silently vanish from a results record.
    model_config = ConfigDict(extra="forbid")


class MachineInfo(_Model):
    hostname: str
    python: str
    implementation: str
    platform: str
    machine: str
    kernel: str
    cpu_count: int | None = None
    memory_bytes: int | None = None


class TraceInfo(_Model):
    """The trace a run replayed: where it was, its content hash and its header summary."""

    file: str
    # Two runs replayed the same trace when the hashes match, whatever the file was called.
    sha256: str | None = None
    generator: str
    version: int
    params: dict[str, Any] = Field(default_factory=dict)
    hosts: list[str]
    ops: int = Field(ge=0)
    ops_by_kind: dict[str, int] = Field(default_factory=dict)
    bytes: int = Field(ge=0)
    delivered_bytes: int = Field(ge=0)
    fanout_mean: float
    # Receivers per multicast op, weighted by bytes (orchestrator.metrics.theoretical_fanout).
    fanout_weighted: float | None = None
    duration: float

    @property
    def name(self) -> str:
        return Path(self.file).name


class RunMeta(_Model):
    run_id: str
    lab: str
    topology_file: str | None = None
    trace: TraceInfo
    mode: str = Field(min_length=1)
    started: datetime
    finished: datetime
    aidclab_version: str
    git_commit: str | None = None
    machine: MachineInfo
    # Free-form replay settings (rate limits, timeouts, options of the mode): recorded, not interpreted.
    settings: dict[str, Any] = Field(default_factory=dict)

    @field_validator("started", "finished")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("must carry a timezone (use datetime.now(UTC))")
        return v.astimezone(UTC)

    @model_validator(mode="after")
    def _order(self) -> RunMeta:
        if self.finished < self.started:
            raise ValueError(
                f"finished {self.finished.isoformat()} is before started {self.started.isoformat()}"
            )
        return self

    @property
    def duration(self) -> float:
        return (self.finished - self.started).total_seconds()


class LinkCounters(_Model):
    """Counter deltas over a run for one veth link, per direction.

    ``link`` is ``"a:ifA<->b:ifB"`` with a and b in topology-file order. ``a_to_b`` is what a's
    interface transmitted (its kernel tx counters), ``b_to_a`` what b's transmitted.
    """

    link: str
    a_to_b_bytes: int = Field(ge=0)
    a_to_b_packets: int = Field(ge=0)
    b_to_a_bytes: int = Field(ge=0)
    b_to_a_packets: int = Field(ge=0)

    @field_validator("link")
    @classmethod
    def _link_id(cls, v: str) -> str:
        if not _LINK_RE.match(v):
            raise ValueError(
                f"{v!r} is not a link id; expected 'node:iface<->node:iface' (e.g. h1:eth1<->leaf1:eth3)"
            )
        return v

    @property
    def a(self) -> str:
        return _LINK_RE.match(self.link).group(1)  # type: ignore[union-attr]

    @property
    def b(self) -> str:
        return _LINK_RE.match(self.link).group(2)  # type: ignore[union-attr]

    @property
    def a_node(self) -> str:
        return self.a.split(":", 1)[0]

    @property
    def b_node(self) -> str:
        return self.b.split(":", 1)[0]

    @property
    def total_bytes(self) -> int:
        return self.a_to_b_bytes + self.b_to_a_bytes

    @property
    def total_packets(self) -> int:
        return self.a_to_b_packets + self.b_to_a_packets


def link_id(a: str, b: str) -> str:
    """``link_id("h1:eth1", "leaf1:eth3") == "h1:eth1<->leaf1:eth3"``."""
    return f"{a}<->{b}"


class MessageResult(_Model):
    """One trace op as replayed: who should have got it, who did, and how long each copy took.

    Times are seconds on the replay clock (one host kernel, so every container reads the same clock).
    ``delivered`` lists each receiver that got the complete message once, in any order; a receiver in
    ``delivered`` but not in ``expected`` is a wrong receiver. ``latency`` maps a delivered receiver to
    the seconds from ``sent_at`` to its first complete copy; ``duplicates`` maps a receiver to the
    number of extra complete copies it got.
    """

    id: int = Field(ge=0)
    op: str = "multicast"
    src: str
    expected: list[str] = Field(min_length=1)
    delivered: list[str] = Field(default_factory=list)
    bytes: int = Field(ge=0)
    sent_at: float = Field(allow_inf_nan=False)
    latency: dict[str, float] = Field(default_factory=dict)
    duplicates: dict[str, int] = Field(default_factory=dict)

    @field_validator("expected", "delivered")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        seen: set[str] = set()
        for r in v:
            if r in seen:
                raise ValueError(f"receiver {r!r} is listed twice (count extra copies in 'duplicates')")
            seen.add(r)
        return v

    @field_validator("latency")
    @classmethod
    def _latency(cls, v: dict[str, float]) -> dict[str, float]:
        for r, s in v.items():
            if not math.isfinite(s) or s < 0:
                raise ValueError(f"latency of {r!r} must be a finite number of seconds >= 0, got {s!r}")
        return v

    @field_validator("duplicates")
    @classmethod
    def _dups(cls, v: dict[str, int]) -> dict[str, int]:
        for r, n in v.items():
            if n < 0:
                raise ValueError(f"duplicates of {r!r} must be >= 0, got {n}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> MessageResult:
        got = set(self.delivered)
        for what, keys in (("latency", self.latency), ("duplicates", self.duplicates)):
            stray = sorted(set(keys) - got)
            if stray:
                raise ValueError(f"{what} names {stray[0]!r}, which is not in 'delivered'")
        return self

    @property
    def missing(self) -> list[str]:
        got = set(self.delivered)
        return [r for r in self.expected if r not in got]

    @property
    def wrong(self) -> list[str]:
        want = set(self.expected)
        return [r for r in self.delivered if r not in want]


class LatencyStats(_Model):
    """Nearest-rank percentiles in seconds; all None when there are no samples."""

    count: int = 0
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None


class DeliveryStats(_Model):
    messages: int = 0
    complete_messages: int = 0
    expected: int = 0
    delivered: int = 0
    missing: int = 0
    duplicates: int = 0
    wrong_receivers: int = 0

    @property
    def ratio(self) -> float:
        return self.delivered / self.expected if self.expected else 1.0

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.wrong_receivers == 0


class LinkEndTiming(_Model):
    """One shaped link end over a run: what it sent and how fast it drained while it had a queue."""

    end: str  # "node:interface", the sending end
    peer: str | None = None  # "node:interface" at the other end of the link
    bandwidth_bps: int = Field(ge=0)  # the fabric's rate (the plan's, or the last link set bandwidth)
    rate_bps: int = Field(ge=0)  # the veth's: bandwidth / scale
    tx_bytes: int = Field(ge=0)  # what its shaper sent (frames, Ethernet header included)
    busy_s: float = Field(ge=0)  # wall seconds its queue held bytes
    drain_bps: float | None = None  # bits/s sent while busy
    queue_drops: int = Field(ge=0, default=0)  # the shaper's queue overflowed
    injected_drops: int = Field(ge=0, default=0)  # the link-fault program dropped on purpose


class NodeTiming(_Model):
    cpu_peak: float = Field(ge=0)  # share of one core over the busiest 0.5 s window (sliding)
    cpu_mean: float = Field(ge=0)
    # Wall seconds the node had work waiting while its links sat idle (fidelity.HeldMeter).
    held_s: float = Field(ge=0, default=0.0)
    cpu_s: float = Field(ge=0, default=0.0)  # CPU seconds its cgroup used over the run
    # Drops anywhere but a shaper or an injected fault, by where (docs/time-and-fidelity.md).
    other_drops: dict[str, int] = Field(default_factory=dict)


class BoundRecord(_Model):
    """Completion can be no sooner than the busiest link end takes to send what it sent."""

    link: str
    bytes: int = Field(ge=0)
    rate_bps: int = Field(gt=0)
    wall_s: float = Field(ge=0)
    fabric_s: float = Field(ge=0)


class PaceRecord(_Model):
    """The run's fabric completion against the time its links need: the time model's prediction, or the
    busiest link's bound where the model does not cover the mode (``by`` says which)."""

    predicted_fabric_s: float = Field(gt=0)
    by: str
    completion_fabric_s: float = Field(ge=0)
    ratio: float = Field(ge=0)
    # Set when the ratio is above fidelity.PREDICTED_LIMIT: the reason the run is not faithful unless a
    # run at a second scale confirms it.
    reason: str | None = None
    # Of predicted_fabric_s, what the links' propagation delay accounts for (docs/delay.md): the time
    # model's prediction less its prediction with every delay 0. None on a lab without delay, or when the
    # busiest link's bound is what the run is set against.
    propagation_s: float | None = Field(default=None, ge=0)


class ConfirmationRecord(_Model):
    """Time dilation's test of this run: the same trace at a second scale (``aidclab replay --confirm``)."""

    scale: int  # the other run's
    run_id: str | None = None
    completion_fabric_s: float  # the other run's
    off: float  # |this - other| / this
    same_bytes: bool
    confirmed: bool
    text: str


# What a busy machine's reason becomes when a second scale confirmed the run (TimingRecord._rejudged).
CLEARED = " (yet confirmed at a second scale: the links set the pace)"


class TimingRecord(_Model):
    """How a run's times relate to the fabric's: the time scale, the fidelity verdict and the bound.

    ``scale`` None: the links were not shaped, times are wall times of our emulator and ``faithful`` is
    None (not judged). Otherwise fabric time = wall time / scale (docs/time-and-fidelity.md).
    """

    scale: int | None = None
    faithful: bool | None = None
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    lossless: bool = True
    bound: BoundRecord | None = None
    host_cpu_peak: float | None = None  # the lab's nodes together, cores at the busiest window
    machine_cpu_peak: float | None = None  # the whole machine (kernel, Docker, anything else too)
    machine_cpu_s: float | None = None  # CPU seconds the whole machine was busy over the run
    cores: int | None = None
    ends: list[LinkEndTiming] = Field(default_factory=list)
    nodes: dict[str, NodeTiming] = Field(default_factory=dict)
    pace: PaceRecord | None = None
    confirmation: ConfirmationRecord | None = None

    @property
    def shaped(self) -> bool:
        return self.scale is not None

    @property
    def time_scale(self) -> TimeScale:
        return TimeScale.of(self.scale)

    def fabric_s(self, wall_s: float | None) -> float | None:
        """Fabric seconds of ``wall_s`` measured on the lab (None when unshaped or unknown)."""
        return self.time_scale.reported_s(wall_s)

    def paced(
        self,
        completion_s: float | None,
        predicted_fabric_s: float | None,
        by: str,
        propagation_s: float | None = None,
    ) -> TimingRecord:
        """This record judged against the time its links need: ``predicted_fabric_s`` from the time model
        (``by`` names it), or the busiest link's measured bound where that is longer (no schedule beats
        the bytes the links really carried: the model gives an ECMP group its expected shares, a kernel's
        hash may load one member more) or where the model does not cover the mode. A completion beyond
        fidelity.PREDICTED_LIMIT times it is not faithful unless a second scale confirms it.
        ``propagation_s``: what of the prediction the links' delay accounts for."""
        from orchestrator.experiment.fidelity import pace_reason, under_bound_reason

        completion = self.fabric_s(completion_s)
        if completion is None or self.faithful is None:
            return self
        judged = self
        bound = self.bound.fabric_s if self.bound is not None else 0.0
        if self.bound is not None and (under := under_bound_reason(completion, bound, self.bound.link)):
            # A reason of its own, not the pace's: a second scale cannot clear it (the bucket is as long in
            # fabric time at any scale).
            judged = self.model_copy(update={"reasons": [*self.reasons, under], "faithful": False})
        if bound > (predicted_fabric_s or 0.0):
            predicted_fabric_s, by = bound, f"the bound of {self.bound.link}"  # type: ignore[union-attr]
            propagation_s = None
        if predicted_fabric_s is None or predicted_fabric_s <= 0:
            return judged
        pace = PaceRecord(
            predicted_fabric_s=predicted_fabric_s,
            by=by,
            completion_fabric_s=completion,
            ratio=completion / predicted_fabric_s,
            reason=pace_reason(completion, predicted_fabric_s, by),
            propagation_s=None if propagation_s is None else max(propagation_s, 0.0),
        )
        return judged._rejudged(pace=pace, confirmation=self.confirmation)

    def confirmed_by(self, confirmation: ConfirmationRecord) -> TimingRecord:
        """This record with the outcome of a run at a second scale."""
        return self._rejudged(pace=self.pace, confirmation=confirmation)

    def _rejudged(self, pace: PaceRecord | None, confirmation: ConfirmationRecord | None) -> TimingRecord:
        from orchestrator.experiment.fidelity import MACHINE_BUSY

        drop = {r for r in (self.pace and self.pace.reason, self.confirmation and self._unconfirmed()) if r}
        reasons = [r for r in self.reasons if r not in drop]
        notes = [n for n in self.notes if not (self.confirmation and n == self.confirmation.text)]
        # A busy machine only suggests our software set the pace; time dilation's test measures it, so a
        # confirmed run keeps it as a note (and a refuted one gets it back as a reason).
        reasons += [n.removesuffix(CLEARED) for n in notes if n.endswith(CLEARED)]
        notes = [n for n in notes if not n.endswith(CLEARED)]
        if confirmation is not None and confirmation.confirmed:
            busy = [r for r in reasons if r.startswith(MACHINE_BUSY)]
            notes += [r + CLEARED for r in busy]
            reasons = [r for r in reasons if r not in busy]
        update: dict[str, Any] = {"pace": pace, "confirmation": confirmation}
        if confirmation is not None and not confirmation.confirmed:
            reasons.append(f"not confirmed at a second scale: {confirmation.text}")
        elif confirmation is not None:
            notes.append(confirmation.text)
        if pace is not None and pace.reason and not (confirmation and confirmation.confirmed):
            reasons.append(pace.reason)
        update["reasons"], update["notes"] = reasons, notes
        if self.faithful is not None:
            update["faithful"] = not reasons
        return self.model_copy(update=update)

    def _unconfirmed(self) -> str | None:
        c = self.confirmation
        return None if c is None or c.confirmed else f"not confirmed at a second scale: {c.text}"

    @property
    def confirmed(self) -> bool:
        return self.confirmation is not None and self.confirmation.confirmed

    @property
    def verdict_text(self) -> str:
        if self.scale is None:
            return "not judged: links unshaped (time.scale off), times are the emulator's wall times"
        if self.faithful:
            how = f", confirmed at 1:{self.confirmation.scale}" if self.confirmed else ""  # type: ignore[union-attr]
            return f"faithful at time scale {self.scale}{how}"
        return f"NOT faithful at time scale {self.scale}: " + "; ".join(self.reasons)


class RunMetrics(_Model):
    """Derived from a RunResult by ``orchestrator.metrics.compute_metrics``; never measured directly."""

    sources: list[str] = Field(default_factory=list)
    source_egress_bytes: int = 0
    source_egress_packets: int = 0
    total_fabric_bytes: int = 0
    total_fabric_packets: int = 0
    max_link: str | None = None
    # The transmitting endpoint of the busiest direction, e.g. "spine1:eth1".
    max_link_from: str | None = None
    max_link_bytes: int = 0
    max_link_share: float = 0.0
    first_send: float | None = None
    last_delivery: float | None = None
    completion_time: float | None = None
    latency: LatencyStats = Field(default_factory=LatencyStats)
    message_latency: LatencyStats = Field(default_factory=LatencyStats)
    delivery: DeliveryStats = Field(default_factory=DeliveryStats)
    payload_bytes: int = 0
    payload_delivered_bytes: int = 0
    theoretical_fanout: float | None = None
    # Fabric time of completion_time (wall / time scale) and completion against the bottleneck bound
    # (1.0 = exactly as fast as the busiest link allows); None when the links were not shaped.
    completion_fabric_time: float | None = None
    bound_ratio: float | None = None


class RunResult(_Model):
    format_version: int = FORMAT_VERSION
    meta: RunMeta
    links: list[LinkCounters] = Field(default_factory=list)
    # node -> counter name -> delta over the run (the agents' `show counters` names).
    agents: dict[str, dict[str, int]] = Field(default_factory=dict)
    messages: list[MessageResult] = Field(default_factory=list)
    metrics: RunMetrics | None = None
    timing: TimingRecord | None = None

    @field_validator("format_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v not in SUPPORTED_FORMAT_VERSIONS:
            raise ValueError(_unsupported(v))
        return v

    @property
    def run_id(self) -> str:
        return self.meta.run_id

    @property
    def mode(self) -> str:
        return self.meta.mode


def _unsupported(v: object) -> str:
    ok = ", ".join(map(str, SUPPORTED_FORMAT_VERSIONS))
    return (
        f"results format version {v!r} is not supported; this aidclab reads version(s) {ok} (upgrade aidclab)"
    )


# ---------------------------------------------------------------------------------------------- run ids
