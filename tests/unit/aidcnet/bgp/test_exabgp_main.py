"""aidcnet.bgp.exabgp_main: a listening socket that gets GTSM's minimum TTL also sends with TTL 255 (the
SYN-ACK of a passive open); one without GTSM is left alone. test_bgp_gtsm_netns.py shows it on the wire.
A reactor with API work left polls without waiting."""

from __future__ import annotations

import socket
from types import SimpleNamespace

from exabgp.protocol.family import AFI
from exabgp.reactor import listener

from aidcnet.bgp import exabgp_main


def test_the_listener_minimum_ttl_setter_also_sets_ttl_255(monkeypatch) -> None:
    monkeypatch.setattr(listener, "set_minimum_ttl", listener.set_minimum_ttl)
    exabgp_main.install()
    exabgp_main.install()  # twice is once
    assert listener.set_minimum_ttl._aidcnet_gtsm
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as gtsm, socket.socket() as plain:
        default = plain.getsockopt(socket.IPPROTO_IP, socket.IP_TTL)
        listener.set_minimum_ttl(gtsm, AFI.ipv4, "10.0.0.2", 255)
        assert gtsm.getsockopt(socket.IPPROTO_IP, socket.IP_TTL) == 255
        assert gtsm.getsockopt(socket.IPPROTO_IP, 21) == 255  # IP_MINTTL (linux/in.h), still set
        listener.set_minimum_ttl(plain, AFI.ipv4, "10.0.0.2", 0)  # incoming-ttl unset: nothing changes
        assert plain.getsockopt(socket.IPPROTO_IP, socket.IP_TTL) == default != 255


def test_the_wrapper_calls_both_setters_in_order() -> None:
    calls = []
    wrapped = exabgp_main.gtsm_listener_ttl(
        lambda *a: calls.append(("min", a[-1])), lambda *a: calls.append(("send", a[-1]))
    )
    wrapped("io", "afi", "ip", 254)
    assert calls == [("min", 254), ("send", 255)]


class RecordingPoller:
    def __init__(self) -> None:
        self.timeouts: list[int] = []

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return []


def test_a_reactor_with_api_work_left_polls_without_waiting_and_an_idle_one_waits(monkeypatch) -> None:
    from exabgp.reactor import asynchronous
    from exabgp.reactor.asynchronous import ASYNC
    from exabgp.reactor.loop import Reactor

    monkeypatch.setattr(Reactor, "_wait_for_io", Reactor._wait_for_io)
    # ExaBGP sets its logger up in the daemon only
    monkeypatch.setattr(asynchronous, "log", SimpleNamespace(debug=lambda *a: None))
    exabgp_main.install()
    exabgp_main.install()  # twice is once
    assert Reactor._wait_for_io._aidcnet_prompt
    reactor = Reactor.__new__(Reactor)  # the loop's state is not needed to poll
    reactor._poller, reactor.asynchronous = RecordingPoller(), ASYNC()

    list(reactor._wait_for_io(50))
    reactor.asynchronous.schedule("api", "announce route ...", iter([False, False]))
    list(reactor._wait_for_io(50))
    while reactor.asynchronous.run():
        pass
    list(reactor._wait_for_io(50))
    assert reactor._poller.timeouts == [50, 0, 50]
