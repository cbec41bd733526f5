#!/usr/bin/env bash
# The check to run on the day a machine with an NVIDIA GPU is lent (for minutes; no network there,
# torch and nvidia-smi present, maybe no systemd or podman). It runs anywhere, in under 8 minutes,
# skipping with the reason what this machine cannot do, and prints one summary.
#
#   tools/device_check.sh [OUT_DIR]        OUT_DIR: default $OUT if set, else ./device-check-out
#
# Steps, each "ok", "failed" or "skipped", with its reason:
#   gpu_probe     llmfleet.engines.gpu_probe's facts (OUT_DIR/gpu_probe.json) and, with a driver,
#                 nvidia-smi's outputs as a fixture case (OUT_DIR/nvidia-smi/<case>/: copy it into
#                 tests/fixtures/nvidia-smi/, where the fake nvidia-smi replays it)
#   gpu_compute   gpu_probe's compute check on every GPU, in a Python with torch (vLLM's own op too
#                 when that Python has vLLM); OUT_DIR/gpu_compute.json
#   engine_node   the engine_node flow on inventories/local (site.yml), where the index it installs
#                 from answers
#   kernel_check  uv_engine_env's GPU check of the environment engine_node built
#   vllm_serve    `vllm serve` of a tiny random-weight model made here with its own tokenizer
#                 (transformers; nothing downloaded), gated by llmfleet.engines.engine_ready: time
#                 to ready and one-token latency; OUT_DIR/vllm-serve.log
#   vllm_group    with two GPUs or more: the same model served by a model group of two members on
#                 this machine, one GPU each (vLLM's multi-node mode over the loopback, tensor parallel
#                 across them, NCCL), as the collection starts a group's members: the follower
#                 --headless first, the leader gated by engine_ready; then the follower is killed and
#                 how soon the leader's /health says so is measured; OUT_DIR/vllm-group-*.log
# OUT_DIR/summary.txt holds the summary, OUT_DIR/device_check.log what ran. Exit status 0 unless
# a step that could run failed.
#
# Environment (all optional):
#   DEVICE_CHECK_PYTHON      a Python with torch (default: the first of python3, /usr/bin/python3,
#                            /usr/local/bin/python3, /opt/conda/bin/python that imports torch)
#   DEVICE_CHECK_VLLM        the vllm executable to serve with (default: the one engine_node built,
#                            else beside DEVICE_CHECK_PYTHON, else on PATH)
#   DEVICE_CHECK_MODEL_DIR   a model directory to serve instead of making one
#   DEVICE_CHECK_SERVE_ARGS  more `vllm serve` arguments (default: --enforce-eager)
#   DEVICE_CHECK_INDEX_URL   the simple index engine_node installs from (default: https://pypi.org/simple)
#   DEVICE_CHECK_ANSIBLE_BIN the directory with ansible and ansible-playbook (default: .venv/bin, else PATH)
#   DEVICE_CHECK_WHEELS      wheels of ansible-core and its dependencies for this machine's python3
#                            (`pip download ansible-core -d DIR`), installed offline into a scratch
#                            venv when there is no ansible-core here
#   DEVICE_CHECK_BUDGET      seconds for the whole check (default 420)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-./device-check-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
budget=${DEVICE_CHECK_BUDGET:-420}
index_url=${DEVICE_CHECK_INDEX_URL:-https://pypi.org/simple}
engine_root=/opt/llmfleet
work=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX")
log=$out/device_check.log
: >"$log"
: >"$work/summary"
mkdir -p "$work/state" "$work/collections/ansible_collections/llmfleet"
ln -s "$repo" "$work/collections/ansible_collections/llmfleet/engines"

cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '%s\n' "$*" | tee -a "$log"; }
# state shared between the steps (each runs in a subshell of its own)
put() { printf '%s' "$2" >"$work/state/$1"; }
get() { cat "$work/state/$1" 2>/dev/null || true; }
result() {  # STEP STATUS DETAIL
  printf '%-13s %s: %s\n' "$1" "$2" "$3" >>"$work/summary"
  put "status_$1" "$2"
  say "== [${SECONDS} s] $1 $2: $3"
}
left() { echo $((budget - SECONDS)); }
now_ms() { date +%s%3N; }

