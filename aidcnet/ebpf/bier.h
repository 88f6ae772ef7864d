/* Map layout shared by the BIER tc programs (bier.c) and the agent (aidcnet/agent/bier/ebpf.py).
 *
 * Change a struct or an enum here and change its ctypes mirror in aidcnet/agent/bier/ebpf.py in the same commit:
 * tests/dataplane/test_bier_ebpf_layout.py compares the two.
 *
 * Tables come in two generations; bier_cfg.gen names the one packets use.  The agent writes the other
 * generation completely, then flips bier_cfg.gen, so a packet never sees half a BIFT (RFC 8279 §6.4).
 */
#ifndef AIDCNET_BIER_H
#define AIDCNET_BIER_H

#include <linux/types.h>

#define BIER_MAX_BSL 256            /* BSLs 64, 128, 256 (RFC 8296 §2.1.2 codes 1..3) */
#define BIER_WORDS (BIER_MAX_BSL / 64)
#define BIER_MAX_BIFT 8             /* BIFTs (one per <sub-domain, BSL, SI> label) the maps hold */
#define BIER_MAX_ECMP 8             /* alternatives per BIFT row (RFC 8279 §6.7.1) */
#define BIER_MAX_FBM 64             /* distinct F-BMs per SI */
#define BIER_MAX_NBR 64             /* BFR-NBRs; also the most copies of one packet */
#define BIER_NULL_NBR 0xFFFF        /* the null BFR-NBR (RFC 8279 §6.5 step 7) */
#define BIER_GENS 2
#define BIER_UDP_PORT 6635          /* MPLS-in-UDP (RFC 7510 §3) */

struct bier_cfg {
	__u32 gen;          /* active table generation, 0 or 1: written last */
	__u16 deliver_port; /* own-bit packets go up to this local UDP port (the agent's delivery socket) */
	__u16 ip_ttl;       /* outer IPv4 TTL of every copy, as the Python dataplane's socket sends */
	/* direct_port 0: off. Otherwise an own-bit packet whose payload is IPv4/UDP to direct_group:direct_port
	 * is decapsulated here and its payload passed up the stack, re-addressed to direct_addr: an application
	 * socket on the port receives it as it would a unicast datagram (the host's replay receiver), with no
	 * agent in the way */
	__u16 direct_port;
	/* report_port 0: off. Otherwise every packet this BFR forwards or delivers whose payload is IPv4/UDP to
	 * report_port carrying a reliable DATA (aidcnet/reliable/header.py: version 1, type 1) is reported on
	 * bier_report: where it came from, where it went, its first octets (struct bier_report). The agent's ACK
	 * aggregation learns each window's BFERs from them, as the Python dataplane's on_forward tells it */
	__u16 report_port;
	__be32 direct_group;
	__be32 direct_addr;
};

/* bier_report (a BPF ring buffer of BIER_REPORT_RING octets): one record per reported packet. */
#define BIER_REPORT_HEAD 48 /* the payload's IPv4 (20) and UDP (8) headers, the reliable common header (16) */
#define BIER_REPORT_RING (1 << 18)
#define BIER_REPORT_FORWARDED 0 /* by bier_rx: saddr is the BFR-NBR it came from */
#define BIER_REPORT_IMPOSED 1   /* by bier_impose: saddr is the host that sent it */
struct bier_report {
	__be32 saddr;           /* outer IPv4 source: where the packet came from */
	__u16 si;               /* the SI of the BitString below */
	__u16 kind;             /* BIER_REPORT_FORWARDED or BIER_REPORT_IMPOSED */
	__u64 bits[BIER_WORDS]; /* its copies' BitStrings and the own bit: the BFERs it went to; word 0: bits 1..64 */
	__u8 head[BIER_REPORT_HEAD];
};

/* bier_table[gen * BIER_MAX_BIFT + slot]: one BIFT, found by its BIFT-id (label): the program compares
 * the generation's BIER_MAX_BIFT slots (array lookups the verifier inlines; a hash lookup cost more) */
