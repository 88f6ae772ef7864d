"""Pure network-BIER edge logic: flow lookup, IPv4 checks, TTL/checksum, group MAC, entropy."""

from __future__ import annotations

import ipaddress
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.edge import (
    MALFORMED_REASONS,
    FlowTable,
    Ipv4Error,
    checksum,
    complete_udp_checksum,
    decrement_ttl,
    ethernet_header,
    flow_entropy,
    is_routable_multicast,
    multicast_mac,
    parse_ipv4,
)
from aidcnet.config import BierFlow


def a(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


def ref_checksum(header: bytes) -> int:
    """Reference RFC 1071 checksum written independently of the module: end-around carry at the end."""
    total = 0
    for i in range(0, len(header), 2):
        total += int.from_bytes(header[i : i + 2], "big")
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return 0xFFFF - total


def ipv4(
    src: str = "10.0.0.1",
    dst: str = "239.1.1.1",
    ttl: int = 64,
    proto: int = 17,
    payload: bytes = b"\x13\x88\x13\x89\x00\x0c\x00\x00abcd",
    frag: int = 0,
    ident: int = 0x1234,
    options: bytes = b"",
) -> bytes:
    ihl = (20 + len(options)) // 4
    hdr = bytearray(
        struct.pack(
            ">BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(payload), ident, frag, ttl, proto, 0, a(src), a(dst)
        )
    )
    hdr += options
    hdr[10:12] = ref_checksum(bytes(hdr)).to_bytes(2, "big")
    return bytes(hdr) + payload


# -- flow lookup --------------------------------------------------------------------------------
def test_source_specific_flow_wins_over_any_source_in_either_order() -> None:
    specs = [("239.1.1.1", None, [5]), ("239.1.1.1", "10.0.0.1", [3, 4])]
    for order in (specs, specs[::-1]):
        t = FlowTable(order)
        assert t.lookup(a("10.0.0.1"), a("239.1.1.1")) == (3, 4)
        assert t.lookup(a("10.0.0.2"), a("239.1.1.1")) == (5,)  # other source: (*,G)
        assert t.lookup(a("10.0.0.1"), a("239.1.1.2")) is None
    assert len(FlowTable(specs)) == 2


def test_source_specific_flow_without_any_source_entry_does_not_match_other_sources() -> None:
    t = FlowTable([("239.1.1.1", "10.0.0.1", [3])])
    assert t.lookup(a("10.0.0.1"), a("239.1.1.1")) == (3,)
    assert t.lookup(a("10.0.0.9"), a("239.1.1.1")) is None


def test_flow_table_from_config_models_sorts_and_dedups_bfers() -> None:
    flows = [
        BierFlow(group="239.0.0.7", bfers=[9, 2, 9]),
        BierFlow(group="239.0.0.7", source="192.0.2.1", bfers=[4]),
    ]
    t = FlowTable.from_config(flows)
    assert t.lookup(a("192.0.2.9"), a("239.0.0.7")) == (2, 9)
    assert t.lookup(a("192.0.2.1"), a("239.0.0.7")) == (4,)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([("239.1.1.1", None, [1]), ("239.1.1.1", None, [2])], r"\(\*,239.1.1.1\) is configured twice"),
        ([("239.1.1.1", "10.0.0.1", [1]), ("239.1.1.1", "10.0.0.1", [2])], "configured twice"),
        ([("224.0.0.5", None, [1])], "not routable multicast"),
        ([("10.0.0.1", None, [1])], "not routable multicast"),
        ([("239.1.1.1", None, [])], "no BFERs"),
        ([("239.1.1.1", None, [0, 70000])], r"\[0, 70000\] are outside"),
    ],
)
def test_flow_table_rejects_bad_specs(specs: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FlowTable(specs)


def test_flow_table_updated_changes_a_copy_as_the_constructor_would_build_it() -> None:
    """A membership change patches a copy (the old table stays whole for a lookup in flight)."""
    old = FlowTable([("239.1.1.1", None, [5]), ("239.1.1.1", "10.0.0.1", [3]), ("239.1.1.2", None, [7])])
    new = old.updated(
        {(None, "239.1.1.1"): [6, 2, 6], ("10.0.0.1", "239.1.1.1"): None, (None, "239.1.1.3"): [9]}
    )
    assert new.lookup(a("10.0.0.1"), a("239.1.1.1")) == (2, 6)  # (S,G) gone: (*,G), sorted, once each
    assert new.lookup(a("10.0.0.1"), a("239.1.1.3")) == (9,)
    assert new.lookup(a("10.0.0.1"), a("239.1.1.2")) == (7,)  # untouched
    assert old.lookup(a("10.0.0.1"), a("239.1.1.1")) == (3,) and len(old) == 3
    assert len(new) == 3
    assert len(new.updated({("10.0.0.9", "239.1.1.9"): None})) == 3  # removing what is not there: nothing
    with pytest.raises(ValueError, match="no BFERs"):
        old.updated({(None, "239.1.1.1"): []})
    with pytest.raises(ValueError, match="not routable multicast"):
        old.updated({(None, "224.0.0.5"): [1]})


def test_routable_multicast_excludes_the_local_network_control_block() -> None:
    assert is_routable_multicast(a("239.1.1.1"))
    assert is_routable_multicast(a("224.0.1.1"))
    assert is_routable_multicast(a("239.255.255.255"))
    assert not is_routable_multicast(a("224.0.0.251"))
    assert not is_routable_multicast(a("224.0.0.22"))
    assert not is_routable_multicast(a("240.0.0.1"))
    assert not is_routable_multicast(a("10.1.1.1"))


# -- IPv4 parsing -------------------------------------------------------------------------------
def test_parse_known_header_vector() -> None:
    # A widely reproduced example header (checksum 0xB861) followed by 95 payload octets.
    hdr = bytes.fromhex("450000730000400040 11b861c0a80001c0a800c7".replace(" ", ""))
    info = parse_ipv4(hdr + b"\x00" * (0x73 - 20))
    assert (info.ihl, info.total_length, info.ttl, info.proto) == (20, 0x73, 64, 17)
    assert (info.src, info.dst) == (a("192.168.0.1"), a("192.168.0.199"))
    assert checksum(hdr) == 0
    assert ref_checksum(hdr[:10] + b"\x00\x00" + hdr[12:]) == 0xB861


def test_parse_reads_udp_ports_and_allows_padding() -> None:
    pkt = ipv4()
    info = parse_ipv4(pkt + b"\x00" * 10)  # Ethernet minimum-frame padding
    assert (info.sport, info.dport, info.total_length) == (5000, 5001, len(pkt))
    assert not info.fragment


@pytest.mark.parametrize("frag", [0x2000, 0x0001, 0x2005])  # MF; offset 8; MF and offset
def test_fragments_have_no_ports(frag: int) -> None:
    info = parse_ipv4(ipv4(frag=frag))
    assert info.fragment and info.sport is None and info.dport is None


def test_dont_fragment_bit_is_not_a_fragment() -> None:
    assert not parse_ipv4(ipv4(frag=0x4000)).fragment


def test_options_move_the_udp_header() -> None:
    info = parse_ipv4(ipv4(options=b"\x94\x04\x00\x00"))  # Router Alert
    assert info.ihl == 24 and (info.sport, info.dport) == (5000, 5001)


def _bad(pkt: bytes, offset: int, value: int) -> bytes:
    b = bytearray(pkt)
    b[offset] = value
    return bytes(b)


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (ipv4()[:19], "truncated"),
        (_bad(ipv4(), 0, 0x65), "bad-version"),
        (_bad(ipv4(), 0, 0x44), "bad-ihl"),
        (_bad(ipv4(), 0, 0x4F), "truncated"),  # IHL 60 octets, packet shorter
        (_bad(ipv4(), 3, 10), "bad-length"),
        (ipv4()[:-1], "truncated"),
        (_bad(ipv4(), 11, ipv4()[11] ^ 0x01), "bad-checksum"),
    ],
)
def test_malformed_reasons(packet: bytes, reason: str) -> None:
    with pytest.raises(Ipv4Error) as exc:
        parse_ipv4(packet)
    assert exc.value.reason == reason
    assert reason in MALFORMED_REASONS


