// SPDX-License-Identifier: GPL-2.0
/* The BFR fast path: RFC 8279 §6.5 forwarding of MPLS-in-UDP BIER packets (RFC 8296, RFC 7510) as a
 * tc (clsact, direct-action) ingress program on every BIER interface of a BFR.
 *
 * For an IPv4/UDP packet to port 6635 addressed to this BFR (bier_local), in this order, each step
 * ending the packet the way aidcnet/agent/bier/dataplane.py does, with the same counter:
 *   label (the BIFT-id) -> BIFT (bier_table), header checks as aidcnet/bier/header.py parse_fields,
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
#define BIER_PROTO_IPV4 4 /* RFC 8296 §2.1.2 Proto: IPv4 */

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

/* bier_adj[label] = 1: our fast-reroute adjacency labels (BierMaps.set_adjacency_labels) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BIER_MAX_NBR);
	__type(key, __u32);
	__type(value, __u32);
} bier_adj SEC(".maps");

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
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BIER_IF_SLOTS);
	__type(key, __u32);
	__type(value, struct bier_if);
} bier_if SEC(".maps");

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
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bier_counters);
} bier_cnt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BIER_MAX_NBR);
	__type(key, __u32);
	__type(value, struct bier_nbr_counters);
} bier_nbr_cnt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, BIER_REPORT_RING);
} bier_report SEC(".maps");

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

/* the BIER payload's IPv4 header and UDP header, as deliver_direct reads them */
struct direct_hdr {
	__u8 ver_ihl, tos;
	__be16 tot_len, id, frag_off;
	__u8 ttl, protocol;
	__be16 check;
	__be32 saddr, daddr;
	__be16 sport, dport, ulen, ucheck;
};

/* State of the §6.5 loop. In the scratch map, not on the stack: kernels that verify a bpf_loop callback as a
 * loop (6.8 and later) walk it again for every value a stack slot of the caller can hold, and past their
 * million-instruction budget; the contents of a map value they do not track. */
struct dctx {
	__u64 bits[BIER_WORDS];
	__u64 noentry[BIER_WORDS];
	__u64 null[BIER_WORDS];
	__u32 base;
	__u32 hash;
	__u32 overflow;
};


struct scratch {
	struct copy copy[BIER_MAX_NBR];
	/* in the map, not in struct dctx: a count on the stack would make the verifier walk the bpf_loop
	 * callback once per value */
	__u32 ncopies;
	__u32 sent;        /* copies out (same reason as ncopies) */
	__u32 redirect;    /* ifindex for bpf_redirect of the last copy, 0: none */
	__u32 pad;
	struct hdr cur;
	struct hdr orig;
	struct hdr next; /* the copy being made (not on the stack: the bpf_loop frames share 512 bytes) */
	__u64 sum;       /* bier_impose: struct isum (checksum state), then the per-packet UDP sum */
	__u32 sum_off;
	__u32 sum_end;
	__u32 sum_err;
	__u32 pad2;
	/* policy_drop's map keys: here, not on the stack, which bier_rx and its callbacks fill to 512 */
	__u32 pol_zero;
	__u32 pol_ifindex;
	struct bier_pol_key pol_key;
	__u32 pol_idx;
	/* deliver_direct's view of the payload's headers (the stack is full here too) */
	__be32 direct_w2;
	struct direct_hdr direct;
	struct bier_report rep; /* report()'s record, built here for the same reason */
	struct dctx dc;         /* the §6.5 loop's state (struct dctx says why it is here) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} bier_scratch SEC(".maps");

static __always_inline void cnt(__u32 idx, __u64 v)
{
	__u32 zero = 0;
	struct bier_counters *c = bpf_map_lookup_elem(&bier_cnt, &zero);

	if (c && idx < C_NUM)
		c->c[idx] += v;
}

static __always_inline void nbr_cnt(__u32 nbr, __u32 which, __u64 v)
{
	struct bier_nbr_counters *c = bpf_map_lookup_elem(&bier_nbr_cnt, &nbr);

	if (c && which < NC_NUM)
		c->c[which] += v;
}

/* BPF has no popcount instruction: each __builtin_popcountll is some twenty instructions, so zero words
 * (most of them: the no-entry and null bits of a packet are usually none) are skipped */
static __always_inline __u32 popcount(const __u64 *w)
{
	__u32 n = 0;

#pragma unroll
	for (int j = 0; j < BIER_WORDS; j++)
		if (w[j])
			n += __builtin_popcountll(w[j]);
	return n;
}

static __always_inline int any(const __u64 *w)
{
	return (w[0] | w[1] | w[2] | w[3]) != 0;
}

/* ``nbr``: the sender's index in bier_nbr_addr, or BIER_NULL_NBR (see rx_nbr) */
static __always_inline void rx_count(__u32 nbr, __u32 len)
{
	cnt(C_RX_PACKETS, 1);
	cnt(C_RX_BYTES, len);
	if (nbr != BIER_NULL_NBR) {
		nbr_cnt(nbr, NC_RX_PACKETS, 1);
		nbr_cnt(nbr, NC_RX_BYTES, len);
	} else {
		cnt(C_RX_OTHER_PACKETS, 1);
		cnt(C_RX_OTHER_BYTES, len);
	}
}

static __always_inline int malformed(__u32 rxn, __u32 len, __u32 reason)
{
	rx_count(rxn, len);
	cnt(C_DROPPED_MALFORMED, 1);
	cnt(reason, 1);
	return TC_ACT_SHOT;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bier_pol_cfg);
} bier_pol_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BIER_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct bier_pol_port);
} bier_pol_port SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BIER_POL_MAX_SRC);
	__type(key, struct bier_pol_key);
	__type(value, struct bier_pol_src);
} bier_pol_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BIER_MAX_PORTS * BIER_POL_NREASONS);
	__type(key, __u32);
	__type(value, __u64);
} bier_pol_cnt SEC(".maps");

