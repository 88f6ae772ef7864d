"""BIRD 2 router built from Debian's bird2 package: an interop peer, not our code."""

from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name="bird",
        description="BIRD 2 (Debian bird2) router",
        place=Place.SWITCH,
        # birdc answers once bird's control socket is up.
        health_cmd=("birdc", "show", "status"),
        interop_peer=True,
        # no GTSM: its rendering has none, rather than behaviour our tests do not cover
        dot_shape="hexagon",
    )
)