say "device check: $(hostname) $(date -u +%FT%TZ), repository $repo, output $out, budget $budget s"

# --- ansible-core ----------------------------------------------------------------------------
ansible_bin=""
find_ansible() {
  local dir candidate
  candidate=$(command -v ansible 2>/dev/null || true)
  set -- "$repo/.venv/bin" "${candidate%/*}"
  if [ -n "${DEVICE_CHECK_ANSIBLE_BIN:-}" ]; then
    set -- "$DEVICE_CHECK_ANSIBLE_BIN"  # when given, only there
  fi
  for dir in "$@"; do
    if [ -n "$dir" ] && [ -x "$dir/ansible" ] && [ -x "$dir/ansible-playbook" ]; then
      ansible_bin=$dir
      return 0
    fi
  done
  if [ -n "${DEVICE_CHECK_WHEELS:-}" ] && [ -d "${DEVICE_CHECK_WHEELS}" ]; then
    say "no ansible-core here: installing it from $DEVICE_CHECK_WHEELS into a scratch venv"
    if python3 -m venv "$work/ansible-venv" >>"$log" 2>&1 &&
      "$work/ansible-venv/bin/python" -m pip install -q --no-index --find-links "$DEVICE_CHECK_WHEELS" \
        ansible-core >>"$log" 2>&1; then
      ansible_bin=$work/ansible-venv/bin
      return 0
    fi
  fi
  return 1
}
find_ansible || true
apy=python3
if [ -n "$ansible_bin" ] && [ -x "$ansible_bin/python" ]; then
  apy=$ansible_bin/python
fi
no_ansible="no ansible-core here (${DEVICE_CHECK_ANSIBLE_BIN:-not in .venv/bin nor on PATH}; make venv, DEVICE_CHECK_ANSIBLE_BIN or DEVICE_CHECK_WHEELS)"

# jget FILE EXPR: a Python expression on the JSON document r of FILE, printed ("" for None)
jget() {
  "$apy" - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
value = eval(sys.argv[2], {"r": r})  # a local tool: the expressions are this script's own
print("" if value is None else value)
PY
}

# module NAME TIMEOUT MODULE ARGS_JSON: runs llmfleet.engines.MODULE on this machine with `ansible`;
# its result goes to $work/NAME.json (when ansible printed one); returns ansible's exit status.
module() {
  local name=$1 seconds=$2 mod=$3 args=$4 rc=0
  say "\$ ansible localhost -m llmfleet.engines.$mod -a '$args'"
  ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_LOCALHOST_WARNING=False \
    ANSIBLE_INVENTORY_UNPARSED_WARNING=False ANSIBLE_NOCOLOR=1 ANSIBLE_DEPRECATION_WARNINGS=False \
    timeout -k 10 "$seconds" "$ansible_bin/ansible" localhost -i localhost, -c local \
    -e "ansible_python_interpreter=$apy" -m "llmfleet.engines.$mod" -a "$args" \
    >"$work/$name.out" 2>>"$log" || rc=$?
  "$apy" - "$work/$name.out" "$work/$name.json" <<'PY' >>"$log" 2>&1 || true
import json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^localhost \| [A-Z!]+ => ", text, re.M)
if m:
    result, _end = json.JSONDecoder().raw_decode(text[m.end():])
    json.dump(result, open(sys.argv[2], "w"), indent=1, sort_keys=True)
else:
    print(text[-2000:])
PY
  return "$rc"
}

