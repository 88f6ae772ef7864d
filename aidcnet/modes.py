"""Transport modes of an experiment, named once for the whole project.

A mode is how one trace is carried over a lab: the orchestrator's mode classes
(``orchestrator/experiment/modes/``) say what each needs configured, what it tells the agents and how its
deliveries are judged; the agents' services send and receive in it. Declaration order is the order reports
show runs in: each family's baseline first, then by how much the network does.
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    # messages (multicast and unicast ops of a trace)
    UNICAST = "unicast"
    HOST_BIER = "host-bier"
    NET_BIER = "net-bier"
    # the same messages over network BIER, the BitString learned instead of configured
    # (docs/igmp.md): receivers join through their kernels around each op (IGMPv3 and the overlay to
    # the BFIRs), or the source names its receivers to its first-hop router (Receiver Proxy Report)
    IGMP = "igmp"
    PROXY = "proxy"
    # the same messages, delivered reliably (docs/reliability.md): unicast with end-to-end ACKs per
    # receiver, host-BIER with end-to-end ACKs from every receiver (the implosion), host-BIER with ACKs
    # aggregated in the BFRs, network-BIER with ACKs aggregated in the leaves and the spines
    RELIABLE_UNICAST = "reliable-unicast"
    RELIABLE_HOST_BIER_E2E = "reliable-host-bier-e2e"
    RELIABLE_HOST_BIER = "reliable-host-bier"
    RELIABLE_NET_BIER = "reliable-net-bier"
    # collectives (allreduce ops)
    INA = "ina"
    RING = "ring"
    PS = "ps"


# Each family's baseline: the mode the others are compared against in reports (what runs today without
# multicast or in-network help).
BASELINES: frozenset[Mode] = frozenset({Mode.UNICAST, Mode.PS})

# The reliable modes: each run says how feedback travels (aidcnet/agent/reliable_node.py); the
# baseline of the reliable ones is reliable-unicast (bench/reliable.py's ratios are against it and
# against reliable-host-bier-e2e).
RELIABLE: dict[Mode, str] = {
    Mode.RELIABLE_UNICAST: "e2e",
    Mode.RELIABLE_HOST_BIER_E2E: "e2e",
    Mode.RELIABLE_HOST_BIER: "hop",
    Mode.RELIABLE_NET_BIER: "net",
}

# The modes whose BitStrings come from memberships learned at run time (docs/igmp.md): their runs carry
# ``settings.membership`` (latency, wrong and missed deliveries) and their control overhead is counted.
MEMBERSHIP: frozenset[Mode] = frozenset({Mode.IGMP, Mode.PROXY})