def test_checksum_can_be_skipped() -> None:
    assert parse_ipv4(_bad(ipv4(), 11, 0), verify_checksum=False).ttl == 64


# -- TTL and checksum ---------------------------------------------------------------------------
@given(
    ttl=st.integers(1, 255),
    ident=st.integers(0, 0xFFFF),
    src=st.integers(0, 0xFFFFFFFF),
    tos=st.integers(0, 255),
    options=st.sampled_from([b"", b"\x94\x04\x00\x00", b"\x01\x01\x01\x00"]),
)
def test_decrement_ttl_matches_full_recomputation(
    ttl: int, ident: int, src: int, tos: int, options: bytes
) -> None:
    pkt = bytearray(ipv4(src=str(ipaddress.IPv4Address(src)), ttl=ttl, ident=ident, options=options))
    pkt[1] = tos
    pkt[10:12] = b"\x00\x00"
    ihl = 20 + len(options)
    pkt[10:12] = ref_checksum(bytes(pkt[:ihl])).to_bytes(2, "big")
    assert decrement_ttl(pkt) == ttl - 1
    assert pkt[8] == ttl - 1
    expect = bytearray(pkt[:ihl])
    expect[10:12] = b"\x00\x00"
    assert int.from_bytes(pkt[10:12], "big") == ref_checksum(bytes(expect))
    assert ref_checksum(bytes(pkt[:ihl])) == 0  # verifies as received


