"""The BFD control packet (RFC 5880 §4.1) and the receive checks of §6.8.6."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bfd.packet import LENGTH, BfdDecodeError, ControlPacket, Diag, State


def test_the_mandatory_section_bit_by_bit():
    pkt = ControlPacket(State.UP, 0x01020304, 0x0A0B0C0D, 50_000, 40_000, 3, Diag.NEIGHBOR_SIGNALED_DOWN)
    wire = pkt.encode()
    assert len(wire) == LENGTH == 24
    # Vers 1 (001), Diag 3 (00011); Sta Up (11), P F C A D M all 0; Detect Mult 3; Length 24
    assert wire[:4] == bytes([0b001_00011, 0b11_000000, 3, 24])
    assert wire[4:8] == bytes([1, 2, 3, 4]) and wire[8:12] == bytes([10, 11, 12, 13])
    assert int.from_bytes(wire[12:16], "big") == 50_000 and int.from_bytes(wire[16:20], "big") == 40_000
    assert wire[20:24] == bytes(4)  # no echo
    assert ControlPacket.decode(wire) == pkt


@given(
    state=st.sampled_from(list(State)),
    my=st.integers(1, 2**32 - 1),
    your=st.integers(0, 2**32 - 1),
    tx=st.integers(0, 2**32 - 1),
    rx=st.integers(0, 2**32 - 1),
    mult=st.integers(1, 255),
    diag=st.integers(0, 31),
    poll=st.booleans(),
    final=st.booleans(),
)
def test_what_is_encoded_decodes_to_itself(state, my, your, tx, rx, mult, diag, poll, final):
    if your == 0 and state not in (State.DOWN, State.ADMIN_DOWN):
        your = 1
    pkt = ControlPacket(state, my, your, tx, rx, mult, diag, poll, final)
    assert ControlPacket.decode(pkt.encode()) == pkt


def good() -> bytearray:
    return bytearray(ControlPacket(State.UP, 7, 9, 1000, 1000, 3).encode())


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.__setitem__(0, 0b010_00000), "bad-version"),
        (lambda b: b.__setitem__(3, 23), "bad-length"),
        (lambda b: b.__setitem__(3, 48), "bad-length"),
        (lambda b: b.__setitem__(1, b[1] | 0x04), "authenticated"),
        (lambda b: b.__setitem__(2, 0), "zero-detect-mult"),
        (lambda b: b.__setitem__(1, b[1] | 0x01), "multipoint"),
        (lambda b: b.__setitem__(slice(4, 8), bytes(4)), "zero-my-discriminator"),
        (lambda b: b.__setitem__(slice(8, 12), bytes(4)), "zero-your-discriminator"),
        (lambda b: b.__delitem__(slice(20, 24)), "truncated"),
    ],
)
def test_rfc5880_6_8_6_discards(mutate, reason):
    wire = good()
    mutate(wire)
    with pytest.raises(BfdDecodeError) as err:
        ControlPacket.decode(bytes(wire))
    assert err.value.reason == reason


@given(st.binary(max_size=40))
def test_any_bytes_decode_or_are_discarded_with_a_reason(data):
    try:
        ControlPacket.decode(data)
    except BfdDecodeError as exc:
        assert exc.reason
