// SPDX-License-Identifier: GPL-2.0
/* The BFR fast path: RFC 8279 §6.5 forwarding of MPLS-in-UDP BIER packets (RFC 8296, RFC 7510) as a
 * tc (clsact, direct-action) ingress program on every BIER interface of a BFR.
 *
 * For an IPv4/UDP packet to port 6635 addressed to this BFR (bier_local), in this order, each step
 * ending the packet the way aidcnet/agent/bier_dataplane.py does, with the same counter:
 *   label (the BIFT-id) -> BIFT (bier_label, bier_table), header checks as aidcnet/bier/header.py parse_fields,
 *   TTL per RFC 8296 §2.1.1.2, own bit, then the §6.5 loop over the BIFT of the SI (bier_bift,
 *   bier_fbm), ECMP by entropy as aidcnet.bier.forwarding.ecmp_hash.
 * Each copy is the packet rewritten in place (MACs, outer IPv4 addresses, UDP source port 6635,
 * label/TTL word, BitString AND F-BM; checksums updated incrementally) and bpf_clone_redirect'ed to the
 * neighbour's interface.  The own bit goes up the stack unchanged except for the UDP destination port,
 * which becomes the agent's delivery port, so the node's application receives it as with the Python
 * dataplane.  What the maps cannot hold (more copies than BIER_MAX_NBR, IP options, fragments, GSO) is
 * passed to the stack untouched, where the Python dataplane on port 6635 forwards it.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "bier.h"

#define IP_OFF ETH_HLEN
#define UDP_OFF (IP_OFF + 20)
#define UDP_CSUM_OFF (UDP_OFF + 6)
#define BIER_OFF (UDP_OFF + 8)
#define BITS_OFF (BIER_OFF + 12)
#define IP_DF 0x4000
#define ECMP_GOLDEN 0x9E3779B1u
#define DEFAULT_DELIVER_PORT 16635

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bier_cfg);
} bier_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BIER_GENS * BIER_MAX_BIFT);
	__type(key, __u32);
	__type(value, struct bier_table);
} bier_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BIER_GENS * BIER_MAX_BIFT * BIER_MAX_BSL);
	__type(key, __u32);
	__type(value, struct bier_entry);
} bier_bift SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BIER_GENS * BIER_MAX_BIFT * BIER_MAX_FBM);
	__type(key, __u32);
	__type(value, struct bier_fbm);
} bier_fbm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BIER_MAX_NBR);
	__type(key, __u32);
	__type(value, struct bier_nbr);
} bier_nbr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BIER_GENS * BIER_MAX_BIFT);
	__type(key, __u32);
	__type(value, __u32);
} bier_label SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BIER_MAX_NBR);
	__type(key, __be32);
	__type(value, __u32);
} bier_nbr_addr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __be32);
	__type(value, __u32);
} bier_local SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_NUM);
	__type(key, __u32);
	__type(value, __u64);
} bier_cnt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BIER_MAX_NBR * NC_NUM);
	__type(key, __u32);
	__type(value, __u64);
} bier_nbr_cnt SEC(".maps");

struct copy {
	__u64 bits[BIER_WORDS];
	__u32 nbr;
	__u32 label;
};

/* The outer headers and BIER fields a copy changes, as they are on the wire. */
struct hdr {
	__u8 eth[12];
	struct iphdr ip;
	__be16 sport;
	__be16 dport;
	__be32 w0;
	__u64 raw[BIER_WORDS]; /* BitString, wire order; unused tail words stay zero */
};

struct scratch {
	struct copy copy[BIER_MAX_NBR];
	/* in the map, not in struct dctx: a count on the stack would make the verifier walk the bpf_loop
	 * callback once per value */
	__u32 ncopies;
	__u32 pad;
	struct hdr cur;
	struct hdr orig;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} bier_scratch SEC(".maps");

/* State of the §6.5 loop (bpf_loop callback argument). */
struct dctx {
	__u64 bits[BIER_WORDS];
	__u64 noentry[BIER_WORDS];
	__u64 null[BIER_WORDS];
	__u32 base;
	__u32 hash;
	__u32 overflow;
};

