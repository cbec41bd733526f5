"""_builds: the build table against FACTS.md's tables, asset patterns, and the choice policy."""

from __future__ import annotations

import re

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds
from tests.upstream.catalog import RELEASES

# FACTS.md, "vLLM publishes its CUDA builds differently by version": one row per version tried,
# (version, PyPI build, PyPI CUDA, GitHub build, GitHub asset label = torch index, GitHub CUDA).
PUBLISHED = [
    ("0.20.0", "cu13", "13.0", "cu129", "cu129", "12.9"),
    ("0.20.1", "cu13", "13.0", "cu129", "cu129", "12.9"),
    ("0.23.4", "cu13", "13.0", "cu129", "cu129", "12.9"),
    ("1.0.0", "cu13", "13.0", "cu129", "cu129", "12.9"),
    ("0.12.0", "cu129", "12.9", "cu13", "cu130", "13.0"),
    ("0.15.1", "cu129", "12.9", "cu13", "cu130", "13.0"),
    ("0.19.2", "cu129", "12.9", "cu13", "cu130", "13.0"),
    ("0.11.1", "cu129", "12.9", "cu13", "cu130", "13.0"),
    ("0.11.2", "cu129", "12.9", "cu13", "cu130", "13.0"),
    ("0.11.0", "cu129", "12.8", None, None, None),
]


@pytest.mark.parametrize("version, pypi, pypi_cuda, github, label, github_cuda", PUBLISHED)
def test_table_matches_facts(version, pypi, pypi_cuda, github, label, github_cuda):
    table = _builds.builds(version, "x86_64")
    assert _builds.default_build(version) == pypi
    src = table[pypi]
    assert (src["origin"], src["cuda"], src["default"]) == ("pypi", pypi_cuda, True)
    assert src["requirement"] == "vllm==" + version
    assert src["github"] is None and src["torch_index"] is None and src["torch_label"] is None
    if github is None:
        assert sorted(table) == [pypi]
        return
    assert sorted(table) == sorted([pypi, github])
    gh = table[github]
    assert (gh["origin"], gh["cuda"], gh["default"], gh["requirement"]) == ("github", github_cuda, False, None)
    assert gh["torch_index"] == label
    assert gh["torch_label"] == "+" + label
    assert gh["github"]["repo"] == "vllm-project/vllm"
    assert gh["github"]["tag"] == "v" + version
    assert re.match(gh["github"]["pattern"], "vllm-%s+%s-cp38-abi3-manylinux_2_28_x86_64.whl" % (version, label))


# FACTS.md, "What a node can run": (build, driver, compute capability, runs?, reason fragment).
CAN_RUN = [
    ("cu13", "580.65.06", "9.0", True, None),
    ("cu13", "580", "7.5", True, None),
    ("cu13", "590.12", "12.0", True, None),
    ("cu13", "575.51.03", "9.0", False, "driver 575.51.03 is older than 580, which CUDA 13 needs"),
    ("cu13", "535.104.05", "8.0", False, "driver 535.104.05 is older than 580, which CUDA 13 needs"),
    ("cu13", "580.65.06", "7.0", False, "compute capability 7.0, below 7.5, which CUDA 13 builds"),
    ("cu13", "580.65.06", "6.1", False, "compute capability 6.1, below 7.5"),
    ("cu129", "525.60.13", "8.0", True, None),
    ("cu129", "535.104.05", "7.5", True, None),
    ("cu129", "580.65.06", "9.0", True, None),
    ("cu129", "525.60.12", "8.0", False, "driver 525.60.12 is older than 525.60.13, which CUDA 12 needs"),
    ("cu129", "470.82.01", "8.0", False, "driver 470.82.01 is older than 525.60.13, which CUDA 12 needs"),
    ("cu129", "535.104.05", "7.0", False, "compute capability 7.0, below 7.5, which CUDA 12 builds"),
]