# --- the steps ---------------------------------------------------------------------------------
step_gpu_probe() {
  if [ -z "$ansible_bin" ]; then
    result gpu_probe skipped "$no_ansible"
    return 0
  fi
  local rc=0 smi driver count case dir
  module gpu_probe 120 gpu_probe '{"version": "0.20.0", "build": "auto", "timeout": 60}' || rc=$?
  if [ ! -s "$work/gpu_probe.json" ]; then
    result gpu_probe failed "ansible exited $rc without a result (see device_check.log)"
    return 0
  fi
  cp "$work/gpu_probe.json" "$out/gpu_probe.json"
  if [ "$rc" -ne 0 ]; then
    result gpu_probe failed "$(jget "$work/gpu_probe.json" 'r.get("msg")')"
    return 0
  fi
  driver=$(jget "$work/gpu_probe.json" 'r["driver_version"]')
  count=$(jget "$work/gpu_probe.json" 'r["gpu_count"]')
  put gpu_count "$count"
  if [ -z "$driver" ] || [ "$count" = 0 ]; then
    put no_gpu "no GPU here (gpu_probe: $(jget "$work/gpu_probe.json" 'r["driver_error"] or "gpu_probe found no GPU"'))"
    result gpu_probe ok "$(get no_gpu); facts in gpu_probe.json"
    return 0
  fi
  smi=$(jget "$work/gpu_probe.json" 'r["nvidia_smi"]')
  case=$(fixture_case "$work/gpu_probe.json")
  dir=$out/nvidia-smi/$case
  mkdir -p "$dir"
  timeout 60 "$smi" --query-gpu=index,name,uuid,compute_cap,memory.total,driver_version \
    --format=csv,noheader,nounits >"$dir/query-gpu.csv" 2>>"$log" || rc=$?
  timeout 60 "$smi" -q -x >"$dir/q-x.xml" 2>>"$log" || rc=$?
  jget "$work/gpu_probe.json" '"%d x %s on driver %s (CUDA %s), captured by tools/device_check.sh" % (r["gpu_count"], ", ".join(sorted({g["name"] for g in r["gpus"]})), r["driver_version"], r["cuda_version"])' >"$dir/description"
  if [ "$rc" -ne 0 ]; then
    result gpu_probe failed "nvidia-smi exited $rc while saving the fixture case nvidia-smi/$case"
    return 0
  fi
  result gpu_probe ok "$(jget "$work/gpu_probe.json" '"%d GPU(s) %s, driver %s (CUDA %s), glibc %s; vLLM 0.20.0 build %s" % (r["gpu_count"], ", ".join(sorted({g["name"] + " (" + str(g["compute_capability"]) + ")" for g in r["gpus"]})), r["driver_version"], r["cuda_version"], r["glibc"], r["choice"]["build"])'); facts in gpu_probe.json, fixture case nvidia-smi/$case"
}

# the fixture case's name, as tests/fixtures/nvidia-smi names them: h200-580, 8xh100-580, mixed-a100-v100-535
fixture_case() {
  "$apy" - "$1" <<'PY'
import collections, json, sys
r = json.load(open(sys.argv[1]))
short = [g["name"].replace("NVIDIA ", "").replace("Tesla ", "").split()[0].split("-")[0].lower() for g in r["gpus"]]
kinds = collections.Counter(short)
name = ("mixed-" + "-".join(sorted(kinds))) if len(kinds) > 1 else ("%dx" % len(short) if len(short) > 1 else "") + short[0]
print("%s-%s" % (name, r["driver_version"].split(".")[0]))
PY
}

find_torch_python() {
  local py
  for py in "${DEVICE_CHECK_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3 /usr/local/bin/python3 \
    /opt/conda/bin/python; do
    if [ -n "$py" ] && [ -x "$py" ] && timeout 120 "$py" -c 'import torch' >>"$log" 2>&1; then
      printf '%s' "$py"
      return 0
    fi
  done
  return 1
}

no_gpu_reason() {
  if [ -n "$(get no_gpu)" ]; then
    get no_gpu
  else
    printf 'gpu_probe gave no facts (see above)'
  fi
}

