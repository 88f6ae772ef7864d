"""Our RFC 8296 encoder against an independent decoder: the scapy layer written from the RFC figure."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.bier.header import BierHeader
from aidcnet.ipv4 import build_udp
from tests.rfc8296_scapy import Rfc8296Bier


@settings(max_examples=50, deadline=None)
@given(
    bsl=st.sampled_from([64, 128, 256, 512, 1024, 2048, 4096]),
    bift_id=st.integers(16, 0xFFFFF),
    ttl=st.integers(0, 255),
    entropy=st.integers(0, 0xFFFFF),
    bfir_id=st.integers(1, 0xFFFF),
    dscp=st.integers(0, 63),
    data=st.data(),
)
def test_scapy_reads_what_we_write(bsl, bift_id, ttl, entropy, bfir_id, dscp, data):
    bits = data.draw(st.integers(1, (1 << bsl) - 1))
    inner = build_udp("10.255.0.7", "232.1.0.1", 50000, 4791, b"hello")
    header = BierHeader(
        bift_id=bift_id,
        bitstring=bits,
        bsl=bsl,
        ttl=ttl,
        entropy=entropy,
        bfir_id=bfir_id,
        dscp=dscp,
        proto=4,
    )
    pkt = Rfc8296Bier(header.encode() + inner)
    assert (pkt.label, pkt.s, pkt.ttl, pkt.nibble, pkt.ver) == (bift_id, 1, ttl, 0b0101, 0)
    assert pkt.bsl == {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}[bsl]
    assert (pkt.entropy, pkt.dscp, pkt.proto, pkt.bfir_id) == (entropy, dscp, 4, bfir_id)
    assert int.from_bytes(pkt.bitstring, "big") == bits
    assert bytes(pkt.payload)[20 + 8 :] == b"hello"