@pytest.mark.parametrize("build, driver, cap, runs, reason", CAN_RUN)
def test_what_a_node_can_run(build, driver, cap, runs, reason):
    # 0.20.0 publishes both builds; 0.15.1 too, from the other places: same requirements
    for version in ("0.20.0", "0.15.1"):
        facts = {"driver_version": driver, "architecture": "x86_64",
                 "gpus": [{"index": 0, "name": "GPU", "compute_capability": cap}]}
        choice = _builds.choose(facts, version, "auto")
        assert choice["runnable"][build] is runs
        if runs:
            assert choice["reasons"][build] == []
        else:
            assert any(reason in text for text in choice["reasons"][build]), choice["reasons"][build]


ASSETS = [
    # (version, label, arch, name, selected?)
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", True),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux1_x86_64.whl", True),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux2014_x86_64.whl", True),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_35_x86_64.whl", True),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl", True),
    ("0.20.0", "cu129", "aarch64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_aarch64.whl", True),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_aarch64.whl", False),
    ("0.20.0", "cu129", "aarch64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", False),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu130-cp38-abi3-manylinux_2_28_x86_64.whl", False),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl", False),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0.tar.gz", False),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.01+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", False),
    ("0.20.0", "cu129", "x86_64", "vllm-10.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", False),
    ("0.20.0", "cu129", "x86_64", "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl.sha256", False),
    ("0.20.0", "cu129", "x86_64", "vllm_other-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", False),
    ("0.15.1", "cu130", "x86_64", "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl", True),
    ("0.15.1", "cu130", "x86_64", "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_aarch64.whl", False),
]


@pytest.mark.parametrize("version, label, arch, name, selected", ASSETS)
def test_asset_pattern(version, label, arch, name, selected):
    pattern = _builds.asset_pattern(version, label, arch)
    assert bool(re.search(pattern, name)) is selected


def test_patterns_select_one_asset_of_each_fake_release():
    """Against the fake upstream's GitHub releases: each (build, arch) pattern picks exactly one."""
    checked = 0
    for row in RELEASES:
        if row["where"] != "github":
            continue
        names = [f["filename"] for f in row["files"]]
        for arch in ("x86_64", "aarch64"):
            for build in _builds.builds(row["version"], arch).values():
                if build["origin"] != "github":
                    continue
                hits = [n for n in names if re.search(build["github"]["pattern"], n)]
                wanted = [n for n in names if "+%s-" % build["torch_index"] in n and n.endswith("_%s.whl" % arch)]
                assert hits == wanted and len(hits) <= 1, (row["tag"], arch, hits)
                checked += len(hits)
    assert checked >= 4


@pytest.mark.parametrize("version", ["0.10.2", "0.9.0", "0.1"])
def test_versions_before_the_table_are_refused(version):
    with pytest.raises(_builds.BuildTableError, match="older than the oldest version the build table knows"):
        _builds.choose({}, version, "auto")


@pytest.mark.parametrize("version", ["", "latest", "x.y", None])
def test_unreadable_versions_are_refused(version):
    with pytest.raises(_builds.BuildTableError, match="is not a version number"):
        _builds.builds(version)


@pytest.mark.parametrize("version, release", [("v0.20.0", (0, 20, 0)), ("0.20", (0, 20, 0)),
                                              ("0.20.0rc1", (0, 20, 0)), ("0.11.0.post1", (0, 11, 0))])
def test_release_numbers(version, release):
    assert _builds.release(version) == release


# --- the choice ---------------------------------------------------------------------------


def gpu(index, name, cap):
    return {"index": index, "name": name, "uuid": "GPU-%d" % index, "compute_capability": cap, "memory_mib": 1}


H100 = gpu(0, "NVIDIA H100 80GB HBM3", "9.0")
A100 = gpu(0, "NVIDIA A100-SXM4-80GB", "8.0")
T4 = gpu(1, "Tesla T4", "7.5")
V100 = gpu(1, "Tesla V100-SXM2-32GB", "7.0")


def node(driver, *gpus, arch="x86_64", glibc="2.36"):
    """gpu_probe's facts; glibc 2.36 (Debian 12) takes every wheel the table knows."""
    return {"driver_version": driver, "cuda_version": None, "gpus": list(gpus), "architecture": arch,
            "glibc": glibc}


