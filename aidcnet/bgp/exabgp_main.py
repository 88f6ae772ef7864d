"""``python -m aidcnet.bgp.exabgp_main server CONF``: ExaBGP with GTSM that also holds on the passive side,
and whose API commands do not wait for its poll timer.

RFC 5082 §3 has a GTSM speaker send every segment with TTL 255. ExaBGP 5.0.15 puts the neighbours'
minimum TTL (``incoming-ttl``, IP_MINTTL) on its listening socket but leaves that socket's own TTL at the
namespace default (64), and Linux sends the SYN-ACK of a passive open with the listening socket's TTL. The
peer's connecting socket, which carries IP_MINTTL 255, drops that SYN-ACK, so between two GTSM speakers no
handshake ever completes (ExaBGP raises the TTL to 255 only once a connection is accepted, too late).

Here the listening socket that gets a minimum TTL also gets IP_TTL 255 (IPv6: the unicast hop limit), and
nothing else changes: the node's other traffic keeps its TTL (a node-wide ``net.ipv4.ip_default_ttl=255``
would work too but changes every packet the node originates), and a listener without GTSM is untouched.
tests/unit/aidcnet/bgp/test_bgp_gtsm_netns.py runs two speakers in namespaces with and without this.

ExaBGP's reactor runs at most 50 steps of the work API commands schedule (``ASYNC.LIMIT``) per turn of its
loop, then polls its sockets with the loop's timeout (``exabgp_reactor_speed`` / 100 s: 50 ms here, chosen
for idle CPU) even when scheduled work is left. A leaf that re-announces a route to its 63 peers queues
about 130 steps, so the last peers' updates left 100 ms late, after two idle polls (the FARE bench's
remote-half took a median 163 ms). Here a reactor with scheduled work left polls without waiting; an idle
one still sleeps the full timeout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from aidcnet.bgp.exabgp import GTSM_TTL


def install() -> None:
    """Patch the two places; fails loudly if this ExaBGP is laid out differently."""
    _install_gtsm_listener()
    _install_prompt_api_work()


def _install_prompt_api_work() -> None:
    from exabgp.reactor.asynchronous import ASYNC
    from exabgp.reactor.loop import Reactor

    wait = getattr(Reactor, "_wait_for_io", None)
    if wait is None or not hasattr(ASYNC, "ready"):
        raise RuntimeError(
            "this ExaBGP has no Reactor._wait_for_io or ASYNC.ready (aidcnet/bgp/exabgp_main.py was written "
            "against ExaBGP 5.0.15): API work would wait for the poll timer; pin exabgp 5.0.15 or adapt it"
        )
    if getattr(wait, "_aidcnet_prompt", False):
        return
    Reactor._wait_for_io = prompt_when_work_is_left(wait)


def prompt_when_work_is_left(wait: Callable[..., Any]) -> Callable[..., Any]:
    def _wait_for_io(reactor: Any, sleeptime: int) -> Any:
        return wait(reactor, 0 if not reactor.asynchronous.ready() else sleeptime)

    _wait_for_io._aidcnet_prompt = True  # type: ignore[attr-defined]
    return _wait_for_io


def _install_gtsm_listener() -> None:
    from exabgp.reactor import listener
    from exabgp.reactor.network import tcp

    original = getattr(listener, "set_minimum_ttl", None)
    sending = getattr(tcp, "set_sending_ttl", None)
    if original is None or sending is None:
        raise RuntimeError(
            "this ExaBGP has no exabgp.reactor.listener.set_minimum_ttl or "
            "exabgp.reactor.network.tcp.set_sending_ttl (aidcnet/bgp/exabgp_main.py was written against "
            "ExaBGP 5.0.15): GTSM's TTL 255 on the passive side cannot be set; pin exabgp 5.0.15 or adapt it"
        )
    if getattr(original, "_aidcnet_gtsm", False):
        return
    listener.set_minimum_ttl = gtsm_listener_ttl(original, sending)


def gtsm_listener_ttl(set_minimum: Callable[..., Any], set_sending: Callable[..., Any]) -> Callable[..., Any]:
    def set_minimum_ttl(io: Any, afi: Any, ip: Any, minimum: int) -> None:
        set_minimum(io, afi, ip, minimum)
        if minimum:
            set_sending(io, afi, ip, GTSM_TTL)

    set_minimum_ttl._aidcnet_gtsm = True  # type: ignore[attr-defined]
    return set_minimum_ttl


def main() -> None:
    install()
    from exabgp.application.main import main as exabgp_main

    sys.argv[0] = "exabgp"
    exabgp_main()


if __name__ == "__main__":
    main()