static __always_inline void cnt(__u32 idx, __u64 v)
{
	__u64 *c = bpf_map_lookup_elem(&bier_cnt, &idx);

	if (c)
		*c += v;
}

static __always_inline void nbr_cnt(__u32 nbr, __u32 which, __u64 v)
{
	__u32 idx = nbr * NC_NUM + which;
	__u64 *c = bpf_map_lookup_elem(&bier_nbr_cnt, &idx);

	if (c)
		*c += v;
}

static __always_inline __u32 popcount(const __u64 *w)
{
	return __builtin_popcountll(w[0]) + __builtin_popcountll(w[1]) + __builtin_popcountll(w[2]) +
	       __builtin_popcountll(w[3]);
}

static __always_inline int any(const __u64 *w)
{
	return (w[0] | w[1] | w[2] | w[3]) != 0;
}

static __always_inline void rx_count(__be32 saddr, __u32 len)
{
	__u32 *nbr = bpf_map_lookup_elem(&bier_nbr_addr, &saddr);

	cnt(C_RX_PACKETS, 1);
	cnt(C_RX_BYTES, len);
	if (nbr) {
		nbr_cnt(*nbr, NC_RX_PACKETS, 1);
		nbr_cnt(*nbr, NC_RX_BYTES, len);
	} else {
		cnt(C_RX_OTHER_PACKETS, 1);
		cnt(C_RX_OTHER_BYTES, len);
	}
}

static __always_inline int malformed(__be32 saddr, __u32 len, __u32 reason)
{
	rx_count(saddr, len);
	cnt(C_DROPPED_MALFORMED, 1);
	cnt(reason, 1);
	return TC_ACT_SHOT;
}

/* Wire order: the last octet of the BitString holds bits 1..8 (RFC 8279 §3, RFC 8296 §2). */
static __always_inline void to_wire(const __u64 *b, __u64 *raw, __u32 n)
{
	if (n == 1) {
		raw[0] = bpf_cpu_to_be64(b[0]);
	} else if (n == 2) {
		raw[0] = bpf_cpu_to_be64(b[1]);
		raw[1] = bpf_cpu_to_be64(b[0]);
	} else {
		raw[0] = bpf_cpu_to_be64(b[3]);
		raw[1] = bpf_cpu_to_be64(b[2]);
		raw[2] = bpf_cpu_to_be64(b[1]);
		raw[3] = bpf_cpu_to_be64(b[0]);
	}
}

static __always_inline void from_wire(const __u64 *raw, __u64 *b, __u32 n)
{
	if (n == 1) {
		b[0] = bpf_be64_to_cpu(raw[0]);
	} else if (n == 2) {
		b[1] = bpf_be64_to_cpu(raw[0]);
		b[0] = bpf_be64_to_cpu(raw[1]);
	} else {
		b[3] = bpf_be64_to_cpu(raw[0]);
		b[2] = bpf_be64_to_cpu(raw[1]);
		b[1] = bpf_be64_to_cpu(raw[2]);
		b[0] = bpf_be64_to_cpu(raw[3]);
	}
}

static __always_inline __u16 ip_csum(const struct iphdr *ip)
{
	const __u16 *p = (const __u16 *)ip;
	__u32 s = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		s += i == 5 ? 0 : p[i];
	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	return ~s & 0xFFFF;
}

/* One step of RFC 8279 §6.5: lowest set bit k, its BIFT row, a copy for BitString AND F-BM (or the
 * null neighbour), BitString AND NOT F-BM.  Returns 1 when the BitString is empty. */
