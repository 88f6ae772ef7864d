"""The RoCEv2 Base Transport Header codec, against the IBTA layout and scapy's independent decoder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.contrib.roce import BTH

from aidcnet.rocev2 import BTH_SIZE, DEFAULT_PKEY, RC_SEND_ONLY, UD_SEND_ONLY, Bth, BthError

headers = st.builds(
    Bth,
    opcode=st.integers(0, 0xFF),
    dest_qp=st.integers(0, 0xFFFFFF),
    psn=st.integers(0, 0xFFFFFF),
    pkey=st.integers(0, 0xFFFF),
    solicited=st.booleans(),
    migreq=st.booleans(),
    pad_count=st.integers(0, 3),
    fecn=st.booleans(),
    becn=st.booleans(),
    ack_req=st.booleans(),
    resv6=st.integers(0, 0x3F),
    resv7=st.integers(0, 0x7F),
)


def test_rc_send_only_bytes_follow_the_ibta_figure() -> None:
    wire = Bth(opcode=RC_SEND_ONLY, dest_qp=0x123456, psn=0xABCDEF).encode()
    # OpCode | S M Pad TVer | P_Key | F B Resv6 | DestQP | A Resv7 | PSN
    assert wire == bytes.fromhex("04 00 ffff 00 123456 00 abcdef")
    assert len(wire) == BTH_SIZE


@given(headers)
def test_decode_inverts_encode(bth: Bth) -> None:
    assert Bth.decode(bth.encode()) == bth


@given(headers)
def test_scapy_reads_every_field_as_we_wrote_it(bth: Bth) -> None:
    # scapy's BTH ends with the 4-byte ICRC trailer: give it one to read.
    got = BTH(bth.encode() + b"\0\0\0\0")
    assert (got.opcode, got.dqpn, got.psn, got.pkey, got.version) == (
        bth.opcode, bth.dest_qp, bth.psn, bth.pkey, bth.version,
    )  # fmt: skip
    assert (got.solicited, got.migreq, got.padcount, got.fecn, got.becn, got.ackreq) == (
        bth.solicited, bth.migreq, bth.pad_count, bth.fecn, bth.becn, bth.ack_req,
    )  # fmt: skip


def test_scapy_names_the_opcodes_we_send() -> None:
    names = BTH().get_field("opcode").i2s
    assert names[RC_SEND_ONLY] == "RC_SEND_ONLY" and names[UD_SEND_ONLY] == "UD_SEND_ONLY"


def test_a_header_of_another_version_or_too_short_is_refused_by_reason() -> None:
    wire = bytearray(Bth(opcode=RC_SEND_ONLY, dest_qp=2, psn=0).encode())
    wire[1] |= 0x02
    with pytest.raises(BthError) as err:
        Bth.decode(bytes(wire))
    assert err.value.reason == "bad-bth-version"
    with pytest.raises(BthError) as err:
        Bth.decode(bytes(wire[:11]))
    assert err.value.reason == "short"


@pytest.mark.parametrize(
    "fields", [{"dest_qp": 1 << 24}, {"psn": -1}, {"pkey": 1 << 16}, {"pad_count": 4}, {"opcode": 256}]
)
def test_a_field_out_of_its_width_is_refused(fields: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(fields))):
        Bth(**{"opcode": RC_SEND_ONLY, "dest_qp": 2, "psn": 0, **fields}).encode()


def test_default_partition_key_is_full_membership_of_the_default_partition() -> None:
    assert Bth(opcode=RC_SEND_ONLY, dest_qp=2, psn=0).pkey == DEFAULT_PKEY == 0xFFFF


def test_test_traffic_is_a_send_only_of_its_size_on_a_data_qp() -> None:
    from aidcnet.rocev2 import MULTICAST_QP, data_qp, send_only

    payload = send_only(data_qp(5), 3, 64)
    assert len(payload) == 64 and payload[BTH_SIZE:] == bytes(64 - BTH_SIZE)
    got = BTH(payload + b"\0\0\0\0")
    assert (got.opcode, got.version, got.pkey, got.dqpn, got.psn) == (RC_SEND_ONLY, 0, 0xFFFF, 7, 3)
    assert len(send_only(2, 0, 1)) == BTH_SIZE  # never shorter than its header
    assert {data_qp(n) for n in (0, MULTICAST_QP - 2, 2**40)} <= set(range(2, MULTICAST_QP))
