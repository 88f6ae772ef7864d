"""Independent decoders read the replay's datagrams as RoCEv2: scapy's RoCE layer always, tshark (Wireshark's
InfiniBand dissector on UDP 4791) when the host has it. The datagrams are the agent's own: the payloads
``aidcnet.replay.build_fragments`` makes, in the IPv4/UDP header ``aidcnet.ipv4.build_udp`` puts around
a host-BIER payload (unicast and network-BIER send the same payload through a kernel socket)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT, build_udp
from aidcnet.replay import build_fragments, parse_fragment, queue_pair
from aidcnet.rocev2 import MULTICAST_QP, RC_SEND_ONLY
from tests.pcap import BTH_FIELDS, tshark_fields, write_pcap

# (message id, bytes): one fragment, several, the smallest message, and ids beyond the QP space.
MESSAGES = [(0, 100), (3, 20_000), (41, 1), (2**24 + 7, 24_001), (2**40 + 5, 8_000)]


def replay_packets() -> list[tuple[int, bytes]]:
    """(message id, IPv4 packet) of every datagram, messages interleaved as a host's QPs interleave."""
    per_msg = {m: build_fragments(m, size, 1_000_000) for m, size in MESSAGES}
    out = []
    for i in range(max(len(d) for d in per_msg.values())):
        for m, datagrams in per_msg.items():
            if i < len(datagrams):
                src, dst = "10.255.0.1", "10.255.0.2"
                out.append((m, build_udp(src, dst, QP_PORT_BASE + m % 8, ROCEV2_PORT, datagrams[i], ident=i)))
    return out


def test_scapy_reads_a_valid_bth_on_every_replay_datagram() -> None:
    psns: dict[int, list[int]] = defaultdict(list)
    qp_of: dict[int, int] = {}
    for msg, packet in replay_packets():
        pkt = IP(packet)
        assert pkt[UDP].dport == ROCEV2_PORT and pkt.haslayer(BTH), pkt.summary()
        bth = pkt[BTH]
        assert bth.get_field("opcode").i2s[bth.opcode] == "RC_SEND_ONLY"
        assert (bth.version, bth.pkey, bth.padcount) == (0, 0xFFFF, 0)
        assert bth.dqpn not in (0, 1, MULTICAST_QP)  # the management QPs and the multicast QP
        assert qp_of.setdefault(msg, bth.dqpn) == bth.dqpn  # one QP per message (flow)
        psns[bth.dqpn].append(bth.psn)
        # the replay's own header and content follow the BTH
        assert parse_fragment(bytes(pkt[UDP].payload)).msg_id == msg
    assert len(set(qp_of.values())) == len(MESSAGES)
    assert all(seq == list(range(len(seq))) for seq in psns.values()), psns


def test_tshark_decodes_the_replay_datagrams_as_infiniband_without_complaint(tmp_path: Path) -> None:
    packets = replay_packets()
    pcap = tmp_path / "replay.pcap"
    write_pcap(pcap, [p for _m, p in packets])
    lines = tshark_fields(pcap, ["udp.dstport", *BTH_FIELDS])
    assert len(lines) == len(packets)
    next_psn: dict[int, int] = defaultdict(int)
    for (msg, _packet), line in zip(packets, lines, strict=True):
        qp = queue_pair(msg)
        want = f"{ROCEV2_PORT};{RC_SEND_ONLY};0;65535;0x{qp:06x};{next_psn[qp]};;"
        assert line == want, f"message {msg}: tshark read {line!r}, expected {want!r}"
        next_psn[qp] += 1