static long step(__u32 i, void *data)
{
	struct dctx *c = data;
	__u32 wi, bit, key, idx = 0, zero = 0;
	__u64 w, low;

	if (c->bits[0]) {
		wi = 0;
		w = c->bits[0];
	} else if (c->bits[1]) {
		wi = 1;
		w = c->bits[1];
	} else if (c->bits[2]) {
		wi = 2;
		w = c->bits[2];
	} else if (c->bits[3]) {
		wi = 3;
		w = c->bits[3];
	} else {
		return 1;
	}
	low = w & -w;
	bit = wi * 64 + __builtin_popcountll(low - 1);
	key = c->base * BIER_MAX_BSL + bit;
	struct bier_entry *e = bpf_map_lookup_elem(&bier_bift, &key);
	struct bier_fbm *f = 0;
	struct bier_alt a = {};

	if (e && e->n) {
		if (e->n > 1)
			idx = c->hash % e->n;
		if (idx >= BIER_MAX_ECMP)
			idx = 0;
		a = e->alt[idx];
		key = c->base * BIER_MAX_FBM + (a.fbm & (BIER_MAX_FBM - 1));
		f = bpf_map_lookup_elem(&bier_fbm, &key);
	}
	if (!f) {
		/* no BIFT row: the bit is dropped as if its neighbour were null ("no-entry") */
		if (wi == 0) {
			c->noentry[0] |= low;
			c->bits[0] ^= low;
		} else if (wi == 1) {
			c->noentry[1] |= low;
			c->bits[1] ^= low;
		} else if (wi == 2) {
			c->noentry[2] |= low;
			c->bits[2] ^= low;
		} else {
			c->noentry[3] |= low;
			c->bits[3] ^= low;
		}
		return 0;
	}
	if (a.nbr == BIER_NULL_NBR) {
#pragma unroll
		for (int j = 0; j < BIER_WORDS; j++)
			c->null[j] |= c->bits[j] & f->w[j];
	} else {
		struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

		if (!s) {
			c->overflow = 1;
			return 1;
		}
		__u32 n = s->ncopies, nidx = a.nbr;
		struct bier_nbr *nb = bpf_map_lookup_elem(&bier_nbr, &nidx);

		/* too many copies, or a neighbour whose MAC the agent has not resolved yet: the Python
		 * dataplane forwards this packet (and its socket makes the kernel resolve the MAC) */
		if (n >= BIER_MAX_NBR || !nb || !nb->ifindex) {
			c->overflow = 1;
			return 1;
		}
		struct copy *cp = &s->copy[n];
#pragma unroll
		for (int j = 0; j < BIER_WORDS; j++)
			cp->bits[j] = c->bits[j] & f->w[j];
		cp->nbr = a.nbr;
		cp->label = a.label;
		s->ncopies = n + 1;
	}
#pragma unroll
	for (int j = 0; j < BIER_WORDS; j++)
		c->bits[j] &= ~f->w[j];
	/* An F-BM always holds its own bit (the agent checks, as Bift does); clearing it again makes
	 * termination independent of that. */
	if (wi == 0)
		c->bits[0] &= ~low;
	else if (wi == 1)
		c->bits[1] &= ~low;
	else if (wi == 2)
		c->bits[2] &= ~low;
	else
		c->bits[3] &= ~low;
	return 0;
}

/* Rewrite the packet from the headers in *cur to those in *want, keeping the UDP checksum right
 * (incrementally: the skb may carry a partial checksum from a local sender). */
