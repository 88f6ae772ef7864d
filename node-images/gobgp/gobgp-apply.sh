#!/bin/sh
# (Re)start gobgpd on /etc/gobgp/gobgpd.conf and originate the prefixes in /etc/gobgp/networks. A restart,
# not SIGHUP: gobgpd's reload only adds and removes neighbors and ignores [global] (ASN, router-id).
# The config file has no "network" statement, so originated prefixes go in through gobgp's API.
set -e
DIR=${GOBGP_DIR:-/etc/gobgp}
CONF=$DIR/gobgpd.conf
PIDFILE=${GOBGP_PIDFILE:-/run/gobgpd.pid}
LOG=${GOBGP_LOG:-/var/log/gobgpd.log}
if [ -f "$PIDFILE" ] && kill "$(cat "$PIDFILE")" 2>/dev/null; then
  i=0
  while kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
fi
if [ -s "$CONF" ]; then
  setsid gobgpd -f "$CONF" -p --api-hosts=127.0.0.1:50051 >>"$LOG" 2>&1 </dev/null &
else
  setsid gobgpd -p --api-hosts=127.0.0.1:50051 >>"$LOG" 2>&1 </dev/null &
fi
echo $! > "$PIDFILE"
# The API answers once gobgpd has read its config; until then "gobgp global" fails.
i=0
until gobgp global >/dev/null 2>&1; do
  i=$((i + 1))
  [ $i -lt 100 ] || { echo "gobgpd did not answer on its API within 10 s; see $LOG" >&2; exit 1; }
  sleep 0.1
done
grep -v '^#' "$DIR/networks" 2>/dev/null | while read -r prefix; do
  if [ -n "$prefix" ]; then gobgp global rib add -a ipv4 "$prefix"; fi
done
exit 0
