// SPDX-License-Identifier: GPL-2.0
/* link_fault: loss on a link for every packet, whatever sent it (docs/time-and-fidelity.md).
 *
 * Attached by the host at tc clsact egress (direct-action) of a link end, one copy per end, each with
 * its own maps. Before the packet reaches the shaper (the root TBF) it meets a Gilbert-Elliott chain:
 * the packet is lost with the loss probability of the state it finds (Good or Bad), then the chain
 * moves (netem's order). Independent loss is the chain held in Good. Every probability is a fraction of
 * 2^32 in a 64-bit field, so 0 never drops and 2^32 always does.
 *
 * Maps (byte layout in docs/time-and-fidelity.md; Python side: aidcnet/ebpf/link_fault.py):
 *   lf_config  array[1] of struct lf_config  written by the host at runtime (bpftool map update)
 *   lf_stats   array[1] of struct lf_stats   counters per cause, and the reliable transport's
 *                                            feedback that crossed the link (ACKs per link, issue 15)
 *   lf_state   array[1] of __u32             the chain's state, 0 Good, 1 Bad
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* The reliable transport's port and types (aidcnet/reliable/header.py, docs/reliability.md). */
#define RELIABLE_UDP_PORT 4795
#define RELIABLE_VERSION 1
#define TYPE_ACK 2
#define TYPE_AGG_ACK 4
#define TYPE_AGG_NACK 5 /* a BFR's merged NACKs: counted as a NACK */

struct lf_config {
	__u64 enter_bad;  /* P(Good -> Bad) per packet, x 2^32 */
	__u64 leave_bad;  /* P(Bad -> Good) per packet, x 2^32 */
	__u64 loss_good;  /* P(loss) in Good, x 2^32 (1 - k) */
	__u64 loss_bad;   /* P(loss) in Bad, x 2^32 (1 - h) */
};

struct lf_stats {
	__u64 passed_packets;
	__u64 passed_bytes;
	__u64 lost_good_packets;  /* dropped in Good: independent loss */
	__u64 lost_good_bytes;
	__u64 lost_bad_packets;   /* dropped in Bad: bursts */
	__u64 lost_bad_bytes;
	__u64 bad_entries;        /* bursts begun */
	/* Of the passed packets, the reliable transport's feedback: IPv4/UDP to port 4795 whose message
	 * is version 1, type ACK, NACK (or AGG-NACK) or AGG-ACK. Counted on the wire, so end-to-end ACKs routed by the
	 * kernel count as much as the ones our BFRs aggregate. */
	__u64 ack_packets;
	__u64 nack_packets;
	__u64 agg_ack_packets;
	__u64 feedback_bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lf_config);
} lf_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lf_stats);
} lf_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} lf_state SEC(".maps");

static __always_inline int chance(__u64 threshold)
{
	/* A u32 draw below a threshold of at most 2^32: 0 never, 2^32 always. */
	return (__u64)bpf_get_prandom_u32() < threshold;
}

/* The reliable feedback type of an IPv4/UDP packet (TYPE_ACK..TYPE_AGG_NACK), or 0. */
static __always_inline int feedback_type(struct __sk_buff *skb)
{
	__u8 ip[20];
	__u8 udp[9]; /* the UDP header and the message's first octet: Ver (4 bits), Type (4 bits) */

	if (skb->protocol != bpf_htons(ETH_P_IP) || bpf_skb_load_bytes(skb, ETH_HLEN, ip, sizeof(ip)) < 0)
		return 0;
	/* Feedback is never fragmented: a non-first fragment has no UDP header to read. */
	if ((ip[0] >> 4) != 4 || ip[9] != IPPROTO_UDP || (ip[6] & 0x1f) || ip[7])
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + (ip[0] & 0x0f) * 4, udp, sizeof(udp)) < 0)
		return 0;
	if (((udp[2] << 8) | udp[3]) != RELIABLE_UDP_PORT || (udp[8] >> 4) != RELIABLE_VERSION)
		return 0;
	__u8 type = udp[8] & 0x0f;
	return type >= TYPE_ACK && type <= TYPE_AGG_NACK ? type : 0;
}

static __always_inline void count_feedback(struct __sk_buff *skb, struct lf_stats *st)
{
	int type = feedback_type(skb);

	if (!type)
		return;
	if (type == TYPE_ACK)
		__sync_fetch_and_add(&st->ack_packets, 1);
	else if (type == TYPE_AGG_ACK)
		__sync_fetch_and_add(&st->agg_ack_packets, 1);
	else
		__sync_fetch_and_add(&st->nack_packets, 1);
	__sync_fetch_and_add(&st->feedback_bytes, skb->len);
}

SEC("tc")
int link_fault(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct lf_config *cfg = bpf_map_lookup_elem(&lf_config, &zero);
	struct lf_stats *st = bpf_map_lookup_elem(&lf_stats, &zero);
	__u32 *state = bpf_map_lookup_elem(&lf_state, &zero);

	if (!cfg || !st || !state)
		return TC_ACT_OK;
	/* Concurrent CPUs may race on the state word; a lost transition only nudges the chain. */
	__u32 bad = *state;
	int lost = chance(bad ? cfg->loss_bad : cfg->loss_good);

	if (bad) {
		if (chance(cfg->leave_bad))
			*state = 0;
	} else if (chance(cfg->enter_bad)) {
		*state = 1;
		__sync_fetch_and_add(&st->bad_entries, 1);
	}
	if (!lost) {
		__sync_fetch_and_add(&st->passed_packets, 1);
		__sync_fetch_and_add(&st->passed_bytes, skb->len);
		count_feedback(skb, st);
		return TC_ACT_OK;
	}
	if (bad) {
		__sync_fetch_and_add(&st->lost_bad_packets, 1);
		__sync_fetch_and_add(&st->lost_bad_bytes, skb->len);
	} else {
		__sync_fetch_and_add(&st->lost_good_packets, 1);
		__sync_fetch_and_add(&st->lost_good_bytes, skb->len);
	}
	/* STOLEN, not SHOT: SHOT reports NET_XMIT_DROP up the stack, so a sender with IP_RECVERR sees
	 * ENOBUFS and resends (our lossless senders do). A loss on a wire is silent to the sender. */
	return TC_ACT_STOLEN;
}

char _license[] SEC("license") = "GPL";