has_module() { timeout 60 "$1" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$2') is None)" 2>>"$log"; }

step_gpu_compute() {
  if [ -z "$ansible_bin" ]; then
    result gpu_compute skipped "$no_ansible"
    return 0
  fi
  if [ -n "$(get no_gpu)" ] || [ -z "$(get gpu_count)" ]; then
    result gpu_compute skipped "$(no_gpu_reason)"
    return 0
  fi
  local py engine=none rc=0 seconds
  if ! py=$(find_torch_python); then
    result gpu_compute skipped "no Python with torch here (set DEVICE_CHECK_PYTHON)"
    return 0
  fi
  put torch_python "$py"
  if has_module "$py" vllm; then
    engine=vllm
  fi
  seconds=$(($(left) > 300 ? 240 : 120))
  module gpu_compute $((seconds + 30)) gpu_probe \
    "$("$apy" -c 'import json, sys; print(json.dumps({"python": sys.argv[1], "engine": sys.argv[2], "python_timeout": int(sys.argv[3])}))' "$py" "$engine" "$seconds")" || rc=$?
  if [ ! -s "$work/gpu_compute.json" ]; then
    result gpu_compute failed "ansible exited $rc without a result (see device_check.log)"
    return 0
  fi
  cp "$work/gpu_compute.json" "$out/gpu_compute.json"
  if [ "$(jget "$work/gpu_compute.json" 'r.get("compute", {}).get("ok")')" = True ]; then
    result gpu_compute ok "$(jget "$work/gpu_compute.json" '(lambda c: "torch %s (CUDA %s) of %s computed on %d GPU(s)%s, in %.1f s" % (c["torch"], c["torch_cuda"], c["python"], len(c["devices"] or []), (", and vLLM %s %s" % (c["engine_op"].get("version"), c["engine_op"].get("op"))) if c.get("engine_op") else " (torch only: no vLLM in it)", c["seconds"]))(r["compute"])' 2>>"$log" || echo "see gpu_compute.json")"
  else
    result gpu_compute failed "$(jget "$work/gpu_compute.json" '(lambda c: "%s at %s: %s; %s" % (c.get("classification"), c.get("stage"), c.get("error"), c.get("hint")) if c else r.get("msg"))(r.get("compute") or {})')"
  fi
}

# why the index engine_node installs from cannot be used here (nothing when it answers)
index_unreachable() {
  timeout 20 "$apy" - "$index_url" <<'PY' 2>&1 || echo "the index $index_url does not answer here"
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/vllm/", timeout=8).close()
except Exception as exc:  # any failure means: no wheels from there
    print("the index engine_node installs from (%s) does not answer here: %s" % (sys.argv[1], exc))
PY
}

step_engine_node() {
  local why rc=0 started
  if [ -z "$ansible_bin" ]; then
    why=$no_ansible
  elif [ -n "$(get no_gpu)" ] || [ -z "$(get gpu_count)" ]; then
    why="$(no_gpu_reason): the flow for this machine's GPU build needs one"
  elif why=$(index_unreachable) && [ -n "$why" ]; then
    :
  elif [ "$(id -u)" != 0 ]; then
    why="engine_node installs under $engine_root as root; this runs as $(id -un)"
  elif [ "$(left)" -lt 300 ]; then
    why="only $(left) s left of the $budget s budget"
  else
    why=""
  fi
  if [ -n "$why" ]; then
    result engine_node skipped "$why"
    result kernel_check skipped "no environment built (engine_node skipped)"
    return 0
  fi
  started=$SECONDS
  say "\$ ansible-playbook -i inventories/local playbooks/site.yml"
  (cd "$repo" && ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_NOCOLOR=1 \
    timeout -k 20 $(($(left) - 200)) "$ansible_bin/ansible-playbook" -i inventories/local playbooks/site.yml \
    >>"$log" 2>&1) || rc=$?
  if [ "$rc" -eq 0 ]; then
    put vllm "$engine_root/engines/vllm/current/bin/vllm"
    result engine_node ok "site.yml on inventories/local in $((SECONDS - started)) s: $(readlink "$engine_root/engines/vllm/current" || echo '?')"
    result kernel_check ok "uv_engine_env's GPU check passed before current was switched (engine_node_gpu_check)"
  else
    result engine_node failed "site.yml on inventories/local exited $rc after $((SECONDS - started)) s ($([ "$rc" -eq 124 ] && echo 'out of time; ')see device_check.log)"
    result kernel_check skipped "no environment switched in (engine_node failed; its GPU check, if it ran, is in device_check.log)"
  fi
}

# the tiny model: a Llama of ~3 MB with random weights and a byte-level tokenizer of its own
make_model() {
  timeout 180 "$1" - "$2" <<'PY'
import os, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
for special in ("<unk>", "<s>", "</s>"):
    vocab[special] = len(vocab)
tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                        unk_token="<unk>").save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(vocab), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                     bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], tie_word_embeddings=False)
config.torch_dtype = torch.float16
LlamaForCausalLM(config).to(torch.float16).save_pretrained(out, safe_serialization=True)
print(sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)))
PY
}

