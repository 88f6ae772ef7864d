// SPDX-License-Identifier: GPL-2.0
/* delay_relay: hand every packet a link delivers to the delay relay, and take it back when it is due
 * (docs/delay.md).
 *
 * No qdisc of this kernel can hold a packet for a time, so a propagation delay is held in user space by
 * the host's relay (orchestrator/lab/relay.py). The packet has already been serialised by the sender's
 * shaper (its root TBF); it is taken at the receiving end, before anything there sees it, and comes back
 * to the same place when its time has come:
 *
 *   sender's TBF -> veth -> [receiver eth ingress: delay_divert] -> tap egress -> relay holds it
 *   relay writes it -> tap ingress: delay_return -> receiver eth ingress (marked) -> delay_divert lets it
 *   pass to the next filter (the eBPF BFR) and the stack.
 *
 * Both programs keep no state. Each attachment has its own dr_target map (tc loads a map per filter),
 * which the relay writes once with the interface to redirect to: the tap for a divert, the link's
 * interface for a return. Interface indexes of a node's links are the host's (the veths were made there
 * and moved in), far above what a filter's classid could carry. Until its target is written a divert
 * lets everything through and a return drops, so a half-made attachment never loops a packet.
 * A tap takes what the kernel made of the packet on its way out (checksums completed, GSO segmented:
 * the tap offers no offloads), so the relay holds complete frames and writes them back as they were.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

/* skb->mark of a packet the relay gave back: the receiver's divert lets it through once and clears it.
 * Keep in step with orchestrator/lab/relay.py RELAY_MARK. */
#define RELAY_MARK 0xd1a70001u

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} dr_target SEC(".maps");

static __always_inline __u32 target(void)
{
	__u32 zero = 0;
	__u32 *ifindex = bpf_map_lookup_elem(&dr_target, &zero);

	return ifindex ? *ifindex : 0;
}

SEC("tc/divert")
int delay_divert(struct __sk_buff *skb)
{
	__u32 tap;

	if (skb->mark == RELAY_MARK) {
		skb->mark = 0;
		return TC_ACT_UNSPEC; /* on to the next filter (the BFR's) and the stack */
	}
	tap = target();
	if (!tap)
		return TC_ACT_UNSPEC;
	return bpf_redirect(tap, 0);
}

SEC("tc/return")
int delay_return(struct __sk_buff *skb)
{
	__u32 link = target();

	if (!link)
		return TC_ACT_SHOT;
	skb->mark = RELAY_MARK;
	return bpf_redirect(link, BPF_F_INGRESS);
}

char _license[] SEC("license") = "GPL";
