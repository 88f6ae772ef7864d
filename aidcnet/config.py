"""The node configuration file: one YAML file per node, written by the orchestrator's plan (through
Ansible) and applied by the node agent. Shared by both sides, so they can never disagree on its shape.

The file carries a ``version``; an agent refuses a version it does not know rather than guessing.
Every later feature (BIER, BGP/FARE, IGMP, INA) adds an optional section here.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from aidcnet.paths import DEFAULT_CONFIG_PATH  # noqa: F401  (re-exported for the agent)
from aidcnet.roles import AGENT_ROLES
from aidcnet.timescale import TimeScale

CONFIG_VERSION = 1
# libyaml's parser when PyYAML has it (the wheels do): a superpod GPU's node file loads 3x faster, and a
# configure reloads every agent at once on a 2-core machine.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


IfName = Annotated[str, Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:-]+$")]


class ConfigError(ValueError):
    """A rejected node file; ``problems`` are ``field.path: message`` strings."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class _Model(BaseModel):
    # Unknown keys are typos until proven otherwise: reject them with their path.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Interface(_Model):
    name: IfName
    ipv4: ipaddress.IPv4Interface | None = None
    peer: str | None = None
    peer_interface: str | None = None
    mtu: int | None = Field(default=None, ge=68, le=65535)
    bandwidth_bps: float | None = Field(default=None, gt=0, description="link bandwidth, bits/s")
    # Set when the lab is shaped (time.scale): the byte limit of this end's shaper queue. Senders size
    # their socket buffers below it so that they wait for room instead of overrunning it.
    queue_bytes: int | None = Field(default=None, gt=0, description="shaper queue limit, bytes")

    @field_validator("name")
    @classmethod
    def _not_mgmt(cls, v: str) -> str:
        if v in ("eth0", "lo"):
            raise ValueError(f"{v} is not a data interface (eth0 is management, lo holds the loopback)")
        return v


class NextHop(_Model):
    via: ipaddress.IPv4Address
    dev: IfName
    weight: int = Field(default=1, ge=1, le=256)


class Route(_Model):
    prefix: ipaddress.IPv4Network
    nexthops: list[NextHop] = Field(min_length=1)


class BierNeighbor(_Model):
    """An adjacent BFR: where its copies go (UDP 6635 on its link address) and its labels."""

    name: str = Field(min_length=1)
    address: ipaddress.IPv4Address
    interface: IfName
    # The neighbor's BIFT-id for SI 0 of (sub-domain, BSL); SI k is label_base + k (RFC 8296 §2.1.1.1).
    label_base: int = Field(ge=16, le=0xFFFFF)


