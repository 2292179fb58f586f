#!/usr/bin/env bash
# Make a Docker engine usable here, for `inv build`, `inv run --hosts` and the container tests:
# install docker.io, debootstrap, qemu-user-static, binfmt-support and openssh (Debian packages)
# if missing, register qemu for the other architectures (aarch64, ppc64le) with binfmt_misc, and
# start dockerd if no daemon answers. dockerd gets the flags this machine needs:
# no bridge, no iptables (containers use --network none; builds use --network host).
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ -e /usr/bin/qemu-ppc64le-static ] && [ -e /usr/bin/qemu-aarch64-static ] || need+=(qemu-user-static binfmt-support)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/docker.sh: missing ${need[*]}; install them (as root) and start dockerd" >&2
    exit 1
  fi
  echo "scripts/docker.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(id -u)" = 0 ]; then  # images of the other architectures run under qemu
  binfmt=/proc/sys/fs/binfmt_misc
  [ -e $binfmt/register ] || mount -t binfmt_misc binfmt_misc $binfmt 2>/dev/null || true
  for qemu in qemu-aarch64 qemu-ppc64le; do
    [ "$(uname -m)" = "${qemu#qemu-}" ] || [ -e "$binfmt/$qemu" ] \
      || update-binfmts --enable "$qemu" 2>/dev/null || echo "scripts/docker.sh: $qemu not registered" >&2
  done
fi
if ! /usr/bin/docker info >/dev/null 2>&1; then
  log=${DOCKERD_LOG:-/tmp/dockerd.log}
  echo "scripts/docker.sh: starting dockerd (log: $log)"
  nohup dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false >"$log" 2>&1 &
  for _ in $(seq 1 60); do
    /usr/bin/docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  /usr/bin/docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $log" >&2; exit 1; }
fi
echo "scripts/docker.sh: docker $(/usr/bin/docker version --format '{{.Server.Version}}') ready"