/* aidcnet.bier.edge_policy.check, same order of tests; counts and returns 1 to drop */
static __always_inline int policy_drop(struct scratch *s, __u32 ifindex, __be32 saddr, __u32 rxn, __u32 len,
				       __u32 bfir, __u32 si, const __u64 *bits)
{
	__u32 why;

	s->pol_zero = 0;
	s->pol_ifindex = ifindex;
	struct bier_pol_cfg *pc = bpf_map_lookup_elem(&bier_pol_cfg, &s->pol_zero);

	if (!pc || !pc->on)
		return 0;
	struct bier_pol_port *port = bpf_map_lookup_elem(&bier_pol_port, &s->pol_ifindex);

	if (!port)
		return 0; /* a port without policy accepts everything */
	s->pol_key.port = port->index;
	s->pol_key.saddr = saddr;
	struct bier_pol_src *src = bpf_map_lookup_elem(&bier_pol_src, &s->pol_key);

	if (port->kind == POL_FABRIC) {
		if (src)
			return 0;
		why = POL_NOT_BFR_NEIGHBOR;
	} else if (!src) {
		why = POL_NOT_BFIR;
	} else if (bfir != src->bfr_id) {
		why = POL_FORGED_BFIR_ID;
	} else if (src->any) {
		return 0;
	} else if (si >= BIER_POL_MAX_SI) {
		why = POL_BITSTRING_OUTSIDE_SET;
	} else {
		const __u64 *ok = src->allowed[si & (BIER_POL_MAX_SI - 1)];

		if (!((bits[0] & ~ok[0]) | (bits[1] & ~ok[1]) | (bits[2] & ~ok[2]) | (bits[3] & ~ok[3])))
			return 0;
		why = POL_BITSTRING_OUTSIDE_SET;
	}
	rx_count(rxn, len);
	cnt(C_DROPPED_POLICY, 1);
	s->pol_idx = (port->index & (BIER_MAX_PORTS - 1)) * BIER_POL_NREASONS + why;
	__u64 *c = bpf_map_lookup_elem(&bier_pol_cnt, &s->pol_idx);

	if (c)
		*c += 1;
	return 1;
}

/* The BIFT whose BIFT-id is ``label`` in generation ``gen`` (agent: slots 0.. in use, the rest invalid),
 * with its bier_table index in *base; 0: none. */
static __always_inline struct bier_table *find_table(__u32 gen, __u32 label, __u32 *base)
{
#pragma unroll
	for (__u32 slot = 0; slot < BIER_MAX_BIFT; slot++) {
		__u32 key = gen * BIER_MAX_BIFT + slot;
		struct bier_table *t = bpf_map_lookup_elem(&bier_table, &key);

		if (!t || !t->valid)
			return 0;
		if (t->label == label) {
			*base = key;
			return t;
		}
	}
	return 0;
}

/* Our address ``daddr`` on ingress interface ``ifindex``: 1 when it is one (bier_local), through the
 * interface's bier_if entry when that names it.  *bi: the entry, for rx_nbr. */
static __always_inline int is_local(__u32 ifindex, __be32 *daddr, struct bier_if **bi)
{
	__u32 key = ifindex & (BIER_IF_SLOTS - 1);
	struct bier_if *e = bpf_map_lookup_elem(&bier_if, &key);

	if (e && e->ifindex != ifindex)
		e = 0;
	*bi = e;
	if (e && e->has_local && e->local == *daddr)
		return 1;
	return bpf_map_lookup_elem(&bier_local, daddr) != 0;
}

