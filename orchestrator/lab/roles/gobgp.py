"""GoBGP router built from Debian's gobgpd package: an interop peer, not our code."""

from orchestrator.lab.roles.base import NodeRole, Place, register

ROLE = register(
    NodeRole(
        name="gobgp",
        description="GoBGP (Debian gobgpd) router",
        place=Place.SWITCH,
        # The gobgp CLI answers once gobgpd's gRPC API listens (the path: "gobgp" alone is the role's name).
        health_cmd=("/usr/bin/gobgp", "global"),
        interop_peer=True,
        # no GTSM: its rendering has none, rather than behaviour our tests do not cover
        dot_shape="hexagon",
    )
)
