"""Replay payloads: the bytes a host agent sends for one trace op, and the receiver's accounting.

Pure logic, no I/O. A message (one trace op as seen by one receiver) of ``size`` bytes is cut into
fragments that add up to exactly ``size`` bytes (so link counters can be compared with the trace), each
at most ``max_datagram`` bytes. Every fragment starts with a fixed 40-byte header; the rest is a slice
of the message *content*, which is derived from the message id alone, so a receiver can check every
byte without storing anything. The UDP payload of each datagram is a RoCEv2 Base Transport Header
(``aidcnet.rocev2``: RC SEND Only, the message's queue pair, PSN = fragment index) followed by the
fragment, so what leaves on port 4791 is what that port promises. The layout is in
``docs/replay-payload.md``.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from aidcnet.rocev2 import (
    BTH_SIZE,
    BTH_VERSION,
    DEFAULT_PKEY,
    PSN_MODULO,
    RC_SEND_ONLY,
    Bth,
    BthError,
    data_qp,
)

MAGIC = 0x4152  # "AR": aidclab replay
# 2: the header follows a RoCEv2 BTH (version 1 was the header alone at the start of the UDP payload).
VERSION = 2
# magic, version, flags, message id, fragment index, fragment count, send time (ns), message size, crc32
HEADER = struct.Struct("!HBBQIIQQI")
HEADER_SIZE = HEADER.size  # 40
# What every datagram carries before its fragment: the BTH.
DATAGRAM_OVERHEAD = BTH_SIZE
# 8000 fragment + BTH (12) + IPv4/UDP (28) + BIER (12 + up to 512 bit-string bytes) + MPLS (4) + outer
# UDP/IPv4 (28) stays under the labs' 9500-byte MTU for every BSL up to 4096.
DEFAULT_MAX_DATAGRAM = 8000
_PATTERN_LEN = 64


class PayloadError(ValueError):
    """A datagram that is not a replay fragment; ``reason`` is a short counter name."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Fragment:
    msg_id: int
    index: int
    count: int
    send_ns: int
    size: int  # the whole message's bytes (sum of all fragments' UDP payloads)
    crc: int
    offset: int  # where this fragment's data sits in the content
    data: bytes


