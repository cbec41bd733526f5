#!/usr/bin/env bash
# `make test`: the whole suite in two lanes that run side by side.
#
#   lane 1: roles system network docs                           (pytest, ansible-playbook)
#   lane 2: molecule unit latest integration lint sanity build  (podman containers, then the newest ansible-core)
#
# The machine's two cores are busy through most of the run (ansible-playbook and the engines use a core
# each), so the lanes are balanced to end together: a lane that ends early leaves a core idle while the
# other goes on (measured from a fresh clone: lane 1 took 2,838 s and lane 2 2,819 s before the molecule
# scenarios were pipelined, which took about 700 s off molecule; the unit tests, then in lane 1's `units`
# beside tests/roles, and integration moved to lane 2).
#
# Each lane is a series of ansible-playbook and pytest processes that mostly keep one core busy
# and wait on timers and sockets in between (gates, polls, container starts), so on a 2-core
# machine the two lanes together take far less than one after the other. They share nothing that
# one writes while the other reads: every server binds port 0, every test writes under its own
# temporary directory, the molecule lane keeps its work under build/molecule.*, and the one
# download both read (devpi-server's wheelhouse) is fetched here before they start.
#
# Every piece runs even when an earlier one failed, so one run reports every failure; each prints
# its time; molecule's lines are prefixed "molecule| ". Exits non-zero when any piece failed.
#
#   tools/test_all.sh                   both lanes
#   TEST_LANES=serial tools/test_all.sh one after the other (a machine with one core)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
make=${MAKE:-make}
status=$repo/build/test-all
rm -rf "$status"
mkdir -p "$status"

lane1=(roles system network docs)
# lane 2: molecule, whose real_engine scenario runs the real vLLM (about 17 minutes), then the pieces
# that balance the lanes. The role-level real-engine test (make real-engine, tests/roles/test_real_engine.py)
# is not in the suite: the scenario proves the same promises under real systemd, and CI's 90 minutes do
# not hold both.
lane2=(molecule unit latest integration lint sanity build)
skipped=()
# The molecule scenarios need root (rootful podman, systemd as PID 1 in containers, apt for the
# image), and the real engine too (it runs as the service user the role makes); run by another
# user they are skipped, and said so here and at the end.
if [ "$(id -u)" -ne 0 ]; then
  lane1+=(unit latest integration lint sanity build)
  lane2=()
  skipped=(molecule)
  echo "test: not root: skipping molecule (needs root: rootful podman, systemd in containers, apt); tests that make users or hand files to them skip themselves"
fi

# piece NAME: run `make NAME` (its output kept in $status/NAME.log too), print its time, record a
# failure in $status/NAME.failed.
piece() {
  local name=$1 start rc
  start=$(date +%s)
  echo "test: $name started at $(date -u +%H:%M:%S)"
  "$make" --no-print-directory "$name" 2>&1 | tee "$status/$name.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    echo "test: $name passed in $(( $(date +%s) - start )) s"
  else
    echo "test: $name FAILED (exit $rc) in $(( $(date +%s) - start )) s"
    touch "$status/$name.failed"
  fi
}

# lane TAG PIECE...: the pieces one after the other, then $status/TAG.done (a lane killed before
# its end leaves no mark, and counts as failed).
lane() {
  local tag=$1 name
  shift
  for name in "$@"; do piece "$name"; done
  touch "$status/$tag.done"
}

all_start=$(date +%s)
# The wheelhouse both lanes read, downloaded once before they start.
if ! tools/devpi_wheelhouse.sh >/dev/null; then
  echo "test: tools/devpi_wheelhouse.sh failed: devpi-server's wheels could not be fetched" >&2
  exit 1
fi

if [ "${TEST_LANES:-parallel}" = serial ]; then
  lane lane1 "${lane1[@]}"
  lane lane2 ${lane2[@]+"${lane2[@]}"}
else
  # Lane 2 in the background, its output prefixed line by line; its PID kept to wait on it (and
  # to stop it, with its children, if this script is interrupted).
  set -m
  ( lane lane2 ${lane2[@]+"${lane2[@]}"} 2>&1 | sed -u 's/^/molecule| /' ) &
  lane2_pid=$!
  set +m
  trap 'kill -- -"$lane2_pid" 2>/dev/null; exit 130' INT TERM
  lane lane1 "${lane1[@]}"
  wait "$lane2_pid"
  trap - INT TERM
fi

failed=()
for name in "${lane1[@]}" ${lane2[@]+"${lane2[@]}"}; do
  [ -e "$status/$name.failed" ] && failed+=("$name")
done
for tag in lane1 lane2; do
  [ -e "$status/$tag.done" ] || failed+=("$tag (ended before its last piece)")
done
echo "test: the whole suite took $(( $(date +%s) - all_start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "test: FAILED: ${failed[*]}"
  # Last, so that the end of the output (all CI shows) says why: a short excerpt of each failed
  # piece's log (tools/why_failed.py); the whole logs are in build/test-all/.
  for name in "${lane1[@]}" ${lane2[@]+"${lane2[@]}"}; do
    [ -e "$status/$name.failed" ] || continue
    echo "test: why $name failed (build/test-all/$name.log):"
    python3 tools/why_failed.py "$status/$name.log" | sed 's/^/  /'
  done
  exit 1
fi
if [ "${#skipped[@]}" -gt 0 ]; then
  echo "test: every piece that ran passed; skipped (needs root): ${skipped[*]}"
else
  echo "test: every piece passed"
fi