stop_server() {
  local pid key
  for key in serve_pid follower_pid; do
    pid=$(get "$key")
    [ -n "$pid" ] || continue
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || true
      for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
      done
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$work/state/$key"
  done
}

free_port() { "$apy" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# gate STEP PORT DEADLINE VERSION STARTED_MS LOG: engine_ready on 127.0.0.1:PORT, 5 s per call, until it passes
# (0; the gate's result in $work/STEP.json), the server (serve_pid) exits (1) or the deadline (2); the step's
# result is said here when it is not ready
gate() {
  local step=$1 port=$2 deadline=$3 version=$4 started=$5 serverlog=$6 rc
  while :; do
    rm -f "$work/$step.json"
    rc=0
    module "$step" 60 engine_ready \
      "$("$apy" -c 'import json, sys; print(json.dumps({"url": "http://127.0.0.1:" + sys.argv[1], "model": "tiny-random", "deadline": int(sys.argv[2]), "wait": 5, "timeout": 10, **({"version": sys.argv[3]} if sys.argv[3] else {})}))' "$port" "$deadline" "$version")" || rc=$?
    if [ "$(jget "$work/$step.json" 'r.get("ready")' 2>/dev/null)" = True ]; then
      return 0
    fi
    if ! kill -0 "$(get serve_pid)" 2>/dev/null; then
      wait "$(get serve_pid)" || rc=$?
      result "$step" failed "vllm serve exited ($rc) before it was ready: $(grep -v '^\s*$' "$serverlog" | tail -1 | cut -c1-300)"
      return 1
    fi
    if [ "$rc" -ne 0 ] || [ "$(($(now_ms) - started))" -gt $((deadline * 1000)) ]; then
      result "$step" failed "not ready: $(jget "$work/$step.json" 'r.get("msg")' 2>/dev/null | cut -c1-400 || echo "engine_ready exited $rc")"
      return 2
    fi
  done
}

step_vllm_serve() {
  if [ -z "$ansible_bin" ]; then
    result vllm_serve skipped "$no_ansible (the gate is llmfleet.engines.engine_ready)"
    return 0
  fi
  if [ -n "$(get no_gpu)" ] || [ -z "$(get gpu_count)" ]; then
    result vllm_serve skipped "$(no_gpu_reason): a real vllm serve needs one"
    return 0
  fi
  local vllm="" py candidate model size="" port started ready_ms rc=0 version deadline extra=()
  py=$(get torch_python)
  for candidate in "${DEVICE_CHECK_VLLM:-}" "$(get vllm)" "${py:+${py%/*}/vllm}" "$(command -v vllm || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      vllm=$candidate
      break
    fi
  done
  if [ -z "$vllm" ]; then
    result vllm_serve skipped "no vLLM here (not built by engine_node, not beside ${py:-a Python with torch}, not on PATH; DEVICE_CHECK_VLLM)"
    return 0
  fi
  [ -x "${vllm%/*}/python" ] && py=${vllm%/*}/python
  if [ -n "${DEVICE_CHECK_MODEL_DIR:-}" ]; then
    model=$DEVICE_CHECK_MODEL_DIR
  elif [ -z "$py" ]; then
    result vllm_serve skipped "no Python beside $vllm to make the model with"
    return 0
  else
    for candidate in torch transformers tokenizers; do
      if ! has_module "$py" "$candidate"; then
        result vllm_serve skipped "cannot make the tiny model: $py has no $candidate (DEVICE_CHECK_MODEL_DIR)"
        return 0
      fi
    done
    model=$work/tiny-model
    started=$SECONDS
    if ! size=$(make_model "$py" "$model" 2>>"$log"); then
      result vllm_serve failed "making the tiny model with $py failed (see device_check.log)"
      return 0
    fi
    say "tiny model: $model, $size bytes, made in $((SECONDS - started)) s"
    size=", made here ($((size / 1024)) KiB)"
  fi
  version=$(timeout 60 "${py:-python3}" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>>"$log" || true)
  put serve_vllm "$vllm"
  put serve_model "$model"
  put serve_version "$version"
  port=$(free_port)
  read -r -a extra <<<"${DEVICE_CHECK_SERVE_ARGS---enforce-eager}"
  deadline=$(($(left) - 30))
  if [ "$deadline" -lt 60 ]; then
    result vllm_serve skipped "only $(left) s left of the $budget s budget"
    return 0
  fi
  say "\$ $vllm serve $model --host 127.0.0.1 --port $port --served-model-name tiny-random --max-model-len 256 --gpu-memory-utilization 0.3 ${extra[*]}"
  started=$(now_ms)
  setsid "$vllm" serve "$model" --host 127.0.0.1 --port "$port" --served-model-name tiny-random \
    --max-model-len 256 --gpu-memory-utilization 0.3 "${extra[@]}" >"$out/vllm-serve.log" 2>&1 &
  put serve_pid "$!"
  if gate vllm_serve "$port" "$deadline" "$version" "$started" "$out/vllm-serve.log"; then
    ready_ms=$(($(now_ms) - started))
    cp "$work/vllm_serve.json" "$out/vllm_serve.json"
    result vllm_serve ok "vLLM ${version:-?} served ${model##*/}$size: ready $((ready_ms / 1000)).$(((ready_ms % 1000) / 100)) s after its start, one-token completion $(jget "$work/vllm_serve.json" 'r["completion_ms"]') ms (engine_ready)"
  fi
  stop_server
}

step_vllm_group() {
  if [ -z "$ansible_bin" ]; then
    result vllm_group skipped "$no_ansible (the gate is llmfleet.engines.engine_ready)"
    return 0
  fi
  local count vllm model version uuids port store internal started ready_ms deadline extra=() member env_common lost=""
  count=$(get gpu_count)
  if [ -n "$(get no_gpu)" ] || [ -z "$count" ]; then
    result vllm_group skipped "$(no_gpu_reason): a model group of two members needs two GPUs"
    return 0
  fi
  if [ "$count" -lt 2 ]; then
    result vllm_group skipped "$count GPU here: a model group of two members needs two"
    return 0
  fi
  vllm=$(get serve_vllm)
  model=$(get serve_model)
  version=$(get serve_version)
  if [ "$(get status_vllm_serve)" != ok ]; then
    result vllm_group skipped "vllm_serve did not serve the model here ($(get status_vllm_serve))"
    return 0
  fi
  deadline=$(($(left) - 40))
  if [ "$deadline" -lt 60 ]; then
    result vllm_group skipped "only $(left) s left of the $budget s budget"
    return 0
  fi
  uuids=$(jget "$work/gpu_probe.json" '" ".join(g["uuid"] for g in r["gpus"][:2])')
  read -r -a uuids <<<"$uuids"
  port=$(free_port)
  store=$(free_port)
  read -r -a extra <<<"${DEVICE_CHECK_SERVE_ARGS---enforce-eager}"
  env_common=(VLLM_HOST_IP=127.0.0.1 GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo)
  started=$(now_ms)
  for member in 1 0; do  # the follower first, as the rollout starts a group
    internal=$(free_port)
    local words=(serve "$model" --served-model-name tiny-random --max-model-len 256 --gpu-memory-utilization 0.3
      --tensor-parallel-size 2 --nnodes 2 --node-rank "$member" --master-addr 127.0.0.1 --master-port "$store")
    if [ "$member" = 1 ]; then
      words+=(--headless)
    else
      words+=(--host 127.0.0.1 --port "$port")
    fi
    say "\$ CUDA_VISIBLE_DEVICES=${uuids[$member]} ${env_common[*]} VLLM_PORT=$internal $vllm ${words[*]} ${extra[*]}"
    env CUDA_VISIBLE_DEVICES="${uuids[$member]}" "${env_common[@]}" VLLM_PORT="$internal" \
      setsid "$vllm" "${words[@]}" "${extra[@]}" >"$out/vllm-group-$([ "$member" = 0 ] && echo leader || echo follower).log" 2>&1 &
    put "$([ "$member" = 0 ] && echo serve_pid || echo follower_pid)" "$!"
  done
  if gate vllm_group "$port" "$deadline" "$version" "$started" "$out/vllm-group-leader.log"; then
    ready_ms=$(($(now_ms) - started))
    cp "$work/vllm_group.json" "$out/vllm_group.json"
    # a member lost: how soon the leader's /health stops answering 200 (the real engine on the CPU: at once)
    kill -KILL -- "-$(get follower_pid)" 2>/dev/null || true
    lost=$("$apy" - "$port" <<'PY'
import sys, time, urllib.request
started = time.monotonic()
while time.monotonic() - started < 30:
    try:
        status = urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).status
    except Exception as exc:  # an HTTP error, a refused or reset connection: no longer 200
        status = getattr(exc, "code", type(exc).__name__)
    if status != 200:
        print("%s after %.1f s" % (status, time.monotonic() - started))
        break
    time.sleep(0.2)
else:
    print("still 200 after 30 s")
PY
)
    result vllm_group ok "two members on GPUs ${uuids[0]} and ${uuids[1]}, tensor parallel 2 across them: ready $((ready_ms / 1000)).$(((ready_ms % 1000) / 100)) s after the start, one-token completion $(jget "$work/vllm_group.json" 'r["completion_ms"]') ms (engine_ready); follower killed: the leader's /health $lost"
  fi
  stop_server
}