class BierFlow(_Model):
    """Network-BIER at a BFIR leaf: IP multicast (S,G) arriving on a host port goes to these BFERs."""

    group: ipaddress.IPv4Address
    source: ipaddress.IPv4Address | None = None
    bfers: list[int] = Field(min_length=1)

    @field_validator("group")
    @classmethod
    def _multicast(cls, v: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
        if not v.is_multicast:
            raise ValueError(f"{v} is not an IPv4 multicast group (224.0.0.0/4)")
        return v


class BierMembership(_Model):
    """Network-BIER at a BFER leaf: host ports that want group G (static until IGMP exists)."""

    group: ipaddress.IPv4Address
    interfaces: list[IfName] = Field(min_length=1)


class BierHostBfir(_Model):
    """A host the plan makes a BFIR behind a host port (RFC 8296 §6)."""

    bfr_id: int = Field(ge=1, le=65535)
    # BFR-ids it may address; None: the whole domain.
    allowed: list[int] | None = None


class BierPortPolicy(_Model):
    """RFC 8296 §6 ingress policy of one port (docs/bier.md "Edge policy")."""

    kind: Literal["host", "fabric"]
    hosts: dict[ipaddress.IPv4Address, BierHostBfir] = Field(default_factory=dict)  # host port
    neighbors: list[ipaddress.IPv4Address] = Field(default_factory=list)  # fabric port: BFR neighbors


class BierBypass(_Model):
    """A BIER-FRR bypass tunnel to one BFR-NBR (docs/bier.md, Fast reroute): the neighbour the tunnel leaves
    through and the adjacency labels pushed above the BIER label, top first."""

    via: str
    labels: list[int] = Field(min_length=1)


class BierNnhBypass(_Model):
    """BIER-FRR node protection toward one next-next hop (docs/bier.md, Fast reroute): while the BFR-NBR it
    protects is down, the copy's bits for ``bfr_ids`` go to ``nnh`` with its BIER label, ``labels`` pushed
    above it, out through BFR-NBR ``via``. ``labels`` is empty when the next-next hop is a BFR-NBR too."""

    nnh: str = Field(min_length=1)
    # the next-next hop's BIFT-id for SI 0, as BierNeighbor.label_base
    label_base: int = Field(ge=16, le=0xFFFFF)
    via: str
    labels: list[int] = Field(default_factory=list)
    bfr_ids: list[int] = Field(min_length=1)


class Bier(_Model):
    """BIER settings and static forwarding state of a BFR (RFC 8279, RFC 8296).

    The BIER feature's knobs (sub_domain, bsl, bift, dataplane) are declared here, once: the lab's vars and
    plan take theirs from these fields (bsl's is checked by the plan, to cite RFC 8296), their defaults are
    the lab's (orchestrator/configure/plan/bier.yml) and the plan writes every one into the node file."""

    bfr_id: int = Field(ge=1, le=65535)
    sub_domain: int = Field(ge=0, le=255)
    bsl: Literal[64, 128, 256, 512, 1024, 2048, 4096]
    bift: Literal["static", "bgp"]
    # Who forwards: the tc/eBPF fast path (falls back to python when the kernel refuses it) or the Python
    # dataplane alone (docs/bier.md).
    dataplane: Literal["ebpf", "python"]
    # Our own BIFT-ids: label_base + SI.
    label_base: int = Field(default=16, ge=16, le=0xFFFFF)
    # SIs in the sub-domain (the plan's): the label range size advertised in the BGP BIER attribute.
    si_count: int = Field(default=1, ge=1, le=255)
    neighbors: list[BierNeighbor] = Field(default_factory=list)
    # static mode: BFR-id -> next-hop neighbor names (several = ECMP); an absent id is unreachable.
    birt: dict[int, list[str]] = Field(default_factory=dict)
    # Host-BIER at a GPU host: delivered UDP payloads also go to 127.0.0.1:app_port (the application).
    app_port: int | None = Field(default=None, ge=1, le=65535)
    host_ports: list[IfName] = Field(default_factory=list)
    flows: list[BierFlow] = Field(default_factory=list)
    members: list[BierMembership] = Field(default_factory=list)
    # ifname -> ingress policy; empty: accept BIER from anyone (before issue 18).
    edge_policy: dict[IfName, BierPortPolicy] = Field(default_factory=dict)
    # Fast reroute, link protection (aidcnet/bier/fast_reroute.py): our adjacency label per BFR-NBR (a
    # bypass through us pops it and sends the rest to that neighbour), and a bypass per BFR-NBR, used while
    # the link to it is down; both empty: off.
    adjacency_labels: dict[str, int] = Field(default_factory=dict)
    bypass: dict[str, BierBypass] = Field(default_factory=dict)
    # ... and node protection: per BFR-NBR, the tunnels to its next hops that avoid it altogether
    nnh_bypass: dict[str, list[BierNnhBypass]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Bier:
        names = {n.name for n in self.neighbors}
        for nbr, label in self.adjacency_labels.items():
            if nbr not in names:
                raise ValueError(f"adjacency_labels.{nbr}: not in bier.neighbors")
            if not 16 <= label <= 0xFFFFF:
                raise ValueError(f"adjacency_labels.{nbr}: label {label} is not 16..1048575")
        for nbr, bypass in self.bypass.items():
            if nbr not in names or bypass.via not in names:
                raise ValueError(
                    f"bypass.{nbr}: {nbr} and its first hop {bypass.via} must be in bier.neighbors"
                )
            if bypass.via == nbr:
                raise ValueError(f"bypass.{nbr}: a bypass cannot leave through the link it protects")
        for nbr, tunnels in self.nnh_bypass.items():
            self._check_nnh(nbr, tunnels, names)
        for bfr_id, hops in self.birt.items():
            if not 1 <= bfr_id <= 65535:
                raise ValueError(f"birt.{bfr_id}: BFR-id must be 1..65535")
            unknown = [h for h in hops if h not in names]
            if unknown:
                raise ValueError(f"birt.{bfr_id}: next hop {', '.join(unknown)} is not in bier.neighbors")
            if not hops:
                raise ValueError(f"birt.{bfr_id}: needs at least one next hop (leave unreachable ids out)")
        return self

    @staticmethod
    def _check_nnh(nbr: str, tunnels: list[BierNnhBypass], names: set[str]) -> None:
        """A next-next hop is usually not a BFR-NBR of ours (that is the point), so only the protected
        neighbour and each tunnel's first hop must be."""
        where = f"nnh_bypass.{nbr}"
        if nbr not in names:
            raise ValueError(f"{where}: {nbr} is not in bier.neighbors")
        seen: set[int] = set()
        for t in tunnels:
            if t.via not in names:
                raise ValueError(f"{where}: first hop {t.via} (to {t.nnh}) is not in bier.neighbors")
            if nbr in (t.via, t.nnh):
                raise ValueError(f"{where}: the tunnel to {t.nnh} must avoid {nbr}, the node it protects")
            if (t.via == t.nnh) == bool(t.labels):
                raise ValueError(
                    f"{where}: the tunnel to {t.nnh} via {t.via} pushes labels exactly when its first hop "
                    "is not the next-next hop itself"
                )
            twice = seen.intersection(t.bfr_ids)
            if twice:
                raise ValueError(f"{where}: BFR-ids {sorted(twice)} are sent to two next-next hops")
            seen.update(t.bfr_ids)


class IgmpPort(_Model):
    """One host port of a leaf as the IGMP router sees it (docs/igmp.md)."""

    name: IfName
    # Run the RFC 3376 querier here (General/specific queries, election); off: listen only, and another
    # querier on the link keeps the hosts answering.
    querier: bool = True
    # The host behind this port may send Receiver Proxy Reports (it is a source the plan trusts).
    proxy: bool = False


class Igmp(_Model):
    """IGMPv3 at a leaf (docs/igmp.md): the querier on host ports, memberships to the BFIRs over BIER,
    Receiver Proxy Reports from allowed ports.

    ``groups`` chooses where the net-BIER BitString of a channel comes from; several combine per channel
    with a fixed precedence: a proxy report's set, else the union of the static flows' and the BFERs'.

    The IGMP feature's knobs are declared here, once, with their types and bounds: the lab's vars and
    plan take theirs from these fields (orchestrator.configure.plan.schema). Their defaults are the lab's,
    in orchestrator/configure/plan/igmp.yml; the plan writes every one into the node file, so none is
    guessed here."""

    groups: list[Literal["static", "igmp", "proxy"]] = Field(min_length=1)
    ports: list[IgmpPort] = Field(default_factory=list)
    # RFC 3376 §8 values in fabric seconds; the agent scales them by time_scale (the lab's time.scale).
    robustness: int = Field(ge=1, le=7)
    query_interval: float = Field(gt=0)
    query_response_interval: float = Field(gt=0)
    last_member_query_interval: float = Field(gt=0)
    time_scale: int | None = Field(default=None, ge=1)
    # BFR-ids this leaf reports its memberships to over BIER (the BFIRs); empty: it reports to no one.
    bfirs: list[int] = Field(default_factory=list)
    # Receiver address -> its BFER's BFR-id, for Receiver Proxy Reports (the plan's address table).
    receivers: dict[ipaddress.IPv4Address, int] = Field(default_factory=dict)
    max_channels: int = Field(ge=1, description="proxy (S,G)/(*,G) entries at most")
    max_groups: int = Field(ge=1, description="groups per port at most; more are refused")
    # The modelled control plane (docs/igmp.md): fabric seconds per control message, served one at a time
    # in arrival order; 0 applies each message as soon as our Python has read it (not a router's time).
    control_cost: float = Field(ge=0, le=1.0)
    # ... plus this per IGMPv3 group record the message carries (per-(S,G) state and table work).
    control_cost_record: float = Field(ge=0, le=1.0)

    @model_validator(mode="after")
    def _consistent(self) -> Igmp:
        names = [p.name for p in self.ports]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"ports: {', '.join(dupes)} listed more than once")
        if len(set(self.groups)) != len(self.groups):
            raise ValueError(f"groups: {self.groups} names a source twice")
        bad = [b for b in [*self.bfirs, *self.receivers.values()] if not 1 <= b <= 65535]
        if bad:
            raise ValueError(f"BFR-ids {bad} are outside 1..65535 (bfirs, receivers)")
        try:
            self.timers()  # the timers must fit the wire, scaled
        except ValidationError as exc:
            raise ValueError("; ".join(_problems(exc))) from None
        return self

    def timers(self):  # -> aidcnet.igmp.router.IgmpTimers (imported late: the agent starts lean)
        from aidcnet.igmp.router import IgmpTimers

        return IgmpTimers(
            robustness=self.robustness,
            query_interval=self.query_interval,
            query_response_interval=self.query_response_interval,
            last_member_query_interval=self.last_member_query_interval,
            time_scale=self.time_scale,
        )


class Bfd(_Model):
    """Liveness of the data links (docs/bfd.md): a BFD session (RFC 5880, single hop as RFC 5881) on each
    listed interface to the node at its other end, whose Down takes the link out of the node's forwarding
    as a carrier loss does.

    The BFD feature's knobs are declared here, once, with their types and bounds: the lab's vars and plan
    take theirs from these fields (orchestrator.configure.plan.schema), and their defaults are the lab's
    (orchestrator/configure/plan/bfd.yml). Times are fabric microseconds; the agent waits the node's
    time_scale times longer on the wall clock."""

    interval_us: float = Field(gt=0, description="fabric microseconds between control packets")
    multiplier: int = Field(ge=1, le=255, description="missed intervals that take a session down")
    # Down when more than this share of the peer's packets is missing over loss_window of its intervals;
    # None: only the detection time (the peer silent for multiplier intervals) takes a session down.
    loss_threshold: float | None = Field(default=None, gt=0, lt=1)
    loss_window: int = Field(ge=2, le=1000)
    interfaces: list[IfName] = Field(default_factory=list)

    @model_validator(mode="after")
    def _window_fits_threshold(self) -> Bfd:
        if self.loss_threshold is not None and self.loss_threshold * self.loss_window < 2:
            raise ValueError(
                f"loss_threshold {self.loss_threshold} over loss_window {self.loss_window}: fewer than 2 "
                "packets would take a session down; widen the window or raise the threshold"
            )
        return self


class BgpNeighbor(_Model):
    """One eBGP session, over one link (RFC 7938: sessions on the link addresses)."""

    # A rejected field must not echo its input: it may be the MD5 secret.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    name: str = Field(min_length=1, description="the neighbor node")
    address: ipaddress.IPv4Address
    local_address: ipaddress.IPv4Address
    interface: IfName
    asn: int = Field(ge=1, le=4294967295)
    # RFC 2385 TCP-MD5 secret of this session; repr=False keeps it out of logs and tracebacks.
    md5_password: str | None = Field(
        default=None,
        repr=False,
        pattern=r"^[!#-:<-z|~]{1,80}$",
        description="TCP-MD5 secret: 1-80 printable ASCII, no space, quote, ';', '{' or '}'",
    )
    # RFC 5082 GTSM of this session (overrides bgp.ttl_security_hops): send with TTL 255, accept only
    # TTL >= 256 - hops. The plan sets it on sessions whose both ends do GTSM (our nodes and FRR).
    ttl_security_hops: int | None = Field(default=None, ge=1, le=254)
    # This end only listens and the neighbour connects (RFC 4271 §8.1.1 PassiveTcpEstablishment). The plan
    # sets it on one end of each session between two agents (docs/fare.md "Who connects").
    passive: bool = False

    def gtsm_hops(self, bgp: Bgp) -> int | None:
        return self.ttl_security_hops if self.ttl_security_hops is not None else bgp.ttl_security_hops


class Bgp(_Model):
    """eBGP with FARE (docs/fare.md). The BGP feature's knobs (mode, link_bandwidth, weights, hold_time)
    are declared here, once: the lab's vars and plan take theirs from these fields, their defaults are the
    lab's (orchestrator/configure/plan/bgp.yml) and the plan writes every one into the node file."""

    asn: int = Field(ge=1, le=4294967295)
    router_id: ipaddress.IPv4Address
    # The sessions; with none the agent runs no BGP (the section then only records the plan's ASN).
    neighbors: list[BgpNeighbor] = Field(default_factory=list)
    # FARE in the host sender (seed draft §3): per-flow = the kernel hashes each QP's UDP source port over
    # the weighted nexthops; per-packet = the sender sprays packets over the planes by weight.
    mode: Literal["per-flow", "per-packet"]
    # Link-bandwidth community type we send (RFC 10005: 0x00 transitive, 0x40 non-transitive); both are read.
    link_bandwidth: Literal["transitive", "non-transitive"]
    # fare: next-hop weights follow the path bandwidths; ecmp: equal weights (the baseline).
    weights: Literal["fare", "ecmp"]
    hold_time: int = Field(ge=3, le=65535)
    # RFC 5082 GTSM on every session without a ttl_security_hops of its own: send with TTL 255, accept only
    # TTL >= 256 - hops; None: off. The agent starts ExaBGP through aidcnet.bgp.exabgp_main, which gives
    # the listening socket TTL 255 too (ExaBGP 5.0.15 does not, and a GTSM peer drops its SYN-ACK).
    ttl_security_hops: int | None = Field(default=None, ge=1, le=254)
    # GPU hosts are stub speakers (originate only); switches re-advertise.
    transit: bool = True

    @model_validator(mode="after")
    def _unique_peers(self) -> Bgp:
        peers = [str(n.address) for n in self.neighbors]
        dupes = sorted({p for p in peers if peers.count(p) > 1})
        if dupes:
            raise ValueError(f"neighbors: address {', '.join(dupes)} listed more than once")
        return self


# An AllReduce job's reduction and element type (docs/allreduce.md); aidcnet.ina.aggregator pairs them.
InaOp = Literal["sum", "min", "max", "prod"]
InaDtype = Literal["int32", "float32", "fixed32"]


class InaJob(_Model):
    """One job's VAT node on an INA switch (seed draft 002 §2.1); ``aidcnet.ina.aggregator.JobConfig``
    checks the rest (BSL, one SI, op/dtype pairing) when the switch agent builds its aggregator.

    The INA feature's knobs (op, dtype) are declared here, once: the lab's vars and plan take theirs from
    these fields, their defaults are the lab's (orchestrator/configure/plan/ina.yml, with slot_budget's),
    and the plan writes every one into the node file."""

    job_id: int = Field(ge=0, le=0xFFFFFFFF)
    # A-BM: BFR-ids of the workers below this VAT node.
    abm: list[int] = Field(min_length=1)
    root: bool = False
    # The parent VAT node (a node name); results go there by following next_hop toward the root.
    parent: str | None = None
    op: InaOp
    dtype: InaDtype
    slot_budget: int = Field(ge=1, le=1 << 20)
    # The neighbour's link address toward the root (none at the root, which disseminates by BIER).
    next_hop: ipaddress.IPv4Address | None = None

    @model_validator(mode="after")
    def _root_or_parent(self) -> InaJob:
        if self.root and (self.parent or self.next_hop):
            raise ValueError(f"job {self.job_id}: the root sends its result by BIER; no parent or next_hop")
        if not self.root and not (self.parent and self.next_hop):
            raise ValueError(f"job {self.job_id}: a non-root VAT node needs a parent and a next_hop")
        return self


class InaTransit(_Model):
    """A switch on a job's path with no VAT node of it: INA packets of the job go on toward the root."""

    job_id: int = Field(ge=0, le=0xFFFFFFFF)
    next_hop: ipaddress.IPv4Address


class InaMember(_Model):
    """A GPU host's part in a job: where its chunks go first and who else takes part."""

    job_id: int = Field(ge=0, le=0xFFFFFFFF)
    # BFR-ids of every worker of the job (the root's A-BM); this host's own is its bier.bfr_id.
    workers: list[int] = Field(min_length=1)
    next_hop: ipaddress.IPv4Address
    root: str
    op: InaOp
    dtype: InaDtype
    # Chunks in flight per worker: at most half the smallest slot budget on the VAT, so a slot is never
    # reused while a slower worker may still retransmit into it (docs/allreduce.md; the plan sets it).
    window: int = Field(ge=1)


class Ina(_Model):
    """In-network aggregation (docs/ina-header.md, docs/allreduce.md)."""

    port: int = Field(default=4792, ge=1, le=65535)
    jobs: list[InaJob] = Field(default_factory=list)
    transit: list[InaTransit] = Field(default_factory=list)
    members: list[InaMember] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_entry_per_job(self) -> Ina:
        ids = [j.job_id for j in self.jobs] + [t.job_id for t in self.transit]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"job {', '.join(map(str, dupes))}: listed more than once in jobs/transit")
        return self


