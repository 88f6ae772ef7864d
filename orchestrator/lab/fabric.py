"""The shaped fabric of a lab: one shaper per link end, the time scale, and the record of both in the lab dir.

Pure logic. The plan gives every link ``shaped_bps`` (bandwidth / time.scale) and ``queue_bytes``
(:mod:`orchestrator.configure.plan.timescale`); this module turns that into what tc needs at each end
(rate, burst, limit) and into ``clab-<lab>/fabric.json``, which ``aidclab link set`` keeps current
(docs/time-and-fidelity.md). The I/O that applies it is :mod:`orchestrator.lab.shaping`; the propagation
delay of each end (docs/delay.md) is held by :mod:`orchestrator.lab.relay`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from aidcnet.ebpf.link_fault import LinkFault
from aidcnet.timescale import TimeScale
from orchestrator.lab.delay import LinkDelay, format_duration

FABRIC_FILE = "fabric.json"
FABRIC_VERSION = 1
# Ethernet header on top of the IP MTU: what one full frame costs the shaper.
ETH_HEADER = 14
# Tokens the shaper may save up, in wall time: enough to ride out timer slack at high rates, small
# enough that a burst at veth speed stays far below what a drain-rate check over a second can see.
BURST_WALL_S = 0.001


class FabricError(ValueError):
    pass


def frame_bytes(mtu: int) -> int:
    """What one full frame of a link with this IP MTU costs its shaper."""
    return mtu + ETH_HEADER


def tbf_burst(rate_bps: int, mtu: int) -> int:
    """Token-bucket depth in bytes: two full frames (TBF drops a frame larger than its bucket, and one
    frame of slack keeps it from idling between timer ticks), or 1 ms of tokens at high rates."""
    return max(2 * frame_bytes(mtu), math.ceil(rate_bps * BURST_WALL_S / 8))


@dataclass(frozen=True)
class EndShaper:
    """What one link end carries. ``bandwidth_bps`` is the plan's (fabric) rate, ``rate_bps`` the veth's;
    ``delay_s`` and ``jitter_s`` (fabric seconds) hold what it sends after the shaper (docs/delay.md)."""

    node: str
    interface: str
    peer: str  # "node:interface" of the other end
    bandwidth_bps: int
    rate_bps: int
    queue_bytes: int
    burst_bytes: int
    mtu: int
    delay_s: float = 0.0
    jitter_s: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.node}:{self.interface}"

    @property
    def delay(self) -> LinkDelay:
        return LinkDelay(self.delay_s, self.jitter_s)

    @property
    def frame_bytes(self) -> int:
        return frame_bytes(self.mtu)


@dataclass(frozen=True)
class Fabric:
    """Every shaped end of a lab, the scale they were divided by, and the loss set on each end
    (``aidcnet.ebpf.link_fault.LinkFault.to_dict()``; an end without an entry loses nothing)."""

    lab: str
    scale: int | None  # None: the links are not shaped (rate_bps 0 at every end)
    ends: dict[str, EndShaper]  # "node:interface" -> its shaper
    faults: dict[str, dict[str, float]] = field(default_factory=dict)
    # Ends ``link set NODE:IF down`` took down, and the bandwidth ``link set ... bandwidth`` gave a link
    # (by the named end): with ``faults`` and ``scale``, the conditions a run records (conditions()).
    down: tuple[str, ...] = ()
    bandwidth_set: dict[str, int] = field(default_factory=dict)
    # The delay ``link set ... delay`` gave an end ({"delay_s", "jitter_s"}), by end.
    delay_set: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def time_scale(self) -> TimeScale:
        """The scale the links are shaped to now: the lab's one live source of it."""
        return TimeScale.of(self.scale)

    def end(self, name: str) -> EndShaper:
        try:
            return self.ends[name]
        except KeyError:
            raise FabricError(
                f"{name} is not a shaped link end of lab {self.lab} (ends: {', '.join(sorted(self.ends))})"
            ) from None

    def with_bandwidth(self, name: str, bandwidth_bps: int) -> tuple[Fabric, list[EndShaper]]:
        """The fabric after ``link set NAME bandwidth``: both ends of the link take the new rate (a
        link has one speed), divided by the same scale. Returns the new fabric and the changed ends."""
        if bandwidth_bps <= 0:
            raise FabricError(f"{name}: bandwidth must be above zero")
        here = self.end(name)
        changed = []
        ends = dict(self.ends)
        for end in (here, self.end(here.peer)):
            rate = self.time_scale.veth_bps(bandwidth_bps)
            new = replace(
                end, bandwidth_bps=bandwidth_bps, rate_bps=rate, burst_bytes=tbf_burst(rate, end.mtu)
            )
            ends[end.name] = new
            changed.append(new)
        overrides = {k: v for k, v in self.bandwidth_set.items() if k not in (here.name, here.peer)}
        overrides[name] = bandwidth_bps
        return replace(self, ends=ends, bandwidth_set=overrides), changed

    def with_delay(
        self, name: str, delay: LinkDelay, one_way: bool = False
    ) -> tuple[Fabric, list[EndShaper]]:
        """The fabric after ``link set NAME delay``: the end (and its peer unless ``one_way``) holds what it
        sends for ``delay``. Returns the new fabric and the changed ends."""
        here = self.end(name)
        ends = dict(self.ends)
        overrides = dict(self.delay_set)
        changed = []
        for end in (here,) if one_way else (here, self.end(here.peer)):
            new = replace(end, delay_s=delay.delay_s, jitter_s=delay.jitter_s)
            ends[end.name] = new
            overrides[end.name] = {"delay_s": delay.delay_s, "jitter_s": delay.jitter_s}
            changed.append(new)
        return replace(self, ends=ends, delay_set=overrides), changed

    def delayed_ends(self) -> dict[str, EndShaper]:
        """The ends whose packets the relay holds (a delay or a jitter above 0)."""
        return {name: end for name, end in self.ends.items() if not end.delay.is_none}

    def with_down(self, name: str, down: bool) -> Fabric:
        """The fabric after ``link set NAME down`` (or ``up``)."""
        rest = tuple(n for n in self.down if n != name)
        return replace(self, down=tuple(sorted((*rest, name))) if down else rest)

    def conditions(self) -> dict[str, Any]:
        """The link settings in force, as a run records them (``settings.conditions`` in run.json): the time
        scale, and only what fault injection changed (loss per end, ends down, bandwidth per link, delay per
        end: the last only when one was set, so runs from before delays existed keep their conditions)."""
        out: dict[str, Any] = {
            "scale": self.scale,
            "loss": {name: LinkFault(**f).mean_loss for name, f in sorted(self.faults.items())},
            "down": list(self.down),
            "bandwidth_bps": dict(sorted(self.bandwidth_set.items())),
        }
        if self.delay_set:
            out["delay_s"] = {name: d["delay_s"] for name, d in sorted(self.delay_set.items())}
        return out

    def with_scale(self, scale: int | TimeScale) -> Fabric:
        """The fabric at another time scale: every end keeps its bandwidth and queue, its veth rate and
        burst follow the new scale (what a scale search tries between runs)."""
        time_scale = TimeScale.of(scale)
        if not time_scale.shaped:
            raise FabricError("a shaped fabric needs a time scale; off would unshape its links")
        ends = {}
        for name, end in self.ends.items():
            rate = time_scale.veth_bps(end.bandwidth_bps)
            ends[name] = replace(end, rate_bps=rate, burst_bytes=tbf_burst(rate, end.mtu))
        return replace(self, scale=time_scale.value, ends=ends)

    def with_fault(self, name: str, fault: dict[str, float] | None) -> Fabric:
        """The fabric after ``link set NAME loss``; None (or no loss) clears the end's entry."""
        self.end(name)
        faults = dict(self.faults)
        if fault is None:
            faults.pop(name, None)
        else:
            faults[name] = dict(fault)
        return replace(self, faults=faults)

    def link_rates_bps(self) -> dict[str, int]:
        """Veth rate per end (bits/s of wall time), what the bottleneck bound and the fidelity check use."""
        return {name: end.rate_bps for name, end in self.ends.items()}

    def to_json(self) -> str:
        body = {
            "version": FABRIC_VERSION,
            "lab": self.lab,
            "scale": self.scale,
            "ends": {name: _end_dict(end) for name, end in sorted(self.ends.items())},
            "faults": dict(sorted(self.faults.items())),
            "down": list(self.down),
            "bandwidth_set": dict(sorted(self.bandwidth_set.items())),
            "delay_set": dict(sorted(self.delay_set.items())),
        }
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = FABRIC_FILE) -> Fabric:
        try:
            doc = json.loads(text)
            if doc.get("version") != FABRIC_VERSION:
                raise FabricError(f"{source}: version {doc.get('version')!r}, expected {FABRIC_VERSION}")
            ends = {
                name: EndShaper(node=name.split(":", 1)[0], interface=name.split(":", 1)[1], **fields)
                for name, fields in doc["ends"].items()
            }
            faults = {name: dict(f) for name, f in (doc.get("faults") or {}).items()}
            scale = None if doc["scale"] is None else int(doc["scale"])
            down = tuple(str(n) for n in doc.get("down") or ())
            bandwidth_set = {str(n): int(b) for n, b in (doc.get("bandwidth_set") or {}).items()}
            delay_set = {
                str(n): {"delay_s": float(d["delay_s"]), "jitter_s": float(d.get("jitter_s", 0.0))}
                for n, d in (doc.get("delay_set") or {}).items()
            }
            return cls(doc["lab"], scale, ends, faults, down, bandwidth_set, delay_set)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, FabricError):
                raise
            raise FabricError(f"{source}: not a fabric file ({exc}); run aidclab configure again") from None


