"""The aidclab INA header, carried over UDP (ours: see docs/ina-header.md).

The seed draft (draft 002, §2.3) fixes only the semantics: every aggregation packet carries a P-BM
encoded exactly like a BIER BitString (RFC 8279 §3, RFC 8296 §2.1.2), so that the A-BM of the VAT
root can be used unchanged as the BitString of the BIER packet that disseminates the result.  The
octets around it are ours; they borrow the SwitchML idea of fixed-point int32 for float sums::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Ver  |R|S|Rsv|   Op  | DType |  BSL  |  Rsv  |       SI      |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |     Scale     |   Reserved    |         Element Count         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                            Job ID                             |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                        Chunk Sequence                         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 P-BM (BSL/8 octets, BIER BitString)           ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |           Payload (Element Count x 4 octets, big-endian)      ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

All multi-octet fields are in network byte order.  Reserved octets and nibbles are sent as zero and
ignored on receipt; the whole flags nibble, reserved bits included, is kept by the decoder so that
``encode(decode(b)) == b`` holds for the flags too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from typing import Final

import numpy as np

from aidcnet.bier.bitstring import BSL_CODES, code_from_bsl, decode_bitstring, encode_bitstring

# IANA has not assigned 4792 to anyone we know of in practice; it sits next to RoCEv2 (4791), which
# makes captures easy to read.  It is our choice, not a registration: daemons take it as a default.
INA_UDP_PORT: Final = 4792

# Version 0 is deliberately invalid so that an all-zero buffer is rejected as bad-version.
VERSION: Final = 1

FIXED_HEADER_LEN: Final = 16
ELEMENT_SIZE: Final = 4
MAX_ELEMENTS: Final = 0xFFFF
MAX_SI: Final = 0xFF
SCALE_MIN: Final = -128
SCALE_MAX: Final = 127

# Byte 0: Ver|Flags, 1: Op|DType, 2: BSL|Rsv, 3: SI, 4: Scale (signed), 5: Rsv, then count, job, chunk.
_FIXED = struct.Struct("!BBBBbBHII")
assert _FIXED.size == FIXED_HEADER_LEN

_IPV4_UDP_OVERHEAD: Final = 20 + 8


class InaFlags(IntFlag):
    """The 4-bit flags nibble.  Values are the nibble's bit weights (R is the high bit)."""

    NONE = 0
    RETRANSMIT = 0x8  # R: the sender timed out and sends again; a completed slot answers with the result
    RESULT = 0x4  # S: final result from the VAT root, disseminated by BIER (P-BM = A-BM of the root)


class Op(IntEnum):
    """Reduction operation; 0 is invalid so that zeroed memory is caught as bad-op."""

    SUM = 1
    MIN = 2
    MAX = 3
    PROD = 4


class DType(IntEnum):
    """Element type of the payload; every type is 4 octets on the wire."""

    INT32 = 1
    FLOAT32 = 2
    # SwitchML-style: the payload is int32 = round(x * 2**Scale); switches add integers.
    FIXED32 = 3


# Wire element types: big-endian, so np.frombuffer reads the packet in place.
WIRE_DTYPES: Final[dict[DType, np.dtype]] = {
    DType.INT32: np.dtype(">i4"),
    DType.FLOAT32: np.dtype(">f4"),
    DType.FIXED32: np.dtype(">i4"),
}
# Accumulator types in native byte order, which is what numpy's ufuncs are fast on.
NATIVE_DTYPES: Final[dict[DType, np.dtype]] = {
    DType.INT32: np.dtype(np.int32),
    DType.FLOAT32: np.dtype(np.float32),
    DType.FIXED32: np.dtype(np.int32),
}

REASONS: Final = frozenset(
    {"truncated", "bad-version", "bad-bsl", "bad-op", "bad-dtype", "length-mismatch"}
)

# Dict lookups instead of Enum(value): no exception machinery on the hot path.
_OP_BY_CODE: Final = {int(op): op for op in Op}
_DTYPE_BY_CODE: Final = {int(dt): dt for dt in DType}
_BSL_BY_CODE: Final = {code: bsl for bsl, code in BSL_CODES.items()}
_FLAGS_BY_NIBBLE: Final = tuple(InaFlags(n) for n in range(16))