struct bier_table {
	__u32 valid;       /* 0: the slot is free in this generation */
	__u16 bsl;
	__u16 nwords;       /* bsl / 64 */
	__u32 ecmp_seed;
	__u32 si;          /* the BIFT's SI: places its BitString among BFR-ids for the edge policy */
	__u64 own[BIER_WORDS]; /* own BFR-id's bit; word 0 holds bits 1..64 */
	__u32 label;       /* our BIFT-id of this BIFT (RFC 8296 §2.1.1.1) */
	__u32 pad;
};

struct bier_alt {
	__u16 fbm;          /* index into bier_fbm of this generation and SI */
	__u16 nbr;          /* index into bier_nbr, or BIER_NULL_NBR */
	__u32 label;        /* BIFT-id the neighbour advertised (RFC 8296 §3) */
};

/* bier_bift[(gen * BIER_MAX_BIFT + slot) * BIER_MAX_BSL + k - 1]; n == 0: no BIFT row for bit k */
struct bier_entry {
	__u32 n;
	__u32 pad;
	struct bier_alt alt[BIER_MAX_ECMP];
};

/* bier_fbm[(gen * BIER_MAX_BIFT + slot) * BIER_MAX_FBM + index] */
struct bier_fbm {
	__u64 w[BIER_WORDS];
};

/* bier_nbr[index]: how a copy to this BFR-NBR leaves */
struct bier_nbr {
	__u32 ifindex;
	__be32 saddr;       /* our address on the link */
	__be32 daddr;       /* the neighbour's */
	__u8 smac[6];
	__u8 dmac[6];
};

/* bier_if[ifindex % BIER_IF_SLOTS]: a per-ingress-interface shortcut for the two address lookups every
 * packet needs, our address (bier_local) and the sender's neighbour index (bier_nbr_addr): the agent puts
 * the link's neighbour and our address on it here too.  A packet whose addresses differ (another
 * neighbour on a LAN, another of our addresses, a slot shared by two ifindexes) takes the hash maps,
 * which stay the authority; an entry never says more than they do. */
#define BIER_IF_SLOTS 256
struct bier_if {
	__u32 ifindex;      /* 0: empty */
	__u32 has_local;    /* 1: local is in bier_local */
	__be32 local;       /* our address on the link */
	__be32 nbr_addr;    /* the neighbour's address (its bier_nbr_addr key) */
	__u32 nbr;          /* bier_nbr_addr's value for it */
	__u32 pad;
};

/* bier_cnt (per CPU, one element: struct bier_counters): same meaning as the Python dataplane's counters of
 * the same name.  One element, not one per counter: a packet's dozen increments then touch one per-CPU
 * block (four cache lines) through one lookup instead of a dozen scattered ones. */
enum bier_counter {
	C_RX_PACKETS,
	C_RX_BYTES,
	C_RX_OTHER_PACKETS,
	C_RX_OTHER_BYTES,
	C_TX_PACKETS,
	C_TX_BYTES,
	C_TX_ERRORS,
	C_ACCEPTED,
	C_FORWARDED,
	C_REPLICATED,
	C_DELIVERED,
	C_DROPPED_MALFORMED,
	C_DROPPED_TTL,
	C_DROPPED_ZERO_BITSTRING,
	C_DROPPED_UNKNOWN_BIFT_ID,
	C_DROPPED_NO_ENTRY,
	C_DROPPED_NULL_NEIGHBOR,
	C_MALFORMED_BAD_BSL,
	C_MALFORMED_BAD_NIBBLE,
	C_MALFORMED_BAD_S_BIT,
	C_MALFORMED_BAD_VERSION,
	C_MALFORMED_BSL_MISMATCH,
	C_MALFORMED_TRUNCATED,
	C_BITS_NO_ENTRY,
	C_BITS_NULL_NBR,
	C_BITS_TTL_EXPIRED,
	C_BITS_UNKNOWN_BIFT_ID,
	C_BITS_ZERO_BITSTRING,
	C_PUNTED,           /* eBPF only: passed untouched to the Python dataplane (see docs/bier.md) */
	C_IMPOSED,          /* BIER packets built as BFIR (bier_impose) */
	C_DROPPED_POLICY,   /* refused by the RFC 8296 §6 edge policy (per port and reason: bier_pol_cnt) */
	C_DELIVERED_DIRECT, /* eBPF only: of C_DELIVERED, handed to the stack decapsulated (bier_cfg.direct_*) */
	C_REPORTED,         /* eBPF only: records written to bier_report (bier_cfg.report_port) */
	C_REPORT_LOST,      /* eBPF only: reports the ring buffer had no room for (the agent fell behind) */
	C_NUM
};