class NodeConfig(_Model):
    version: int
    node: str = Field(min_length=1)
    # The node's role: one of the agent's (aidcnet.roles), or an interop peer's (the host knows those),
    # whose Ansible role renders its daemon's config from this file.
    role: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9-]*$")
    loopback: ipaddress.IPv4Interface
    interfaces: list[Interface] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)
    bgp: Bgp | None = None
    bier: Bier | None = None
    ina: Ina | None = None
    igmp: Igmp | None = None
    bfd: Bfd | None = None
    # The lab's time scale (docs/time-and-fidelity.md): every protocol timer the agent runs is written in
    # fabric seconds and waits this many times longer on the wall clock. None: the links are unshaped.
    # A run may change it without a new node file (the scale search, --confirm): Op.TIME_SCALE.
    time_scale: int | None = Field(default=None, ge=1)

    @property
    def clock(self) -> TimeScale:
        return TimeScale.of(self.time_scale)

    def at_time_scale(self, time_scale: TimeScale) -> NodeConfig:
        """This config with the lab's time scale changed, everywhere the node file carries it."""
        update: dict[str, Any] = {"time_scale": time_scale.value}
        if self.igmp is not None:
            update["igmp"] = self.igmp.model_copy(update={"time_scale": time_scale.value})
        return self.model_copy(update=update)

    @field_validator("version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != CONFIG_VERSION:
            raise ValueError(
                f"version {v} is not supported by this agent (it reads version {CONFIG_VERSION})"
            )
        return v

    @field_validator("loopback")
    @classmethod
    def _host_loopback(cls, v: ipaddress.IPv4Interface) -> ipaddress.IPv4Interface:
        if v.network.prefixlen != 32:
            raise ValueError(f"loopback {v} must be a /32")
        return v

    @model_validator(mode="after")
    def _agent_sections(self) -> NodeConfig:
        # BIER, INA and IGMP run in our agent: a file carrying them is for a node of the agent's roles.
        sections = [name for name in ("bier", "ina", "igmp", "bfd") if getattr(self, name) is not None]
        if sections and self.role not in AGENT_ROLES:
            raise ValueError(
                f"role: {self.role} is not one of the agent's roles ({', '.join(AGENT_ROLES)}); only their "
                f"nodes take {', '.join(sections)}"
            )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        names = [i.name for i in self.interfaces]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"interfaces: {', '.join(dupes)} listed more than once")
        known = set(names)
        prefixes = [str(r.prefix) for r in self.routes]
        dupes = sorted({p for p in prefixes if prefixes.count(p) > 1})
        if dupes:
            raise ValueError(f"routes: prefix {', '.join(dupes)} listed more than once; merge the next hops")
        for i, route in enumerate(self.routes):
            for j, hop in enumerate(route.nexthops):
                if hop.dev not in known:
                    raise ValueError(
                        f"routes.{i}.nexthops.{j}.dev: {hop.dev} is not one of this node's interfaces "
                        f"({', '.join(sorted(known)) or 'none'})"
                    )
        for i, neighbor in enumerate(self.bgp.neighbors if self.bgp else []):
            if neighbor.interface not in known:
                raise ValueError(
                    f"bgp.neighbors.{i}.interface: {neighbor.interface} is not one of this node's interfaces "
                    f"({', '.join(sorted(known)) or 'none'})"
                )
        p2p = {i.name for i in self.interfaces if i.ipv4 is not None and i.ipv4.network.prefixlen == 31}
        for i, ifname in enumerate(self.bfd.interfaces if self.bfd else []):
            if ifname not in p2p:
                raise ValueError(
                    f"bfd.interfaces.{i}: {ifname} is not one of this node's point-to-point (/31) data "
                    f"interfaces ({', '.join(sorted(p2p)) or 'none'})"
                )
        if self.igmp is not None:
            if self.bier is None:
                raise ValueError("igmp: needs a bier section (the leaf is BFIR and BFER)")
            hosts = set(self.bier.host_ports)
            for i, port in enumerate(self.igmp.ports):
                if port.name not in hosts:
                    raise ValueError(
                        f"igmp.ports.{i}.name: {port.name} is not in bier.host_ports "
                        f"({', '.join(sorted(hosts)) or 'none'}); add it there or remove it here"
                    )
        return self

    @property
    def smallest_queue_bytes(self) -> int | None:
        """The shallowest shaper queue at this node's link ends (None: the lab is not shaped): what one
        socket of its agent may never fill (:func:`aidcnet.udpio.shaped_sndbuf`)."""
        queues = [i.queue_bytes for i in self.interfaces if i.queue_bytes]
        return min(queues) if queues else None


