#!/bin/sh
# Start bird (it daemonizes, control socket /run/bird/bird.ctl), then stay in the foreground.
set -e
mkdir -p /run/bird
bird -c /etc/bird/bird.conf -s /run/bird/bird.ctl
exec sleep infinity