def _end_dict(end: EndShaper) -> dict[str, Any]:
    out = asdict(end)
    del out["node"], out["interface"]
    return out


def conditions_label(conditions: dict[str, Any] | None) -> str:
    """A run's recorded conditions in a few words for a report: ``1:20000, loss 2.00% s5:eth1`` or
    ``unshaped, clean``; ``not recorded`` for a run from before runs recorded them."""
    if not conditions:
        return "not recorded"
    from aidcnet.fare.bandwidth import format_bandwidth

    scale = conditions.get("scale")
    # A word ("shaped") stands for the scale where the caller groups runs of any scale together.
    parts = [scale if isinstance(scale, str) else f"1:{scale}" if scale else "unshaped"]
    parts += [f"loss {p:.2%} {end}" for end, p in (conditions.get("loss") or {}).items()]
    parts += [f"{end} down" for end in conditions.get("down") or ()]
    parts += [
        f"{end} {format_bandwidth(bps / 8)}" for end, bps in (conditions.get("bandwidth_bps") or {}).items()
    ]
    parts += [f"{end} delay {format_duration(s)}" for end, s in (conditions.get("delay_s") or {}).items()]
    if len(parts) == 1:
        parts.append("clean")
    return ", ".join(parts)


def fabric_from_plan(plan: Any) -> Fabric:
    """Both ends of every planned link (``plan`` is an :class:`orchestrator.configure.plan.LabPlan`)."""
    ends: dict[str, EndShaper] = {}
    for link in plan.links:
        if plan.time.scale is not None and (link.shaped_bps <= 0 or link.queue_bytes <= 0):
            raise FabricError(f"plan link {link.a}--{link.b} has no shaped rate: plan made before time.scale")
        for here, there in ((link.a, link.b), (link.b, link.a)):
            shaped = plan.time.scale is not None
            end = EndShaper(
                node=here.node,
                interface=here.interface,
                peer=str(there),
                bandwidth_bps=link.bandwidth_bps,
                rate_bps=link.shaped_bps,
                queue_bytes=link.queue_bytes,
                burst_bytes=tbf_burst(link.shaped_bps, link.mtu) if shaped else 0,
                mtu=link.mtu,
                delay_s=link.delay_s,
                jitter_s=link.jitter_s,
            )
            ends[end.name] = end
    return Fabric(plan.lab, plan.time.scale, ends)
