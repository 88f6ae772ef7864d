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
 *   lf_stats   array[1] of struct lf_stats   counters per cause, read by the host
 *   lf_state   array[1] of __u32             the chain's state, 0 Good, 1 Bad
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

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
