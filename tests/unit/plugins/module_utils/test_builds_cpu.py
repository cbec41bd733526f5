"""_builds: the cpu build (vLLM's +cpu release wheel) in the table and in the choice."""

from __future__ import annotations

import re

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
# FACTS.md, "vLLM's release assets (0.31.0)"
ASSETS_0310 = [
    "vllm-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    "vllm-0.31.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl",
    "vllm-0.31.0+cu129-cp38-abi3-manylinux_2_28_aarch64.whl",
    "vllm-0.31.0+cpu-cp38-abi3-manylinux_2_39_x86_64.whl",
    "vllm-0.31.0+cpu-cp38-abi3-manylinux_2_39_aarch64.whl",
    "vllm-0.31.0+cpu-cp38-abi3-macosx_14_0_arm64.whl",
]


def node(driver=None, gpus=(), glibc="2.39", arch="x86_64"):
    return {"driver_version": driver, "gpus": list(gpus), "glibc": glibc, "architecture": arch}


@pytest.mark.parametrize("arch, asset", [("x86_64", "vllm-0.31.0+cpu-cp38-abi3-manylinux_2_39_x86_64.whl"),
                                         ("aarch64", "vllm-0.31.0+cpu-cp38-abi3-manylinux_2_39_aarch64.whl")])
def test_the_cpu_source_of_0_31_0(arch, asset):
    cpu = _builds.builds("0.31.0", arch)["cpu"]
    assert [name for name in ASSETS_0310 if re.match(cpu["github"]["pattern"], name)] == [asset]
    assert (cpu["origin"], cpu["torch_index"], cpu["torch_label"], cpu["default"]) == ("github", "cpu", "+cpu", False)
    assert cpu["wheel"] == {"arches": ["aarch64", "x86_64"], "manylinux": "manylinux_2_39", "glibc": "2.39"}
    assert cpu["github"]["tag"] == "v0.31.0" and cpu["cuda"] is None


@pytest.mark.parametrize("version", ["0.11.0", "0.20.0", "0.30.0", "0.32.0", "0.33.0"])
def test_no_cpu_build_where_the_table_knows_none(version):
    assert "cpu" not in _builds.builds(version)
    with pytest.raises(_builds.BuildRequestError,
                       match=r"the build table knows no CPU build of vLLM %s \(the \+cpu wheels of vLLM 0\.31\.0\)"
                       % re.escape(version)):
        _builds.choose(node(), version, "cpu")


def test_cpu_on_debian_12_is_blocked_naming_both_glibcs():
    choice = _builds.choose(node(glibc="2.36"), "0.31.0", "cpu")
    assert choice["build"] == "cpu" and choice["blocked"]
    assert ("glibc 2.36 is older than 2.39, which vLLM 0.31.0's cpu wheel on the GitHub release (manylinux_2_39) "
            "needs" in choice["blocked"])
    assert "upgrade the node's OS to one with glibc 2.39 or newer" in choice["blocked"]
    # no CUDA way out is offered to a node that asked for the CPU build
    assert "cu13" not in choice["blocked"] and "engine_node_version" not in choice["blocked"]
    assert choice["warnings"] == []


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_cpu_on_ubuntu_24_04(arch):
    choice = _builds.choose(node(glibc="2.39", arch=arch), "0.31.0", "cpu")
    assert (choice["build"], choice["blocked"], choice["warnings"]) == ("cpu", None, [])
    assert choice["skip_gpu_check"] is False and choice["source"]["torch_index"] == "cpu"
    assert choice["why"].startswith("build cpu was asked for: cpu (+cpu wheel, torch from the cpu index, from the "
                                    "GitHub release)")


def test_cpu_on_another_architecture_is_blocked():
    choice = _builds.choose(node(arch="ppc64le"), "0.31.0", "cpu")
    assert "is built for aarch64 and x86_64 only, not for machine architecture ppc64le" in choice["blocked"]


def test_cpu_on_a_gpu_node_is_honoured_with_a_warning():
    choice = _builds.choose(node("580.65.06", [H100]), "0.31.0", "cpu")
    assert choice["build"] == "cpu" and choice["blocked"] is None
    assert choice["warnings"] == ["build cpu was asked for on a node with 1 NVIDIA GPU: vLLM's CPU build does "
                                  "not use it"]


@pytest.mark.parametrize("facts", [
    node("580.65.06", [H100]),                       # a GPU node that runs the default
    node("535.104.05", [dict(H100, compute_capability="7.0")]),   # a GPU below every CUDA build: none
    node("580.65.06", [H100], glibc="2.17"),         # no CUDA wheel fits
    node(),                                           # no driver at all
    node(glibc="2.17"),                               # no driver, no CUDA wheel fits, but cpu's does not either
])
def test_auto_never_picks_cpu(facts):
    choice = _builds.choose(facts, "0.31.0", "auto")
    assert choice["build"] != "cpu" and "cpu" not in choice["runnable"] and "cpu" not in choice["reasons"]


def test_a_cuda_build_gets_no_warning_from_the_cpu_wheels_tag():
    """cu129's GitHub tag is unknown: the CPU wheel's 2_39 says nothing of it."""
    choice = _builds.choose(node("535.104.05", [H100], glibc="2.36"), "0.31.0", "cu129")
    assert choice["warnings"] == [] and choice["blocked"] is None


def test_the_cpu_versions_are_known_versions():
    assert _builds.cpu_versions() == ["0.31.0"]
    assert "cpu" in _builds.REQUESTS and "cpu" in _builds.BUILDS and "cpu" not in _builds.GPU_BUILDS