/* The sender's index in bier_nbr_addr (BIER_NULL_NBR: not a neighbour), through bier_if when it names it */
static __always_inline __u32 rx_nbr(const struct bier_if *bi, __be32 saddr)
{
	if (bi && bi->nbr_addr == saddr)
		return bi->nbr;
	__u32 *nbr = bpf_map_lookup_elem(&bier_nbr_addr, &saddr);

	return nbr ? *nbr : BIER_NULL_NBR;
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

/* ip_csum of the IPv4 header emit gives a copy (version 4, IHL 5, no TOS, ID 0, DF, UDP), from the values:
 * summing the header back from memory right after writing it byte by byte stalls on store forwarding. */
static __always_inline __u16 copy_ip_csum(__be16 tot_len, __u8 ttl, __be32 saddr, __be32 daddr)
{
	__u32 s = bpf_htons(0x4500) + tot_len + bpf_htons(IP_DF) + bpf_htons(((__u16)ttl << 8) | IPPROTO_UDP) +
		  (saddr & 0xFFFF) + (saddr >> 16) + (daddr & 0xFFFF) + (daddr >> 16);

	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	return ~s & 0xFFFF;
}

/* One step of RFC 8279 §6.5: lowest set bit k, its BIFT row, a copy for BitString AND F-BM (or the
 * null neighbour), BitString AND NOT F-BM.  Returns 1 when the BitString is empty. */
static long step(__u32 i, void *data)
{
	__u32 wi, bit, key, idx = 0, zero = 0;
	__u64 w, low;
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!s)
		return 1; /* cannot happen (a one-slot array); the caller's overflow flag is in it too */
	struct dctx *c = &s->dc;

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

/* One's complement sum of 32-bit words, as bpf_csum_diff computes it (__wsum). */
static __always_inline __u64 add32(__u64 s, __u32 old, __u32 new)
{
	return s + (__u32)~old + new;
}

static __always_inline __u32 fold32(__u64 s)
{
	s = (s & 0xFFFFFFFF) + (s >> 32);
	s = (s & 0xFFFFFFFF) + (s >> 32);
	return s;
}

/* Make the packet carry the headers in *want instead of those in *cur (which it carries now).
 *
 * Two helper calls keep the UDP checksum right whatever the skb's checksum state: the pseudo-header
 * part (addresses) with BPF_F_PSEUDO_HDR, which is all a CHECKSUM_PARTIAL skb needs (a local sender's;
 * the rest is summed at transmit) and also fixes skb->csum of a CHECKSUM_COMPLETE one, and the
 * UDP/BIER part, both as one precomputed difference.  The first of them makes the head private
 * (after a clone it copies it: the one copy per clone that the kernel's ipmr makes too); then every
 * other byte is written directly, one contiguous run of stores, no helper per field.  The IPv4 header
 * gets a fresh checksum, which also keeps a CHECKSUM_COMPLETE sum unchanged. */
static __always_inline int rewrite(struct __sk_buff *skb, const struct hdr *cur, const struct hdr *want,
				   __u32 nwords)
{
	__u64 ps = 0, ds = 0;
	__u32 op, np;

	ps = add32(ps, cur->ip.saddr, want->ip.saddr);
	ps = add32(ps, cur->ip.daddr, want->ip.daddr);
	/* the port pair as one 32-bit word, built from the 16-bit fields (a 32-bit load of two fields written
	 * separately just before would stall on store forwarding) */
	op = (__u32)cur->sport | (__u32)cur->dport << 16;
	np = (__u32)want->sport | (__u32)want->dport << 16;
	ds = add32(ds, op, np);
	ds = add32(ds, cur->w0, want->w0);
	const __u32 *o = (const __u32 *)cur->raw, *w = (const __u32 *)want->raw;
#pragma unroll
	for (int j = 0; j < 2 * BIER_WORDS; j++)
		ds = add32(ds, o[j], w[j]); /* unused tail words are zero in both */
	if (bpf_l4_csum_replace(skb, UDP_CSUM_OFF, 0, fold32(ps), BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0) ||
	    bpf_l4_csum_replace(skb, UDP_CSUM_OFF, 0, fold32(ds), BPF_F_MARK_MANGLED_0))
		return -1;

	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;

	if ((long)end - (long)data < BITS_OFF + nwords * 8) {
		/* headers outside the linear area (the parse pulled them, but a clone may not have them) */
		if (bpf_skb_pull_data(skb, BITS_OFF + nwords * 8))
			return -1;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	if (data + BITS_OFF + 8 > end)
		return -1;
	__builtin_memcpy(data, want->eth, 12);
	struct iphdr *ip = data + IP_OFF;
	ip->tos = want->ip.tos;
	ip->id = want->ip.id;
	ip->frag_off = want->ip.frag_off;
	ip->ttl = want->ip.ttl;
	ip->check = want->ip.check;
	ip->saddr = want->ip.saddr;
	ip->daddr = want->ip.daddr;
	struct udphdr *udp = data + UDP_OFF;
	udp->source = want->sport;
	udp->dest = want->dport;
	*(__be32 *)(data + BIER_OFF) = want->w0;
	__u64 *bits = data + BITS_OFF;
	bits[0] = want->raw[0];
	if (nwords == 1)
		return 0;
	if (data + BITS_OFF + 16 > end)
		return -1;
	bits[1] = want->raw[1];
	if (nwords == 2)
		return 0;
	if (data + BITS_OFF + 32 > end)
		return -1;
	bits[2] = want->raw[2];
	bits[3] = want->raw[3];
	return 0;
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
	__u32 local;       /* the packet goes up the stack after the copies */
	__u32 deliver_port;
};

/* The own bit's packet, when its payload is IPv4/UDP to the configured direct group and port (bier_cfg): strip the
 * outer IPv4/UDP and the BIER header (RFC 8296 §3: the BFER passes the payload to the overlay), put the
 * payload's destination to this host's address and let the stack deliver it to the application's socket.
 * 0: done; nonzero: not such a packet, or the kernel refused, and nothing was changed. */
static __always_inline int deliver_direct(struct ectx *e, struct scratch *s, const struct bier_cfg *cfg)
{
	struct __sk_buff *skb = e->skb;
	__u32 off = BITS_OFF + e->nwords * 8;
	struct direct_hdr *in = &s->direct;

	if (bpf_skb_load_bytes(skb, BIER_OFF + 8, &s->direct_w2, 4) ||
	    ((bpf_ntohl(s->direct_w2) >> 16) & 0x3F) != BIER_PROTO_IPV4)
		return 1;
	if (off > BITS_OFF + BIER_MAX_BSL / 8 || bpf_skb_load_bytes(skb, off, in, sizeof(*in)))
		return 1;
	if (in->ver_ihl != 0x45 || in->protocol != IPPROTO_UDP || in->frag_off & bpf_htons(0x3FFF) ||
	    in->daddr != cfg->direct_group || in->dport != bpf_htons(cfg->direct_port))
		return 1;
	if (bpf_skb_adjust_room(skb, -(__s32)(off - IP_OFF), BPF_ADJ_ROOM_MAC, 0))
		return 1;
	/* from here the payload's IPv4 header is at IP_OFF; the new address goes in through the scratch map */
	__be32 old = in->daddr;

	in->daddr = cfg->direct_addr;
	if (bpf_l3_csum_replace(skb, IP_OFF + 10, old, in->daddr, 4) ||
	    (in->ucheck &&
	     bpf_l4_csum_replace(skb, IP_OFF + 26, old, in->daddr, BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | 4)) ||
	    bpf_skb_store_bytes(skb, IP_OFF + 16, &in->daddr, 4, 0))
		e->err = 1; /* already stripped: a packet that cannot be re-addressed is dropped, not passed up */
	else
		cnt(C_DELIVERED_DIRECT, 1);
	return 0;
}

/* bier_cfg.report_port: a reliable DATA this BFR forwards (or delivers, or imposes) is reported on
 * bier_report, so the agent's ACK aggregation sees the windows that pass here while the packet itself stays
 * in the kernel. ``meta``: the report port (bits 16..31), REPORT_IMPOSED (imposed by bier_impose: the
 * payload starts at IP_OFF and s->rep.saddr, s->rep.bits are the caller's), the BitString's words (bits
 * 1..3; forwarded: read from s->orig), REPORT_EXPIRED (BIER-TTL 1 let no copy go: only the own bit). A
 * subprogram, not inlined: bier_rx's stack and a bpf_loop callback's share 512 octets. Called before the
 * copies are made (they rewrite the outer headers, and a direct delivery strips them). */
#define REPORT_EXPIRED 1
#define REPORT_IMPOSED 16
#define REPORT_LOAD 44 /* of head: IPv4, UDP, the reliable common header (a DATA is at least that long) */
static __attribute__((noinline)) int report(struct __sk_buff *skb, struct scratch *s, const struct dctx *c,
					    const struct bier_table *tbl, __u32 meta)
{
	struct bier_report *r = &s->rep;
	__u32 nwords = (meta >> 1) & 7, off = IP_OFF;
	const __u8 *h = r->head;

	if (!(meta & REPORT_IMPOSED)) {
		off = BITS_OFF + nwords * 8;
		if (bpf_skb_load_bytes(skb, BIER_OFF + 8, &s->direct_w2, 4) ||
		    ((bpf_ntohl(s->direct_w2) >> 16) & 0x3F) != BIER_PROTO_IPV4 || off > BITS_OFF + BIER_MAX_BSL / 8)
			return 0;
	}
	if (bpf_skb_load_bytes(skb, off, r->head, REPORT_LOAD))
		return 0;
	/* IPv4 without options, unfragmented, UDP to the report port; a reliable DATA (Ver 1, Type 1) */
	if (h[0] != 0x45 || h[9] != IPPROTO_UDP || (h[6] & 0x3F) || h[7] ||
	    ((h[22] << 8) | h[23]) != meta >> 16 || h[28] != 0x11)
		return 0;
	r->si = tbl->si;
	if (meta & REPORT_IMPOSED) {
		r->kind = BIER_REPORT_IMPOSED;
	} else {
		r->kind = BIER_REPORT_FORWARDED;
		r->saddr = s->orig.ip.saddr;
		r->bits[0] = r->bits[1] = r->bits[2] = r->bits[3] = 0;
		from_wire(s->orig.raw, r->bits, nwords);
	}
#pragma unroll
	for (int j = 0; j < BIER_WORDS; j++)
		r->bits[j] &= (meta & REPORT_EXPIRED) ? tbl->own[j] : ~(c->noentry[j] | c->null[j]);
	if (bpf_ringbuf_output(&bier_report, r, sizeof(*r), 0))
		cnt(C_REPORT_LOST, 1);
	else
		cnt(C_REPORTED, 1);
	return 0;
}

/* Copy i: rewrite the packet for its BFR-NBR and clone it out of the neighbour's interface.  The last
 * copy of a packet that is not also delivered locally is the packet itself (bpf_redirect after the
 * program returns): no clone, and no head copy for it. */
static long emit(__u32 i, void *data)
{
	struct ectx *e = data;
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!s)
		return 1;
	if (i >= e->n) {
		/* RFC 8279 §6.5 step 4: up to the agent's delivery socket, as received (here, not in
		 * bier_rx, so that one frame holds the rewrite's stack) */
		if (e->local) {
			struct bier_cfg *cfg = bpf_map_lookup_elem(&bier_cfg, &zero);

			if (cfg && cfg->direct_port && !deliver_direct(e, s, cfg))
				return 1;
			s->orig.dport = bpf_htons(e->deliver_port);
			if (rewrite(e->skb, &s->cur, &s->orig, e->nwords))
				e->err = 1;
		}
		return 1;
	}
	if (i >= BIER_MAX_NBR)
		return 1;
	__u32 k = i;

	/* keep the verifier's bound on k: clang would otherwise index with an unchecked copy of i */
	asm volatile("" : "+r"(k));
	struct copy *cp = &s->copy[k & (BIER_MAX_NBR - 1)];
	__u32 nidx = cp->nbr;
	struct bier_nbr *nb = bpf_map_lookup_elem(&bier_nbr, &nidx);

	if (!nb || !nb->ifindex) {
		cnt(C_TX_ERRORS, 1);
		nbr_cnt(nidx, NC_TX_ERRORS, 1);
		return 0;
	}
	struct hdr *want = &s->next;

	*want = s->cur;
	__builtin_memcpy(want->eth, nb->dmac, 6);
	__builtin_memcpy(want->eth + 6, nb->smac, 6);
	/* as a Linux UDP socket sends (the Python dataplane): no TOS, ID 0 with DF, fixed TTL */
	want->ip.tos = 0;
	want->ip.id = 0;
	want->ip.frag_off = bpf_htons(IP_DF);
	want->ip.ttl = e->ip_ttl;
	want->ip.saddr = nb->saddr;
	want->ip.daddr = nb->daddr;
	want->ip.check = copy_ip_csum(want->ip.tot_len, e->ip_ttl, nb->saddr, nb->daddr);
	want->sport = bpf_htons(BIER_UDP_PORT);
	want->w0 = bpf_htonl((cp->label << 12) | (e->w0 & 0xF00) | e->ttl_out);
	to_wire(cp->bits, want->raw, e->nwords);
	if (rewrite(e->skb, &s->cur, want, e->nwords)) {
		cnt(C_TX_ERRORS, 1);
		e->err = 1;
		return 1;
	}
	if (i + 1 == e->n && !e->local) {
		s->redirect = nb->ifindex; /* the packet itself, as it is now: nothing follows it */
	} else {
		s->cur = *want;
		if (bpf_clone_redirect(e->skb, nb->ifindex, 0)) {
			cnt(C_TX_ERRORS, 1);
			nbr_cnt(nidx, NC_TX_ERRORS, 1);
			return 0;
		}
	}
	s->sent++;
	nbr_cnt(nidx, NC_TX_PACKETS, 1);
	nbr_cnt(nidx, NC_TX_BYTES, e->len);
	return 0;
}

SEC("tc")
int bier_rx(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__be32 be0;
	__u32 w0, w1;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	/* headers are read in place: pull them into the linear area first in the rare case they are not */
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u32 head = skb->len < BITS_OFF + BIER_MAX_BSL / 8 ? skb->len : BITS_OFF + BIER_MAX_BSL / 8;

	if (data + head > end) {
		if (bpf_skb_pull_data(skb, head))
			return TC_ACT_OK;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	if (data + BIER_OFF > end)
		return TC_ACT_OK;
	struct iphdr *iph = data + IP_OFF;
	struct udphdr *udph = data + UDP_OFF;

	if (iph->version != 4 || iph->protocol != IPPROTO_UDP || udph->dest != bpf_htons(BIER_UDP_PORT))
		return TC_ACT_OK;
	struct bier_if *bi;

	if (!is_local(skb->ingress_ifindex, &iph->daddr, &bi))
		return TC_ACT_OK;
	struct bier_cfg *cfg = bpf_map_lookup_elem(&bier_cfg, &zero);
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!cfg || !s)
		return TC_ACT_OK;
	/* the received headers, kept for the local delivery and as the first copy's "before" */
	struct hdr *orig = &s->orig;
	struct iphdr *ip = &orig->ip;

	/* every field is written below (struct hdr has no padding); BitString words past the BSL stay zero */
	orig->raw[1] = 0;
	orig->raw[2] = 0;
	orig->raw[3] = 0;
	__builtin_memcpy(orig->eth, data, 12);
	*ip = *iph;
	orig->sport = udph->source;
	orig->dport = udph->dest;
	__u32 ulen = bpf_ntohs(udph->len);
	if (ip->ihl != 5 || ip->frag_off & bpf_htons(0x3FFF) || skb->gso_segs > 1 || ulen < 8 ||
	    ulen + 20 > bpf_ntohs(ip->tot_len) || BIER_OFF + ulen - 8 > skb->len) {
		/* not ours to judge: the stack (and the Python dataplane behind it) sees it as is */
		cnt(C_PUNTED, 1);
		return TC_ACT_OK;
	}
	__u32 len = ulen - 8, gen = cfg->gen & 1;
	__be32 saddr = ip->saddr;
	__u32 rxn = rx_nbr(bi, saddr);

	/* aidcnet.bier.forwarding.forward_packet: peek the label, find the BIFT, then parse_fields */
	if (len < 4)
		return malformed(rxn, len, C_MALFORMED_TRUNCATED);
	if (data + BIER_OFF + 4 > end)
		return TC_ACT_OK;
	be0 = *(__be32 *)(data + BIER_OFF);
	w0 = bpf_ntohl(be0);
	__u32 base = 0, label = w0 >> 12;
	struct bier_table *tbl = find_table(gen, label, &base);

	if (!tbl) {
		if (bpf_map_lookup_elem(&bier_adj, &label)) {
			/* one of our adjacency labels: a fast-reroute bypass passing through
			 * (aidcnet/bier/fast_reroute.py). The program pops no labels; the Python dataplane does. */
			cnt(C_PUNTED, 1);
			return TC_ACT_OK;
		}
		rx_count(rxn, len);
		cnt(C_DROPPED_UNKNOWN_BIFT_ID, 1);
		return TC_ACT_SHOT;
	}
	if (len < 12)
		return malformed(rxn, len, C_MALFORMED_TRUNCATED);
	if (data + BIER_OFF + 8 > end)
		return TC_ACT_OK;
	w1 = bpf_ntohl(*(__be32 *)(data + BIER_OFF + 4));
	if (w1 >> 28 != 5)
		return malformed(rxn, len, C_MALFORMED_BAD_NIBBLE);
	if ((w1 >> 24) & 0xF)
		return malformed(rxn, len, C_MALFORMED_BAD_VERSION);
	__u32 code = (w1 >> 20) & 0xF;
	if (code < 1 || code > 7)
		return malformed(rxn, len, C_MALFORMED_BAD_BSL);
	__u32 bsl = tbl->bsl, nwords = tbl->nwords;
	if ((32u << code) != bsl)
		return malformed(rxn, len, C_MALFORMED_BSL_MISMATCH);
	if (len < 12 + bsl / 8)
		return malformed(rxn, len, C_MALFORMED_TRUNCATED);
	if (!(w0 & 0x100))
		return malformed(rxn, len, C_MALFORMED_BAD_S_BIT);
	if (nwords != 1 && nwords != 2 && nwords != 4) {
		cnt(C_PUNTED, 1);
		return TC_ACT_OK;
	}

	if (data + BITS_OFF + 8 > end)
		return TC_ACT_OK;
	orig->raw[0] = *(__u64 *)(data + BITS_OFF);
	if (nwords > 1) {
		if (data + BITS_OFF + 16 > end)
			return TC_ACT_OK;
		orig->raw[1] = *(__u64 *)(data + BITS_OFF + 8);
	}
	if (nwords > 2) {
		if (data + BITS_OFF + 32 > end)
			return TC_ACT_OK;
		orig->raw[2] = *(__u64 *)(data + BITS_OFF + 16);
		orig->raw[3] = *(__u64 *)(data + BITS_OFF + 24);
	}
	orig->w0 = be0;

	struct dctx *c = &s->dc;

	__builtin_memset(c, 0, sizeof(*c));
	__u32 ttl = w0 & 0xFF, local = 0;
	__u64 own[BIER_WORDS];

	s->ncopies = 0;
	from_wire(orig->raw, c->bits, nwords);
	if (policy_drop(s, skb->ingress_ifindex, saddr, rxn, len, bpf_ntohl(*(__be32 *)(data + BIER_OFF + 8)) & 0xFFFF,
			tbl->si, c->bits))
		return TC_ACT_SHOT;
	own[0] = c->bits[0] & tbl->own[0];
	own[1] = c->bits[1] & tbl->own[1];
	own[2] = c->bits[2] & tbl->own[2];
	own[3] = c->bits[3] & tbl->own[3];

	/* aidcnet.bier.forwarding.forward: TTL 0, zero BitString, own bit, TTL 1, then §6.5 */
	if (ttl == 0) {
		rx_count(rxn, len);
		cnt(C_BITS_TTL_EXPIRED, popcount(c->bits));
		cnt(C_DROPPED_TTL, 1);
		return TC_ACT_SHOT;
	}
	if (!any(c->bits)) {
		rx_count(rxn, len);
		cnt(C_DROPPED_ZERO_BITSTRING, 1);
		return TC_ACT_SHOT;
	}
	if (any(own)) {
		local = 1;
#pragma unroll
		for (int j = 0; j < BIER_WORDS; j++)
			c->bits[j] ^= own[j];
	}
	if (any(c->bits) && ttl == 1) {
		rx_count(rxn, len);
		cnt(C_BITS_TTL_EXPIRED, popcount(c->bits));
		if (!local) {
			cnt(C_DROPPED_TTL, 1);
			return TC_ACT_SHOT;
		}
		__builtin_memset(c->bits, 0, sizeof(c->bits));
	} else {
		c->base = base;
		c->hash = ((((w1 & 0xFFFFF) ^ tbl->ecmp_seed) * ECMP_GOLDEN) & 0xFFFFFFFF) >> 8;
		bpf_loop(BIER_MAX_BSL + 1, step, NULL, 0);
		if (c->overflow) {
			cnt(C_PUNTED, 1);
			return TC_ACT_OK;
		}
		rx_count(rxn, len);
	}

	__u32 noentry = popcount(c->noentry), null = popcount(c->null), n = s->ncopies;

	if (noentry)
		cnt(C_BITS_NO_ENTRY, noentry);
	if (null)
		cnt(C_BITS_NULL_NBR, null);
	if (!n && !local) {
		cnt(noentry ? C_DROPPED_NO_ENTRY : C_DROPPED_NULL_NEIGHBOR, 1);
		return TC_ACT_SHOT;
	}
	struct bier_counters *C = bpf_map_lookup_elem(&bier_cnt, &zero); /* once for the accepted packet's */

	if (C) {
		C->c[C_ACCEPTED] += 1;
		if (n) {
			C->c[C_FORWARDED] += 1;
			if (n > 1)
				C->c[C_REPLICATED] += n - 1;
		}
		if (local)
			C->c[C_DELIVERED] += 1;
	}
	if (cfg->report_port)
		report(skb, s, c, tbl, ((__u32)cfg->report_port << 16) | (nwords << 1) | (ttl == 1 ? REPORT_EXPIRED : 0));

	/* the copies: each rewritten from the previous one, then cloned out (the last one redirected) */
	struct ectx e = {
		.skb = skb,
		.n = n,
		.nwords = nwords,
		.w0 = w0,
		.ttl_out = ttl - 1,
		.len = len,
		.ip_ttl = cfg->ip_ttl ? cfg->ip_ttl : 64,
		.local = local,
		.deliver_port = cfg->deliver_port ? cfg->deliver_port : DEFAULT_DELIVER_PORT,
	};
	struct hdr *cur = &s->cur;

	*cur = *orig;
	s->sent = 0;
	s->redirect = 0;
	bpf_loop(BIER_MAX_NBR + 1, emit, &e, 0);
	if (s->sent && C) {
		C->c[C_TX_PACKETS] += s->sent;
		C->c[C_TX_BYTES] += (__u64)s->sent * len;
	}
	if (e.err)
		return TC_ACT_SHOT;
	if (s->redirect)
		return bpf_redirect(s->redirect, 0);
	return local ? TC_ACT_OK : TC_ACT_STOLEN;
}


/* -- network-BIER imposition (BFIR) ------------------------------------------------------------------
 *
 * bier_impose: tc ingress on a leaf's host ports, the fast path of aidcnet/agent/bier/net_bier.py's ingress.
 * An IPv4 multicast UDP packet to a routable group, (S,G) then (*,G) in bier_flow, becomes MPLS-in-UDP
 * BIER with Proto 4 and the flow's BitString, exactly as NetBierEdge + BierDataplane.impose build it:
 * Entropy = CRC-32(S, G, UDP ports) & 0xFFFFF (aidcnet.bier.edge.flow_entropy), BIER-TTL 64 on the
 * copies, a UDP checksum the sender left to offload completed first (complete_udp_checksum).  The
 * §6.5 loop is bier_rx's (step).  Each copy's outer headers are written whole, with checksums computed
 * from a per-packet sum: the skb may still be CHECKSUM_PARTIAL for the inner UDP header, so the
 * incremental helpers (which then only touch pseudo-headers) do not apply; such an skb's outer UDP
 * field gets the pseudo-header sum, as any local socket's packet over veth has (see emit_imp).
 *
 * Everything else passes untouched to the stack, where the Python edge's AF_PACKET socket takes it
 * (counted E_PUNTED): IP options, fragments, Ethernet padding, TTL <= 1, a bad header, no flow, a flow
 * the agent did not install (BFERs in several SIs, or this BFR among them), too many copies.
 *
 * "Untouched" is TC_ACT_UNSPEC, not TC_ACT_OK: a host port also runs bier_rx (pref 49, after this
 * program's 48), and TC_ACT_OK from a direct-action program ends the port's filter chain. BIER from a
 * GPU host (host-BIER) then skipped bier_rx and was forwarded by the Python dataplane behind the stack.
 */
#define NOT_IMPOSED TC_ACT_UNSPEC
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bier_flow_key);
	__type(value, struct bier_flow);
} bier_flow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BIER_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} bier_port SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BIER_MAX_PORTS * E_NUM);
	__type(key, __u32);
	__type(value, __u64);
} bier_edge_cnt SEC(".maps");

