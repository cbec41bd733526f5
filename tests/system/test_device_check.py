"""tools/device_check.sh, the one script for the day a GPU machine is lent.

Here (no GPU) it must run, say which steps it skipped and why, exit 0 and write its output
directory. Then the same script on a GPU machine made of the test fakes (the captured H200's
nvidia-smi, the fake torch and vLLM, whose ``vllm serve`` speaks the API the readiness gate asks):
each step that can run does, the fixture case it saves is the one the fake replayed, the served
model passes ``engine_ready``; a compute check or a server that fails makes the script fail, naming
the step. Nothing leaves 127.0.0.1: the index engine_node would install from is a closed port.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.unit.plugins.python_envs import fake_runtime_env

pytestmark = pytest.mark.integration

SCRIPT = REPO / "tools" / "device_check.sh"
CASE = REPO / "tests" / "fixtures" / "nvidia-smi" / "h200-580"
STEPS = ("gpu_probe", "gpu_compute", "engine_node", "kernel_check", "vllm_serve", "vllm_group")


def closed_port_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return "http://127.0.0.1:%d/simple" % port  # nothing listens there once the socket is closed


def base_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "DEVICE_CHECK_", "FAKE_"))}
    env.pop("OUT", None)
    # the ansible-core of the Python running the tests (.venv, or .venv-latest in `make latest`)
    env.update(DEVICE_CHECK_ANSIBLE_BIN=str(pathlib.Path(sys.executable).parent),
               DEVICE_CHECK_INDEX_URL=closed_port_url())
    env.update(extra)
    return env


def run(args, env, timeout=300):
    started = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc, time.monotonic() - started


def summary(out):
    """{step: (status, detail)} and the result line, from OUT/summary.txt."""
    lines = (out / "summary.txt").read_text().splitlines()
    assert lines[0].startswith("device check summary: "), lines
    steps = {}
    for line in lines[1:-1]:
        m = re.match(r"^  (\w+) +(ok|failed|skipped): (.+)$", line)
        assert m, line
        steps[m.group(1)] = (m.group(2), m.group(3))
    assert list(steps) == list(STEPS), lines
    return steps, lines[-1]


def test_here_without_a_gpu_it_says_what_it_skipped(tmp_path):
    out = tmp_path / "out"
    # the output directory from $OUT, as on the device machine
    proc, seconds = run([], base_env(OUT=str(out)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert seconds < 120
    steps, result = summary(out)
    assert proc.stdout.rstrip().endswith((out / "summary.txt").read_text().rstrip())  # printed, too
    assert steps["gpu_probe"][0] == "ok" and steps["gpu_probe"][1].startswith("no GPU here (gpu_probe: no nvidia-smi")
    for step in ("gpu_compute", "engine_node", "vllm_serve", "vllm_group"):
        assert steps[step][0] == "skipped" and "no GPU here" in steps[step][1], steps[step]
    assert steps["kernel_check"] == ("skipped", "no environment built (engine_node skipped)")
    assert result == "result: ok (nothing that could run failed)"
    facts = json.loads((out / "gpu_probe.json").read_text())
    assert (facts["driver_version"], facts["gpu_count"], facts["choice"]["build"]) == (None, 0, "cu13")
    assert sorted(p.name for p in out.iterdir()) == ["device_check.log", "gpu_probe.json", "summary.txt"]


def test_without_ansible_core_every_step_says_so(tmp_path):
    out = tmp_path / "out"
    empty = tmp_path / "no-ansible"
    empty.mkdir()
    proc, _seconds = run([str(out)], base_env(DEVICE_CHECK_ANSIBLE_BIN=str(empty)))
    assert proc.returncode == 0, proc.stdout[-3000:]
    steps, result = summary(out)
    for step in ("gpu_probe", "gpu_compute", "engine_node", "vllm_serve", "vllm_group"):
        assert steps[step][0] == "skipped" and steps[step][1].startswith("no ansible-core here (%s; " % empty), steps[step]
    assert result == "result: ok (nothing that could run failed)"


@pytest.fixture(scope="module")
def fake_gpu_machine(tmp_path_factory):
    """PATH with the captured H200's nvidia-smi and a Python with the fake torch and vLLM, whose
    ``vllm`` console script sits beside it (as in a real environment)."""
    python = pathlib.Path(fake_runtime_env(tmp_path_factory))
    vllm = python.parent / "vllm"
    vllm.write_text("#!%s\nimport sys\nfrom vllm.scripts import main\nsys.exit(main())\n" % python)
    vllm.chmod(0o755)
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "nvidia-smi").symlink_to(REPO / "tests" / "fixtures" / "bin" / "fake-nvidia-smi")
    model = tmp_path_factory.mktemp("tiny-model")  # the fake serves any directory
    return {"PATH": "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]), "FAKE_NVIDIA_SMI_CASE": str(CASE),
            "FAKE_TORCH_GPUS": "NVIDIA H200=9.0", "FAKE_VLLM_LOAD_SECONDS": "1", "DEVICE_CHECK_PYTHON": str(python),
            "DEVICE_CHECK_MODEL_DIR": str(model), "DEVICE_CHECK_SERVE_ARGS": ""}


def test_on_a_gpu_machine_every_step_that_can_run_runs(tmp_path, fake_gpu_machine):
    out = tmp_path / "out"
    proc, _seconds = run([str(out)], base_env(FAKE_TORCH_CUDA="ok", **fake_gpu_machine))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps, result = summary(out)
    assert result == "result: ok (nothing that could run failed)"
    assert steps["gpu_probe"] == ("ok", "1 GPU(s) NVIDIA H200 (9.0), driver 580.82.07 (CUDA 13.0), glibc %s; vLLM 0.20.0 "
                                        "build cu13; facts in gpu_probe.json, fixture case nvidia-smi/h200-580"
                                  % json.loads((out / "gpu_probe.json").read_text())["glibc"])
    # the fixture case it saved is the one the fake nvidia-smi replayed
    saved = out / "nvidia-smi" / "h200-580"
    for name in ("query-gpu.csv", "q-x.xml"):
        assert (saved / name).read_text() == (CASE / name).read_text()
    assert (saved / "description").read_text().startswith("1 x NVIDIA H200 on driver 580.82.07 (CUDA 13.0)")
    assert steps["gpu_compute"][0] == "ok"
    assert "computed on 1 GPU(s), and vLLM 0.20.0 vllm._custom_ops.rms_norm" in steps["gpu_compute"][1]
    assert json.loads((out / "gpu_compute.json").read_text())["compute"]["ok"] is True
    assert steps["engine_node"][0] == "skipped" and "does not answer here" in steps["engine_node"][1]
    assert steps["kernel_check"][0] == "skipped"
    status, detail = steps["vllm_serve"]
    assert status == "ok", detail
    assert re.fullmatch(r"vLLM 0\.20\.0 served tiny-model\d*: ready \d+\.\d s after its start, one-token completion "
                        r"[\d.]+ ms \(engine_ready\)", detail), detail
    gate = json.loads((out / "vllm_serve.json").read_text())
    assert gate["ready"] is True and gate["models"] == ["tiny-random"]
    assert steps["vllm_group"] == ("skipped", "1 GPU here: a model group of two members needs two")
    assert "Starting vLLM API server on http://127.0.0.1:" in (out / "vllm-serve.log").read_text()
    # the server is stopped: its port no longer answers
    port = int(re.search(r"--port (\d+)", (out / "device_check.log").read_text()).group(1))
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_a_step_that_fails_fails_the_check_and_is_named(tmp_path, fake_gpu_machine):
    out = tmp_path / "out"
    env = base_env(FAKE_TORCH_CUDA="no_kernel_image", FAKE_VLLM_SERVE_FAIL="start", **fake_gpu_machine)
    proc, _seconds = run([str(out)], env)
    assert proc.returncode == 1, proc.stdout[-3000:]
    steps, result = summary(out)
    assert result == "result: FAILED: gpu_compute vllm_serve"
    assert steps["gpu_compute"][0] == "failed" and steps["gpu_compute"][1].startswith(
        "no_kernel_image at torch computing on GPU 0: RuntimeError: CUDA error: no kernel image")
    assert steps["vllm_serve"] == ("failed", "vllm serve exited (1) before it was ready: RuntimeError: fake start failure")
    assert steps["vllm_group"][0] == "skipped"
    assert steps["gpu_probe"][0] == "ok"


def test_without_transformers_the_model_is_not_made_and_it_says_why(tmp_path, fake_gpu_machine):
    out = tmp_path / "out"
    env = base_env(FAKE_TORCH_CUDA="ok", **fake_gpu_machine)
    del env["DEVICE_CHECK_MODEL_DIR"]
    proc, _seconds = run([str(out)], env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    steps, _result = summary(out)
    assert steps["vllm_serve"] == ("skipped", "cannot make the tiny model: %s has no transformers (DEVICE_CHECK_MODEL_DIR)"
                                   % fake_gpu_machine["DEVICE_CHECK_PYTHON"])


def test_with_two_gpus_a_model_group_of_two_members_is_served_and_a_lost_member_seen(tmp_path, fake_gpu_machine):
    """The multi-GPU case (the captured 8 x H100, two of them seen by the fake torch): the follower runs headless on
    the second GPU, the leader serves on the first and passes the gate; killing the follower turns the leader's
    /health to 503 (the fake does what the real engine does with tensor parallel across nodes)."""
    out = tmp_path / "out"
    two = dict(fake_gpu_machine, FAKE_NVIDIA_SMI_CASE=str(REPO / "tests" / "fixtures" / "nvidia-smi" / "8xh100-580"),
               FAKE_TORCH_GPUS="NVIDIA H100 80GB HBM3=9.0;NVIDIA H100 80GB HBM3=9.0")
    proc, _seconds = run([str(out)], base_env(FAKE_TORCH_CUDA="ok", **two))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps, result = summary(out)
    assert result == "result: ok (nothing that could run failed)"
    status, detail = steps["vllm_group"]
    assert status == "ok", detail
    gpus = json.loads((out / "gpu_probe.json").read_text())["gpus"]
    assert re.fullmatch(r"two members on GPUs %s and %s, tensor parallel 2 across them: ready \d+\.\d s after the"
                        r" start, one-token completion [\d.]+ ms \(engine_ready\); follower killed: the leader's"
                        r" /health 503 after \d+\.\d s" % (gpus[0]["uuid"], gpus[1]["uuid"]), detail), detail
    follower = (out / "vllm-group-follower.log").read_text()
    assert "Launching vLLM headless multiproc executor, rank 1 of 2" in follower
    assert "Starting vLLM API server" not in follower
    assert "rank 1 joined" in (out / "vllm-group-leader.log").read_text()
    log = (out / "device_check.log").read_text()
    assert "CUDA_VISIBLE_DEVICES=%s VLLM_HOST_IP=127.0.0.1 GLOO_SOCKET_IFNAME=lo" % gpus[1]["uuid"] in log
    # both members are stopped: nothing answers on the leader's port
    port = int(re.search(r"--node-rank 0 .*--port (\d+)", log).group(1))
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
