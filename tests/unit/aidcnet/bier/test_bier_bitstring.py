"""BitString helpers: RFC 8279 §3 mapping and RFC 8296 §2.1.2 codes and byte order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.bitstring import (
    BSL_CODES,
    bfr_id_to_si_bit,
    bitstrings_from_ids,
    bsl_from_code,
    code_from_bsl,
    decode_bitstring,
    encode_bitstring,
    ids_from_bitstring,
    lowest_bit_index,
    si_bit_to_bfr_id,
)

BSLS = sorted(BSL_CODES)


def test_bsl_codes_are_rfc8296_values() -> None:
    # RFC 8296 §2.1.2: code = log2(k) - 5
    assert BSL_CODES == {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}
    for bsl, code in BSL_CODES.items():
        assert code_from_bsl(bsl) == code
        assert bsl_from_code(code) == bsl
        assert bsl.bit_length() - 1 - 5 == code


@pytest.mark.parametrize("bad", [0, 4, 32, 100, 8192, -64])
def test_code_from_bsl_rejects(bad: int) -> None:
    with pytest.raises(ValueError, match=str(bad)):
        code_from_bsl(bad)


@pytest.mark.parametrize("bad", [0, 8, 15, -1])
def test_bsl_from_code_rejects(bad: int) -> None:
    with pytest.raises(ValueError, match=str(bad)):
        bsl_from_code(bad)


@pytest.mark.parametrize(
    ("bfr_id", "bsl", "expected"),
    [
        (1, 64, (0, 1)),
        (64, 64, (0, 64)),
        (65, 64, (1, 1)),
        (128, 64, (1, 64)),
        (129, 64, (2, 1)),
        # RFC 8279 §3 example: BFR-ids 27 and 235 in SI 0, 497 is SI 1 bit 241 (BSL 256)
        (27, 256, (0, 27)),
        (235, 256, (0, 235)),
        (497, 256, (1, 241)),
        (65535, 4096, (15, 4095)),
    ],
)
def test_bfr_id_to_si_bit(bfr_id: int, bsl: int, expected: tuple[int, int]) -> None:
    assert bfr_id_to_si_bit(bfr_id, bsl) == expected
    assert si_bit_to_bfr_id(*expected, bsl) == bfr_id


@pytest.mark.parametrize("bad", [0, -1, 65536])
def test_bfr_id_invalid(bad: int) -> None:
    with pytest.raises(ValueError, match="BFR-id"):
        bfr_id_to_si_bit(bad, 64)


def test_si_bit_to_bfr_id_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        si_bit_to_bfr_id(0, 0, 64)
    with pytest.raises(ValueError):
        si_bit_to_bfr_id(0, 65, 64)
    with pytest.raises(ValueError):
        si_bit_to_bfr_id(-1, 1, 64)


def test_rfc8279_section3_example() -> None:
    # "27, 235, and 497 ... One copy, associated with SI=0, will have a BitString with
    # bits 27 and 235 set. The other copy, associated with SI=1, ... bit 241 set."
    assert bitstrings_from_ids([27, 235, 497], 256) == {0: (1 << 26) | (1 << 234), 1: 1 << 240}


def test_ids_from_bitstring_ascending() -> None:
    assert ids_from_bitstring(0, 0b1011, 64) == [1, 2, 4]
    assert ids_from_bitstring(2, 0b1011, 64) == [129, 130, 132]
    assert ids_from_bitstring(0, 0, 64) == []
    with pytest.raises(ValueError):
        ids_from_bitstring(0, 1 << 64, 64)


def test_encode_bitstring_big_endian_bit1_last_octet() -> None:
    # RFC 8296 §2: the BitString's last 32 bits end the header, and bit 1 is the LSB.
    assert encode_bitstring(1, 64) == bytes(7) + b"\x01"
    assert encode_bitstring(1 << 63, 64) == b"\x80" + bytes(7)
    assert encode_bitstring(0x0102, 128) == bytes(14) + b"\x01\x02"
    assert len(encode_bitstring(0, 4096)) == 512
    with pytest.raises(ValueError, match="64 bits"):
        encode_bitstring(1 << 64, 64)
    with pytest.raises(ValueError):
        encode_bitstring(-1, 64)


def test_decode_bitstring_accepts_memoryview() -> None:
    buf = memoryview(b"\xff" + bytes(7) + b"\x03")
    assert decode_bitstring(buf[1:]) == 3


def test_lowest_bit_index() -> None:
    assert lowest_bit_index(0) == 0
    assert lowest_bit_index(1) == 1
    assert lowest_bit_index(0b1100) == 3
    assert lowest_bit_index(1 << 4095) == 4096


@given(st.sampled_from(BSLS), st.data())
def test_id_roundtrip(bsl: int, data: st.DataObject) -> None:
    bfr_id = data.draw(st.integers(1, 65535))
    si, bit = bfr_id_to_si_bit(bfr_id, bsl)
    assert 1 <= bit <= bsl
    assert si_bit_to_bfr_id(si, bit, bsl) == bfr_id


@given(st.sampled_from(BSLS), st.frozensets(st.integers(1, 20000), max_size=40))
def test_bitstrings_roundtrip(bsl: int, ids: frozenset[int]) -> None:
    per_si = bitstrings_from_ids(ids, bsl)
    back = [i for si, bits in sorted(per_si.items()) for i in ids_from_bitstring(si, bits, bsl)]
    assert back == sorted(ids)
    for bits in per_si.values():
        assert decode_bitstring(encode_bitstring(bits, bsl)) == bits
        k = lowest_bit_index(bits)
        assert (bits >> (k - 1)) & 1 == 1
        assert bits & ((1 << (k - 1)) - 1) == 0