def test_decrement_ttl_when_the_new_checksum_is_zero() -> None:
    """The corner RFC 1624 §3 is about: an incremental update must give 0x0000 here, as a full
    recomputation does, not the other ones' complement zero 0xFFFF."""
    # Choose the ID so that the header after the decrement sums to 0xFFFF, i.e. checksum 0x0000.
    base = bytearray(ipv4(ttl=63, ident=0)[:20])
    base[10:12] = b"\x00\x00"
    total = 0xFFFF - ref_checksum(bytes(base))  # ones' complement sum with ID 0
    ident = 0xFFFF - total
    after = ipv4(ttl=63, ident=ident)
    assert after[10:12] == b"\x00\x00"
    before = bytearray(ipv4(ttl=64, ident=ident))
    decrement_ttl(before)
    assert bytes(before) == after


def test_decrement_ttl_leaves_the_payload_alone() -> None:
    pkt = bytearray(ipv4(ttl=2))
    payload = bytes(pkt[20:])
    assert decrement_ttl(pkt) == 1
    assert bytes(pkt[20:]) == payload


def test_decrement_ttl_zero_raises() -> None:
    with pytest.raises(ValueError, match="already 0"):
        decrement_ttl(bytearray(ipv4(ttl=0)))


# -- UDP checksum completion --------------------------------------------------------------------
def udp_packet(payload: bytes, options: bytes = b"", field: int = 0) -> bytearray:
    udp = struct.pack(">HHHH", 40000, 5000, 8 + len(payload), field) + payload
    return bytearray(ipv4(payload=udp, options=options))


def ref_udp_checksum(pkt: bytes, ihl: int) -> int:
    seg = bytearray(pkt[ihl:])
    seg[6:8] = b"\x00\x00"
    pseudo = pkt[12:20] + bytes([0, 17]) + len(seg).to_bytes(2, "big")
    value = ref_checksum(pseudo + bytes(seg) + b"\x00" * (len(seg) % 2))
    return value or 0xFFFF


@given(
    payload=st.binary(max_size=300),
    field=st.integers(0, 0xFFFF),
    options=st.sampled_from([b"", b"\x94\x04\x00\x00"]),
)
def test_complete_udp_checksum_matches_reference(payload: bytes, field: int, options: bytes) -> None:
    """Whatever the field held (a partial pseudo-header sum, garbage), the result is the full checksum."""
    pkt = udp_packet(payload, options, field)
    ihl = 20 + len(options)
    value = complete_udp_checksum(pkt, ihl)
    assert value == ref_udp_checksum(bytes(pkt), ihl)
    assert int.from_bytes(pkt[ihl + 6 : ihl + 8], "big") == value
    assert pkt[ihl + 8 :] == payload  # payload untouched
    assert parse_ipv4(pkt).ttl == 64  # the IP header is untouched and still verifies