# A check across fields names the field at fault itself ("role: ...", "interfaces: ..."); its message then
# stands alone rather than under "(top level)".
_NAMES_ITS_FIELD = re.compile(r"^[a-z_][a-z0-9_.]*: ")


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if not err["loc"] and _NAMES_ITS_FIELD.match(msg):
            out.append(msg)
            continue
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        out.append(f"{where}: {msg}")
    return out


def parse_config(data: Any, source: str = "<config>") -> NodeConfig:
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): the file must be a YAML mapping"])
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _problems(exc)) from None


def load_config(path: str | Path) -> NodeConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"(file): cannot read: {exc.strerror}"]) from None
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"(file): not valid YAML: {exc}"]) from None
    return parse_config(data, str(path))


# What `aidcnet ctl show config` prints in place of a TCP-MD5 secret: set, not shown (issue 18).
SECRET_SHOWN = "<set, not shown>"


def shown_config(config: NodeConfig) -> dict[str, Any]:
    """The config as the agent shows it (``show config``): every TCP-MD5 secret replaced by SECRET_SHOWN,
    so status output, logs and anything that records it never carry one."""
    data = config.model_dump(mode="json", exclude_none=True)
    for neighbor in (data.get("bgp") or {}).get("neighbors", []):
        if "md5_password" in neighbor:
            neighbor["md5_password"] = SECRET_SHOWN
    return data


def dump_config(config: NodeConfig) -> str:
    """Canonical YAML: the same config always gives the same bytes, so Ansible sees no change."""
    return yaml.safe_dump(config.model_dump(mode="json", exclude_none=True), sort_keys=False)
