#!/usr/bin/env bash
# Install the Debian packages of requirements/system.txt that a group needs (run, test,
# molecule), only those missing: nothing is done, and nothing printed, when every one is there.
# When something is missing it says so in one line, then installs it with apt-get (root), or, run
# by another user, names what is missing and how to install it, and exits 1.
#
#   tools/system_packages.sh test        what `make test` needs
#   tools/system_packages.sh --list run  the packages of a group, one per line (installs nothing)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
list=$repo/requirements/system.txt
only_list=false
if [ "${1:-}" = --list ]; then only_list=true; shift; fi
[ "$#" -gt 0 ] || { echo "usage: $0 [--list] GROUP... (groups: run, test, molecule)" >&2; exit 2; }

wanted=()
while read -r pkg groups _; do
  case $pkg in ''|'#'*) continue ;; esac
  for group in "$@"; do
    if [[ ",$groups," == *",$group,"* ]]; then wanted+=("$pkg"); break; fi
  done
done <"$list"
[ "${#wanted[@]}" -gt 0 ] || { echo "system: no package of requirements/system.txt is in group(s) $*" >&2; exit 2; }
if $only_list; then printf '%s\n' "${wanted[@]}"; exit 0; fi

missing=()
for pkg in "${wanted[@]}"; do
  # installed means dpkg's status "install ok installed" (a removed package keeps "deinstall ... config-files")
  [ "$(dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$pkg")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "system: missing ${missing[*]} (requirements/system.txt, group $*); installing needs root: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "system: installing ${missing[*]} with apt-get (requirements/system.txt, group $*)"
export DEBIAN_FRONTEND=noninteractive
# A package's own service (nginx-light's nginx.service) is not started on install where
# invoke-rc.d is asked: this script installs programs the tests run themselves.
policy=/usr/sbin/policy-rc.d
made_policy=false
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  made_policy=true
fi
trap '$made_policy && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
