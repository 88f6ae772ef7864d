"""Typed models of the lab plan: the vars file a user writes (:class:`LabVars`) and the plan the feature
modules compute from it (:class:`LabPlan`).

:class:`LabVars` leaves every key optional; a missing key means "use the default", and the defaults are
data too (the ``*.yml`` files beside the feature modules, read into the very same model), and only there:
the plan's sections carry none, every value comes from the vars or those files. Semantic checks (BSL
values, BFR-ID range, address clashes) live in the feature that owns the value, because only there can an
error name both of the values that disagree.

A knob that reaches the node file is declared once, in the node file's model (:mod:`aidcnet.config`, what
the nodes read): its vars and plan fields are made from that declaration (:func:`knobs_of`), so a type or
a bound is never written twice.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    create_model,
    field_serializer,
    model_validator,
)

from aidcnet.config import Bfd, Bgp, Bier, BierBypass, BierNnhBypass, Igmp, InaDtype, InaJob, InaOp

PLAN_VERSION = 1
MAX_ASN = 4294967295


class PlanError(ValueError):
    """The vars, the defaults and the topology cannot all be honoured; the message names every source."""


class _Vars(BaseModel):
    # Unknown keys in a vars file are typos until proven otherwise. Errors never echo a value: the vars
    # hold secrets (bgp.md5).
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def knobs_of(
    source: type[BaseModel], names: Iterable[str], base: type[BaseModel], optional: bool = False
) -> type[BaseModel]:
    """A model of ``base`` with ``source``'s fields ``names``: each with the type and bounds declared
    there and no default (the plan's section: every value is set), or ``optional``: None unless given
    (the vars: unset means the default, from the feature's ``.yml``). Subclass it to add the section's own
    fields."""
    fields: dict[str, Any] = {}
    for name in names:
        info = source.model_fields[name]
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = (Optional[kind], None) if optional else (kind, ...)  # noqa: UP045 (a runtime value)
    return create_model(f"{source.__name__}{base.__name__}Knobs", __base__=base, **fields)


# The knobs of each feature that reach the node file, declared there (aidcnet.config), defaults in the
# feature's .yml.
IGMP_KNOBS = (
    "groups",
    "robustness",
    "query_interval",
    "query_response_interval",
    "last_member_query_interval",
    "max_channels",
    "max_groups",
    "control_cost",
    "control_cost_record",
)
IGMP_TIMERS = ("query_interval", "query_response_interval", "last_member_query_interval")
BFD_KNOBS = ("interval_us", "multiplier", "loss_threshold", "loss_window")
BGP_KNOBS = ("mode", "link_bandwidth", "weights", "hold_time")
BIER_KNOBS = ("sub_domain", "bift", "dataplane")
INA_KNOBS = ("op", "dtype")


class Pools(_Vars):
    loopback: ipaddress.IPv4Network | None = Field(default=None, description="/32 loopbacks come from here")
    links: ipaddress.IPv4Network | None = Field(default=None, description="/31 link subnets come from here")


class AsnRange(_Vars):
    first: int = Field(ge=1, le=MAX_ASN)
    last: int = Field(ge=1, le=MAX_ASN)

    @model_validator(mode="after")
    def _ordered(self) -> AsnRange:
        if self.first > self.last:
            raise ValueError(f"first {self.first} is above last {self.last}")
        return self

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


class AsnVars(_Vars):
    hosts: AsnRange | None = None
    leaves: AsnRange | None = None
    upper: AsnRange | None = None


BandwidthText = str | int | float


class BandwidthVars(_Vars):
    default: BandwidthText | None = None
    sublinks: int | None = Field(default=None, ge=1, le=64)
    host: BandwidthText | None = None
    host_sublinks: int | None = Field(default=None, ge=1, le=64)
    # Shaper queue limit per link end, bytes (plan/timescale.py parses "512KiB" and the like).
    queue: str | int | None = None


class TimeVars(_Vars):
    """The lab-wide time scale (docs/lab-plan.md, docs/time-and-fidelity.md)."""

    # "off": links unshaped (a null would only mean "not set here" and take the default); "auto": each
    # replay picks the scale its trace needs on this machine (docs/time-and-fidelity.md).
    scale: Annotated[int, Field(ge=1)] | Literal["off", "auto"] | None = None


class GroupVars(_Vars):
    """A network-BIER multicast group with static receivers (until IGMP exists)."""

    group: ipaddress.IPv4Address
    # The sending host; none means any host behind any leaf may send to the group, i.e. (*,G).
    source: str | None = None
    receivers: list[str] = Field(min_length=1)


class BierVars(knobs_of(Bier, BIER_KNOBS, _Vars, optional=True)):  # type: ignore[misc]
    # Range and value set are checked by the bier feature so the message can cite RFC 8296.
    bsl: int | None = None
    edge_policy: bool | None = None
    fast_reroute: bool | None = None
    # tenant -> its gpu hosts: under the edge policy each may address only its tenant's BFERs
    tenants: dict[str, list[str]] | None = None
    groups: list[GroupVars] = Field(default_factory=list)


class IgmpWallTimers(knobs_of(Igmp, IGMP_TIMERS, _Vars, optional=True)):  # type: ignore[misc]
    """What an unset IGMP timer is on the wall clock: its fabric value is this divided by the time scale."""


class IgmpVars(knobs_of(Igmp, IGMP_KNOBS, _Vars, optional=True)):  # type: ignore[misc]
    """IGMP memberships at the leaves (docs/igmp.md); defaults in plan/igmp.yml. The timers are fabric
    seconds; unset, each is its ``wall_timers`` value divided by the time scale."""

    enabled: bool | None = None
    wall_timers: IgmpWallTimers = Field(default_factory=IgmpWallTimers)
    proxy_hosts: list[str] | Literal["all"] | None = None
    querier_off: list[str] | None = None


class BfdVars(knobs_of(Bfd, BFD_KNOBS, _Vars, optional=True)):  # type: ignore[misc]
    """Link liveness (docs/bfd.md); defaults in plan/bfd.yml. ``interval_us`` is fabric microseconds;
    unset, it outlasts a full shaper queue and is at least ``wall_interval_ms`` of wall time."""

    enabled: bool | None = None
    wall_interval_ms: float | None = Field(default=None, gt=0)


class SecretRef(_Vars):
    """A secret kept out of the vars file: read from an environment variable or a file (a path relative
    to the vars file; its trailing newline dropped) when the plan is computed."""

    env: str | None = Field(default=None, min_length=1)
    file: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give the secret's source as exactly one of {env: VARIABLE} or {file: PATH}")
        return self


# A TCP-MD5 secret in the vars: the secret itself (SecretStr: never shown by repr or in errors), or where
# to read it. Pydantic's messages name the key, never the value.
Md5Secret = SecretStr | SecretRef


class BgpVars(knobs_of(Bgp, BGP_KNOBS, _Vars, optional=True)):  # type: ignore[misc]
    """BGP underlay with FARE (docs/fare.md); off means the plan's static routes."""

    enabled: bool | None = None
    # RFC 2385 TCP-MD5 on every session, with this secret (unset: a secret generated for the lab and kept
    # in its lab dir; false: unsigned); links.<end>.md5 overrides it per session.
    md5: Literal[False] | Md5Secret | None = None
    # RFC 5082 GTSM radius in hops on every session between two speakers that do GTSM; false: off.
    ttl_security_hops: Literal[False] | Annotated[int, Field(ge=1, le=254)] | None = None


DurationText = str | int | float


class DelayVars(_Vars):
    """Propagation delay per link class, fabric time (docs/delay.md); defaults in plan/delay.yml."""

    host: DurationText | None = None
    fabric: DurationText | None = None
    dci: DurationText | None = None
    jitter: DurationText | None = None


class NodeVars(_Vars):
    loopback: ipaddress.IPv4Interface | None = None
    asn: int | None = Field(default=None, ge=1, le=MAX_ASN)
    bfr_id: int | None = None


class LinkVars(_Vars):
    subnet: ipaddress.IPv4Network | None = None
    bandwidth: BandwidthText | None = None
    sublinks: int | None = Field(default=None, ge=1, le=64)
    queue: str | int | None = None
    # One-way propagation delay and its jitter, fabric time with a unit (2ms, 100us): docs/delay.md.
    delay: DurationText | None = None
    jitter: DurationText | None = None
    # The TCP-MD5 secret of this link's BGP session (overrides bgp.md5), or false: this session unsigned.
    md5: Literal[False] | Md5Secret | None = None


# At least 2: each worker keeps at most half of the slots in flight (plan/ina.py).
SlotBudgetVar = Annotated[int, Field(ge=2, le=1 << 20)] | None


class InaJobVars(knobs_of(InaJob, INA_KNOBS, _Vars, optional=True)):  # type: ignore[misc]
    """One AllReduce job: its workers, its VAT root and the A-BM of every VAT node (seed draft 002)."""

    job: int = Field(ge=0, le=0xFFFFFFFF)
    workers: list[str] = Field(min_length=1)
    root: str
    # switch -> the workers it aggregates (its A-BM); the root may be left out (its A-BM is every worker).
    abm: dict[str, list[str]] = Field(default_factory=dict)
    slot_budget: SlotBudgetVar = None


class InaVars(knobs_of(InaJob, INA_KNOBS, _Vars, optional=True)):  # type: ignore[misc]
    slot_budget: SlotBudgetVar = None
    jobs: list[InaJobVars] = Field(default_factory=list)


PlanesSpec = Literal["auto"] | Annotated[int, Field(ge=1)] | list[list[str]]


class LabVars(_Vars):
    """``labs/<lab>.vars.yml``: every key optional; see docs/lab-plan.md for the keys and defaults."""

    pools: Pools = Field(default_factory=Pools)
    asn: AsnVars = Field(default_factory=AsnVars)
    bandwidth: BandwidthVars = Field(default_factory=BandwidthVars)
    time: TimeVars = Field(default_factory=TimeVars)
    delay: DelayVars = Field(default_factory=DelayVars)
    bier: BierVars = Field(default_factory=BierVars)
    ina: InaVars = Field(default_factory=InaVars)
    igmp: IgmpVars = Field(default_factory=IgmpVars)
    bfd: BfdVars = Field(default_factory=BfdVars)
    bgp: BgpVars = Field(default_factory=BgpVars)
    planes: PlanesSpec | None = None
    nodes: dict[str, NodeVars] = Field(default_factory=dict)
    links: dict[str, LinkVars] = Field(default_factory=dict)
    # Faults every replay of the lab gets, as `aidclab replay --fault` takes them (docs/faults.md).
    faults: list[str] = Field(default_factory=list)
    # Where these vars came from, for error messages; not a key of the file.
    _source: str = PrivateAttr(default="lab vars")

    @property
    def source(self) -> str:
        return self._source

    def with_source(self, source: str) -> LabVars:
        self._source = source
        return self


# --- the plan ---------------------------------------------------------------------------------------


class PlanNextHop(_Plan):
    via: ipaddress.IPv4Address
    dev: str
    neighbor: str


class PlanRoute(_Plan):
    to: str
    prefix: ipaddress.IPv4Network
    nexthops: list[PlanNextHop]


class PlanNode(_Plan):
    name: str
    role: str
    # Hop distance from the nearest GPU host over switches: 0 host, 1 leaf, 2 spine, ...
    tier: int | None = None
    loopback: ipaddress.IPv4Interface | None = None
    asn: int | None = None
    bfr_id: int | None = None
    # This BFR's BIFT-ids (MPLS labels): label_base + SI, one per SI in use (RFC 8296 §2.1.1.1).
    bier_label_base: int | None = None
    # BIER fast reroute (docs/bier.md): this BFR's adjacency label per BFR-NBR and its bypass tunnel per
    # BFR-NBR that has one; computed once per plan, since a bypass depends on the whole lab's adjacency.
    bier_adjacency_labels: dict[str, int] = Field(default_factory=dict)
    bier_bypass: dict[str, BierBypass] = Field(default_factory=dict)
    # ... and node protection: per BFR-NBR, tunnels to its next hops around it
    bier_nnh_bypass: dict[str, list[BierNnhBypass]] = Field(default_factory=dict)
    planes: list[int] = Field(default_factory=list)
    routes: list[PlanRoute] = Field(default_factory=list)

    # In plan.yml the routes are grouped by next-hop set, each group naming its destination nodes (whose
    # loopbacks are the prefixes): a leaf of the 256-GPU lab reaches 240 remote hosts over the same 8
    # spines, and one route per destination made the file 11 MB and a replay's load of it 45 s. In
    # memory they stay one route per destination, in plan node order (LabPlan expands them).
    @field_serializer("routes", when_used="json")
    def _routes_by_next_hops(self, routes: list[PlanRoute]) -> list[dict[str, object]]:
        groups: dict[tuple[tuple[str, str, str], ...], dict[str, list[object]]] = {}
        singles: list[dict[str, object]] = []
        for route in routes:
            if route.prefix.prefixlen != 32:  # not a loopback route: kept whole
                singles.append(route.model_dump(mode="json"))
                continue
            key = tuple((str(h.via), h.dev, h.neighbor) for h in route.nexthops)
            group = groups.setdefault(
                key, {"nexthops": [{"via": v, "dev": d, "neighbor": n} for v, d, n in key], "to": []}
            )
            group["to"].append(route.to)
        return [*groups.values(), *singles]


class PlanEndpoint(_Plan):
    node: str
    interface: str
    address: ipaddress.IPv4Interface | None = None

    def __str__(self) -> str:
        return f"{self.node}:{self.interface}"


class PlanLink(_Plan):
    index: int
    a: PlanEndpoint
    b: PlanEndpoint
    subnet: ipaddress.IPv4Network | None = None
    mtu: int
    bandwidth: str = ""
    bandwidth_bps: int = 0
    # A port split by a Y-cable into parallel sub-links of equal share (superpod: 800G = 2 x 400G).
    sublinks: int = 1
    sublink_bandwidth_bps: int = 0
    # What the veth carries: bandwidth_bps / time.scale, at both ends, with a queue of queue_bytes.
    shaped_bps: int = 0
    queue_bytes: int = 0
    # host (a GPU host at one end), fabric, or dci (its ends in two sites): its delay's default.
    link_class: Literal["host", "fabric", "dci"] = "fabric"
    # One-way propagation delay, each direction, and its jitter: fabric seconds (docs/delay.md).
    delay_s: float = 0.0
    jitter_s: float = 0.0
    plane: int | None = None
    # TCP-MD5 on this link's BGP session. The secret goes only into the two node files: exclude keeps it
    # out of plan.yml (a plan read back from there has md5 set and no secret, and cannot render sessions).
    md5: bool = False
    md5_secret: SecretStr | None = Field(default=None, exclude=True, repr=False)
    # RFC 5082 GTSM radius of this link's BGP session; None: no GTSM (off, or an end that cannot do it).
    ttl_security_hops: int | None = None

    def endpoint(self, node: str, interface: str) -> PlanEndpoint | None:
        for ep in (self.a, self.b):
            if ep.node == node and ep.interface == interface:
                return ep
        return None


class PlanGroup(_Plan):
    """Network-BIER: hosts send (S,G) as IP multicast; their leaf (BFIR) imposes BIER toward the BFER
    leaves of the receivers, which emit it on the receivers' ports."""

    group: ipaddress.IPv4Address
    source: str | None = None
    source_address: ipaddress.IPv4Address | None = None
    receivers: list[str]
    # receiver host -> (its leaf, the leaf's port toward it)
    receiver_ports: dict[str, tuple[str, str]]


class PlanBier(knobs_of(Bier, BIER_KNOBS, _Plan)):  # type: ignore[misc]
    bsl: int
    # RFC 8296 §6 ingress policy on every BFR port (docs/bier.md, Edge policy); bier.yml turns it on.
    edge_policy: bool
    # BIER fast reroute, link protection (docs/bier.md): adjacency labels and a bypass per BFR-NBR (a plan
    # written before it existed has neither)
    fast_reroute: bool = False
    # tenant -> its gpu hosts (sorted); a host in none may address the whole domain
    tenants: dict[str, list[str]]
    # How many SIs the BFR-ids use: (max BFR-id - 1) // BSL + 1; each BFR gets that many labels.
    si_count: int = 1
    groups: list[PlanGroup] = Field(default_factory=list)


class PlanIgmp(knobs_of(Igmp, IGMP_KNOBS, _Plan)):  # type: ignore[misc]
    """The timers are fabric seconds (the node files carry them with time_scale); control_cost and
    control_cost_record are fabric seconds per message at each leaf's modelled control plane (0: not
    modelled)."""

    enabled: bool
    # leaf -> its ports that may send Receiver Proxy Reports; leaf -> its ports that do not query
    proxy_ports: dict[str, list[str]] = Field(default_factory=dict)
    quiet_ports: dict[str, list[str]] = Field(default_factory=dict)


class PlanBfd(knobs_of(Bfd, BFD_KNOBS, _Plan)):  # type: ignore[misc]
    """``interval_us`` is fabric microseconds (the node files carry it with time_scale)."""

    enabled: bool


class PlanBgp(knobs_of(Bgp, BGP_KNOBS, _Plan)):  # type: ignore[misc]
    enabled: bool
    # RFC 5082 GTSM radius of the sessions (None: off); the links say which sessions have it.
    ttl_security_hops: int | None = None


class PlanTime(_Plan):
    # The emulation runs `scale` times slower than the fabric it stands for: `scale` wall seconds are one
    # second of fabric time. None: links are not shaped, times are wall times.
    scale: int | None = None
    # time.scale: auto: ``scale`` is where configure shapes the links; each replay then picks the scale its
    # trace needs (orchestrator/run/autoscale.py) and reshapes links and agents to it.
    auto: bool = False


class PlanPlane(_Plan):
    id: int
    switches: list[str]


class Unreachable(_Plan):
    count: int = 0
    # The first few "src -> dst" pairs, enough to see what is cut off without a huge plan file.
    pairs: list[str] = Field(default_factory=list)


class PlanVatNode(_Plan):
    abm: list[str]
    abm_bfr_ids: list[int]
    parent: str | None = None
    next_hop: ipaddress.IPv4Address | None = None


class PlanInaJob(_Plan):
    """A job as the switches and hosts see it: VAT nodes, transit switches and each worker's first hop."""

    job: int
    workers: list[str]
    worker_bfr_ids: list[int]
    root: str
    op: InaOp
    dtype: InaDtype
    slot_budget: int
    window: int
    vat: dict[str, PlanVatNode]
    # transit switch -> its next hop toward the root
    transit: dict[str, ipaddress.IPv4Address] = Field(default_factory=dict)
    # worker -> its first hop toward the root
    first_hop: dict[str, ipaddress.IPv4Address] = Field(default_factory=dict)


class LabPlan(_Plan):
    version: int = PLAN_VERSION
    lab: str
    topology: str
    vars: str
    nodes: dict[str, PlanNode]
    links: list[PlanLink]
    # Each feature's section is set when the feature runs (build_plan); a plan read back has them all.
    bier: PlanBier | None = None
    bgp: PlanBgp | None = None
    time: PlanTime = Field(default_factory=PlanTime)
    planes: list[PlanPlane] = Field(default_factory=list)
    ina: list[PlanInaJob] = Field(default_factory=list)
    igmp: PlanIgmp | None = None
    bfd: PlanBfd | None = None
    unreachable: Unreachable = Field(default_factory=Unreachable)
    faults: list[str] = Field(default_factory=list)  # the vars' faults: every replay applies them

    @model_validator(mode="before")
    @classmethod
    def _routes_per_destination(cls, data: object) -> object:
        """Expand plan.yml's route groups (PlanNode) to one route per destination node, whose loopback
        is the prefix; a group naming a node without a loopback is left for validation to refuse."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
            return data
        nodes = data["nodes"]
        loopbacks = {
            name: str(ipaddress.ip_interface(node["loopback"]).network)
            for name, node in nodes.items()
            if isinstance(node, dict) and node.get("loopback")
        }
        for node in nodes.values():
            if not isinstance(node, dict) or not isinstance(node.get("routes"), list):
                continue
            routes: list[object] = []
            for item in node["routes"]:
                if isinstance(item, dict) and isinstance(item.get("to"), list):
                    # The group's next hops are validated once and shared by its routes: 8 spines
                    # times 240 hosts on each leaf of the 256-GPU lab.
                    hops = item.get("nexthops")
                    if isinstance(hops, list):
                        hops = [PlanNextHop.model_validate(h) for h in hops]
                    routes += [{"to": to, "prefix": loopbacks.get(to), "nexthops": hops} for to in item["to"]]
                else:
                    routes.append(item)
            node["routes"] = routes
        return data

    @model_validator(mode="after")
    def _routes_in_node_order(self) -> LabPlan:
        # plan.yml groups routes by next hops (PlanNode); the plan computes them in destination node order.
        order = {name: i for i, name in enumerate(self.nodes)}
        for node in self.nodes.values():
            node.routes.sort(key=lambda r: order.get(r.to, len(order)))
        return self