# --- run them ----------------------------------------------------------------------------------
say "ansible: ${ansible_bin:-none}; python for modules: $apy"
failed_steps=()
for step in gpu_probe gpu_compute engine_node vllm_serve vllm_group; do
  # each step in a subshell with -e in force (not in an `||` list, where bash would ignore -e):
  # an unexpected error ends that step, not the check
  set +e
  (
    set -eEuo pipefail
    trap 'say "unexpected error in $step at line $LINENO: $BASH_COMMAND"' ERR
    "step_$step"
  )
  rc=$?
  set -e
  if [ "$rc" -ne 0 ] && [ -z "$(get "status_$step")" ]; then
    result "$step" failed "the step stopped at an unexpected error (exit $rc; see device_check.log)"
  fi
  stop_server
done
for step in gpu_probe gpu_compute engine_node kernel_check vllm_serve vllm_group; do
  [ "$(get "status_$step")" = failed ] && failed_steps+=("$step")
done

{
  echo "device check summary: $(hostname), $(date -u +%FT%TZ), ${SECONDS} s, output in $out"
  sed 's/^/  /' "$work/summary"
  if [ "${#failed_steps[@]}" -eq 0 ]; then
    echo "result: ok (nothing that could run failed)"
  else
    echo "result: FAILED: ${failed_steps[*]}"
  fi
} >"$out/summary.txt"
echo
cat "$out/summary.txt"
[ "${#failed_steps[@]}" -eq 0 ]
