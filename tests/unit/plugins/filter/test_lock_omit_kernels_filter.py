"""Issue 27: what the role passes to the modules that lock - the packages left out
(``engine_node_omit_packages``) and FlashInfer's kernels (``engine_node_flashinfer_index_url``): the
filters ``engine_node_kernels``, ``engine_node_lock_item`` and ``engine_node_problems``, and the task
files that hand them on."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_plugin

REPO = pathlib.Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "engine_node"
LOCK = filter_plugin("engine_node_lock").FilterModule().filters()
NODE = filter_plugin("engine_node").FilterModule().filters()
KERNELS = LOCK["engine_node_kernels"]
LOCK_ITEM = LOCK["engine_node_lock_item"]

RELEASE = {"published": "2026-06-10T12:00:00Z", "exclude_newer": "2026-06-11T12:00:00Z", "late_files": []}
CU13 = {"version": "0.33.0", "build": "cu13", "arch": "x86_64", "source": {"origin": "pypi", "cuda": "13.0"}}
CU129 = {"version": "0.33.0", "build": "cu129", "arch": "x86_64",
         "source": {"origin": "github", "cuda": "12.9", "torch_index": "cu129", "torch_label": "+cu129"}}
CPU = {"version": "0.31.0", "build": "cpu", "arch": "x86_64", "source": {"origin": "github", "cuda": None}}
BASE = "http://127.0.0.1:8080/flashinfer/whl"


def item(job, omit=None, base=BASE):
    return LOCK_ITEM(job, {"glibc": "2.36"}, RELEASE, {"url": "http://x/v.whl", "sha256": "0" * 64}, "3.12",
                     "/srv/locks", "http://127.0.0.1:8080/simple", "http://127.0.0.1:8080/torch", None, "", omit, base)


@pytest.mark.parametrize("job, expected", [
    (CU13, {"kernels_index_url": BASE + "/cu130", "kernels_label": "cu130"}),
    (CU129, {"kernels_index_url": BASE + "/cu129", "kernels_label": "cu129"}),
    (CPU, {}),
    ({"version": "0.33.0", "build": "none", "source": None}, {}),
])
def test_kernels_follow_the_builds_cuda_and_a_build_without_cuda_gets_none(job, expected):
    assert KERNELS(job, BASE + "/") == expected
    assert KERNELS(job, "") == {}


def test_the_lock_item_carries_the_kernels_and_the_omitted_packages_sorted():
    plain = LOCK_ITEM(CU13, {"glibc": "2.36"}, RELEASE, {}, "3.12", "/srv/locks", "http://i/simple", "http://t")
    assert "omit_packages" not in plain and "kernels" not in plain
    cu13 = item(CU13)
    assert cu13["kernels"] == {"kernels_index_url": BASE + "/cu130", "kernels_label": "cu130"}
    assert "omit_packages" not in cu13 and cu13["name"] == plain["name"]
    assert "kernels" not in item(CPU)
    one = item(CU13, ["torchvision", "TorchAudio"])
    other = item(CU13, ["TORCHAUDIO", "torchvision", "torchvision"])
    assert one["omit_packages"] == ["torchaudio", "torchvision"]
    # another order, the same group and lock; another list, another lock file
    assert one == other
    assert one["dest"] != cu13["dest"] and item(CU13, ["torchvision"])["dest"] != one["dest"]


OPTIONS = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
GOOD = {"engine_node_build": "auto", "engine_node_python_preference": "only-managed", "engine_node_version": "0.20.0",
        "engine_node_keep": 1, "engine_node_root": "/opt/llmfleet", "engine_node_services": []}


@pytest.mark.parametrize("omit, expected", [
    ([], []),
    (["torchvision", "torch_audio", "torchcodec"], []),
    ("torchvision", ['variable engine_node_omit_packages is "torchvision", allowed: a list of project names left out'
                     ' of the lock, such as [torchvision, torchaudio]']),
    ({"torchvision": 1}, ['variable engine_node_omit_packages is {"torchvision": 1}, allowed: a list of project names'
                          ' left out of the lock, such as [torchvision, torchaudio]']),
    (["torchvision", "torch vision", 3], ['variable engine_node_omit_packages holds "torch vision", 3, allowed: project'
                                          " names (letters, digits, '.', '-', '_'), such as torchvision"]),
])
def test_the_host_variable_is_checked(omit, expected):
    assert NODE["engine_node_problems"](OPTIONS, dict(GOOD, engine_node_omit_packages=omit)) == expected


def test_defaults_specs_and_validation_agree():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["engine_node_omit_packages"] == OPTIONS["engine_node_omit_packages"]["default"] == []
    assert defaults["engine_node_flashinfer_index_url"] == OPTIONS["engine_node_flashinfer_index_url"]["default"]
    # validate.yml and the engine_node_plan action read the variables this filter names
    assert "engine_node_omit_packages" in NODE["engine_node_checked_variables"](OPTIONS)


def _task(path, module):
    for task in yaml.safe_load(path.read_text()):
        for inner in [task] + task.get("block", []):
            if module in inner:
                return inner
    raise AssertionError("%s has no %s task" % (path, module))


def test_the_task_files_hand_them_to_the_modules():
    locks = _task(ROLE / "tasks" / "install_locks.yml", "llmfleet.engines.uv_fleet_lock")
    args = locks["llmfleet.engines.uv_fleet_lock"]
    assert args["omit_packages"] == "{{ item.omit_packages | default([]) }}"
    assert "item.kernels.kernels_index_url" in args["kernels_index_url"]
    assert "item.kernels.kernels_label" in args["kernels_label"]
    fact = _task(ROLE / "tasks" / "install_locks.yml", "ansible.builtin.set_fact")["ansible.builtin.set_fact"]
    assert "engine_node_omit_packages, engine_node_flashinfer_index_url)" in fact["__engine_node_lock_item"]
    build = _task(ROLE / "tasks" / "install_build.yml", "llmfleet.engines.uv_engine_env")
    args = build["llmfleet.engines.uv_engine_env"]
    assert args["omit_packages"] == "{{ engine_node_omit_packages }}"
    assert "__engine_node_kernels.kernels_index_url" in args["kernels_index_url"]
    assert "engine_node_kernels(engine_node_flashinfer_index_url)" in build["vars"]["__engine_node_kernels"]