CHOICES = [
    # (facts, version, requested, build, origin, skip_gpu_check)
    (node("580.65.06", H100), "0.20.0", "auto", "cu13", "pypi", False),
    (node("580.65.06", H100), "0.15.1", "auto", "cu129", "pypi", False),
    (node("580.65.06", H100), "0.11.0", "auto", "cu129", "pypi", False),
    (node("535.104.05", A100), "0.20.0", "auto", "cu129", "github", False),
    (node("535.104.05", A100), "0.15.1", "auto", "cu129", "pypi", False),
    (node("550.54.15", dict(T4, index=0)), "0.20.0", "auto", "cu129", "github", False),
    (node("580.65.06", H100, T4), "0.20.0", "auto", "cu13", "pypi", False),
    (node("535.104.05", dict(V100, index=0)), "0.20.0", "auto", "none", None, True),
    (node("535.104.05", A100, V100), "0.20.0", "auto", "none", None, True),
    (node("580.65.06", H100, V100), "0.15.1", "auto", "none", None, True),
    (node(None), "0.20.0", "auto", "cu13", "pypi", True),
    (node(None), "0.15.1", "auto", "cu129", "pypi", True),
    (node(None), "0.11.0", "auto", "cu129", "pypi", True),
    (node("580.65.06"), "0.20.0", "auto", "cu13", "pypi", True),
    (node("535.104.05"), "0.20.0", "auto", "cu129", "github", True),
    (node("580.65.06", H100), "0.20.0", "cu129", "cu129", "github", False),
    (node("580.65.06", H100), "0.15.1", "cu13", "cu13", "github", False),
    (node("580.65.06", H100), "0.20.0", "none", "none", None, True),
    (node("535.104.05", A100), "0.20.0", None, "cu129", "github", False),
]


@pytest.mark.parametrize("facts, version, requested, build, origin, skip", CHOICES)
def test_choose(facts, version, requested, build, origin, skip):
    choice = _builds.choose(facts, version, requested)
    assert choice["build"] == build
    assert choice["skip_gpu_check"] is skip
    if origin is None:
        assert choice["source"] is None
    else:
        assert choice["source"]["origin"] == origin
        assert choice["source"]["build"] == build
    assert choice["version"] == version
    assert choice["requested"] == (requested or "auto")


def test_the_reason_is_said_in_words():
    choice = _builds.choose(node("535.104.05", A100), "0.20.0")
    assert choice["runnable"] == {"cu13": False, "cu129": True}
    assert choice["reasons"] == {"cu13": ["driver 535.104.05 is older than 580, which CUDA 13 needs"], "cu129": []}
    assert choice["default"] == "cu13"
    assert "cannot run vLLM 0.20.0's default build cu13" in choice["why"]
    assert "cu129 (CUDA 12.9, from the GitHub release)" in choice["why"]


def test_mixed_gpus_are_judged_by_the_weakest():
    choice = _builds.choose(node("535.104.05", A100, V100), "0.20.0")
    assert choice["build"] == "none"
    assert choice["reasons"]["cu129"] == [
        "GPU 1 (Tesla V100-SXM2-32GB) has compute capability 7.0, below 7.5, which CUDA 12 builds of vLLM need"
    ]
    assert "no build of vLLM 0.20.0 runs on this node" in choice["why"]
    assert "Tesla V100-SXM2-32GB" in choice["why"]


def test_several_gpus_below_the_floor_name_the_weakest_and_count_the_rest():
    gpus = [gpu(0, "Tesla V100-SXM2-32GB", "7.0"), gpu(1, "Tesla P100-PCIE-16GB", "6.0"),
            gpu(2, "Tesla V100-SXM2-32GB", "7.0")]
    choice = _builds.choose(node("535.104.05", *gpus), "0.15.1")
    assert choice["reasons"]["cu129"] == [
        "GPU 1 (Tesla P100-PCIE-16GB) has compute capability 6.0 (and 2 more GPUs below it), "
        "below 7.5, which CUDA 12 builds of vLLM need"
    ]