static __always_inline int set_hdr(struct __sk_buff *skb, const struct hdr *cur, const struct hdr *want,
				   __u32 nwords)
{
	__s64 diff;
	__u32 old_ports, new_ports;

	if (bpf_l4_csum_replace(skb, UDP_CSUM_OFF, cur->ip.saddr, want->ip.saddr,
				BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | 4) ||
	    bpf_l4_csum_replace(skb, UDP_CSUM_OFF, cur->ip.daddr, want->ip.daddr,
				BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | 4))
		return -1;
	__builtin_memcpy(&old_ports, &cur->sport, 4);
	__builtin_memcpy(&new_ports, &want->sport, 4);
	if (bpf_l4_csum_replace(skb, UDP_CSUM_OFF, old_ports, new_ports, BPF_F_MARK_MANGLED_0 | 4) ||
	    bpf_l4_csum_replace(skb, UDP_CSUM_OFF, cur->w0, want->w0, BPF_F_MARK_MANGLED_0 | 4))
		return -1;
	diff = bpf_csum_diff((__be32 *)cur->raw, sizeof(cur->raw), (__be32 *)want->raw, sizeof(want->raw), 0);
	if (bpf_l4_csum_replace(skb, UDP_CSUM_OFF, 0, diff, BPF_F_MARK_MANGLED_0))
		return -1;
	if (bpf_skb_store_bytes(skb, 0, want->eth, 12, 0) ||
	    bpf_skb_store_bytes(skb, IP_OFF, &want->ip, sizeof(want->ip), BPF_F_RECOMPUTE_CSUM) ||
	    bpf_skb_store_bytes(skb, UDP_OFF, &want->sport, 4, BPF_F_RECOMPUTE_CSUM) ||
	    bpf_skb_store_bytes(skb, BIER_OFF, &want->w0, 4, BPF_F_RECOMPUTE_CSUM))
		return -1;
	if (nwords == 1)
		return bpf_skb_store_bytes(skb, BITS_OFF, want->raw, 8, BPF_F_RECOMPUTE_CSUM);
	if (nwords == 2)
		return bpf_skb_store_bytes(skb, BITS_OFF, want->raw, 16, BPF_F_RECOMPUTE_CSUM);
	return bpf_skb_store_bytes(skb, BITS_OFF, want->raw, 32, BPF_F_RECOMPUTE_CSUM);
}

struct ectx {
	struct __sk_buff *skb;
	__u32 n;
	__u32 nwords;
	__u32 w0;
	__u32 ttl_out;
	__u32 len;
	__u32 ip_ttl;
	__u32 err;
};

/* Copy i: rewrite the packet for its BFR-NBR and clone it out of the neighbour's interface. */
static long emit(__u32 i, void *data)
{
	struct ectx *e = data;
	__u32 zero = 0;
	struct hdr want;

	if (i >= e->n || i >= BIER_MAX_NBR)
		return 1;
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);
	if (!s)
		return 1;
	__u32 k = i;

	/* keep the verifier's bound on k: clang would otherwise index with an unchecked copy of i */
	asm volatile("" : "+r"(k));
	struct copy *cp = &s->copy[k & (BIER_MAX_NBR - 1)];
	__u32 nidx = cp->nbr;
	struct bier_nbr *nb = bpf_map_lookup_elem(&bier_nbr, &nidx);

	if (!nb || !nb->ifindex) {
		cnt(C_TX_ERRORS, 1);
		return 0;
	}
	want = s->cur;
	__builtin_memcpy(want.eth, nb->dmac, 6);
	__builtin_memcpy(want.eth + 6, nb->smac, 6);
	/* as a Linux UDP socket sends (the Python dataplane): no TOS, ID 0 with DF, fixed TTL */
	want.ip.tos = 0;
	want.ip.id = 0;
	want.ip.frag_off = bpf_htons(IP_DF);
	want.ip.ttl = e->ip_ttl;
	want.ip.saddr = nb->saddr;
	want.ip.daddr = nb->daddr;
	want.ip.check = 0;
	want.ip.check = ip_csum(&want.ip);
	want.sport = bpf_htons(BIER_UDP_PORT);
	want.w0 = bpf_htonl((cp->label << 12) | (e->w0 & 0xF00) | e->ttl_out);
	to_wire(cp->bits, want.raw, e->nwords);
	if (set_hdr(e->skb, &s->cur, &want, e->nwords)) {
		cnt(C_TX_ERRORS, 1);
		e->err = 1;
		return 1;
	}
	s->cur = want;
	if (bpf_clone_redirect(e->skb, nb->ifindex, 0)) {
		cnt(C_TX_ERRORS, 1);
		return 0;
	}
	cnt(C_TX_PACKETS, 1);
	cnt(C_TX_BYTES, e->len);
	nbr_cnt(nidx, NC_TX_PACKETS, 1);
	nbr_cnt(nidx, NC_TX_BYTES, e->len);
	return 0;
}

