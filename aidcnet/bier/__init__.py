"""BIER pure logic: no I/O, no sockets, no threads.

- ``bitstring``: BFR-id <-> (SI, bit), BitStrings as ints (RFC 8279 §3)
- ``header``: RFC 8296 header codec and hot-path parse/rewrite
- ``mpls``: RFC 3032 label entries, RFC 7510 MPLS-in-UDP (port 6635, entropy port)
- ``bift``: BIRT -> BIFT per SI with ECMP alternatives (RFC 8279 §6.3-6.4, §6.7.1)
- ``forwarding``: the RFC 8279 §6.5 decision with RFC 8296 §2.1.1.2 TTL rules
- ``routing``: static BIRTs for a whole graph by BFS with all equal-cost next hops
"""

from aidcnet.bier.bift import NULL, SELF, Bift, bifts_by_label, build_bifts
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
from aidcnet.bier.forwarding import DROP_REASONS, ForwardResult, build_copies, forward, forward_packet, impose
from aidcnet.bier.header import (
    DECODE_REASONS,
    BierDecodeError,
    BierHeader,
    BierProto,
    make_copy,
    parse_fields,
    peek_bift_id,
    rewrite,
)
from aidcnet.bier.mpls import (
    MPLS_IN_UDP_PORT,
    decode_lse,
    encode_bier_udp_payload,
    encode_lse,
    entropy_to_src_port,
    parse_bier_udp_payload,
)
from aidcnet.bier.routing import compute_birts

__all__ = [
    "BSL_CODES",
    "DECODE_REASONS",
    "DROP_REASONS",
    "MPLS_IN_UDP_PORT",
    "NULL",
    "SELF",
    "BierDecodeError",
    "BierHeader",
    "BierProto",
    "Bift",
    "ForwardResult",
    "bfr_id_to_si_bit",
    "bifts_by_label",
    "bitstrings_from_ids",
    "bsl_from_code",
    "build_bifts",
    "build_copies",
    "code_from_bsl",
    "compute_birts",
    "decode_bitstring",
    "decode_lse",
    "encode_bier_udp_payload",
    "encode_bitstring",
    "encode_lse",
    "entropy_to_src_port",
    "forward",
    "forward_packet",
    "ids_from_bitstring",
    "impose",
    "lowest_bit_index",
    "make_copy",
    "parse_bier_udp_payload",
    "parse_fields",
    "peek_bift_id",
    "rewrite",
    "si_bit_to_bfr_id",
]