def test_no_driver_takes_the_pypi_build_and_skips_the_gpu_check():
    choice = _builds.choose({"driver_version": None, "gpus": [], "architecture": "x86_64"}, "0.20.0")
    assert choice["build"] == "cu13" and choice["source"]["origin"] == "pypi"
    assert choice["skip_gpu_check"] is True
    assert choice["why"] == (
        "no NVIDIA driver on this node: vLLM 0.20.0's default build cu13 (CUDA 13.0, from PyPI); "
        "the GPU check will be skipped"
    )


def test_an_explicit_build_is_honoured_with_warnings():
    choice = _builds.choose(node("535.104.05", A100), "0.20.0", "cu13")
    assert choice["build"] == "cu13"
    assert choice["warnings"] == [
        "build cu13 was asked for, but this node may not run it: "
        "driver 535.104.05 is older than 580, which CUDA 13 needs"
    ]


def test_an_explicit_build_the_version_does_not_publish_is_refused():
    with pytest.raises(_builds.BuildRequestError, match=r"vLLM 0.11.0 publishes no cu13 build .*choose cu129, auto or none"):
        _builds.choose(node("580.65.06", H100), "0.11.0", "cu13")


def test_cu13_of_0_11_0_is_reported_as_not_published():
    choice = _builds.choose(node("580.65.06", H100), "0.11.0")
    assert choice["runnable"]["cu13"] is False
    assert choice["reasons"]["cu13"] == ["vLLM 0.11.0 publishes no CUDA 13 build"]
    assert choice["source"]["cuda"] == "12.8"


@pytest.mark.parametrize("requested", ["cu12", "cu130", "CU13", "gpu", ""])
def test_unknown_requests_are_refused(requested):
    with pytest.raises(_builds.BuildRequestError, match="is not one of auto, cu13, cu129, cpu, none"):
        _builds.choose(node("580.65.06", H100), "0.20.0", requested)


@pytest.mark.parametrize("arch, expect", [("aarch64", "_aarch64"), ("arm64", "_aarch64"), ("amd64", "_x86_64")])
def test_the_asset_pattern_follows_the_node_architecture(arch, expect):
    choice = _builds.choose(node("535.104.05", A100, arch=arch), "0.20.0")
    assert choice["source"]["github"]["pattern"].endswith(expect + r"\.whl$")


def test_an_architecture_without_github_wheels_rules_the_github_build_out():
    choice = _builds.choose(node("535.104.05", A100, arch="ppc64le"), "0.20.0")
    assert choice["build"] == "none"
    assert any("machine architecture ppc64le" in r for r in choice["reasons"]["cu129"])
    # 0.20.0's PyPI wheels are x86_64 and aarch64 only (FACTS.md): PyPI's build is ruled out too
    assert _builds.choose(node("580.65.06", H100, arch="ppc64le"), "0.20.0")["build"] == "none"
    # 0.15.1's PyPI architectures are not known: nothing rules its PyPI build out
    assert _builds.choose(node("580.65.06", H100, arch="ppc64le"), "0.15.1")["build"] == "cu129"


def test_choose_does_not_change_its_input():
    facts = node("535.104.05", A100, V100)
    before = repr(facts)
    _builds.choose(facts, "0.20.0")
    assert repr(facts) == before


def test_without_facts_nothing_rules_a_build_out_and_the_pattern_waits_for_the_architecture():
    choice = _builds.choose({}, "0.20.0", "cu129")
    assert choice["build"] == "cu129" and choice["warnings"] == []
    assert choice["runnable"] == {"cu13": True, "cu129": True}
    assert choice["source"]["github"]["pattern"] is None
    assert choice["skip_gpu_check"] is True


# --- wheels against the node's glibc and architecture ---------------------------------------

