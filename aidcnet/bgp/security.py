"""BGP session security as pure functions: the kernel's TCP-MD5 counters and what they say about a session.

TCP-MD5 (RFC 2385) is checked by the kernel, not by ExaBGP: a segment with a wrong or missing signature is
dropped before the BGP speaker sees it, so a wrong secret shows only as a session that never comes up
plus these TcpExt counters of the node's network namespace (/proc/net/netstat):

* ``TCPMD5NotFound``: a segment without a signature on a socket that expects one (the peer has no secret);
* ``TCPMD5Unexpected``: a signed segment on a socket without a secret (we have none, the peer has one);
* ``TCPMD5Failure``: the signature does not verify (both have a secret, they differ).

The counters are per namespace, not per socket: a peer is named as the likely culprit when its session
is not up while the counters grew.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

MD5_COUNTERS: tuple[str, ...] = ("TCPMD5NotFound", "TCPMD5Unexpected", "TCPMD5Failure")
NETSTAT = "/proc/net/netstat"


def parse_netstat(text: str, section: str = "TcpExt") -> dict[str, int]:
    """/proc/net/netstat: pairs of lines ``Section: names...`` / ``Section: values...``."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    for names, values in itertools.pairwise(lines):
        if names[0] == f"{section}:" and values[0] == f"{section}:" and not names[1].lstrip("-").isdigit():
            if len(names) != len(values):
                raise ValueError(f"{NETSTAT}: {section} has {len(names)} names but {len(values)} values")
            return {n: int(v) for n, v in zip(names[1:], values[1:], strict=True)}
    return {}


def md5_deltas(now: Mapping[str, int], base: Mapping[str, int]) -> dict[str, int]:
    return {k: now.get(k, 0) - base.get(k, 0) for k in MD5_COUNTERS}


def session_problem(session: str, md5: bool, deltas: Mapping[str, int]) -> str | None:
    """Why a session is not up, if the MD5 counters tell; None when it is up or they say nothing."""
    if session == "up":
        return None
    grew = {k: v for k, v in deltas.items() if v > 0}
    if not grew:
        return None
    seen = ", ".join(f"{k} +{v}" for k, v in grew.items())
    if md5:
        return (
            f"TCP-MD5 secret mismatch suspected ({seen}): "
            "both ends need the same md5_password in their node files"
        )
    return f"peer signs with TCP-MD5 but this session has no secret ({seen})"