#define IPPROTO_IGMP_ 2
#define IMPOSE_TTL 64 /* BierDataplane.impose's default */
#define IMPOSE_MAX_LEN 9216 /* longer inner packets (jumbo frames) go to the Python edge */

static __always_inline void ecnt(__u32 port, __u32 which, __u64 v)
{
	__u32 idx = port * E_NUM + which;
	__u64 *c = bpf_map_lookup_elem(&bier_edge_cnt, &idx);

	if (c)
		*c += v;
}

static __always_inline __u32 fold16(__u64 s)
{
	__u32 x = fold32(s);

	x = (x & 0xFFFF) + (x >> 16);
	x = (x & 0xFFFF) + (x >> 16);
	return x;
}

/* CRC-32 (IEEE 802.3, reflected, as zlib.crc32) */
static __always_inline __u32 crc32_step(__u32 c, __u8 b)
{
	c ^= b;
#pragma unroll
	for (int k = 0; k < 8; k++) {
		__u32 low = c & 1;

		/* a product, not a mask or a select: clang turns a select into a branch, and this kernel's
		 * verifier splits {-1, 0} & K into two states; either way 2^96 paths to verify */
		asm volatile("" : "+r"(low));
		c = (c >> 1) ^ (0xEDB88320u * low);
	}
	return c;
}

