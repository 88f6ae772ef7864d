#!/bin/bash
# Run the gobgp and bird Ansible roles (with peer_net) for real, without containers: for superpod-peers' L1
# (GoBGP) and L2 (BIRD), in a network namespace prA-an with the node's interfaces as veths and a private
# mount namespace whose /etc, /run and /usr/local/bin are overlays (nothing lands on the host). The daemon
# starts as its image starts it; the play runs twice: the first run changes, the second must not. Prints
# the PLAY RECAPs and what the daemon then runs; ends the daemons it started (by PID), removes the netns.
# Needs Debian's gobgpd and bird2 on the host and `pip install -e .[dev]` in .venv.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${WORKDIR:-/tmp/prA-roles}
NS=prA-an

inner() {  # ROLE: inside unshare -m + ip netns exec
  local role=$1 R=$W/$1
  mkdir -p $R/up-etc $R/wk-etc $R/up-run $R/wk-run $R/up-bin $R/wk-bin
  mount --make-rprivate /
  mount -t overlay overlay -o lowerdir=/etc,upperdir=$R/up-etc,workdir=$R/wk-etc /etc
  mount -t overlay overlay -o lowerdir=/run,upperdir=$R/up-run,workdir=$R/wk-run /run
  mount -t overlay overlay -o lowerdir=/usr/local/bin,upperdir=$R/up-bin,workdir=$R/wk-bin /usr/local/bin
  if [ $role = bird ]; then  # as node-images/bird starts it
    sed -n "s/^RUN printf '\(.*\)' \\\\$/\1/p" $ROOT/node-images/bird/Dockerfile | xargs -0 printf > /etc/bird/bird.conf
    mkdir -p /run/bird
    bird -c /etc/bird/bird.conf -s /run/bird/bird.ctl -P /run/bird/bird.pid
    cp /run/bird/bird.pid $R/daemon.pid
  else  # as node-images/gobgp starts it
    mkdir -p /etc/gobgp && touch /etc/gobgp/networks
    install -m 755 $ROOT/node-images/gobgp/gobgp-apply.sh /usr/local/bin/gobgp-apply
    GOBGP_LOG=$R/gobgpd.log /usr/local/bin/gobgp-apply
    cp /run/gobgpd.pid $R/daemon.pid
  fi
  for run in 1 2; do
    ANSIBLE_ROLES_PATH=$ROOT/playbooks/roles $ROOT/.venv/bin/ansible-playbook -i $R/inventory.yml $R/play.yml \
      > $R/ansible-$run.log 2>&1 || tail -30 $R/ansible-$run.log
    echo "run $run: $(grep -A1 'PLAY RECAP' $R/ansible-$run.log | tail -1)"
  done
  if [ $role = bird ]; then
    birdc -s /run/bird/bird.ctl show status | sed -n 3p
    echo "BGP protocols: $(birdc -s /run/bird/bird.ctl show protocols | grep -c ' BGP ')"
  else
    gobgp global | head -2
    echo "neighbors: $(gobgp neighbor | tail -n +2 | wc -l)"
    gobgp global rib
    cp /run/gobgpd.pid $R/daemon.pid  # gobgp-apply restarted it
  fi
}

if [ "${1:-}" = --inner ]; then inner "$2"; exit; fi

rm -rf $W && mkdir -p $W
$ROOT/.venv/bin/python - "$ROOT" "$W" <<'PY'
import sys
from pathlib import Path

import yaml

from orchestrator.configure.plan import build_plan, node_configs
from orchestrator.configure.plan.schema import LabVars
from orchestrator.lab.topology import load_topology

root, work = Path(sys.argv[1]), Path(sys.argv[2])
lab = root / "labs" / "superpod-peers"
plan = build_plan(load_topology(lab.with_suffix(".clab.yml")),
                  LabVars.model_validate(yaml.safe_load(lab.with_suffix(".vars.yml").read_text())))
configs = node_configs(plan)
for role, node in (("bird", "L2"), ("gobgp", "L1")):
    out = work / role
    out.mkdir()
    host = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
            "aidclab_node": configs[node].model_dump(mode="json", exclude_none=True)}
    (out / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {node: host}}}))
    (out / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                                   "roles": ["peer_net", role]}]))
    (out / "interfaces").write_text(" ".join(i.name for i in configs[node].interfaces))
PY

for role in bird gobgp; do
  ip netns add $NS
  ip -n $NS link set lo up
  for i in $(cat $W/$role/interfaces); do
    ip -n $NS link add $i type veth peer name p-$i && ip -n $NS link set p-$i up
  done
  echo "== $role"
  unshare -m ip netns exec $NS bash "$0" --inner $role || true
  [ -f $W/$role/daemon.pid ] && kill "$(cat $W/$role/daemon.pid)" 2>/dev/null || true
  sleep 0.5
  ip netns del $NS
done
