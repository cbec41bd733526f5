#!/usr/bin/env bash
# Prepare rootful podman for the molecule scenarios on a Debian 12 machine without registry
# access (FACTS.md, "Containers for molecule"): Debian's podman with runc and ulimits the host
# allows, and a Debian bookworm base image built locally with debootstrap and imported. The image
# has systemd (bookworm's 252: newer ones refuse this host's cgroup v1 layout): scenarios that
# need it start /sbin/init (podman --systemd=always), the others a sleep.
set -euo pipefail
image=${IMAGE:-localhost/llmfleet-debian-systemd:bookworm}
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${MIRROR:-${mirror:-http://deb.debian.org/debian}}

# podman, runc, debootstrap: requirements/system.txt, group molecule (nothing done when present)
"$(dirname "$0")/system_packages.sh" molecule

# crun refuses this host's hybrid cgroup layout; runc works. Ulimits above the host's hard
# limits make every container start fail.
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
conf=/etc/containers/containers.conf
mkdir -p /etc/containers
if ! grep -q 'llmfleet: test settings' "$conf" 2>/dev/null; then
  cat >>"$conf" <<CONF
# llmfleet: test settings (tools/podman_setup.sh)
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]

[engine]
runtime = "runc"
CONF
fi

if ! podman image exists "$image"; then
  root=$(mktemp -d /var/tmp/llmfleet-rootfs.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase --include=python3,python3-apt,sudo,ca-certificates,systemd,systemd-sysv,dbus \
    bookworm "$root" "$mirror" >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import --change 'CMD ["/bin/sleep", "infinity"]' - "$image" >/dev/null
fi
podman run --rm --network host "$image" python3 -c 'import sys; print("podman ok:", sys.version.split()[0])'