/* aidcnet.bier.edge.flow_entropy(S, G, sport, dport): CRC-32 of the 12 octets from the IPv4 source
 * address to the UDP destination port, low 20 bits. */
static __always_inline __u32 flow_entropy(const struct iphdr *iph)
{
	__u32 crc = 0xFFFFFFFF;
	__u32 w[3];

	__builtin_memcpy(w, &iph->saddr, 12);
	const __u8 *fb = (const __u8 *)w;
#pragma unroll
	for (int j = 0; j < 12; j++)
		crc = crc32_step(crc, fb[j]);
	return ~crc & 0xFFFFF;
}

/* State of the checksum loop (in the scratch map: see ncopies). */
struct isum {
	__u64 sum;
	__u32 off;
	__u32 end;
	__u32 err;
};

struct sctx {
	struct __sk_buff *skb;
};

/* One's complement sum of packet octets [off, end), memory order, a chunk per call. */
static long sum_chunk(__u32 i, void *data)
{
	struct sctx *c = data;
	struct __sk_buff *skb = c->skb;
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!s)
		return 1;
	struct isum *m = (struct isum *)&s->sum;
	__u32 off = m->off, left;

	if (off >= m->end)
		return 1;
	if (off > IMPOSE_MAX_LEN) { /* the bound lets the verifier check p + 256 against the packet */
		m->err = 1;
		return 1;
	}
	left = m->end - off;
	void *p = (void *)(long)skb->data + off, *end = (void *)(long)skb->data_end;

	if (left >= 256) {
		if (p + 256 > end)
			goto bad;
		m->sum += (__u32)bpf_csum_diff(0, 0, p, 256, 0);
		m->off = off + 256;
	} else if (left >= 64) {
		if (p + 64 > end)
			goto bad;
		m->sum += (__u32)bpf_csum_diff(0, 0, p, 64, 0);
		m->off = off + 64;
	} else if (left >= 16) {
		if (p + 16 > end)
			goto bad;
		m->sum += (__u32)bpf_csum_diff(0, 0, p, 16, 0);
		m->off = off + 16;
	} else if (left >= 4) {
		if (p + 4 > end)
			goto bad;
		m->sum += *(__u32 *)p;
		m->off = off + 4;
	} else {
		/* 1..3 octets: zero padded at the end (RFC 1071) */
		__u8 *b = p;
		__u32 t = 0;

		if (b + 1 > (__u8 *)end)
			goto bad;
		t = b[0];
		if (left > 1) {
			if (b + 2 > (__u8 *)end)
				goto bad;
			t |= (__u32)b[1] << 8;
		}
		if (left > 2) {
			if (b + 3 > (__u8 *)end)
				goto bad;
			t |= (__u32)b[2] << 16;
		}
		m->sum += t;
		m->off = m->end;
	}
	return 0;
