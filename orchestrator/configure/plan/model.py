"""Typed models of the lab plan: the vars file a user writes (:class:`LabVars`) and the plan the feature
modules compute from it (:class:`LabPlan`).

:class:`LabVars` leaves every key optional; a missing key means "use the default", and the defaults are
data too (the ``*.yml`` files beside the feature modules, read into the very same model). Semantic
checks (BSL values, BFR-ID range, address clashes) live in the feature that owns the value, because
only there can an error name both of the values that disagree.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_serializer, model_validator

PLAN_VERSION = 1
MAX_ASN = 4294967295


class PlanError(ValueError):
    """The vars, the defaults and the topology cannot all be honoured; the message names every source."""


class _Vars(BaseModel):
    # Unknown keys in a vars file are typos until proven otherwise. Errors never echo a value: the vars
    # hold secrets (bgp.md5).
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


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

    # "off": links unshaped (a null would only mean "not set here" and take the default).
    scale: Annotated[int, Field(ge=1)] | Literal["off"] | None = None


class GroupVars(_Vars):
    """A network-BIER multicast group with static receivers (until IGMP exists)."""

    group: ipaddress.IPv4Address
    # The sending host; none means any host behind any leaf may send to the group, i.e. (*,G).
    source: str | None = None
    receivers: list[str] = Field(min_length=1)


class BierVars(_Vars):
    sub_domain: int | None = Field(default=None, ge=0, le=255)
    # Range and value set are checked by the bier feature so the message can cite RFC 8296.
    bsl: int | None = None
    bift: Literal["static", "bgp"] | None = None
    dataplane: Literal["ebpf", "python"] | None = None
    edge_policy: bool | None = None
    # tenant -> its gpu hosts: under the edge policy each may address only its tenant's BFERs
    tenants: dict[str, list[str]] | None = None
    groups: list[GroupVars] = Field(default_factory=list)


class IgmpVars(_Vars):
    """IGMP memberships at the leaves (docs/igmp.md); defaults in plan/igmp.yml."""

    enabled: bool | None = None
    groups: list[Literal["static", "igmp", "proxy"]] | None = None
    robustness: int | None = Field(default=None, ge=1, le=7)
    query_interval: float | None = Field(default=None, gt=0)
    query_response_interval: float | None = Field(default=None, gt=0)
    last_member_query_interval: float | None = Field(default=None, gt=0)
    proxy_hosts: list[str] | Literal["all"] | None = None
    querier_off: list[str] | None = None
    max_channels: int | None = Field(default=None, ge=1)
    max_groups: int | None = Field(default=None, ge=1)
    control_cost: float | None = Field(default=None, ge=0, le=1.0)
    control_cost_record: float | None = Field(default=None, ge=0, le=1.0)


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


class BgpVars(_Vars):
    """BGP underlay with FARE (docs/fare.md); off means the plan's static routes."""

    enabled: bool | None = None
    mode: Literal["per-flow", "per-packet"] | None = None
    link_bandwidth: Literal["transitive", "non-transitive"] | None = None
    weights: Literal["fare", "ecmp"] | None = None
    hold_time: int | None = Field(default=None, ge=3, le=65535)
    # RFC 2385 TCP-MD5 on every session, with this secret (unset: a secret generated for the lab and kept
    # in its lab dir; false: unsigned); links.<end>.md5 overrides it per session.
    md5: Literal[False] | Md5Secret | None = None
    # RFC 5082 GTSM radius in hops on every session between two speakers that do GTSM; false: off.
    ttl_security_hops: Literal[False] | Annotated[int, Field(ge=1, le=254)] | None = None


class NodeVars(_Vars):
    loopback: ipaddress.IPv4Interface | None = None
    asn: int | None = Field(default=None, ge=1, le=MAX_ASN)
    bfr_id: int | None = None


class LinkVars(_Vars):
    subnet: ipaddress.IPv4Network | None = None
    bandwidth: BandwidthText | None = None
    sublinks: int | None = Field(default=None, ge=1, le=64)
    queue: str | int | None = None
    # The TCP-MD5 secret of this link's BGP session (overrides bgp.md5), or false: this session unsigned.
    md5: Literal[False] | Md5Secret | None = None


class InaJobVars(_Vars):
    """One AllReduce job: its workers, its VAT root and the A-BM of every VAT node (seed draft 002)."""

    job: int = Field(ge=0, le=0xFFFFFFFF)
    workers: list[str] = Field(min_length=1)
    root: str
    # switch -> the workers it aggregates (its A-BM); the root may be left out (its A-BM is every worker).
    abm: dict[str, list[str]] = Field(default_factory=dict)
    op: Literal["sum", "min", "max", "prod"] | None = None
    dtype: Literal["int32", "float32", "fixed32"] | None = None
    slot_budget: int | None = Field(default=None, ge=2, le=1 << 20)


