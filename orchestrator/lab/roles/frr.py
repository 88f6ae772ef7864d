"""FRR router built from Debian's frr package: an interop peer, not our code."""

from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name="frr",
        description="FRR (Debian frr) router",
        place=Place.SWITCH,
        # vtysh answers only once zebra and the vtysh socket are up.
        health_cmd=("vtysh", "-c", "show version"),
        interop_peer=True,
        # its template renders ttl-security for GTSM sessions
        gtsm=True,
        dot_shape="hexagon",
    )
)
