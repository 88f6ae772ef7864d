#!/bin/sh
# Start FRR's daemons the Debian way, then stay in the foreground so the container lives.
set -e
/usr/lib/frr/frrinit.sh start
exec sleep infinity
