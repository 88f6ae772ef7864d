"""What this machine's kernel offers a lab: every node shares it, so a feature the kernel was built
without is missing in every node (docs/requirements.md).

IP multicast routing (``CONFIG_IP_MROUTE``) is what FRR's pimd programs through its mroute socket, and
where pimd takes IGMP from: without it pimd neither hears receivers nor forwards, so PIM cannot run and
an FRR querier keeps no group table.
"""

from __future__ import annotations

from pathlib import Path

# Present in every network namespace of a kernel with IP multicast routing.
MROUTE_VIFS = Path("/proc/net/ip_mr_vif")
NO_MULTICAST_ROUTING = (
    "this kernel has no IP multicast routing (CONFIG_IP_MROUTE; /proc/net/ip_mr_vif is absent), which FRR's "
    "pimd needs to hear IGMP and to forward"
)


def has_multicast_routing() -> bool:
    """Whether the kernel routes IP multicast (the mroute socket pimd opens works)."""
    return MROUTE_VIFS.exists()