struct bier_counters {
	__u64 c[C_NUM];
};

/* bier_nbr_cnt (per CPU): [nbr] is a struct bier_nbr_counters, c[NC_*] */
enum bier_nbr_counter {
	NC_RX_PACKETS,
	NC_RX_BYTES,
	NC_TX_PACKETS,
	NC_TX_BYTES,
	NC_TX_ERRORS, /* copies for this neighbour that could not leave: no port (a link down), a refused redirect */
	NC_NUM
};

struct bier_nbr_counters {
	__u64 c[NC_NUM];
};

/* Network-BIER imposition at a leaf (bier_impose on host ports, aidcnet/agent/bier/net_bier.py's fast path).
 * bier_flow: (S,G), or (0,G) for (*,G), -> the flow's BitString in one SI and our label for that SI.
 * The agent installs only flows whose BFERs share one SI and do not include this BFR; the rest, like
 * every packet the program does not handle, goes up to the Python edge untouched. */
struct bier_flow_key {
	__be32 src;
	__be32 grp;
};

struct bier_flow {
	__u32 label;        /* our BIFT-id of the SI: the packet is forwarded through that BIFT */
	__u16 bfr_id;       /* BFIR-id (our BFR-id) */
	__u16 pad;
	__u64 bits[BIER_WORDS];
};

/* bier_port: host port ifindex -> index; bier_edge_cnt (per CPU): [index * E_NUM + E_*], named as
 * aidcnet/agent/bier/net_bier.py's per-port counters (port.<ifname>.<name>) and summed for the flat ones */
enum bier_edge_counter {
	E_CAPTURED,
	E_CAPTURED_BYTES,
	E_IMPOSED,
	E_CSUM_COMPLETED,
	E_PUNTED,           /* eBPF only: left to the Python edge */
	E_NUM
};
#define BIER_MAX_PORTS 64


/* RFC 8296 §6 edge policy, the decision of aidcnet.bier.edge_policy.check (reason codes: its REASON_CODE,
 * the order of POLICY_REASONS).  bier_pol_cfg[0].on == 0: accept from anyone (no policy in the node file).
 * bier_pol_port: ingress ifindex -> its policy (a port missing from it accepts everything);
 * bier_pol_src: (port index, IPv4 source) -> the host BFIR or BFR neighbour the plan put on that port;
 * a source missing there is not-bfir on a host port, not-bfr-neighbor on a fabric port.
 * bier_pol_cnt (per CPU): [port index * BIER_POL_NREASONS + reason]. */
#define BIER_POL_MAX_SI 8
#define BIER_POL_MAX_SRC 1024
#define BIER_POL_NREASONS 5
enum bier_pol_reason {
	POL_OK,
	POL_NOT_BFIR,
	POL_FORGED_BFIR_ID,
	POL_BITSTRING_OUTSIDE_SET,
	POL_NOT_BFR_NEIGHBOR,
};
enum bier_pol_kind {
	POL_HOST = 1,
	POL_FABRIC = 2,
};
struct bier_pol_cfg {
	__u32 on;
	__u32 pad;
};
struct bier_pol_port {
	__u32 index;       /* counter slot, < BIER_MAX_PORTS */
	__u32 kind;        /* enum bier_pol_kind */
};
struct bier_pol_key {
	__u32 port;        /* bier_pol_port.index */
	__be32 saddr;
};
struct bier_pol_src {
	__u16 bfr_id;      /* host port: the host's BFR-id as BFIR; fabric port: unused */
	__u16 any;         /* host port: 1 when it may address the whole domain (allowed unused) */
	__u32 pad;
	__u64 allowed[BIER_POL_MAX_SI][BIER_WORDS]; /* BFERs it may address, per SI; word 0: bits 1..64 */
};

#endif