class InaVars(_Vars):
    op: Literal["sum", "min", "max", "prod"] | None = None
    dtype: Literal["int32", "float32", "fixed32"] | None = None
    slot_budget: int | None = Field(default=None, ge=2, le=1 << 20)
    jobs: list[InaJobVars] = Field(default_factory=list)


PlanesSpec = Literal["auto"] | Annotated[int, Field(ge=1)] | list[list[str]]


class LabVars(_Vars):
    """``labs/<lab>.vars.yml``: every key optional; see docs/lab-plan.md for the keys and defaults."""

    pools: Pools = Field(default_factory=Pools)
    asn: AsnVars = Field(default_factory=AsnVars)
    bandwidth: BandwidthVars = Field(default_factory=BandwidthVars)
    time: TimeVars = Field(default_factory=TimeVars)
    bier: BierVars = Field(default_factory=BierVars)
    ina: InaVars = Field(default_factory=InaVars)
    igmp: IgmpVars = Field(default_factory=IgmpVars)
    bgp: BgpVars = Field(default_factory=BgpVars)
    planes: PlanesSpec | None = None
    nodes: dict[str, NodeVars] = Field(default_factory=dict)
    links: dict[str, LinkVars] = Field(default_factory=dict)
    # Where these vars came from, for error messages; not a key of the file.
    _source: str = PrivateAttr(default="lab vars")

    @property
    def source(self) -> str:
        return self._source

    def with_source(self, source: str) -> LabVars:
        self._source = source
        return self


# --- the plan ---------------------------------------------------------------------------------------


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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


class PlanBier(_Plan):
    sub_domain: int = 0
    bsl: int = 256
    bift: Literal["static", "bgp"] = "static"
    dataplane: Literal["ebpf", "python"] = "ebpf"
    # RFC 8296 §6 ingress policy on every BFR port (docs/bier.md, Edge policy); bier.yml turns it on.
    edge_policy: bool = True
    # tenant -> its gpu hosts (sorted); a host in none may address the whole domain
    tenants: dict[str, list[str]] = Field(default_factory=dict)
    # How many SIs the BFR-ids use: (max BFR-id - 1) // BSL + 1; each BFR gets that many labels.
    si_count: int = 1
    groups: list[PlanGroup] = Field(default_factory=list)


class PlanIgmp(_Plan):
    enabled: bool = False
    groups: list[str] = Field(default_factory=lambda: ["static", "igmp", "proxy"])
    robustness: int = 2
    # fabric seconds (the node files carry them with time_scale)
    query_interval: float = 125.0
    query_response_interval: float = 10.0
    last_member_query_interval: float = 1.0
    # leaf -> its ports that may send Receiver Proxy Reports; leaf -> its ports that do not query
    proxy_ports: dict[str, list[str]] = Field(default_factory=dict)
    quiet_ports: dict[str, list[str]] = Field(default_factory=dict)
    max_channels: int = 4096
    max_groups: int = 4096
    # fabric seconds per control message at each leaf's modelled control plane; 0: not modelled
    control_cost: float = 0.0
    control_cost_record: float = 0.0


class PlanBgp(_Plan):
    enabled: bool = False
    mode: Literal["per-flow", "per-packet"] = "per-flow"
    link_bandwidth: Literal["transitive", "non-transitive"] = "transitive"
    weights: Literal["fare", "ecmp"] = "fare"
    hold_time: int = 9
    # RFC 5082 GTSM radius of the sessions (None: off); the links say which sessions have it.
    ttl_security_hops: int | None = None


class PlanTime(_Plan):
    # The emulation runs `scale` times slower than the fabric it stands for: `scale` wall seconds are one
    # second of fabric time. None: links are not shaped, times are wall times.
    scale: int | None = None


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
    op: str
    dtype: str
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
    bier: PlanBier = Field(default_factory=PlanBier)
    bgp: PlanBgp = Field(default_factory=PlanBgp)
    time: PlanTime = Field(default_factory=PlanTime)
    planes: list[PlanPlane] = Field(default_factory=list)
    ina: list[PlanInaJob] = Field(default_factory=list)
    igmp: PlanIgmp = Field(default_factory=PlanIgmp)
    unreachable: Unreachable = Field(default_factory=Unreachable)

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