SEC("tc")
int bier_rx(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct iphdr ip;
	struct udphdr udp;
	__be32 be[3];
	__u32 w0, w1;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, IP_OFF, &ip, sizeof(ip)) || bpf_skb_load_bytes(skb, UDP_OFF, &udp, sizeof(udp)))
		return TC_ACT_OK;
	if (ip.version != 4 || ip.protocol != IPPROTO_UDP || udp.dest != bpf_htons(BIER_UDP_PORT))
		return TC_ACT_OK;
	if (!bpf_map_lookup_elem(&bier_local, &ip.daddr))
		return TC_ACT_OK;
	struct bier_cfg *cfg = bpf_map_lookup_elem(&bier_cfg, &zero);
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!cfg || !s)
		return TC_ACT_OK;
	__u32 ulen = bpf_ntohs(udp.len);
	if (ip.ihl != 5 || ip.frag_off & bpf_htons(0x3FFF) || skb->gso_segs > 1 || ulen < 8 ||
	    ulen + 20 > bpf_ntohs(ip.tot_len) || BIER_OFF + ulen - 8 > skb->len) {
		/* not ours to judge: the stack (and the Python dataplane behind it) sees it as is */
		cnt(C_PUNTED, 1);
		return TC_ACT_OK;
	}
	__u32 len = ulen - 8, gen = cfg->gen & 1;
	__be32 saddr = ip.saddr;

	/* aidcnet.bier.forwarding.forward_packet: peek the label, find the BIFT, then parse_fields */
	if (len < 4)
		return malformed(saddr, len, C_MALFORMED_TRUNCATED);
	if (bpf_skb_load_bytes(skb, BIER_OFF, be, 4))
		return TC_ACT_OK;
	w0 = bpf_ntohl(be[0]);
	__u32 lkey = (gen << 20) | (w0 >> 12);
	__u32 *slot = bpf_map_lookup_elem(&bier_label, &lkey);
	struct bier_table *tbl = 0;
	__u32 base = 0;

	if (slot && *slot < BIER_MAX_BIFT) {
		base = gen * BIER_MAX_BIFT + *slot;
		tbl = bpf_map_lookup_elem(&bier_table, &base);
	}
	if (!tbl || !tbl->valid) {
		rx_count(saddr, len);
		cnt(C_DROPPED_UNKNOWN_BIFT_ID, 1);
		return TC_ACT_SHOT;
	}
	if (len < 12)
		return malformed(saddr, len, C_MALFORMED_TRUNCATED);
	if (bpf_skb_load_bytes(skb, BIER_OFF, be, 12))
		return TC_ACT_OK;
	w1 = bpf_ntohl(be[1]);
	if (w1 >> 28 != 5)
		return malformed(saddr, len, C_MALFORMED_BAD_NIBBLE);
	if ((w1 >> 24) & 0xF)
		return malformed(saddr, len, C_MALFORMED_BAD_VERSION);
	__u32 code = (w1 >> 20) & 0xF;
	if (code < 1 || code > 7)
		return malformed(saddr, len, C_MALFORMED_BAD_BSL);
	__u32 bsl = tbl->bsl, nwords = tbl->nwords;
	if ((32u << code) != bsl)
		return malformed(saddr, len, C_MALFORMED_BSL_MISMATCH);
	if (len < 12 + bsl / 8)
		return malformed(saddr, len, C_MALFORMED_TRUNCATED);
	if (!(w0 & 0x100))
		return malformed(saddr, len, C_MALFORMED_BAD_S_BIT);
	if (nwords != 1 && nwords != 2 && nwords != 4) {
		cnt(C_PUNTED, 1);
		return TC_ACT_OK;
	}

	struct hdr *orig = &s->orig;
	__builtin_memset(orig, 0, sizeof(*orig));
	if (bpf_skb_load_bytes(skb, 0, orig->eth, 12))
		return TC_ACT_OK;
	if (nwords == 1 ? bpf_skb_load_bytes(skb, BITS_OFF, orig->raw, 8)
	    : nwords == 2 ? bpf_skb_load_bytes(skb, BITS_OFF, orig->raw, 16)
			  : bpf_skb_load_bytes(skb, BITS_OFF, orig->raw, 32))
		return TC_ACT_OK;
	orig->ip = ip;
	orig->sport = udp.source;
	orig->dport = udp.dest;
	orig->w0 = be[0];

	struct dctx c = {};
	__u32 ttl = w0 & 0xFF, local = 0;
	__u64 own[BIER_WORDS];

	s->ncopies = 0;
	from_wire(orig->raw, c.bits, nwords);
	own[0] = c.bits[0] & tbl->own[0];
	own[1] = c.bits[1] & tbl->own[1];
	own[2] = c.bits[2] & tbl->own[2];
	own[3] = c.bits[3] & tbl->own[3];

	/* aidcnet.bier.forwarding.forward: TTL 0, zero BitString, own bit, TTL 1, then §6.5 */
	if (ttl == 0) {
		rx_count(saddr, len);
		cnt(C_BITS_TTL_EXPIRED, popcount(c.bits));
		cnt(C_DROPPED_TTL, 1);
		return TC_ACT_SHOT;
	}
	if (!any(c.bits)) {
		rx_count(saddr, len);
		cnt(C_DROPPED_ZERO_BITSTRING, 1);
		return TC_ACT_SHOT;
	}
	if (any(own)) {
		local = 1;
#pragma unroll
		for (int j = 0; j < BIER_WORDS; j++)
			c.bits[j] ^= own[j];
	}
	if (any(c.bits) && ttl == 1) {
		rx_count(saddr, len);
		cnt(C_BITS_TTL_EXPIRED, popcount(c.bits));
		if (!local) {
			cnt(C_DROPPED_TTL, 1);
			return TC_ACT_SHOT;
		}
		__builtin_memset(c.bits, 0, sizeof(c.bits));
	} else {
		c.base = base;
		c.hash = ((((w1 & 0xFFFFF) ^ tbl->ecmp_seed) * ECMP_GOLDEN) & 0xFFFFFFFF) >> 8;
		bpf_loop(BIER_MAX_BSL + 1, step, &c, 0);
		if (c.overflow) {
			cnt(C_PUNTED, 1);
			return TC_ACT_OK;
		}
		rx_count(saddr, len);
	}

	__u32 noentry = popcount(c.noentry), null = popcount(c.null), n = s->ncopies;

	if (noentry)
		cnt(C_BITS_NO_ENTRY, noentry);
	if (null)
		cnt(C_BITS_NULL_NBR, null);
	if (!n && !local) {
		cnt(noentry ? C_DROPPED_NO_ENTRY : C_DROPPED_NULL_NEIGHBOR, 1);
		return TC_ACT_SHOT;
	}
	cnt(C_ACCEPTED, 1);
	if (n) {
		cnt(C_FORWARDED, 1);
		cnt(C_REPLICATED, n - 1);
	}
	if (local)
		cnt(C_DELIVERED, 1);

	/* the copies: each rewritten from the previous one, then cloned out */
	struct ectx e = {
		.skb = skb,
		.n = n,
		.nwords = nwords,
		.w0 = w0,
		.ttl_out = ttl - 1,
		.len = len,
		.ip_ttl = cfg->ip_ttl ? cfg->ip_ttl : 64,
	};
	struct hdr want;
	struct hdr *cur = &s->cur;

	*cur = *orig;
	bpf_loop(BIER_MAX_NBR, emit, &e, 0);
	if (e.err)
		return TC_ACT_SHOT;
	if (!local)
		return TC_ACT_STOLEN;
	/* RFC 8279 §6.5 step 4: up to the agent's delivery socket, as received */
	want = *orig;
	want.dport = bpf_htons(cfg->deliver_port ? cfg->deliver_port : DEFAULT_DELIVER_PORT);
	if (set_hdr(skb, cur, &want, nwords))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
