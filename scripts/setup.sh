#!/usr/bin/env bash
# Idempotent machine setup for aidclab (Debian 12, root): says what it did, does nothing twice.
#   - Debian packages: docker.io (engine), mmdebstrap (node rootfs), iproute2 (ip netns, tc), tshark,
#     clang + llvm + libbpf-dev (tc programs, aidcnet/ebpf/), bpftool (their maps, from the host)
#   - a virtualenv .venv with aidclab and its dev extras
#   - dockerd started in the background (no systemd here) and waited for
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
did=()

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(mmdebstrap)
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
command -v tcpdump >/dev/null 2>&1 || need_pkgs+=(tcpdump)
# tshark: the independent decoder our message formats are checked against (IGMPv3 reports, docs/igmp.md).
command -v tshark >/dev/null 2>&1 || need_pkgs+=(tshark)
# The tc programs (aidcnet/ebpf/): BIER's compiled here at image build time, link-fault's here for the host
# to attach (clang -target bpf needs the libbpf and kernel UAPI headers); bpftool reads and writes their
# maps from the host; nsenter for the netns dataplane tests.
command -v clang >/dev/null 2>&1 || need_pkgs+=(clang)
command -v llvm-objdump >/dev/null 2>&1 || need_pkgs+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need_pkgs+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need_pkgs+=(linux-libc-dev)
command -v bpftool >/dev/null 2>&1 || [ -x /usr/sbin/bpftool ] || need_pkgs+=(bpftool)
command -v nsenter >/dev/null 2>&1 || need_pkgs+=(util-linux)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install ${need_pkgs[*]} (run: sudo make setup)" >&2; exit 1
  fi
  echo "setup: apt-get install ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  did+=("installed ${need_pkgs[*]}")
fi

stamp="$VENV/.aidclab-setup"
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
  did+=("created $VENV")
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: pip install -e .[dev] into $VENV (about a minute the first time)"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -e '.[dev]'
  echo "$want" > "$stamp"
  did+=("installed aidclab[dev] into $VENV")
fi

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: dockerd is not running and starting it needs root (run: sudo make setup)" >&2; exit 1
  fi
  echo "setup: starting dockerd (log: /var/log/aidclab-dockerd.log)"
  # setsid: dockerd must outlive the shell (and make) that started it.
  setsid nohup dockerd >/var/log/aidclab-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    echo "setup: dockerd did not answer within 60 s; last log lines:" >&2
    tail -20 /var/log/aidclab-dockerd.log >&2; exit 1
  fi
  did+=("started dockerd")
fi
mkdir -p /run/netns

if [ ${#did[@]} -eq 0 ]; then
  echo "setup: nothing to do (packages, $VENV and dockerd already in place)"
else
  printf 'setup: done: %s\n' "$(IFS=';'; echo "${did[*]}" | sed 's/;/; /g')"
fi
