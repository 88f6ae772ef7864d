"""aidcnet.bgp.exabgp_main: a listening socket that gets GTSM's minimum TTL also sends with TTL 255 (the
SYN-ACK of a passive open); one without GTSM is left alone. test_bgp_gtsm_netns.py shows it on the wire."""

from __future__ import annotations

import socket

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