class InaDecodeError(ValueError):
    """A malformed INA packet; ``reason`` is one of :data:`REASONS` (the daemon's drop counter key)."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def max_elements(bsl: int, mtu: int = 1500) -> int:
    """Largest element count whose INA packet fits one IPv4/UDP datagram of ``mtu`` octets."""
    room = mtu - _IPV4_UDP_OVERHEAD - FIXED_HEADER_LEN - bsl // 8
    return max(0, min(MAX_ELEMENTS, room // ELEMENT_SIZE))


def payload_from_array(values: np.ndarray, dtype: DType) -> memoryview:
    """Wire payload for ``values``: no copy when it already is contiguous big-endian of the wire type.

    Casting follows numpy's ``same_kind`` rule so a float array is never silently truncated into an
    int32 payload; use :mod:`aidcnet.ina.fixedpoint` to turn floats into FIXED32 integers.
    """
    wire = WIRE_DTYPES[dtype]
    arr = np.ascontiguousarray(np.asarray(values).astype(wire, casting="same_kind", copy=False))
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    return memoryview(arr).cast("B")


@dataclass(frozen=True, slots=True, kw_only=True)
class InaHeader:
    """One INA packet (header + payload).  ``encode``/``decode`` are exact inverses.

    ``payload`` is the raw big-endian element octets.  After :meth:`decode` it is a memoryview into
    the caller's buffer (no copy): the caller must not reuse that buffer while the header is alive.
    """

    job_id: int
    chunk: int
    op: Op
    dtype: DType
    bsl: int
    si: int = 0
    pbm: int = 0
    scale: int = 0
    flags: InaFlags = InaFlags.NONE
    version: int = VERSION
    payload: bytes | memoryview = field(default=b"", repr=False)

    @property
    def element_count(self) -> int:
        return len(self.payload) // ELEMENT_SIZE

    @property
    def bsl_code(self) -> int:
        return code_from_bsl(self.bsl)

    @property
    def encoded_len(self) -> int:
        return FIXED_HEADER_LEN + self.bsl // 8 + len(self.payload)

    @property
    def retransmit(self) -> bool:
        return bool(self.flags & InaFlags.RETRANSMIT)

    @property
    def result(self) -> bool:
        return bool(self.flags & InaFlags.RESULT)

    def payload_array(self) -> np.ndarray:
        """The payload as a read-only big-endian numpy view (no copy)."""
        return np.frombuffer(self.payload, dtype=WIRE_DTYPES[self.dtype])

    def encode(self) -> bytes:
        """Serialize; raises ``ValueError`` naming the field when a value does not fit its field."""
        code = code_from_bsl(self.bsl)
        plen = len(self.payload)
        if not 0 <= self.version <= 0xF:
            raise ValueError(f"version {self.version} does not fit 4 bits")
        if not 0 <= int(self.flags) <= 0xF:
            raise ValueError(f"flags {int(self.flags):#x} do not fit 4 bits")
        if not 0 <= self.si <= MAX_SI:
            raise ValueError(f"si {self.si} does not fit 8 bits")
        if not SCALE_MIN <= self.scale <= SCALE_MAX:
            raise ValueError(f"scale {self.scale} does not fit a signed octet")
        if not 0 <= self.job_id <= 0xFFFFFFFF:
            raise ValueError(f"job_id {self.job_id} does not fit 32 bits")
        if not 0 <= self.chunk <= 0xFFFFFFFF:
            raise ValueError(f"chunk {self.chunk} does not fit 32 bits")
        if plen % ELEMENT_SIZE:
            raise ValueError(f"payload length {plen} is not a multiple of {ELEMENT_SIZE}")
        if plen // ELEMENT_SIZE > MAX_ELEMENTS:
            raise ValueError(f"payload has {plen // ELEMENT_SIZE} elements, more than {MAX_ELEMENTS}")
        op = Op(self.op)
        dtype = DType(self.dtype)
        pbm = encode_bitstring(self.pbm, self.bsl)
        buf = bytearray(FIXED_HEADER_LEN + len(pbm) + plen)
        _FIXED.pack_into(
            buf,
            0,
            (self.version << 4) | int(self.flags),
            (op << 4) | dtype,
            code << 4,
            self.si,
            self.scale,
            0,
            plen // ELEMENT_SIZE,
            self.job_id,
            self.chunk,
        )
        off = FIXED_HEADER_LEN + len(pbm)
        buf[FIXED_HEADER_LEN:off] = pbm
        buf[off:] = self.payload
        return bytes(buf)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> InaHeader:
        """Parse one packet (the whole UDP payload).  Raises :class:`InaDecodeError` when malformed.

        Checks run in wire order, so the reason names the first field that is wrong.
        """
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        total = len(mv)
        if total < FIXED_HEADER_LEN:
            raise InaDecodeError("truncated", f"{total} octets, the fixed header needs {FIXED_HEADER_LEN}")
        b0, b1, b2, si, scale, _rsv, count, job_id, chunk = _FIXED.unpack_from(mv, 0)
        version = b0 >> 4
        if version != VERSION:
            raise InaDecodeError("bad-version", f"version {version}, expected {VERSION}")
        bsl = _BSL_BY_CODE.get(b2 >> 4)
        if bsl is None:
            raise InaDecodeError("bad-bsl", f"BSL code {b2 >> 4} is not an RFC 8296 code (1..7)")
        op = _OP_BY_CODE.get(b1 >> 4)
        if op is None:
            raise InaDecodeError("bad-op", f"operation code {b1 >> 4}")
        dtype = _DTYPE_BY_CODE.get(b1 & 0xF)
        if dtype is None:
            raise InaDecodeError("bad-dtype", f"dtype code {b1 & 0xF}")
        pbm_end = FIXED_HEADER_LEN + (bsl >> 3)
        if total < pbm_end:
            raise InaDecodeError("truncated", f"{total} octets, header with a {bsl}-bit P-BM needs {pbm_end}")
        end = pbm_end + count * ELEMENT_SIZE
        if total != end:
            raise InaDecodeError(
                "length-mismatch", f"{total} octets, element count {count} implies {end}"
            )
        return cls(
            job_id=job_id,
            chunk=chunk,
            op=op,
            dtype=dtype,
            bsl=bsl,
            si=si,
            pbm=decode_bitstring(mv[FIXED_HEADER_LEN:pbm_end]),
            scale=scale,
            flags=_FLAGS_BY_NIBBLE[b0 & 0xF],
            version=version,
            payload=mv[pbm_end:end],
        )
