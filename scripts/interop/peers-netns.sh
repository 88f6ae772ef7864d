#!/bin/bash
# Measure what GoBGP and BIRD do with our link-bandwidth community (docs/interop.md), in network namespaces
# prA-ex (ExaBGP), prA-gb (gobgpd, AS 65100) and prA-bd (bird, AS 65101) on this host; needs Debian's
# gobgpd and bird2 installed (their services need not run). ExaBGP (AS 4200000000) announces 10.255.0.5-8/32
# over two sessions to each peer with different link bandwidths; a third session per peer (AS 65500) shows
# what the peer re-advertises. The peers' configs are rendered from the roles' templates. Prints what it
# measured, then removes the namespaces and ends the processes it started (by PID). KEEP=1 leaves them up.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${WORKDIR:-/tmp/prA}; VENV=$ROOT/.venv
mkdir -p $W
cleanup() {
  for f in $W/*.pid; do [ -f "$f" ] && kill "$(cat $f)" 2>/dev/null; rm -f "$f"; done
  sleep 0.5
  for n in prA-ex prA-gb prA-bd; do ip netns del $n 2>/dev/null; done
}
cleanup
for n in prA-ex prA-gb prA-bd; do ip netns add $n; ip -n $n link set lo up; done
ip -n prA-gb addr add 10.255.9.1/32 dev lo; ip -n prA-bd addr add 10.255.9.2/32 dev lo
pair() { # exdev exaddr peerns peerdev peeraddr
  ip link add $1 netns prA-ex type veth peer name $4 netns $3
  ip -n prA-ex addr add $2/31 dev $1; ip -n prA-ex link set $1 up
  ip -n $3 addr add $5/31 dev $4; ip -n $3 link set $4 up
}
pair exg1 10.9.1.0 prA-gb eth1 10.9.1.1; pair exg2 10.9.1.2 prA-gb eth2 10.9.1.3; pair exg3 10.9.1.4 prA-gb eth3 10.9.1.5
pair exb1 10.9.2.0 prA-bd eth1 10.9.2.1; pair exb2 10.9.2.2 prA-bd eth2 10.9.2.3; pair exb3 10.9.2.4 prA-bd eth3 10.9.2.5
for n in prA-gb prA-bd; do ip netns exec $n sysctl -qw net.ipv4.ip_forward=1; done

# GoBGP and BIRD configs from the roles' templates, for a node file shaped like the plan's.
for s in 1:65100:L1:gobgpd.conf:gobgp 2:65101:L2:bird.conf:bird; do IFS=: read side as name out role <<<"$s"
  $VENV/bin/python - "$ROOT/playbooks/roles/$role/templates/$out.j2" > $W/$out <<PY
import sys, jinja2
node = {"node": "$name", "loopback": "10.255.9.$side/32", "routes": [],
        "interfaces": [{"name": f"eth{i}", "ipv4": f"10.9.$side.{2 * i - 1}/31"} for i in (1, 2, 3)],
        "bgp": {"asn": $as, "router_id": "10.255.9.$side", "hold_time": 9, "neighbors": [
            {"name": "G1" if i < 3 else "RX", "address": f"10.9.$side.{2 * i - 2}",
             "local_address": f"10.9.$side.{2 * i - 1}", "interface": f"eth{i}",
             "asn": 4200000000 if i < 3 else 65500} for i in (1, 2, 3)]}}
env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
print(env.from_string(open(sys.argv[1]).read()).render(aidclab_node=node, ansible_managed="peers-netns.sh"))
PY
done
ip netns exec prA-gb gobgpd -f $W/gobgpd.conf -p --api-hosts=127.0.0.1:50051 > $W/gobgpd.log 2>&1 & echo $! > $W/gobgpd.pid
ip netns exec prA-bd bird -f -c $W/bird.conf -s $W/bird.ctl > $W/bird.log 2>&1 & echo $! > $W/bird.pid
sleep 1
ip netns exec prA-gb gobgp global rib add 10.255.9.1/32 -a ipv4 >> $W/gobgpd.log 2>&1

cat > $W/rx.py <<PY
import sys
with open("$W/rx.log", "a") as f:
    for line in sys.stdin:
        f.write(line); f.flush()
PY
rm -f $W/rx.log
T20=0x00045BA04F1502F9; T400=0x00045BA0513A43B7; T10=0x00045BA04E9502F9
N20=bandwidth:23456:2500000000; N10=bandwidth:23456:1250000000
nb() { # peer local localas peeras routes [router-id]
cat <<NB
neighbor $1 {
  router-id ${6:-10.255.9.9}; local-address $2; local-as $3; peer-as $4; hold-time 9;
  family { ipv4 unicast; }
  api { processes [ rx ]; receive { parsed; update; } }
  static {
$5
  }
}
NB
}
{
echo "process rx { run $VENV/bin/python $W/rx.py; encoder json; }"
for side in 1:65100 2:65101; do s=${side%%:*}; as=${side##*:}
  nb 10.9.$s.1 10.9.$s.0 4200000000 $as "    route 10.255.0.5/32 next-hop self extended-community [ $T20 ];
    route 10.255.0.6/32 next-hop self extended-community [ $N20 ];
    route 10.255.0.7/32 next-hop self extended-community [ $T10 ];
    route 10.255.0.8/32 next-hop self extended-community [ $T400 ];"
  nb 10.9.$s.3 10.9.$s.2 4200000000 $as "    route 10.255.0.5/32 next-hop self extended-community [ $T10 ];
    route 10.255.0.6/32 next-hop self extended-community [ $N10 ];
    route 10.255.0.7/32 next-hop self extended-community [ $T20 ];"
  nb 10.9.$s.5 10.9.$s.4 65500 $as "" 10.255.9.10
done
} > $W/exabgp.conf
env exabgp_daemon_user=root exabgp_daemon_drop=false exabgp_api_encoder=json exabgp_log_destination=$W/exabgp.log \
  ip netns exec prA-ex $VENV/bin/exabgp $W/exabgp.conf > $W/exabgp.out 2>&1 & echo $! > $W/exabgp.pid
sleep ${WAIT:-15}
echo "== GoBGP neighbors"; ip netns exec prA-gb gobgp neighbor
echo "== GoBGP rib 10.255.0.5/32 (transitive LB in)"; ip netns exec prA-gb gobgp global rib -a ipv4 10.255.0.5/32 longer-prefixes
echo "== GoBGP rib json"; ip netns exec prA-gb gobgp global rib -a ipv4 -j | python3 -m json.tool | head -150
echo "== GoBGP rib 10.255.0.6/32 (non-transitive LB in)"; ip netns exec prA-gb gobgp global rib -a ipv4 10.255.0.6/32 longer-prefixes
echo "== GoBGP kernel"; ip -n prA-gb route
echo "== BIRD protocols"; birdc -s $W/bird.ctl show protocols
echo "== BIRD route 10.255.0.5/32"; birdc -s $W/bird.ctl show route for 10.255.0.5/32 all
echo "== BIRD route 10.255.0.6/32"; birdc -s $W/bird.ctl show route for 10.255.0.6/32 all
echo "== GoBGP rib 10.255.0.7-8"; ip netns exec prA-gb gobgp global rib -a ipv4 | grep "10.255.0.[78]"
echo "== BIRD 10.255.0.7"; birdc -s $W/bird.ctl show route for 10.255.0.7/32 all | grep -E "unicast|ext_comm"
echo "== BIRD kernel"; ip -n prA-bd route
echo "== received by AS 65500 (what each re-advertises)"
grep '"update"' $W/rx.log | python3 -c '
import sys, json
for line in sys.stdin:
    m = json.loads(line); n = m["neighbor"]; u = n.get("message", {}).get("update")
    if not u: continue
    for fam, hops in u.get("announce", {}).items():
        for nh, routes in hops.items():
            for r in routes:
                print(n["address"]["peer"], r["nlri"] if isinstance(r, dict) else r, "as-path", u["attribute"].get("as-path"), "ext", u["attribute"].get("extended-community"))
'
[ -n "${KEEP:-}" ] || cleanup
