"""The BIER edge policy of RFC 8296 §6 as a pure decision: may this packet enter on this port?

RFC 8296 §6 asks a BFR to accept BIER packets only from trusted sources: on a port facing hosts,
only from hosts that are BFIRs of the domain, and on a port facing the fabric only from BFR
neighbors.  Here that becomes, per ingress port (a local interface):

* a *host* port lists the hosts the plan makes BFIRs, by source address; each one's packets
  must carry the BFIR-id equal to its own BFR-id and a BitString whose BFERs lie in the set the
  host may reach (the whole domain by default, or a tenant/job group from the vars);
* a *fabric* port lists the neighboring BFRs by source address; nothing else may send BIER there.

A port with no policy accepts everything (a BFR configured before this existed keeps working).
No I/O here: the dataplanes (Python :mod:`aidcnet.agent.bier.dataplane`, eBPF ``aidcnet/ebpf/bier.c``
policy_drop, loaded by :meth:`aidcnet.agent.bier.ebpf.BierMaps.write_policy`) enforce it and count
drops per port and reason under the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aidcnet.bier.bitstring import bitstrings_from_ids

# Why a closed set: each dataplane keeps one counter per port and reason.
POLICY_REASONS: tuple[str, ...] = (
    "not-bfir",  # host port: the source is no BFIR the plan put behind this port
    "forged-bfir-id",  # host port: BFIR-id is not the sending host's own BFR-id
    "bitstring-outside-set",  # host port: a BFER outside the host's allowed set
    "not-bfr-neighbor",  # fabric port: the source is no neighboring BFR
)

# Numeric codes of the eBPF program (bier.h enum bier_pol_reason); 0 there means accepted.
REASON_CODE: dict[str, int] = {r: i + 1 for i, r in enumerate(POLICY_REASONS)}

HOST = "host"
FABRIC = "fabric"


@dataclass(frozen=True)
class HostBfir:
    """One host allowed to impose BIER on a host port."""

    bfr_id: int
    # {SI: allowed bits}; None means any BFER of the domain.
    allowed: Mapping[int, int] | None = None

    @classmethod
    def reaching(cls, bfr_id: int, allowed_ids: Iterable[int] | None, bsl: int) -> HostBfir:
        if allowed_ids is None:
            return cls(bfr_id, None)
        return cls(bfr_id, bitstrings_from_ids(allowed_ids, bsl))


@dataclass(frozen=True)
class PortPolicy:
    kind: str  # HOST or FABRIC
    hosts: Mapping[str, HostBfir] = field(default_factory=dict)  # host port: source address -> BFIR
    neighbors: frozenset[str] = frozenset()  # fabric port: BFR neighbor source addresses

    def __post_init__(self) -> None:
        if self.kind not in (HOST, FABRIC):
            raise ValueError(f"port policy kind {self.kind!r}: use {HOST!r} or {FABRIC!r}")


def check(policy: PortPolicy | None, src: str, si: int, bitstring: int, bfir_id: int) -> str | None:
    """The reason (one of POLICY_REASONS) to drop a packet from ``src`` with this SI, BitString and
    BFIR-id arriving on a port with ``policy``; None to accept it."""
    if policy is None:
        return None
    if policy.kind == FABRIC:
        return None if src in policy.neighbors else "not-bfr-neighbor"
    host = policy.hosts.get(src)
    if host is None:
        return "not-bfir"
    if bfir_id != host.bfr_id:
        return "forged-bfir-id"
    if host.allowed is not None and bitstring & ~host.allowed.get(si, 0):
        return "bitstring-outside-set"
    return None


def check_bypass(policy: PortPolicy | None, src: str) -> str | None:
    """The reason to drop a fast-reroute bypass packet (a label stack, aidcnet/bier/fast_reroute.py) from
    ``src`` on a port with ``policy``; None to pass it on. A bypass hands its BIER packet on as if from a
    fabric port, so only a fabric port's BFR neighbour may send one: from a host port it would skip the
    host checks."""
    if policy is None:
        return None
    if policy.kind == FABRIC and src in policy.neighbors:
        return None
    return "not-bfr-neighbor"


def from_config(ports: Mapping[str, Mapping[str, object]], bsl: int) -> dict[str, PortPolicy]:
    """The node file's ``bier.edge_policy`` -> ``{ifname: PortPolicy}``.

    Form (written by the orchestrator from the plan)::

        {"eth1": {"kind": "host", "hosts": {"10.0.1.2": {"bfr_id": 3, "allowed": [1, 2, 3]}}},
         "eth2": {"kind": "fabric", "neighbors": ["10.1.0.1"]}}

    ``allowed`` absent or null: the whole domain.
    """
    out: dict[str, PortPolicy] = {}
    for ifname, spec in ports.items():
        kind = spec.get("kind")
        where = f"bier.edge_policy.{ifname}"
        if kind == FABRIC:
            nbrs = spec.get("neighbors") or []
            if not isinstance(nbrs, list):
                raise ValueError(f"{where}.neighbors: expected a list of addresses")
            out[ifname] = PortPolicy(FABRIC, neighbors=frozenset(str(n) for n in nbrs))
        elif kind == HOST:
            hosts_spec = spec.get("hosts") or {}
            if not isinstance(hosts_spec, Mapping):
                raise ValueError(f"{where}.hosts: expected {{address: {{bfr_id, allowed}}}}")
            hosts = {}
            for addr, h in hosts_spec.items():
                if not isinstance(h, Mapping) or not isinstance(h.get("bfr_id"), int) or h["bfr_id"] < 1:
                    raise ValueError(f"{where}.hosts.{addr}.bfr_id: expected a BFR-id >= 1")
                allowed = h.get("allowed")
                hosts[str(addr)] = HostBfir.reaching(
                    h["bfr_id"], None if allowed is None else [int(i) for i in allowed], bsl
                )
            out[ifname] = PortPolicy(HOST, hosts=hosts)
        else:
            raise ValueError(f"{where}.kind: {kind!r}; use {HOST!r} (hosts behind it) or {FABRIC!r}")
    return out
