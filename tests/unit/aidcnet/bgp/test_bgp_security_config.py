"""The node file's BGP security fields: GTSM on by default, the MD5 secret checked but never echoed."""

from __future__ import annotations

import pydantic
import pytest

from aidcnet.config import Bgp, BgpNeighbor
from tests.unit.node_files import bgp_knobs

BASE = {"name": "S1", "address": "10.0.0.1", "local_address": "10.0.0.0", "interface": "eth1", "asn": 65100}


def test_gtsm_is_off_until_exabgp_sends_its_syn_ack_with_ttl_255() -> None:
    assert Bgp(asn=65000, router_id="10.255.0.1", **bgp_knobs()).ttl_security_hops is None
    assert Bgp(asn=65000, router_id="10.255.0.1", ttl_security_hops=1, **bgp_knobs()).ttl_security_hops == 1


def test_secret_not_in_repr() -> None:
    n = BgpNeighbor(**BASE, md5_password="topSecret1")
    assert "topSecret1" not in repr(n) and "topSecret1" not in str(n)


@pytest.mark.parametrize("bad", ["with space", 'qu"ote', "x" * 81])
def test_bad_secret_rejected_without_echo(bad: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        BgpNeighbor(**BASE, md5_password=bad)
    assert "md5_password" in str(err.value) and bad not in str(err.value)
