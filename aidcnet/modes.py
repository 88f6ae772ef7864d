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
    # collectives (allreduce ops)
    INA = "ina"
    RING = "ring"
    PS = "ps"


# Each family's baseline: the mode the others are compared against in reports (what runs today without
# multicast or in-network help).
BASELINES: frozenset[Mode] = frozenset({Mode.UNICAST, Mode.PS})