def test_complete_udp_checksum_sends_zero_as_all_ones() -> None:
    """RFC 768: a computed 0 is transmitted as 0xFFFF (0 would mean "no checksum")."""
    pkt = udp_packet(b"ab\x00\x00")
    seg_sum = 0xFFFF - ref_udp_checksum(bytes(pkt), 20)  # ones' complement sum with the last word 0
    pkt[-2:] = (0xFFFF - seg_sum).to_bytes(2, "big")  # now the sum is 0xFFFF: checksum 0
    assert complete_udp_checksum(pkt, 20) == 0xFFFF
    assert pkt[26:28] == b"\xff\xff"


def test_complete_udp_checksum_rejects_a_udp_length_beyond_the_packet() -> None:
    pkt = udp_packet(b"abcd")
    pkt[24:26] = (100).to_bytes(2, "big")
    with pytest.raises(ValueError, match="UDP length 100"):
        complete_udp_checksum(pkt, 20)
    with pytest.raises(ValueError, match="UDP length 0"):
        complete_udp_checksum(bytearray(pkt[:25]), 20)


# -- group MAC ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("group", "mac"),
    [
        ("239.1.1.1", "01:00:5e:01:01:01"),
        ("224.128.1.1", "01:00:5e:00:01:01"),  # bit 24 of the group is dropped
        ("239.255.255.255", "01:00:5e:7f:ff:ff"),
        ("224.0.0.1", "01:00:5e:00:00:01"),
        ("238.217.10.200", "01:00:5e:59:0a:c8"),
    ],
)
def test_multicast_mac(group: str, mac: str) -> None:
    assert multicast_mac(group).hex(":") == mac
    assert multicast_mac(a(group)) == multicast_mac(ipaddress.IPv4Address(group))


def test_thirty_two_groups_share_a_mac() -> None:
    macs = {multicast_mac(f"{224 + hi // 2}.{(hi % 2) * 128 + 5}.6.7") for hi in range(32)}
    assert macs == {bytes.fromhex("01005e050607")}


def test_multicast_mac_rejects_unicast() -> None:
    with pytest.raises(ValueError, match="not an IPv4 multicast group"):
        multicast_mac("10.0.0.1")


def test_ethernet_header() -> None:
    hdr = ethernet_header("239.1.2.3", bytes.fromhex("02aabbccddee"))
    assert hdr == bytes.fromhex("01005e01020302aabbccddee0800")
    with pytest.raises(ValueError, match="6 octets"):
        ethernet_header("239.1.2.3", b"\x02")


# -- entropy ------------------------------------------------------------------------------------
def test_entropy_is_20_bits_and_depends_on_every_field() -> None:
    s, g = a("10.0.0.1"), a("239.1.1.1")
    base = flow_entropy(s, g, 5000, 5001)
    assert 0 <= base < 1 << 20
    assert flow_entropy(s, g, 5000, 5001) == base
    assert flow_entropy(a("10.0.0.2"), g, 5000, 5001) != base
    assert flow_entropy(s, a("239.1.1.2"), 5000, 5001) != base
    assert flow_entropy(s, g, 5002, 5001) != base
    assert flow_entropy(s, g, 5000, 5003) != base
    assert flow_entropy(s, g, 5001, 5000) != base  # direction matters
    # Source ports spread (what ECMP by entropy needs): 1000 flows, few collisions.
    assert len({flow_entropy(s, g, p, 4791) for p in range(49152, 50152)}) > 990


def test_entropy_is_the_same_in_another_process() -> None:
    """The value must survive a restart: Python's per-process hash salt must not leak into it."""
    code = (
        "from aidcnet.bier.edge import flow_entropy;"
        "print(flow_entropy(bytes([10,0,0,1]), bytes([239,1,1,1]), 5000, 5001))"
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        outs.add(int(run.stdout))
    assert outs == {flow_entropy(a("10.0.0.1"), a("239.1.1.1"), 5000, 5001)}


def test_entropy_of_a_fragment_ignores_ports() -> None:
    s, g = a("10.0.0.1"), a("239.1.1.1")
    assert flow_entropy(s, g) == flow_entropy(s, g, None, None)
    assert flow_entropy(s, g) != flow_entropy(s, g, 0, 0)


def test_entropy_rejects_bad_addresses() -> None:
    with pytest.raises(ValueError, match="4 octets"):
        flow_entropy(b"\x01\x02", a("239.1.1.1"))