def fragment_sizes(size: int, max_datagram: int = DEFAULT_MAX_DATAGRAM) -> list[int]:
    """Size of each fragment (replay header and content; its datagram adds the BTH). Even split rather
    than full-then-remainder, so no fragment is smaller than the header when ``size`` allows it; a message
    smaller than the header is one header."""
    if size <= 0:
        raise ValueError(f"message size must be > 0, got {size}")
    # Twice the header guarantees the even split never cuts a fragment below the header.
    if max_datagram < 2 * HEADER_SIZE:
        raise ValueError(f"max datagram must be at least {2 * HEADER_SIZE} bytes, got {max_datagram}")
    if size <= HEADER_SIZE:
        return [HEADER_SIZE]
    n = -(-size // max_datagram)
    base, extra = divmod(size, n)
    return [base + 1 if i < extra else base for i in range(n)]


def content_size(size: int, max_datagram: int = DEFAULT_MAX_DATAGRAM) -> int:
    sizes = fragment_sizes(size, max_datagram)
    return sum(sizes) - HEADER_SIZE * len(sizes)


def _pattern(msg_id: int) -> bytes:
    return hashlib.blake2b(msg_id.to_bytes(8, "big"), digest_size=_PATTERN_LEN).digest()


def content_slice(msg_id: int, offset: int, length: int) -> bytes:
    """Bytes ``[offset, offset+length)`` of message ``msg_id``'s content: its blake2b-512 of the id,
    repeated. Cheap to regenerate at any offset, different for every message."""
    if length <= 0:
        return b""
    pat = _pattern(msg_id)
    start = offset % _PATTERN_LEN
    reps = -(-(start + length) // _PATTERN_LEN)
    return (pat * reps)[start : start + length]


def content_crc(msg_id: int, length: int) -> int:
    return zlib.crc32(content_slice(msg_id, 0, length))


def datagram_sizes(size: int, max_datagram: int = DEFAULT_MAX_DATAGRAM) -> list[int]:
    """UDP payload size of each datagram of a message: its fragment after the BTH."""
    return [DATAGRAM_OVERHEAD + n for n in fragment_sizes(size, max_datagram)]


def queue_pair(msg_id: int) -> int:
    """The destination QP of message ``msg_id``: each message is one flow, sent on a queue pair of its
    own, numbered from the first data QP and never the multicast QP (0xFFFFFF)."""
    return data_qp(msg_id)


def transport_header(msg_id: int, index: int) -> Bth:
    """The BTH of fragment ``index`` of message ``msg_id``: every fragment is a whole RC SEND (it carries
    its own replay header), and the PSN counts the fragments on the message's QP from 0."""
    return Bth(opcode=RC_SEND_ONLY, dest_qp=queue_pair(msg_id), psn=index % PSN_MODULO)


def build_fragments(
    msg_id: int, size: int, send_ns: int, max_datagram: int = DEFAULT_MAX_DATAGRAM
) -> list[bytes]:
    """Every datagram (UDP payload: BTH, then the fragment) of one message, in order."""
    sizes = fragment_sizes(size, max_datagram)
    total = sum(sizes) - HEADER_SIZE * len(sizes)
    content = content_slice(msg_id, 0, total)
    crc = zlib.crc32(content)
    out = []
    offset = 0
    for i, frag in enumerate(sizes):
        n = frag - HEADER_SIZE
        head = HEADER.pack(MAGIC, VERSION, 0, msg_id, i, len(sizes), send_ns, size, crc)
        out.append(transport_header(msg_id, i).encode() + head + content[offset : offset + n])
        offset += n
    return out


def looks_like_replay(payload: bytes) -> bool:
    """The payload starts as a replay datagram does (a SEND Only BTH of version 0, then the replay magic
    and version): what the replay may take of a port it shares (host-BIER deliveries to 4791 also carry
    ``aidcnet ctl bier send`` payloads)."""
    at = DATAGRAM_OVERHEAD
    return (
        len(payload) >= at + 3
        and payload[0] == RC_SEND_ONLY
        and payload[1] & 0x0F == BTH_VERSION
        and (payload[at] << 8 | payload[at + 1]) == MAGIC
        and payload[at + 2] == VERSION
    )


def _check_send(bth: Bth) -> None:
    if bth.opcode != RC_SEND_ONLY:
        raise PayloadError("bad-opcode", f"BTH opcode 0x{bth.opcode:02x}, not RC SEND Only")
    if bth.pkey != DEFAULT_PKEY:
        raise PayloadError("bad-pkey", f"P_Key 0x{bth.pkey:04x}, not 0x{DEFAULT_PKEY:04x}")


def _check_queue_pair(bth: Bth, msg_id: int, index: int) -> None:
    qp, psn = queue_pair(msg_id), index % PSN_MODULO  # transport_header's, without building one
    if (bth.dest_qp, bth.psn) != (qp, psn):
        want = f"message {msg_id} fragment {index} is QP {qp} PSN {psn}"
        raise PayloadError("bad-qp", f"QP {bth.dest_qp} PSN {bth.psn}; {want}")


def parse_fragment(payload: bytes, max_datagram: int = DEFAULT_MAX_DATAGRAM) -> Fragment:
    """Decode one datagram (BTH and fragment); raises PayloadError (never anything else) for a foreign or
    broken one."""
    if len(payload) < DATAGRAM_OVERHEAD + HEADER_SIZE:
        raise PayloadError(
            "short", f"{len(payload)} bytes < {DATAGRAM_OVERHEAD}-byte BTH + {HEADER_SIZE}-byte header"
        )
    try:
        bth = Bth.decode(payload)
    except BthError as exc:
        raise PayloadError(exc.reason, str(exc)) from None
    _check_send(bth)
    at = DATAGRAM_OVERHEAD
    magic, version, _flags, msg_id, index, count, send_ns, size, crc = HEADER.unpack_from(payload, at)
    if magic != MAGIC:
        raise PayloadError("bad-magic", f"0x{magic:04x}")
    if version != VERSION:
        raise PayloadError("bad-version", str(version))
    if size <= 0:
        raise PayloadError("bad-size", str(size))
    sizes = fragment_sizes(size, max_datagram)
    if count != len(sizes) or index >= count:
        raise PayloadError("bad-index", f"fragment {index}/{count} of a {size}-byte message")
    if len(payload) - at != sizes[index]:
        got = len(payload) - at
        raise PayloadError("bad-length", f"fragment {index} is {got} bytes after the BTH, not {sizes[index]}")
    _check_queue_pair(bth, msg_id, index)
    offset = sum(sizes[:index]) - HEADER_SIZE * index
    return Fragment(msg_id, index, count, send_ns, size, crc, offset, bytes(payload[at + HEADER_SIZE :]))


@dataclass
class MessageRecord:
    """What one receiver saw of one message."""

    msg_id: int
    count: int
    size: int
    send_ns: int
    copies: list[int]  # per fragment: good arrivals
    bad: int = 0  # fragments whose content or checksum did not check
    first_ns: int | None = None
    last_ns: int | None = None
    complete_ns: int | None = None  # when every fragment had arrived once
    src: str | None = None

    @property
    def complete(self) -> bool:
        return self.complete_ns is not None

    @property
    def checksum_ok(self) -> bool:
        return self.complete and self.bad == 0

    @property
    def fragments(self) -> int:
        return sum(1 for c in self.copies if c)

    @property
    def duplicates(self) -> int:
        """Extra complete copies beyond the first (a fragment seen 3 times in a 2-copy message is not a
        third copy)."""
        return max(0, min(self.copies) - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.msg_id,
            "size": self.size,
            "fragments": self.fragments,
            "count": self.count,
            "duplicates": self.duplicates,
            "dup_fragments": sum(max(0, c - 1) for c in self.copies),
            "bad": self.bad,
            "send_ns": self.send_ns,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "complete_ns": self.complete_ns,
            "checksum_ok": self.checksum_ok,
            "src": self.src,
        }


@dataclass
class Reassembly:
    """Receiver accounting over every message; holds counters, never payload bytes."""

    max_datagram: int = DEFAULT_MAX_DATAGRAM
    records: dict[int, MessageRecord] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    _crc_cache: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    def _expected_crc(self, msg_id: int, size: int) -> int:
        key = (msg_id, size)
        crc = self._crc_cache.get(key)
        if crc is None:
            crc = self._crc_cache[key] = content_crc(msg_id, content_size(size, self.max_datagram))
        return crc

    def add(self, payload: bytes, now_ns: int, src: str | None = None) -> MessageRecord | None:
        """Account one datagram arriving at ``now_ns``; a foreign datagram is counted by reason."""
        try:
            frag = parse_fragment(payload, self.max_datagram)
        except PayloadError as exc:
            self.errors[exc.reason] = self.errors.get(exc.reason, 0) + 1
            return None
        rec = self.records.get(frag.msg_id)
        if rec is None:
            rec = self.records[frag.msg_id] = MessageRecord(
                frag.msg_id, frag.count, frag.size, frag.send_ns, [0] * frag.count, src=src
            )
        elif rec.count != frag.count or rec.size != frag.size:
            self.errors["inconsistent"] = self.errors.get("inconsistent", 0) + 1
            return rec
        rec.first_ns = now_ns if rec.first_ns is None else min(rec.first_ns, now_ns)
        rec.last_ns = now_ns if rec.last_ns is None else max(rec.last_ns, now_ns)
        good = frag.crc == self._expected_crc(frag.msg_id, frag.size) and frag.data == content_slice(
            frag.msg_id, frag.offset, len(frag.data)
        )
        if not good:
            rec.bad += 1
            return rec
        rec.copies[frag.index] += 1
        if rec.complete_ns is None and all(rec.copies):
            rec.complete_ns = now_ns
        return rec

    def complete_good(self) -> int:
        return sum(1 for r in self.records.values() if r.checksum_ok)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": [r.to_dict() for r in self.records.values()],
            "errors": dict(sorted(self.errors.items())),
        }