# FACTS.md, "Measured 2026-12-01": PyPI's wheel of 0.20.0 is manylinux_2_35, of 0.21.0
# manylinux_2_24, from 0.22.0 on manylinux_2_28 (measured up to 0.33.0), x86_64 and aarch64 from
# 0.20.0 on; 0.11.0 from real PyPI (tests/network/test_real_pypi.py). None: not known.
WHEEL_TABLE = [
    # (version, origin, arch, manylinux tag, glibc, architectures with wheels)
    ("0.20.0", "pypi", "x86_64", "manylinux_2_35", "2.35", ["aarch64", "x86_64"]),
    ("0.20.0", "pypi", "aarch64", "manylinux_2_35", "2.35", ["aarch64", "x86_64"]),
    ("0.20.0", "pypi", "arm64", "manylinux_2_35", "2.35", ["aarch64", "x86_64"]),
    ("0.20.0", "pypi", None, "manylinux_2_35", "2.35", ["aarch64", "x86_64"]),
    ("0.20.0", "pypi", "ppc64le", None, None, ["aarch64", "x86_64"]),
    ("0.21.0", "pypi", "x86_64", "manylinux_2_24", "2.24", ["aarch64", "x86_64"]),
    ("0.21.0", "pypi", "aarch64", "manylinux_2_24", "2.24", ["aarch64", "x86_64"]),
    ("0.22.0", "pypi", "x86_64", "manylinux_2_28", "2.28", ["aarch64", "x86_64"]),
    ("0.23.0", "pypi", "aarch64", "manylinux_2_28", "2.28", ["aarch64", "x86_64"]),
    ("0.33.0", "pypi", "x86_64", "manylinux_2_28", "2.28", ["aarch64", "x86_64"]),
    # patch releases FACTS.md does not name: architectures known, tags not
    ("0.20.1", "pypi", "x86_64", None, None, ["aarch64", "x86_64"]),
    ("0.21.1", "pypi", "x86_64", None, None, ["aarch64", "x86_64"]),
    # 0.11.1 - 0.19.x: nothing known
    ("0.11.1", "pypi", "x86_64", None, None, None),
    ("0.15.1", "pypi", "aarch64", None, None, None),
    ("0.19.2", "pypi", "x86_64", None, None, None),
    ("0.11.0", "pypi", "x86_64", "manylinux1", "2.5", ["aarch64", "x86_64"]),
    ("0.11.0", "pypi", "aarch64", "manylinux2014", "2.17", ["aarch64", "x86_64"]),
    ("0.11.0", "pypi", None, None, None, ["aarch64", "x86_64"]),  # the two tags differ
    # the GitHub release: both architectures, tags not known
    ("0.20.0", "github", "x86_64", None, None, ["aarch64", "x86_64"]),
    ("0.15.1", "github", "aarch64", None, None, ["aarch64", "x86_64"]),
]


@pytest.mark.parametrize("version, origin, arch, tag, glibc, arches", WHEEL_TABLE)
def test_wheel_table_matches_facts(version, origin, arch, tag, glibc, arches):
    assert _builds.wheel(version, origin, arch) == {"arches": arches, "manylinux": tag, "glibc": glibc}


def test_the_build_table_carries_each_build_s_wheel():
    table = _builds.builds("0.20.0", "x86_64")
    assert table["cu13"]["wheel"] == {"arches": ["aarch64", "x86_64"], "manylinux": "manylinux_2_35", "glibc": "2.35"}
    assert table["cu129"]["wheel"] == {"arches": ["aarch64", "x86_64"], "manylinux": None, "glibc": None}
    assert _builds.builds("0.22.0", "aarch64")["cu13"]["wheel"]["manylinux"] == "manylinux_2_28"


def test_the_table_agrees_with_the_files_real_pypi_lists_for_0_11_0():
    """vLLM 0.11.0's files as measured on the real PyPI (the network tests check them there)."""
    from tests.network.test_real_pypi import FILES

    wheels = [name for name, (kind, _time) in FILES.items() if kind == "bdist_wheel"]
    found = {}
    for name in wheels:
        platform = name[:-len(".whl")].split("-")[-1]          # manylinux1_x86_64
        tag, arch = re.match(r"^(.*?)_(x86_64|aarch64)$", platform).groups()
        found[arch] = tag
    assert found == {"x86_64": "manylinux1", "aarch64": "manylinux2014"}
    for arch, tag in found.items():
        assert _builds.wheel("0.11.0", "pypi", arch)["manylinux"] == tag
    assert _builds.wheel("0.11.0", "pypi")["arches"] == sorted(found)


