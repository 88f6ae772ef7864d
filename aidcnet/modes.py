"""Transport modes of an experiment, named once for the whole project.

A mode is how one trace is carried over a lab: the orchestrator's mode classes
(``orchestrator/experiment/modes/``) say what each needs configured, what it tells the agents and how its
deliveries are judged; the agents' services send and receive in it. Declaration order is the order reports
show runs in: each family's baseline first, then by how much the network does.
"""

from __future__ import annotations

from dataclasses import dataclass
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

# The reliable modes: each run says how feedback travels (aidcnet/agent/reliable/node.py); the
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

# -- families: every set of modes the project needs is declared here and nowhere else -----------------------
# The AllReduce modes (allreduce ops): the INA worker, the ring and the parameter server carry them.
COLLECTIVE: frozenset[Mode] = frozenset({Mode.INA, Mode.RING, Mode.PS})
# The message modes (multicast and unicast ops): the host agent's replay carries them.
MESSAGE: frozenset[Mode] = frozenset(Mode) - COLLECTIVE
# The message modes the scale model counts without runtime state (no feedback, no memberships).
MODELLED: frozenset[Mode] = frozenset({Mode.UNICAST, Mode.HOST_BIER, Mode.NET_BIER})
# The modes whose source hosts are BFIRs: they impose BIER themselves and need BFR-ids.
HOST_BIER: frozenset[Mode] = frozenset({Mode.HOST_BIER, Mode.RELIABLE_HOST_BIER, Mode.RELIABLE_HOST_BIER_E2E})
# The modes whose sources send plain IP multicast, one group per op, which the leaves carry over BIER.
IP_MULTICAST: frozenset[Mode] = frozenset({Mode.NET_BIER, Mode.IGMP, Mode.PROXY, Mode.RELIABLE_NET_BIER})
# The modes whose sources send one copy per receiver, loopback to loopback (ingress replication): the
# message modes that are neither host-BIER nor IP multicast.
PER_RECEIVER: frozenset[Mode] = MESSAGE - HOST_BIER - IP_MULTICAST


# The reliable modes whose ACKs go end to end: the baselines that aggregation in the network is measured
# against.
RELIABLE_END_TO_END: frozenset[Mode] = frozenset(m for m, feedback in RELIABLE.items() if feedback == "e2e")

# -- the pairs the demo and the benches compare, the baseline first ----------------------------------------
# Messages: one copy per receiver from the source against BIER imposed by the source host.
MESSAGE_PAIR: tuple[Mode, Mode] = (Mode.UNICAST, Mode.HOST_BIER)
# AllReduces: a parameter server on a host against aggregation in the INA switches.
COLLECTIVE_PAIR: tuple[Mode, Mode] = (Mode.PS, Mode.INA)


# A closed-loop step (trace version 2, docs/training.md): its messages travel in one of these message modes,
# its AllReduces in a collective mode, each host starting an op once its inputs are there.
STEP_MESSAGES: frozenset[Mode] = MODELLED
STEP_COLLECTIVES: frozenset[Mode] = COLLECTIVE


@dataclass(frozen=True)
class StepModes:
    """How a closed-loop step travels: its messages in ``messages``, its AllReduces in ``collective``
    (None: the step has none of that kind). Written ``host-bier+ring``."""

    messages: Mode | None
    collective: Mode | None = None

    def __post_init__(self) -> None:
        for mode, family, what in (
            (self.messages, STEP_MESSAGES, "messages travel"),
            (self.collective, STEP_COLLECTIVES, "AllReduces run"),
        ):
            if mode is not None and mode not in family:
                raise ValueError(f"a step's {what} in {', '.join(in_order(family))}, not {mode}")

    def __str__(self) -> str:
        return "+".join(str(m) for m in (self.messages, self.collective) if m is not None)


def in_order(modes: frozenset[Mode] | set[Mode]) -> tuple[Mode, ...]:
    """A family's modes in declaration order (reports', CLIs' and benches' order)."""
    return tuple(m for m in Mode if m in modes)
