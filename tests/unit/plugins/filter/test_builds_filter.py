"""The build filters: the role's view of the build table, and the same choice as gpu_probe's."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import gpu_probe
from tests.unit.plugins.filter._plugins import filter_error, filter_plugin
from tests.unit.plugins.lookup_fakes import run_module

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"


# imported without leaving the process in controller mode (see _plugins.py)
builds_filter, AnsibleFilterError = filter_plugin("builds"), filter_error()
FILTERS = builds_filter.FilterModule().filters()
CASES = sorted(p.name for p in (FIXTURES / "nvidia-smi").iterdir() if (p / "query-gpu.csv").is_file()
               and not (p / "hang").exists())


def test_the_filters_are_registered_under_their_documented_names():
    assert sorted(FILTERS) == ["engine_build_plan", "engine_builds"]
    docs = sorted(p.stem for p in pathlib.Path(builds_filter.__file__).parent.glob("*.yml"))
    assert set(FILTERS) <= set(docs)


@pytest.mark.parametrize("case", CASES + ["not-responding"])
@pytest.mark.parametrize("version, requested", [("0.20.0", "auto"), ("0.15.1", "auto"), ("0.20.0", "cu13")])
def test_the_filter_gives_the_module_s_answer(monkeypatch, capsys, case, version, requested):
    """The role decides from gpu_probe's registered result with the filter: same answer as the module."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(FIXTURES / "nvidia-smi" / case))
    args = {"nvidia_smi": str(FIXTURES / "bin" / "fake-nvidia-smi"), "version": version, "build": requested}
    code, result, _out = run_module(gpu_probe.main, args, capsys)
    assert code == 0
    from_module = result.pop("choice")
    assert FILTERS["engine_build_plan"](result, version, requested) == from_module


@pytest.mark.parametrize("glibc", ["2.31", None])
@pytest.mark.parametrize("version, requested", [("0.20.0", "cu13"), ("0.20.0", "auto"), ("0.22.0", "cu13")])
def test_the_filter_gives_the_module_s_answer_on_an_older_os(monkeypatch, capsys, glibc, version, requested):
    """The same with the node's glibc replaced (Ubuntu 20.04, or musl): blocked, warnings and all."""
    from ansible.module_utils import _internal
    from ansible_collections.llmfleet.engines.plugins.module_utils.node import _gpu

    monkeypatch.setattr(_internal, "is_controller", False)
    monkeypatch.setattr(_gpu, "glibc_version", lambda: glibc)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(FIXTURES / "nvidia-smi" / "h100-580"))
    args = {"nvidia_smi": str(FIXTURES / "bin" / "fake-nvidia-smi"), "version": version, "build": requested}
    code, result, _out = run_module(gpu_probe.main, args, capsys)
    assert code == 0 and result["glibc"] == glibc
    from_module = result.pop("choice")
    assert FILTERS["engine_build_plan"](result, version, requested) == from_module
    blocked = glibc == "2.31" and version == "0.20.0" and requested == "cu13"
    assert (from_module["blocked"] is not None) is blocked


def test_engine_build_plan_blocks_an_explicit_build_whose_wheel_does_not_fit():
    facts = {"driver_version": "580.65.06", "architecture": "x86_64", "glibc": "2.28",
             "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}]}
    plan = FILTERS["engine_build_plan"](facts, "0.20.0", "cu13")
    assert plan["build"] == "cu13"
    assert plan["blocked"].startswith("vLLM 0.20.0 build cu13 cannot be installed on this node (glibc 2.28, x86_64)")
    assert "manylinux_2_35" in plan["blocked"] and "upgrade the node's OS" in plan["blocked"]
    # the role fails such a node: no AnsibleFilterError here, the plan says it
    assert FILTERS["engine_build_plan"](facts, "0.22.0", "cu13")["blocked"] is None
    assert FILTERS["engine_build_plan"](facts, "0.20.0")["build"] == "cu129"


def test_engine_build_plan_defaults_to_auto():
    facts = {"driver_version": "535.104.05", "architecture": "x86_64",
             "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}]}
    plan = FILTERS["engine_build_plan"](facts, "0.20.0")
    assert (plan["requested"], plan["build"], plan["source"]["torch_index"]) == ("auto", "cu129", "cu129")
    assert plan["reasons"]["cu13"] == ["driver 535.104.05 is older than 580, which CUDA 13 needs"]


@pytest.mark.parametrize("facts, version, requested, match", [
    ({}, "0.9.0", "auto", "engine_build_plan: vLLM 0.9.0 is older than the oldest version the build table knows"),
    ({}, "0.20.0", "cu12", "engine_build_plan: build 'cu12' is not one of auto, cu13, cu129, cpu, none"),
    ({}, "0.11.0", "cu13", "engine_build_plan: vLLM 0.11.0 publishes no cu13 build"),
    ("580.65.06", "0.20.0", "auto", "engine_build_plan: the input must be gpu_probe's result"),
])
def test_engine_build_plan_errors(facts, version, requested, match):
    with pytest.raises(AnsibleFilterError, match=match):
        FILTERS["engine_build_plan"](facts, version, requested)


def test_engine_builds_gives_the_table_row():
    table = FILTERS["engine_builds"]("0.15.1", "aarch64")
    assert table["version"] == "0.15.1" and table["default"] == "cu129"
    assert sorted(table["builds"]) == ["cu129", "cu13"]
    cu13 = table["builds"]["cu13"]
    assert (cu13["origin"], cu13["torch_index"], cu13["torch_label"]) == ("github", "cu130", "+cu130")
    assert cu13["github"]["pattern"].endswith(r"_aarch64\.whl$")
    assert table["builds"]["cu129"]["requirement"] == "vllm==0.15.1"
    # 0.15.1's PyPI wheels are not in the table; the GitHub release's architectures are
    assert table["builds"]["cu129"]["wheel"] == {"arches": None, "manylinux": None, "glibc": None}
    assert cu13["wheel"] == {"arches": ["aarch64", "x86_64"], "manylinux": None, "glibc": None}
    assert FILTERS["engine_builds"]("0.20.0")["builds"]["cu13"]["wheel"]["manylinux"] == "manylinux_2_35"


def test_engine_builds_defaults_to_x86_64_and_refuses_old_versions():
    assert FILTERS["engine_builds"]("v0.20.0")["builds"]["cu129"]["github"]["pattern"].endswith(r"_x86_64\.whl$")
    with pytest.raises(AnsibleFilterError, match="engine_builds: vLLM 0.10.0 is older"):
        FILTERS["engine_builds"]("0.10.0")