@pytest.mark.parametrize("tag, glibc", [
    ("manylinux_2_35", "2.35"), ("manylinux_2_28_x86_64", "2.28"), ("manylinux_2_24_aarch64", "2.24"),
    ("manylinux1", "2.5"), ("manylinux1_x86_64", "2.5"), ("manylinux2010_x86_64", "2.12"),
    ("manylinux2014_aarch64", "2.17"), ("MANYLINUX_2_31", "2.31"),
    ("musllinux_1_1_x86_64", None), ("linux_x86_64", None), ("manylinux2", None), ("", None), (None, None),
])
def test_manylinux_tags_give_their_glibc(tag, glibc):
    assert _builds.manylinux_glibc(tag) == glibc


# Ubuntu 20.04 has glibc 2.31, RHEL 8 2.28, Ubuntu 22.04 2.35, CentOS 7 2.17, Debian 12 2.36.
FITS = [
    # (glibc, arch, version, does PyPI's build fit?)
    ("2.31", "x86_64", "0.20.0", False),
    ("2.28", "x86_64", "0.20.0", False),
    ("2.34", "aarch64", "0.20.0", False),
    ("2.35", "x86_64", "0.20.0", True),
    ("2.36", "aarch64", "0.20.0", True),
    ("2.31", "x86_64", "0.21.0", True),
    ("2.23", "x86_64", "0.21.0", False),
    ("2.24", "x86_64", "0.21.0", True),
    ("2.28", "x86_64", "0.22.0", True),     # equal to the floor: fits
    ("2.27", "x86_64", "0.22.0", False),
    ("2.28", "aarch64", "0.33.0", True),
    ("2.17", "x86_64", "0.11.0", True),
    ("2.17", "aarch64", "0.11.0", True),
    ("2.12", "aarch64", "0.11.0", False),
    ("2.17", "x86_64", "0.15.1", True),     # not known: nothing rules it out
    ("2.17", "x86_64", "0.20.1", True),     # not known: nothing rules it out
]


@pytest.mark.parametrize("glibc, arch, version, fits", FITS)
def test_auto_checks_the_pypi_wheel_against_glibc(glibc, arch, version, fits):
    choice = _builds.choose(node("580.65.06", H100, arch=arch, glibc=glibc), version)
    default = choice["default"]
    assert choice["runnable"][default] is fits
    glibc_reasons = [r for r in choice["reasons"][default] if "glibc %s is older than" % glibc in r]
    assert bool(glibc_reasons) is not fits, choice["reasons"]
    assert choice["blocked"] is None   # auto never blocks: it takes another build or none
    if fits:
        assert choice["build"] == default


def test_auto_on_ubuntu_20_04_takes_the_github_build_and_says_why():
    choice = _builds.choose(node("580.65.06", H100, glibc="2.31"), "0.20.0")
    assert (choice["build"], choice["source"]["origin"], choice["blocked"]) == ("cu129", "github", None)
    assert choice["reasons"]["cu13"] == [
        "glibc 2.31 is older than 2.35, which vLLM 0.20.0's cu13 wheel on PyPI (manylinux_2_35) needs"]
    assert choice["why"] == (
        "this node cannot run vLLM 0.20.0's default build cu13 (glibc 2.31 is older than 2.35, which "
        "vLLM 0.20.0's cu13 wheel on PyPI (manylinux_2_35) needs): cu129 (CUDA 12.9, from the GitHub release) instead")
    # the GitHub wheel's tag is not known: not ruled out, but said
    assert choice["warnings"] == [
        "the build table does not know which glibc vLLM 0.20.0's cu129 wheel on the GitHub release needs, "
        "and vLLM 0.20.0's cu13 wheel on PyPI needs 2.35, newer than this node's 2.31: if this one needs it "
        "too, uv cannot install it"]