bad:
	m->err = 1;
	return 1;
}

struct ictx {
	struct __sk_buff *skb;
	__u32 n;
	__u32 nwords;
	__u32 ip_ttl;
	__u32 ip_len;       /* outer IPv4 total length */
	__u32 udp_len;      /* outer UDP length (= BIER packet length + 8) */
	__u32 len;          /* BIER packet length (per-neighbour tx bytes, as the Python dataplane counts) */
	__be32 w1;
	__be32 w2;
	__be32 pseudo_len; /* the pseudo-header's protocol and length word */
	__u32 partial;      /* the skb is CHECKSUM_PARTIAL (the sender offloaded its UDP checksum) */
	__u32 err;
};

/* Copy i of an imposed packet: the whole outer header block written for its BFR-NBR, then out. */
static long emit_imp(__u32 i, void *data)
{
	struct ictx *e = data;
	struct __sk_buff *skb = e->skb;
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!s || i >= e->n || i >= BIER_MAX_NBR)
		return 1;
	__u32 k = i;

	asm volatile("" : "+r"(k));
	struct copy *cp = &s->copy[k & (BIER_MAX_NBR - 1)];
	__u32 nidx = cp->nbr;
	struct bier_nbr *nb = bpf_map_lookup_elem(&bier_nbr, &nidx);

	if (!nb || !nb->ifindex) {
		cnt(C_TX_ERRORS, 1);
		nbr_cnt(nidx, NC_TX_ERRORS, 1);
		return 0;
	}
	struct hdr *want = &s->next;

	__builtin_memset(want, 0, sizeof(*want));
	to_wire(cp->bits, want->raw, e->nwords);
	want->w0 = bpf_htonl((cp->label << 12) | 0x100 | IMPOSE_TTL);
	want->ip.version = 4;
	want->ip.ihl = 5;
	want->ip.tot_len = bpf_htons(e->ip_len);
	want->ip.frag_off = bpf_htons(IP_DF);
	want->ip.ttl = e->ip_ttl;
	want->ip.protocol = IPPROTO_UDP;
	want->ip.saddr = nb->saddr;
	want->ip.daddr = nb->daddr;
	want->ip.check = ip_csum(&want->ip);

	/* UDP checksum: the per-packet part (inner packet, BIER words 1-2, ports, lengths) plus this copy's.
	 * A CHECKSUM_PARTIAL skb stays one (no helper clears the state): its outer field then holds the
	 * pseudo-header sum, as a local socket's packet has, so that the next BFR's incremental updates
	 * (bier_rx: only the pseudo-header part for such an skb) keep it right. */
	__u16 csum;

	if (e->partial) {
		csum = fold16((__u64)nb->saddr + nb->daddr + e->pseudo_len);
	} else {
		__u64 sum = s->sum + nb->saddr + nb->daddr + want->w0;
		const __u32 *w = (const __u32 *)want->raw;
#pragma unroll
		for (int j = 0; j < 2 * BIER_WORDS; j++)
			sum += w[j];
		csum = ~fold16(sum) & 0xFFFF;
		if (!csum)
			csum = 0xFFFF;
	}
	/* after a clone the head is shared: make it ours before writing (the one copy per clone) */
	if (i > 0 && bpf_skb_pull_data(skb, BITS_OFF + e->nwords * 8))
		goto err;
	void *d = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;

	if (d + BITS_OFF + 8 > end)
		goto err;
	__builtin_memcpy(d, nb->dmac, 6);
	__builtin_memcpy(d + 6, nb->smac, 6);
	*(struct iphdr *)(d + IP_OFF) = want->ip;
	struct udphdr *udp = d + UDP_OFF;
	udp->source = bpf_htons(BIER_UDP_PORT);
	udp->dest = bpf_htons(BIER_UDP_PORT);
	udp->len = bpf_htons(e->udp_len);
	udp->check = csum;
	__be32 *bw = d + BIER_OFF;
	bw[0] = want->w0;
	bw[1] = e->w1;
	bw[2] = e->w2;
	__u64 *bits = d + BITS_OFF;
	bits[0] = want->raw[0];
	if (e->nwords > 1) {
		if (d + BITS_OFF + 16 > end)
			goto err;
		bits[1] = want->raw[1];
	}
	if (e->nwords > 2) {
		if (d + BITS_OFF + 32 > end)
			goto err;
		bits[2] = want->raw[2];
		bits[3] = want->raw[3];
	}
	if (i + 1 == e->n) {
		s->redirect = nb->ifindex;
	} else if (bpf_clone_redirect(skb, nb->ifindex, 0)) {
		cnt(C_TX_ERRORS, 1);
		nbr_cnt(nidx, NC_TX_ERRORS, 1);
		return 0;
	}
	s->sent++;
	nbr_cnt(nidx, NC_TX_PACKETS, 1);
	nbr_cnt(nidx, NC_TX_BYTES, e->len);
	return 0;
