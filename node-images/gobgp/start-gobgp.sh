#!/bin/sh
# Start gobgpd (from its config once the gobgp role has written one), then stay in the foreground.
set -e
/usr/local/bin/gobgp-apply
exec sleep infinity