def test_auto_without_a_wheel_that_fits_takes_none_with_the_reason():
    # ppc64le: no build of 0.20.0 has a wheel for it
    choice = _builds.choose(node("580.65.06", H100, arch="ppc64le"), "0.20.0")
    assert (choice["build"], choice["source"], choice["blocked"]) == ("none", None, None)
    assert choice["runnable"] == {"cu13": False, "cu129": False}
    assert choice["why"].startswith("no build of vLLM 0.20.0 runs on this node: cu13: vLLM 0.20.0's cu13 "
                                    "wheel on PyPI is built for aarch64 and x86_64 only, not for machine "
                                    "architecture ppc64le; cu129: ")
    # glibc too old for the PyPI wheel and a driver too old for the GitHub build
    choice = _builds.choose(node("535.104.05", A100, glibc="2.31"), "0.20.0")
    assert choice["build"] == "cu129"
    choice = _builds.choose(node("580.65.06", H100, glibc="2.31"), "0.21.0")
    assert choice["build"] == "cu13"   # 0.21.0 is manylinux_2_24: fits
    choice = _builds.choose(node("580.65.06", H100, V100, glibc="2.31"), "0.20.0")
    assert choice["build"] == "none" and "glibc 2.31 is older than 2.35" in choice["why"]


def test_auto_without_a_driver_also_takes_a_wheel_that_fits():
    choice = _builds.choose(node(None, glibc="2.31"), "0.20.0")
    assert (choice["build"], choice["source"]["origin"], choice["skip_gpu_check"]) == ("cu129", "github", True)
    assert choice["why"].startswith("no NVIDIA driver on this node, and it cannot take the wheel of vLLM "
                                    "0.20.0's default build cu13 (glibc 2.31 is older than 2.35")
    assert choice["why"].endswith("cu129 (CUDA 12.9, from the GitHub release) instead; the GPU check will be skipped")
    choice = _builds.choose(node(None, arch="s390x"), "0.20.0")
    assert choice["build"] == "none" and choice["why"].startswith("no build of vLLM 0.20.0 can be installed on this node")
    assert _builds.choose(node(None, glibc="2.35"), "0.20.0")["build"] == "cu13"


def test_an_explicit_build_whose_wheel_does_not_fit_is_blocked():
    choice = _builds.choose(node("580.65.06", H100, glibc="2.31"), "0.20.0", "cu13")
    assert choice["build"] == "cu13" and choice["source"]["origin"] == "pypi"
    assert choice["runnable"]["cu13"] is False
    assert choice["blocked"] == (
        "vLLM 0.20.0 build cu13 cannot be installed on this node (glibc 2.31, x86_64): glibc 2.31 is older "
        "than 2.35, which vLLM 0.20.0's cu13 wheel on PyPI (manylinux_2_35) needs. Without a wheel that "
        "fits, uv would have to compile vLLM from its source (an hour or more). To go on: choose a vLLM "
        "version whose PyPI wheel this node takes (engine_node_version 0.22.0 or newer, 0.21.0 or 0.11.0); "
        "or set engine_node_build to cu129 or auto (the wheel of cu129, CUDA 12.9 from the GitHub release, "
        "is not ruled out); or upgrade the node's OS to one with glibc 2.35 or newer."
    )
    assert choice["why"].startswith("build cu13 was asked for, but this node cannot take its wheel: glibc 2.31")
    # the wheel's reason is in blocked, not repeated as a warning
    assert choice["warnings"] == []


def test_a_blocked_explicit_build_keeps_its_gpu_warnings():
    choice = _builds.choose(node("535.104.05", A100, glibc="2.28"), "0.20.0", "cu13")
    assert choice["blocked"].startswith("vLLM 0.20.0 build cu13 cannot be installed on this node (glibc 2.28, x86_64)")
    assert choice["warnings"] == [
        "build cu13 was asked for, but this node may not run it: driver 535.104.05 is older than 580, which CUDA 13 needs"]