err:
	cnt(C_TX_ERRORS, 1);
	e->err = 1;
	return 1;
}

SEC("tc")
int bier_impose(struct __sk_buff *skb)
{
	__u32 zero = 0, ifindex = skb->ingress_ifindex;

	if (skb->protocol != bpf_htons(ETH_P_IP) || (skb->pkt_type != 0 && skb->pkt_type != 2))
		return NOT_IMPOSED; /* PACKET_HOST, PACKET_MULTICAST: what the Python edge's filter keeps */
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;

	if (data + BIER_OFF > end) {
		if (skb->len < BIER_OFF || bpf_skb_pull_data(skb, BIER_OFF))
			return NOT_IMPOSED;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		if (data + BIER_OFF > end)
			return NOT_IMPOSED;
	}
	struct iphdr *iph = data + IP_OFF;
	__u8 *g = (__u8 *)&iph->daddr;

	/* aidcnet.bier.edge.is_routable_multicast, IGMP excluded: the packets the edge captures at all */
	if (iph->version != 4 || (g[0] & 0xF0) != 0xE0 || (g[0] == 224 && g[1] == 0 && g[2] == 0) ||
	    iph->protocol == IPPROTO_IGMP_)
		return NOT_IMPOSED;
	__u32 *pidx = bpf_map_lookup_elem(&bier_port, &ifindex);

	if (!pidx)
		return NOT_IMPOSED;
	__u32 port = *pidx & (BIER_MAX_PORTS - 1);
	__u32 tot = bpf_ntohs(iph->tot_len);
	struct udphdr *udph = data + UDP_OFF;
	__u32 ulen = bpf_ntohs(udph->len);

	/* the common case only; the Python edge judges the rest with its own counters */
	if (iph->ihl != 5 || iph->protocol != IPPROTO_UDP || iph->frag_off & bpf_htons(0x3FFF) ||
	    iph->ttl <= 1 || tot != skb->len - ETH_HLEN || ulen < 8 || ulen != tot - 20 || ip_csum(iph) != iph->check ||
	    skb->gso_segs > 1 || tot > IMPOSE_MAX_LEN)
		goto punt;
	struct bier_flow_key fk = {.src = iph->saddr, .grp = iph->daddr};
	struct bier_flow *fl = bpf_map_lookup_elem(&bier_flow, &fk);

	if (!fl) {
		fk.src = 0;
		fl = bpf_map_lookup_elem(&bier_flow, &fk);
		if (!fl)
			goto punt;
	}
	struct bier_cfg *cfg = bpf_map_lookup_elem(&bier_cfg, &zero);
	struct scratch *s = bpf_map_lookup_elem(&bier_scratch, &zero);

	if (!cfg || !s)
		goto punt;
	/* a reliable retransmission (flag R) goes to the Python edge, which narrows it to the BFERs that have not
	 * confirmed it (aidcnet/reliable/edge.py repair_bfers); the kernel would send it to the whole group */
	if (cfg->report_port && udph->dest == bpf_htons(cfg->report_port) &&
	    !bpf_skb_load_bytes(skb, UDP_OFF + 8, &s->direct_w2, 2)) {
		__u8 *rel = (__u8 *)&s->direct_w2;

		if (rel[0] == 0x11 && (rel[1] & 0x80))
			goto punt;
	}
	__u32 base = 0;
	struct bier_table *tbl = find_table(cfg->gen & 1, fl->label & 0xFFFFF, &base);

	if (!tbl)
		goto punt;
	__u32 nwords = tbl->nwords, bsl = tbl->bsl;

	if (nwords != 1 && nwords != 2 && nwords != 4)
		goto punt;

	__be32 grp = iph->daddr, src = iph->saddr;
	__u16 ucheck = udph->check;
	__u32 entropy = flow_entropy(iph);

	/* §6.5 through the SI's BIFT (aidcnet.bier.forwarding.impose: copies carry TTL 64) */
	struct dctx *c = &s->dc;

	__builtin_memset(c, 0, sizeof(*c));

#pragma unroll
	for (int j = 0; j < BIER_WORDS; j++)
		c->bits[j] = fl->bits[j];
	if (!any(c->bits) || (c->bits[0] & tbl->own[0]) | (c->bits[1] & tbl->own[1]) | (c->bits[2] & tbl->own[2]) |
				    (c->bits[3] & tbl->own[3]))
		goto punt; /* the agent installs neither: the Python edge handles them */
	s->ncopies = 0;
	c->base = base;
	c->hash = ((((entropy) ^ tbl->ecmp_seed) * ECMP_GOLDEN) & 0xFFFFFFFF) >> 8;
	bpf_loop(BIER_MAX_BSL + 1, step, NULL, 0);
	if (c->overflow)
		goto punt;

	/* the inner UDP checksum: finished here if the sender left it to offload (the field holds the
	 * pseudo-header sum and the octets do not verify), as the Python edge does on TP_STATUS_CSUMNOTREADY */
	struct isum *m = (struct isum *)&s->sum;
	struct sctx sc = {.skb = skb};

	m->sum = 0;
	m->off = UDP_OFF;
	m->end = UDP_OFF + ulen;
	m->err = 0;
	bpf_loop(64, sum_chunk, &sc, 0);
	if (m->err || m->off != m->end)
		goto punt;
	__u64 inner = m->sum;
	__u64 pseudo = (__u64)src + grp + bpf_htonl((IPPROTO_UDP << 16) | ulen);
	__u32 completed = 0;

	if (ucheck && fold16(inner + pseudo) != 0xFFFF && ucheck == fold16(pseudo)) {
		__u16 v = ~fold16(inner + (__u16)~ucheck + pseudo) & 0xFFFF;

		if (!v)
			v = 0xFFFF;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		if (data + BIER_OFF > end)
			goto punt;
		((struct udphdr *)(data + UDP_OFF))->check = v;
		inner += (__u16)~ucheck + v;
		completed = 1;
	}

	/* counters, as NetBierEdge._ingress and BierDataplane.impose/_dispatch count */
	__u32 noentry = popcount(c->noentry), null = popcount(c->null), n = s->ncopies;

	ecnt(port, E_CAPTURED, 1);
	ecnt(port, E_CAPTURED_BYTES, tot);
	if (completed)
		ecnt(port, E_CSUM_COMPLETED, 1);
	ecnt(port, E_IMPOSED, 1);
	cnt(C_IMPOSED, 1);
	if (noentry)
		cnt(C_BITS_NO_ENTRY, noentry);
	if (null)
		cnt(C_BITS_NULL_NBR, null);
	if (!n) {
		cnt(noentry ? C_DROPPED_NO_ENTRY : C_DROPPED_NULL_NEIGHBOR, 1);
		return TC_ACT_SHOT;
	}
	cnt(C_ACCEPTED, 1);
	cnt(C_FORWARDED, 1);
	cnt(C_REPLICATED, n - 1);
	if (cfg->report_port) {
		s->rep.saddr = src;
#pragma unroll
		for (int j = 0; j < BIER_WORDS; j++)
			s->rep.bits[j] = fl->bits[j];
		report(skb, s, c, tbl, ((__u32)cfg->report_port << 16) | REPORT_IMPOSED);
	}

	/* room for outer IPv4, UDP and the BIER header between Ethernet and the inner packet */
	__u32 blen = 12 + bsl / 8, code = nwords == 1 ? 1 : nwords == 2 ? 2 : 3;

	if (bpf_skb_adjust_room(skb, 28 + blen, BPF_ADJ_ROOM_MAC, 0)) {
		cnt(C_TX_ERRORS, n);
		return TC_ACT_SHOT;
	}
	struct ictx e = {
		.skb = skb,
		.n = n,
		.nwords = nwords,
		.ip_ttl = cfg->ip_ttl ? cfg->ip_ttl : 64,
		.ip_len = 28 + blen + tot,
		.udp_len = 8 + blen + tot,
		.len = blen + tot,
		.w1 = bpf_htonl((5u << 28) | (code << 20) | entropy),
		.w2 = bpf_htonl((BIER_PROTO_IPV4 << 16) | fl->bfr_id),
		.pseudo_len = bpf_htonl((IPPROTO_UDP << 16) | (8 + blen + tot)),
		.partial = completed,
	};
	__u32 plen = 8 + blen + tot;

	/* the inner packet's IPv4 header sums to 0 (it verified), so its UDP part stands for all of it */
	s->sum = inner + e.w1 + e.w2 + ((__u32)bpf_htons(BIER_UDP_PORT) << 16 | bpf_htons(BIER_UDP_PORT)) +
		 bpf_htons(plen) + e.pseudo_len;
	s->sent = 0;
	s->redirect = 0;
	bpf_loop(BIER_MAX_NBR, emit_imp, &e, 0);
	if (s->sent) {
		cnt(C_TX_PACKETS, s->sent);
		cnt(C_TX_BYTES, (__u64)s->sent * e.len);
	}
	if (e.err)
		return TC_ACT_SHOT;
	if (s->redirect)
		return bpf_redirect(s->redirect, 0);
	return TC_ACT_STOLEN;
punt:
	ecnt(port, E_PUNTED, 1);
	return NOT_IMPOSED;
}

char LICENSE[] SEC("license") = "GPL";
