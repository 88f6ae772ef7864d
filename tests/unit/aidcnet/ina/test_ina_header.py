"""INA header: hand-built byte vectors, every malformed reason, round trips, zero-copy payloads."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.bitstring import BSL_CODES, bitstrings_from_ids, encode_bitstring
from aidcnet.ina.header import (
    FIXED_HEADER_LEN,
    INA_UDP_PORT,
    REASONS,
    VERSION,
    DType,
    InaDecodeError,
    InaFlags,
    InaHeader,
    Op,
    max_elements,
    payload_from_array,
)

# Vector 1, written octet by octet from the diagram in docs/ina-header.md:
# job 1, chunk 2, sum, int32, BSL 64 (code 1), SI 0, P-BM = w1..w4, payload [1, -2].
VECTOR_1 = bytes.fromhex(
    "10"  # Ver 1 | flags 0
    "11"  # Op 1 (sum) | DType 1 (int32)
    "10"  # BSL code 1 (64 bits) | reserved
    "00"  # SI 0
    "00"  # Scale 0
    "00"  # reserved
    "0002"  # element count
    "00000001"  # job id
    "00000002"  # chunk
    "000000000000000f"  # P-BM: bits 1..4 are the low nibble of the LAST octet (RFC 8296 §2.1.2)
    "00000001"
    "fffffffe"
)

# Vector 2: R and S flags, max, fixed32 with scale -3, BSL 256 (code 3), SI 5, bits 256 and 1.
VECTOR_2 = bytes.fromhex(
    "1c"  # Ver 1 | R (0x8) + S (0x4)
    "33"  # Op 3 (max) | DType 3 (fixed32)
    "30"  # BSL code 3
    "05"  # SI 5
    "fd"  # Scale -3 (two's complement octet)
    "00"
    "0001"
    "deadbeef"
    "ffffffff"
    "80" + "00" * 30 + "01"  # bit 256 is the MSB of the first octet, bit 1 the LSB of the last
    "7fffffff"
)


def test_port_and_version_constants() -> None:
    assert INA_UDP_PORT == 4792
    assert VERSION == 1
    assert FIXED_HEADER_LEN == 16


def test_vector_1_encode_and_decode() -> None:
    hdr = InaHeader(
        job_id=1,
        chunk=2,
        op=Op.SUM,
        dtype=DType.INT32,
        bsl=64,
        si=0,
        pbm=0b1111,
        payload=payload_from_array(np.array([1, -2], dtype=np.int32), DType.INT32),
    )
    assert hdr.encode() == VECTOR_1
    got = InaHeader.decode(VECTOR_1)
    assert got == hdr
    assert got.element_count == 2
    assert got.bsl_code == 1
    assert got.payload_array().tolist() == [1, -2]
    assert not got.retransmit and not got.result


def test_vector_2_encode_and_decode() -> None:
    hdr = InaHeader(
        job_id=0xDEADBEEF,
        chunk=0xFFFFFFFF,
        op=Op.MAX,
        dtype=DType.FIXED32,
        bsl=256,
        si=5,
        pbm=(1 << 255) | 1,
        scale=-3,
        flags=InaFlags.RETRANSMIT | InaFlags.RESULT,
        payload=struct.pack("!i", 2**31 - 1),
    )
    assert hdr.encode() == VECTOR_2
    got = InaHeader.decode(VECTOR_2)
    assert got == hdr
    assert got.retransmit and got.result
    assert got.scale == -3
    assert got.encoded_len == len(VECTOR_2) == 16 + 32 + 4


def test_float32_payload_is_ieee754_big_endian() -> None:
    hdr = InaHeader(
        job_id=7,
        chunk=0,
        op=Op.SUM,
        dtype=DType.FLOAT32,
        bsl=64,
        pbm=1,
        payload=payload_from_array(np.array([1.0, -2.5], dtype=np.float32), DType.FLOAT32),
    )
    wire = hdr.encode()
    assert wire[-8:] == bytes.fromhex("3f800000c0200000")
    assert InaHeader.decode(wire).payload_array().tolist() == [1.0, -2.5]


@pytest.mark.parametrize("bsl", sorted(BSL_CODES))
def test_pbm_octets_are_the_bier_bitstring(bsl: int) -> None:
    ids = [1, 2, bsl]  # lowest two bits and the highest bit of SI 0
    bits = bitstrings_from_ids(ids, bsl)[0]
    wire = InaHeader(job_id=1, chunk=0, op=Op.SUM, dtype=DType.INT32, bsl=bsl, pbm=bits).encode()
    assert wire[2] >> 4 == BSL_CODES[bsl]
    assert wire[FIXED_HEADER_LEN:] == encode_bitstring(bits, bsl)
    assert wire[FIXED_HEADER_LEN] == 0x80 and wire[-1] == 0x03


def test_reserved_flag_bits_survive_a_round_trip() -> None:
    wire = bytearray(VECTOR_1)
    wire[0] = 0x13
    hdr = InaHeader.decode(bytes(wire))
    assert int(hdr.flags) == 0x3
    assert hdr.encode() == bytes(wire)


def test_reserved_octets_are_ignored_on_receipt_and_sent_as_zero() -> None:
    wire = bytearray(VECTOR_1)
    wire[2] |= 0x0F
    wire[5] = 0xAA
    hdr = InaHeader.decode(bytes(wire))
    assert hdr == InaHeader.decode(VECTOR_1)
    assert hdr.encode() == VECTOR_1


def test_decode_payload_is_a_view_into_the_buffer() -> None:
    buf = bytearray(VECTOR_1)
    hdr = InaHeader.decode(memoryview(buf))
    arr = hdr.payload_array()
    assert arr.dtype == np.dtype(">i4")
    buf[-1] = 0xFF  # -2 becomes -1 only if the array shares the packet's memory
    assert arr.tolist() == [1, -1]


def test_payload_from_big_endian_array_does_not_copy() -> None:
    arr = np.array([5, 6, 7], dtype=">i4")
    view = payload_from_array(arr, DType.INT32)
    assert np.shares_memory(np.frombuffer(view, dtype=">i4"), arr)
    assert bytes(view) == bytes.fromhex("000000050000000600000007")


def test_payload_from_native_array_is_converted() -> None:
    view = payload_from_array(np.array([[1, 2], [3, 4]], dtype=np.int32), DType.FIXED32)
    assert bytes(view) == struct.pack("!4i", 1, 2, 3, 4)


def test_payload_from_float_array_refuses_int32() -> None:
    with pytest.raises(TypeError):
        payload_from_array(np.array([1.5]), DType.INT32)


def test_max_elements_fits_one_datagram() -> None:
    assert max_elements(64) == (1500 - 20 - 8 - 16 - 8) // 4 == 362
    assert max_elements(4096, 1500) == (1500 - 28 - 16 - 512) // 4
    assert max_elements(4096, 100) == 0
    assert max_elements(64, 10**6) == 0xFFFF


# --- malformed input: one error class, one reason per check -------------------------------------------


def _patched(offset: int, value: int, base: bytes = VECTOR_1) -> bytes:
    buf = bytearray(base)
    buf[offset] = value
    return bytes(buf)


MALFORMED = [
    ("truncated", b""),
    ("truncated", VECTOR_1[:15]),
    ("truncated", VECTOR_1[:16]),  # fixed header complete, 64-bit P-BM missing
    ("truncated", VECTOR_2[:40]),  # BSL 256 needs 48 octets before the payload
    ("bad-version", _patched(0, 0x00)),
    ("bad-version", _patched(0, 0x20)),
    ("bad-version", _patched(0, 0xF0)),
    ("bad-bsl", _patched(2, 0x00)),
    ("bad-bsl", _patched(2, 0x80)),
    ("bad-bsl", _patched(2, 0xF0)),
    ("bad-op", _patched(1, 0x01)),
    ("bad-op", _patched(1, 0x51)),
    ("bad-dtype", _patched(1, 0x10)),
    ("bad-dtype", _patched(1, 0x14)),
    ("length-mismatch", VECTOR_1 + b"\x00"),
    ("length-mismatch", VECTOR_1[:-1]),
    ("length-mismatch", VECTOR_1[:-4]),
    ("length-mismatch", VECTOR_1[:24]),  # header and P-BM but no payload at all
]


def test_reason_set_is_the_documented_one() -> None:
    assert {"truncated", "bad-version", "bad-bsl", "bad-op", "bad-dtype", "length-mismatch"} == REASONS
    assert {reason for reason, _ in MALFORMED} == REASONS


@pytest.mark.parametrize(("reason", "wire"), MALFORMED)
def test_malformed_reason(reason: str, wire: bytes) -> None:
    with pytest.raises(InaDecodeError) as info:
        InaHeader.decode(wire)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(reason)


def test_decode_error_refuses_unknown_reason() -> None:
    with pytest.raises(AssertionError):
        InaDecodeError("weird", "x")


@pytest.mark.parametrize(
    "bad",
    [
        {"si": 256},
        {"si": -1},
        {"scale": 128},
        {"scale": -129},
        {"job_id": 2**32},
        {"chunk": -1},
        {"payload": b"\x00\x00\x00"},
        {"payload": bytes(4 * 0x10000)},
        {"pbm": 1 << 64},
        {"bsl": 100},
        {"version": 16},
        {"flags": InaFlags(0x10)},
    ],
)
def test_encode_rejects_values_that_do_not_fit(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {"job_id": 1, "chunk": 0, "op": Op.SUM, "dtype": DType.INT32, "bsl": 64}
    fields.update(bad)
    with pytest.raises(ValueError):
        InaHeader(**fields).encode()  # type: ignore[arg-type]


# --- properties ---------------------------------------------------------------------------------------


@st.composite
def headers(draw: st.DrawFn) -> InaHeader:
    bsl = draw(st.sampled_from(sorted(BSL_CODES)))
    dtype = draw(st.sampled_from(list(DType)))
    n = draw(st.integers(0, 64))
    return InaHeader(
        job_id=draw(st.integers(0, 2**32 - 1)),
        chunk=draw(st.integers(0, 2**32 - 1)),
        op=draw(st.sampled_from(list(Op))),
        dtype=dtype,
        bsl=bsl,
        si=draw(st.integers(0, 255)),
        pbm=draw(st.integers(0, 2**bsl - 1)),
        scale=draw(st.integers(-128, 127)),
        flags=InaFlags(draw(st.integers(0, 15))),
        payload=draw(st.binary(min_size=4 * n, max_size=4 * n)),
    )


@given(headers())
def test_round_trip(hdr: InaHeader) -> None:
    wire = hdr.encode()
    assert len(wire) == hdr.encoded_len
    back = InaHeader.decode(wire)
    assert back == hdr
    assert back.encode() == wire


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_the_one_error(data: bytes) -> None:
    try:
        hdr = InaHeader.decode(data)
    except InaDecodeError as err:
        assert err.reason in REASONS
    else:
        assert hdr.encoded_len == len(data)


@given(headers(), st.integers(0, 300))
def test_any_cut_of_a_valid_packet_is_rejected(hdr: InaHeader, cut: int) -> None:
    wire = hdr.encode()
    cut %= len(wire)
    with pytest.raises(InaDecodeError) as info:
        InaHeader.decode(wire[:cut])
    assert info.value.reason in {"truncated", "length-mismatch"}