@pytest.mark.parametrize("glibc, arch, versions", [
    ("2.28", "aarch64", "engine_node_version 0.22.0 or newer, 0.21.0 or 0.11.0"),   # RHEL 8 on ARM
    ("2.17", "x86_64", "engine_node_version 0.11.0)"),                               # CentOS 7
])
def test_the_blocked_message_names_the_versions_that_fit(glibc, arch, versions):
    blocked = _builds.choose(node("580.65.06", H100, arch=arch, glibc=glibc), "0.20.0", "cu13")["blocked"]
    assert "(glibc %s, %s)" % (glibc, arch) in blocked and versions in blocked
    assert blocked.endswith("or upgrade the node's OS to one with glibc 2.35 or newer.")


def test_an_explicit_build_without_a_wheel_for_the_architecture_is_blocked():
    for build in ("cu13", "cu129"):
        choice = _builds.choose(node("580.65.06", H100, arch="ppc64le"), "0.20.0", build)
        assert choice["build"] == build
        assert choice["blocked"].startswith(
            "vLLM 0.20.0 build %s cannot be installed on this node (glibc 2.36, ppc64le): vLLM 0.20.0's %s "
            "wheel on %s is built for aarch64 and x86_64 only, not for machine architecture ppc64le."
            % (build, build, "PyPI" if build == "cu13" else "the GitHub release"))
        # no version, no other build, no OS upgrade helps
        assert choice["blocked"].endswith("To go on: set engine_node_build to none for this node.")


def test_an_explicit_build_that_fits_is_not_blocked():
    for glibc, version in (("2.35", "0.20.0"), ("2.31", "0.21.0"), ("2.28", "0.22.0"), ("2.17", "0.11.0")):
        choice = _builds.choose(node("580.65.06", H100, glibc=glibc), version, _builds.default_build(version))
        assert choice["blocked"] is None and choice["warnings"] == [], (glibc, version)
    # a GitHub wheel whose tag is not known is not blocked
    assert _builds.choose(node("580.65.06", H100, glibc="2.17"), "0.20.0", "cu129")["blocked"] is None


@pytest.mark.parametrize("facts_glibc, said", [
    ({"glibc": None}, "its C library is not glibc, such as musl, or its version could not be read"),
    ({}, "the facts do not say"),
])
@pytest.mark.parametrize("requested", ["auto", "cu13"])
def test_an_unknown_glibc_is_warned_not_blocked(facts_glibc, said, requested):
    facts = {k: v for k, v in node("580.65.06", H100).items() if k != "glibc"}
    facts.update(facts_glibc)
    choice = _builds.choose(facts, "0.20.0", requested)
    assert (choice["build"], choice["blocked"], choice["runnable"]["cu13"]) == ("cu13", None, True)
    assert choice["warnings"] == [
        "this node's glibc is not known (%s), so it was not checked against vLLM 0.20.0's cu13 wheel on PyPI "
        "(manylinux_2_35), which needs glibc 2.35 or newer; on a node without it uv cannot install that wheel" % said]


def test_an_unknown_glibc_against_an_unknown_tag_says_nothing():
    choice = _builds.choose(node("580.65.06", H100, glibc=None), "0.15.1")
    assert choice["build"] == "cu129" and choice["warnings"] == [] and choice["blocked"] is None


def test_an_unknown_architecture_rules_no_wheel_out():
    facts = {k: v for k, v in node("580.65.06", H100, glibc="2.36").items() if k != "architecture"}
    choice = _builds.choose(facts, "0.20.0", "cu13")
    assert choice["blocked"] is None and choice["source"]["wheel"]["manylinux"] == "manylinux_2_35"
    # ... but the glibc is still checked against the tag both architectures share
    facts["glibc"] = "2.31"
    assert _builds.choose(facts, "0.20.0", "cu13")["blocked"] is not None


def test_the_fallback_is_not_offered_to_a_build_whose_wheel_does_not_fit():
    # the role retries auto's other build only where the plan says it is runnable
    choice = _builds.choose(node("580.65.06", H100, glibc="2.31"), "0.15.1")
    assert choice["runnable"] == {"cu13": True, "cu129": True}    # 0.15.1's tags are not known
    choice = _builds.choose(node("580.65.06", H100, glibc="2.34"), "0.20.0")
    assert choice["build"] == "cu129" and choice["runnable"]["cu13"] is False
